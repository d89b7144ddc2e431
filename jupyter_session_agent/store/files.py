"""The history folder as reads see it: which journals and Parquet files a read uses.

A read lists the folder (:meth:`Files.plan`): the regular journals and Parquet files, less the
ones left out. A file is left out (:meth:`Files.leave_out`, one warning) when it cannot be used
— a Parquet file cut short by an interrupted copy or sync (its magic number missing at either
end), a file a read failed on — until it changes. Parquet footers and generation manifests are
read once per file identity (inode, size, mtime): the store never changes a file in place.
"""

from __future__ import annotations

import os
from pathlib import Path

from .generation import Plan, list_manifests, plan
from .problems import BadFile, one_line, report_file
from .segment import parquet_problem, read_meta, stat_key


class Files:
    """The files of one history folder a read uses (see the module docstring)."""

    def __init__(self, history: Path) -> None:
        self._history = history
        self._root: Path | None = None
        self._bad: dict[str, tuple | None] = {}  # files left out of reads → their stat then
        self._verified: set[str] = set()  # Parquet files found whole
        self._metas: dict[str, tuple] = {}  # Parquet file → (its stat, its footer entry)
        self._manifests: dict[str, tuple] = {}  # generation manifest → (its stat, its contents)

    @property
    def root(self) -> Path:
        """The history folder, symbolic links resolved (resolved once, when first needed)."""
        if self._root is None:
            self._root = self._history.resolve()
        return self._root

    def journal_of(self, writer: str) -> Path:
        """The live journal of ``writer`` (a name read from a row: never a path of its own)."""
        return self.root / "live" / f"{os.path.basename(writer) or '_'}.jsonl"

    def journals(self) -> tuple[str, ...]:
        """Every journal in the folder (whether or not a read may use it)."""
        return _list_files(self.root / "live", ".jsonl")

    def plan(self, connection) -> Plan:
        """The plan of a read: the usable journals and Parquet files, split into the tail and
        the current generation (``generation.plan``). ``connection()``: the DuckDB connection
        to read Parquet footers with (asked for only when a footer is read)."""
        root = self.root
        folder = root / "parquet"
        live = _list_files(root / "live", ".jsonl")
        parquet = _list_files(folder, ".parquet")
        try:
            names = frozenset(os.listdir(folder))
        except OSError:
            names = frozenset()
        usable = tuple(p for p in parquet if self._usable(p, True))
        manifests = list_manifests(folder, self._manifests) if names else {}
        for number, gen in manifests.items():
            if gen is None:  # every file is then read as a small one: slower, never wrong
                report_file(
                    root,
                    str(folder / f"generation-{number}.json"),
                    "not a readable generation manifest; its files are read one by one",
                )

        def meta_or_none(path: str) -> dict | None:
            try:
                return self.meta(connection(), path)
            except BadFile:
                return None  # the read of the file says why

        return plan(
            tuple(p for p in live if self._usable(p, False)), usable, names, manifests, meta_or_none
        )

    def meta(self, con, path: str) -> dict | None:
        """The file's footer entry (None: an older or foreign file); BadFile if unreadable."""
        import duckdb

        key = stat_key(path)
        hit = self._metas.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            meta = read_meta(con, path)
        except (duckdb.Error, UnicodeDecodeError) as err:
            raise BadFile(path, one_line(err)) from None
        self._metas[path] = (key, meta)
        return meta

    def leave_out(self, path: str, reason: str) -> None:
        """Exclude ``path`` from every read until it changes (warned once)."""
        self._bad[path] = stat_key(path)
        self._verified.discard(path)
        report_file(self.root, path, reason)

    def _usable(self, path: str, parquet: bool) -> bool:
        """Whether a listed file is read: not left out (unless it changed since), and for a
        Parquet file, whole (its magic number at both ends: not cut short by a copy or sync).
        A footer that cannot be read is found when the file is read."""
        if path in self._bad:
            if stat_key(path) == self._bad[path]:
                return False
            del self._bad[path]  # changed: look again
        if not parquet or path in self._verified:
            return True
        reason = parquet_problem(path)
        if reason is None:
            self._verified.add(path)
            return True
        if reason != "gone" and os.path.lexists(path):
            self.leave_out(path, reason)
        return False


def _list_files(folder: Path, suffix: str) -> tuple[str, ...]:
    """The regular files named ``*suffix`` in ``folder`` (not hidden), sorted. Anything else
    with that name (a folder, a link, a FIFO) is left out with one warning."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(suffix) and e.name[0] != "."]
    except FileNotFoundError:
        return ()
    except OSError as err:  # e.g. `live` is a file: nothing to read there
        report_file(folder.parent, str(folder), f"not a folder: {os.strerror(err.errno or 0)}")
        return ()
    files = []
    for entry in entries:
        try:
            regular = entry.is_file(follow_symlinks=False)
        except OSError:
            continue  # vanished meanwhile (compacted)
        if regular:
            files.append(entry.path)
        else:
            report_file(folder.parent, entry.path, "not a regular file")
    return tuple(sorted(files))
