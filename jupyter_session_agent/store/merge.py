"""Merging the small Parquet files into a generation of large ones, safe against any crash.

Small files (``parquet/<writer>.parquet``: one per finished journal; also any other Parquet file
found there) pile up, one per kernel. A merge folds them into the *current generation*: a set of
large files ``parquet/merged-<g>-….parquet`` that partition the history by session id (each
covers a range ``[lo, hi)`` of session ids, so every row of a session is in one file and no id
is in two), deduplicated (newest revision per id, tombstones kept), typed, sorted, with the
``step`` and ``tool_call`` rows of their parts precomputed. A generation is described by its
manifest ``parquet/generation-<g>.json``: its files, their ranges, and the files it *consumed*
(the small files and the replaced large files its rows came from).

The protocol (one merger at a time: ``flock`` on ``parquet/.merge.lock``, released by the
kernel even on ``kill -9``):

1. clean up what an earlier merge left: files of generations older than the current one, files
   of a newer generation that has no manifest (it never committed), the current generation's
   consumed files, temporary files;
2. write the new large files under hidden names, fsync them, rename them into place;
3. write the manifest (hidden name, fsync, rename): **the commit point**;
4. remove the consumed files.

Readers (``generation.plan``) use the newest manifest whose files all exist and ignore the files it
consumed and the large files of older generations; a large file of a newer generation (a
merge between steps 2 and 3, or a manifest someone damaged) is read like a small file. Small
files are deduplicated against everything at read time, so in every state a crash can leave
— before, between and after any two of these steps — each row is seen exactly once: a merge
never loses or doubles a row (``tests/test_store_merge.py`` kills mergers at random moments).

A small file is merged only once its journal is gone (the conversion that wrote it has
finished), so a journal and the merged copy of its rows never coexist.

One module: it is one protocol; the clean-up of step 1 and the files of step 2 are only
safe in the order :func:`merge` runs them under its lock, and they share that run's state (its
listing, the footers it read, its DuckDB connection).
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from .generation import (
    MERGED,
    Partition,
    Plan,
    current_generation,
    file_names,
    list_manifests,
    plan,
)
from .schema import (
    COLUMN_LIST,
    DERIVED,
    DERIVED_KEY,
    KINDS,
    LAYOUT,
    SESSION_KEY,
    derived,
    quote,
    select_list,
    typed,
)
from .segment import ORDER, connect, copy, fsync_dir, parquet_problem, read_meta

MIN_FILES = 8  # a merge waits for this many small files …
MIN_BYTES = 16 << 20  # … or this many bytes of them (about 200,000 rows: a tail worth scanning)
TARGET_ROWS = 1_000_000  # rows per large file (a session is never split)
MEMORY_LIMIT = "1GB"  # a merge spills to disk past this


def merge_due(history: Path) -> bool:
    """Whether enough small files wait for :func:`merge` to be worth starting, or the current
    generation lacks derived files it backfills (a cheap look at the folder; ``merge`` itself
    decides on the files it can merge)."""
    folder = history / "parquet"
    try:
        entries = list(os.scandir(folder))
        waiting = [
            entry.stat().st_size
            for entry in entries
            if entry.name.endswith(".parquet") and not entry.name.startswith((".", MERGED))
        ]
    except OSError:
        return False
    if len(waiting) >= MIN_FILES or sum(waiting) >= MIN_BYTES:
        return True
    current = current_generation(
        list_manifests(folder, _MANIFESTS), frozenset(e.name for e in entries)
    )
    return current is not None and any(  # written by a version that derived fewer kinds
        k not in entry.get("derived", {}) for entry in current.files for k in DERIVED
    )


_MANIFESTS: dict = {}  # path → (stat, manifest): merge_due reads a manifest once


def merge(
    history: Path,
    *,
    force: bool = False,
    min_files: int = MIN_FILES,
    target_rows: int = TARGET_ROWS,
) -> dict | None:
    """Merge the small files into a new generation, if another merge is not running and there
    are enough of them (any number when ``force``). Returns what it did, or None."""
    folder = history / "parquet"
    try:
        fd = os.open(folder / ".merge.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None  # no folder (nothing to merge) or a read-only one
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another process is merging
        spill = folder / f".merge-spill-{secrets.token_hex(4)}"
        con = connect(MEMORY_LIMIT, spill)
        try:
            return _Merge(history, target_rows, con, spill).run(force, min_files)
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)
    finally:
        os.close(fd)  # also releases the lock


class _Merge:
    """One merge, under the lock: ``con`` its DuckDB connection, ``spill`` its spill folder."""

    def __init__(self, history: Path, target_rows: int, con, spill: Path) -> None:
        self.history = history
        self.folder = history / "parquet"
        self.target_rows = target_rows
        self.con = con
        self.spill = spill
        self.metas: dict[str, dict | None] = {}

    def meta(self, path: str) -> dict | None:
        if path not in self.metas:
            try:
                self.metas[path] = read_meta(self.con, path)
            except Exception:  # noqa: BLE001 - unreadable: not ours to merge
                self.metas[path] = {"unreadable": True}
        return self.metas[path]

    def _listing(self):
        names = frozenset(os.listdir(self.folder))
        parquet = tuple(
            str(self.folder / n)
            for n in sorted(names)
            if n.endswith(".parquet")
            and n[0] != "."
            and os.path.isfile(self.folder / n)
            and not os.path.islink(self.folder / n)
            and parquet_problem(str(self.folder / n)) is None
        )
        parquet = tuple(p for p in parquet if not (self.meta(p) or {}).get("unreadable"))
        manifests = list_manifests(self.folder, {})
        live_dir = self.history / "live"
        live = (
            tuple(str(live_dir / n) for n in sorted(os.listdir(live_dir)) if n.endswith(".jsonl"))
            if live_dir.is_dir()
            else ()
        )
        return names, parquet, manifests, live

    def run(self, force: bool, min_files: int) -> dict | None:
        names, parquet, manifests, live = self._listing()
        current = current_generation(manifests, names)
        self._clean(names, parquet, manifests, current)
        names, parquet, manifests, live = self._listing()
        now = plan(live, parquet, names, manifests, self.meta)
        journals = {Path(p).stem for p in live}
        if current is not None and len(now.base) != len(current.files):
            return None  # a file of the generation cannot be read: never merge around a hole
        backfilled = self._backfill(current, self._next_number(parquet, manifests), manifests)
        if backfilled:
            names, parquet, manifests, live = self._listing()
            current = current_generation(manifests, names)
            now = plan(live, parquet, names, manifests, self.meta)
        inputs = [p for p in now.small if Path(p).stem not in journals]  # compaction finished
        size = sum(os.path.getsize(p) for p in inputs)
        if not inputs or (not force and len(inputs) < min_files and size < MIN_BYTES):
            return {"backfilled": backfilled} if backfilled else None
        number = self._next_number(parquet, manifests)
        written, consumed = self._write(number, now, inputs)
        kept = [f for f in (current.files if current else ()) if f["name"] not in consumed]
        # step 2: into place (until step 3, readers read them like small files)
        for name in (n for f in written for n in file_names(f)):
            os.rename(self.folder / f".{name}.tmp", self.folder / name)
        fsync_dir(self.folder)
        self._commit(number, kept + written, consumed, manifests)
        return {
            "generation": number,
            "inputs": len(inputs),
            "files": len(written),
            "rows": sum(f["rows"] for f in written),
        }

    def _next_number(self, parquet, manifests) -> int:
        """A generation number above every manifest's and every merged file's."""
        seen = [int((self.meta(p) or {}).get("generation", 0)) for p in parquet]
        return max([0, *manifests, *seen]) + 1

    def _commit(self, number: int, files: list[dict], consumed, manifests) -> None:
        """Steps 3 and 4: the manifest of generation ``number`` (its ``files``), then the
        ``consumed`` files and the older manifests removed."""
        manifest = {
            "format": 2,
            "generation": number,
            "files": files,
            "consumed": sorted(consumed),
        }
        tmp = self.folder / f".generation-{number}.json.tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.folder / f"generation-{number}.json")  # step 3: the commit
        fsync_dir(self.folder)
        for name in consumed:  # step 4
            (self.folder / name).unlink(missing_ok=True)
        for old in manifests:
            if old != number:
                (self.folder / f"generation-{old}.json").unlink(missing_ok=True)
        fsync_dir(self.folder)

    def _clean(self, names, parquet, manifests, current) -> None:
        """Step 1: what earlier merges left behind (we hold the lock: nobody else merges)."""
        for name in names:
            if name == self.spill.name:
                continue
            temporary = name.startswith((".merge-", ".generation-")) or (
                name.startswith(".merged-") and name.endswith(".tmp")
            )
            if temporary:
                path = self.folder / name
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        if current is None:
            return  # never delete a large file without a generation that holds its rows
        listed = {n for f in current.files for n in file_names(f)}
        for path in parquet:
            name = os.path.basename(path)
            if name in current.consumed:
                Path(path).unlink(missing_ok=True)
            elif name.startswith(MERGED) and name not in listed:
                info = self.meta(path)
                if info is None or info.get("level") != 1:
                    continue  # not ours
                number = int(info.get("generation", 0))
                if number < current.number or (number > current.number and number not in manifests):
                    # older (merged since), or never committed (its inputs are still there)
                    Path(path).unlink(missing_ok=True)

    def _write(self, number: int, now: Plan, inputs: list[str]) -> tuple[list[dict], set[str]]:
        """Step 2's files (hidden names, fsynced): the affected partitions rewritten with the
        inputs' rows, split so that none holds much more than ``target_rows``."""
        con = self.con
        typed_in = [p for p in inputs if self.meta(p) is not None]
        legacy = [p for p in inputs if self.meta(p) is None]
        sources = []
        if typed_in:
            sources.append(
                f"SELECT *, 1 AS src FROM read_parquet({_list(typed_in)}, "
                f"union_by_name=true) WHERE kind IN {_KINDS}"
            )
        if legacy:
            raw = (
                f"SELECT {COLUMN_LIST}::JSON AS data FROM read_parquet({_list(legacy)}, "
                "union_by_name=true) WHERE id IS NOT NULL"
            )
            sources.append(f"SELECT *, 1 AS src FROM ({typed(raw)})")
        # a view: each range below scans the inputs again, min/max statistics skipping the row
        # groups of other sessions (they are sorted by session), so no copy of them is held
        con.execute("CREATE OR REPLACE TEMP VIEW inp AS " + " UNION ALL BY NAME ".join(sources))
        keys = [
            k
            for (k,) in con.execute(f"SELECT DISTINCT {SESSION_KEY} FROM inp ORDER BY 1").fetchall()
        ]
        parts = list(now.base) or [Partition("", None, None, 0)]
        lows = [p.lo or "" for p in parts]
        affected: dict[int, list[str]] = {}
        for key in keys:
            index = max(bisect.bisect_right(lows, key) - 1, 0)
            if not parts[index].holds(key):  # the generation does not cover every session
                raise RuntimeError(
                    f"history merge: no file of generation {now.generation} holds {key!r}"
                )
            affected.setdefault(index, []).append(key)
        written: list[dict] = []
        consumed = {os.path.basename(p) for p in inputs}
        token = secrets.token_hex(3)
        for index in sorted(affected):
            part = parts[index]
            old = (
                (
                    f"SELECT *, 0 AS src FROM read_parquet([{quote(part.path)}], "
                    f"union_by_name=true) WHERE kind IN {_KINDS}"
                )
                if part.path
                else None
            )
            if part.path:
                consumed.add(os.path.basename(part.path))
                consumed |= {os.path.basename(path) for _, path in part.derived}
            for lo, hi in self._ranges(old, part):
                stem = f"{MERGED}{number}-{token}-{len(written)}"
                entry: dict[str, Any] = {
                    "name": f"{stem}.parquet",
                    "lo": lo,
                    "hi": hi,
                    "layout": LAYOUT,
                    "derived": {kind: f"{stem}-{kind}.parquet" for kind in DERIVED},
                }
                entry["rows"] = self._write_range(old, entry, number)
                written.append(entry)
        con.execute("DROP VIEW inp")
        return written, consumed

    def _ranges(self, old: str | None, part: Partition) -> list[tuple[str | None, str | None]]:
        """Sub-ranges of ``part`` of about ``target_rows`` rows each, cut between sessions."""
        within = _within(part.lo, part.hi)
        counts = f"SELECT {SESSION_KEY} k, count(*) n FROM inp WHERE {within} GROUP BY k"
        if old:
            counts += f" UNION ALL SELECT {SESSION_KEY} k, count(*) n FROM ({old}) GROUP BY k"
        rows = self.con.execute(
            f"SELECT k, sum(n) FROM ({counts}) GROUP BY k ORDER BY k"
        ).fetchall()
        cuts, total = [], 0
        for key, n in rows:
            if total >= self.target_rows:
                cuts.append(key)
                total = 0
            total += n
        bounds = [part.lo, *cuts, part.hi]
        return list(zip(bounds[:-1], bounds[1:]))

    def _write_range(self, old: str | None, entry: dict, number: int) -> int:
        """The files of one range (``entry``: its names and bounds), under hidden names; its
        step and tool_call rows in files of their own, so that a scan of them reads nothing else."""
        con = self.con
        within = _within(entry["lo"], entry["hi"])
        union = f"SELECT * FROM inp WHERE {within}"
        if old:
            union = f"SELECT * FROM ({old}) WHERE {within} UNION ALL BY NAME {union}"
        # newest revision per id; most ids have one row, so only those with more are ranked
        con.execute(f"CREATE OR REPLACE TEMP VIEW u AS {union}")
        con.execute(
            "CREATE OR REPLACE TEMP TABLE dup AS SELECT id FROM u GROUP BY id HAVING count(*) > 1"
        )
        con.execute(
            "CREATE OR REPLACE TEMP TABLE c AS SELECT * EXCLUDE (src) FROM u "
            "WHERE id NOT IN (SELECT id FROM dup) UNION ALL SELECT * EXCLUDE (src) FROM u "
            "WHERE id IN (SELECT id FROM dup) QUALIFY row_number() OVER "
            "(PARTITION BY id ORDER BY rev DESC, writer DESC, src DESC) = 1"
        )
        con.execute("DROP VIEW u")
        parts = "(FROM c WHERE kind = 'part' AND deleted IS NOT TRUE)"
        messages = "(FROM c WHERE kind = 'message' AND deleted IS NOT TRUE)"
        hidden = self.folder / f".{entry['name']}.tmp"
        n = copy(
            con, f"SELECT * FROM c ORDER BY {ORDER}", hidden, {"level": 1, "generation": number}
        )
        for kind, name in entry["derived"].items():
            self._derive(kind, parts, messages, name, number)
        con.execute("DROP TABLE c")
        con.execute("DROP TABLE dup")
        return n

    def _derive(self, kind: str, parts: str, messages: str, name: str, number: int) -> None:
        """The hidden file ``name`` of the ``kind`` rows derived from ``parts`` and ``messages``."""
        copy(
            self.con,
            f"SELECT '{kind}' AS kind, * FROM ({derived(kind, parts, messages)}) "
            f"ORDER BY session_id, {DERIVED_KEY[kind]}",
            self.folder / f".{name}.tmp",
            {"level": 1, "generation": number, "derived": kind},
        )

    def _backfill(self, current, number: int, manifests) -> int:
        """The derived files the current generation's entries lack (written by a version that
        did not derive every kind of :data:`~.schema.DERIVED`), made from each entry's own file
        and committed as a new generation holding the same files (True if it did). A one-time
        migration of a history: its files are never rewritten."""
        lacking = {
            entry["name"]: [k for k in DERIVED if k not in entry.get("derived", {})]
            for entry in (current.files if current is not None else ())
        }
        if current is None or not any(lacking.values()):
            return 0
        files, added = [], []
        for entry in current.files:
            entry = {**entry, "derived": dict(entry.get("derived", {}))}
            rows = (
                f"(SELECT {{}} FROM read_parquet([{quote(str(self.folder / entry['name']))}]) "
                "WHERE kind = '{}' AND deleted IS NOT TRUE)"
            )
            for kind in lacking[entry["name"]]:
                name = f"{entry['name'].removesuffix('.parquet')}-{kind}.parquet"
                self._derive(
                    kind,
                    rows.format(select_list("part"), "part"),
                    rows.format(select_list("message"), "message"),
                    name,
                    number,
                )
                entry["derived"][kind] = name
                added.append(name)
            files.append(entry)
        for name in added:
            os.rename(self.folder / f".{name}.tmp", self.folder / name)
        fsync_dir(self.folder)
        self._commit(number, files, [], manifests)
        return len(added)


_KINDS = "(" + ", ".join(f"'{k}'" for k in KINDS) + ")"


def _list(paths) -> str:
    return "[" + ", ".join(quote(p) for p in paths) + "]"


def _within(lo: str | None, hi: str | None) -> str:
    """SQL: the session id is in ``[lo, hi)`` (rows without one count as ""), as plain comparisons
    on the column, so that min/max statistics skip the row groups outside the range."""
    terms = []
    if lo is not None:  # a cut is never "" (the first key never starts a new range)
        terms.append(f"session_id >= {quote(lo)}")
    if hi is not None:
        nulls = " OR session_id IS NULL" if lo is None else ""
        terms.append(f"(session_id < {quote(hi)}{nulls})")
    return " AND ".join(terms) or "true"
