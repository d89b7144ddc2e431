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

Readers (:func:`plan`) use the newest manifest whose files all exist and ignore the files it
consumed and the large files of older generations; a large file of a newer generation (a
merge between steps 2 and 3, or a manifest someone damaged) is read like a small file. Small
files are deduplicated against everything at read time, so in every state a crash can leave
— before, between and after any two of these steps — each row is seen exactly once: a merge
never loses or doubles a row (``tests/test_store_merge.py`` kills mergers at random moments).

A small file is merged only once its journal is gone (the compaction that wrote it has
finished), so a journal and the merged copy of its rows never coexist.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from .schema import COLUMN_LIST, DERIVED, KINDS, LAYOUT, derived, quote, typed
from .segment import ORDER, connect, copy, fsync_dir, parquet_problem, read_meta, stat_key

MERGED = "merged-"
MANIFEST = re.compile(r"^generation-(\d+)\.json$")
MIN_FILES = 8  # a merge waits for this many small files …
MIN_BYTES = 16 << 20  # … or this many bytes of them (about 200,000 rows: a tail worth scanning)
TARGET_ROWS = 1_000_000  # rows per large file (a session is never split)
MEMORY_LIMIT = "1GB"  # a merge spills to disk past this


@dataclass(frozen=True)
class Partition:
    """One large file of the current generation: the rows of sessions ``lo <= id < hi``
    (None: unbounded; rows without a session sort as the empty string)."""

    path: str
    lo: str | None
    hi: str | None
    rows: int
    layout: str | None = None  # its column layout (schema.LAYOUT of the version that wrote it)
    derived: tuple = ()  # (kind, path) of the files of its step and tool_call rows

    def holds(self, key: str) -> bool:
        return (self.lo is None or key >= self.lo) and (self.hi is None or key < self.hi)


