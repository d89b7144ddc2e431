"""Generations as readers see them: manifests, the current generation, the plan of a read.

A merge (``merge.py``) folds the small Parquet files into a *generation*: large files
``parquet/merged-<g>-….parquet`` that partition the history by session id, described by the
manifest ``parquet/generation-<g>.json`` (its files, their session ranges, the files it
consumed). Readers use the newest manifest whose files all exist (:func:`current_generation`)
and ignore the files it consumed and the large files of older generations; a large file of a
newer generation (a merge between writing its files and its manifest, or a damaged manifest)
is read like a small file. :func:`plan` says which files a read uses, and how.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .segment import stat_key

MERGED = "merged-"  # the name prefix of a generation's large files
_MANIFEST = re.compile(r"^generation-(\d+)\.json$")


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
class Generation:
    """A manifest's contents: its number, its files' entries, the files it consumed."""

    number: int
    files: tuple[dict, ...]
    consumed: frozenset


def read_manifest(path: str) -> Generation | None:
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
        return Generation(int(data["generation"]), files, frozenset(map(str, data["consumed"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_manifests(folder: Path, cache: dict) -> dict:
    """generation → manifest (None if damaged) in ``folder``; ``cache``: path → (stat, it)."""
    found: dict[int, Generation | None] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        match = _MANIFEST.match(name)
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


def current_generation(manifests: dict, names: frozenset) -> Generation | None:
    """The newest valid generation whose files all exist (``names``: the folder's entries)."""
    for number in sorted(manifests, reverse=True):
        gen = manifests[number]
        if gen is not None and all(n in names for f in gen.files for n in file_names(f)):
            return gen
    return None


def file_names(entry: dict) -> list[str]:
    """The files of one manifest entry: its rows' and its derived rows'."""
    return [entry["name"], *entry.get("derived", {}).values()]


def plan(
    live: tuple[str, ...], parquet: tuple[str, ...], names: frozenset, manifests: dict, meta
) -> Plan:
    """The plan for these files.

    ``live`` and ``parquet`` are the usable journals and Parquet files, ``names`` every entry
    of the Parquet folder, ``manifests`` generation number → ``Generation`` (or None when its
    manifest is damaged), ``meta(path)`` a Parquet file's footer entry (or None).
    """
    current = current_generation(manifests, names)
    by_name = {os.path.basename(p): p for p in parquet}
    base: list[Partition] = []
    ignored: set[str] = set()
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
        ignored |= {n for f in current.files for n in file_names(f)}
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