@dataclass(frozen=True)
class Plan:
    """What a read uses: the journals and small files (deduplicated at read time: "the tail")
    and the current generation's large files (read as they are: "the base")."""

    live: tuple[str, ...] = ()
    small: tuple[str, ...] = ()
    base: tuple[Partition, ...] = ()
    generation: int = 0

    @property
    def files(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(journals, Parquet files) for reads over every row (``events``, one session)."""
        return self.live, self.small + tuple(p.path for p in self.base)

    def partition(self, key: str) -> Partition | None:
        for part in self.base:
            if part.holds(key):
                return part
        return None


@dataclass(frozen=True)
class _Generation:
    number: int
    files: tuple[dict, ...]
    consumed: frozenset


def read_manifest(path: str) -> _Generation | None:
    """A manifest, or None if it is not one (unreadable, damaged, another format)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(1 << 24))
        files = tuple(
            {
                "name": str(f["name"]),
                "lo": f["lo"],
                "hi": f["hi"],
                "rows": int(f["rows"]),
                "layout": f.get("layout"),
                "derived": {str(k): str(v) for k, v in f.get("derived", {}).items()},
            }
            for f in data["files"]
        )
        return _Generation(int(data["generation"]), files, frozenset(map(str, data["consumed"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def plan(
    live: tuple[str, ...], parquet: tuple[str, ...], names: frozenset, manifests: dict, meta
) -> Plan:
    """The plan for these files.

    ``live`` and ``parquet`` are the usable journals and Parquet files, ``names`` every entry
    of the Parquet folder, ``manifests`` generation number → ``_Generation`` (or None when its
    manifest is damaged), ``meta(path)`` a Parquet file's footer entry (or None).
    """
    current = _current(manifests, names)
    by_name = {os.path.basename(p): p for p in parquet}
    base, ignored = [], set()
    if current is not None:
        ignored |= current.consumed
        for f in current.files:
            if f["name"] in by_name:  # else left out of reads (a warning says why)
                path = by_name[f["name"]]
                layout = f.get("layout") or (meta(path) or {}).get("layout")
                derived = tuple(
                    (k, by_name[n]) for k, n in sorted(f["derived"].items()) if n in by_name
                )
                base.append(Partition(path, f["lo"], f["hi"], f["rows"], layout, derived))
        ignored |= {n for f in current.files for n in _names(f)}
    small = []
    for name, path in by_name.items():
        if name in ignored:
            continue
        if name.startswith(MERGED):
            info = meta(path) or {}
            if info.get("level") == 1 and info.get("derived"):
                continue  # step or tool_call rows of a generation not in use: computed again
            older = (
                current is not None
                and info.get("level") == 1
                and int(info.get("generation", 0)) < current.number
            )
            if older:
                continue  # an older generation's: its rows are in the current one
        small.append(path)
    stems = {_stem(name) for name in ignored} | {_stem(p) for p in small}
    live = tuple(p for p in live if _stem(p) not in stems)  # compacted: its file is read
    base.sort(key=lambda p: (p.lo is not None, p.lo or ""))
    number = current.number if current is not None else 0
    return Plan(live, tuple(sorted(small)), tuple(base), number)


def _stem(path: str) -> str:
    """A file's name without folder and extension (``Path(path).stem``, cheaper)."""
    return os.path.splitext(os.path.basename(path))[0]


def _current(manifests: dict, names: frozenset) -> _Generation | None:
    """The newest valid generation whose files all exist."""
    for number in sorted(manifests, reverse=True):
        gen = manifests[number]
        if gen is not None and all(n in names for f in gen.files for n in _names(f)):
            return gen
    return None


def list_manifests(folder: Path, cache: dict) -> dict:
    """generation → manifest (None if damaged) in ``folder``; ``cache``: path → (stat, it)."""
    found = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        match = MANIFEST.match(name)
        if not match:
            continue
        path = str(folder / name)
        key = stat_key(path)
        hit = cache.get(path)
        if hit is None or hit[0] != key:
            hit = cache[path] = (key, read_manifest(path))
        gen = hit[1]
        number = int(match.group(1))
        found[number] = gen if gen is None or gen.number == number else None
    return found


# --------------------------------------------------------------------------
# merging


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
        return _Merge(history, target_rows).run(force, min_files)
    finally:
        os.close(fd)  # also releases the lock


class _Merge:
    def __init__(self, history: Path, target_rows: int) -> None:
        self.history = history
        self.folder = history / "parquet"
        self.target_rows = target_rows
        self.con = None
        self.metas: dict[str, dict | None] = {}

    def meta(self, path: str) -> dict | None:
        if path not in self.metas:
            try:
                self.metas[path] = read_meta(self.con, path)
            except Exception:  # noqa: BLE001 - unreadable: not ours to merge
                self.metas[path] = {"unreadable": True}
        return self.metas[path]

    def run(self, force: bool, min_files: int) -> dict | None:
        self.spill = spill = self.folder / f".merge-spill-{secrets.token_hex(4)}"
        self.con = connect(MEMORY_LIMIT, spill)
        try:
            return self._run(force, min_files)
        finally:
            self.con.close()
            shutil.rmtree(spill, ignore_errors=True)

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

    def _run(self, force: bool, min_files: int) -> dict | None:
        names, parquet, manifests, live = self._listing()
        current = _current(manifests, names)
        self._clean(names, parquet, manifests, current)
        names, parquet, manifests, live = self._listing()
        now = plan(live, parquet, names, manifests, self.meta)
        journals = {Path(p).stem for p in live}
        if current is not None and len(now.base) != len(current.files):
            return None  # a file of the generation cannot be read: never merge around a hole
        inputs = [p for p in now.small if Path(p).stem not in journals]  # compaction finished
        size = sum(os.path.getsize(p) for p in inputs)
        if not inputs or (not force and len(inputs) < min_files and size < MIN_BYTES):
            return None
        seen = [int((self.meta(p) or {}).get("generation", 0)) for p in parquet]
        number = max([0, *manifests, *seen]) + 1
        written, consumed = self._write(number, now, inputs)
        kept = [f for f in (current.files if current else ()) if f["name"] not in consumed]
        manifest = {
            "format": 2,
            "generation": number,
            "files": kept + written,
            "consumed": sorted(consumed),
        }
        # step 2: into place (until step 3, readers read them like small files)
        for name in (n for f in written for n in _names(f)):
            os.rename(self.folder / f".{name}.tmp", self.folder / name)
        fsync_dir(self.folder)
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
        return {
            "generation": number,
            "inputs": len(inputs),
            "files": len(written),
            "rows": sum(f["rows"] for f in written),
        }

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
        listed = {n for f in current.files for n in _names(f)}
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
        keys = [k for (k,) in con.execute(f"SELECT DISTINCT {_KEY} FROM inp ORDER BY 1").fetchall()]
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
        written, consumed = [], {os.path.basename(p) for p in inputs}
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
                entry = {
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
        counts = f"SELECT {_KEY} k, count(*) n FROM inp WHERE {within} GROUP BY k"
        if old:
            counts += f" UNION ALL SELECT {_KEY} k, count(*) n FROM ({old}) GROUP BY k"
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
            copy(
                con,
                f"SELECT '{kind}' AS kind, * FROM ({derived(kind, parts, messages)}) "
                "ORDER BY session_id, id",
                self.folder / f".{name}.tmp",
                {"level": 1, "generation": number, "derived": kind},
            )
        con.execute("DROP TABLE c")
        con.execute("DROP TABLE dup")
        return n


_KEY = "coalesce(session_id, '')"
_KINDS = "(" + ", ".join(f"'{k}'" for k in KINDS) + ")"


def _names(entry: dict) -> list[str]:
    """The files of one manifest entry: its rows' and its derived rows'."""
    return [entry["name"], *entry.get("derived", {}).values()]


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
