"""The memory on disk: reviewable Markdown the user can edit.

One module: the file layout, its parser, its writer and consolidation into ``MEMORY.md`` must
agree on one format; split, a change to the format would have to be made in several places.

Layout, one folder per project (a session's working directory)::

    <data_dir>/memory/<name>-<hash8>/
        MEMORY.md                 # consolidated: Pinned (yours) + the four sections, newest first,
                                  # superseded notes listed apart; regenerated after each extraction
        sessions/<session_id>.md  # the observation log: one dated extraction per session

A session file is front matter (session, title, directory, updated, extractor,
digest) and the four sections as bullet lists. ``digest`` is the hash of the
body as we wrote it: a file whose body no longer matches was edited by the
user and is not overwritten (``force`` does). Deleting a bullet forgets it;
deleting a file forgets the session until it is remembered again.

The ``## Pinned`` section of MEMORY.md is the user's own: it is kept when
MEMORY.md is regenerated, searched like everything else and always injected.
Every write is a temporary file renamed over the old one, so a reader never
sees half a file, whichever kernel writes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from .extract import (
    KINDS,
    TITLES,
    Extraction,
    Note,
    count,
    parse_sections,
    render_sections,
    subject,
    supersedes,
)
from .text import iso_date, iso_time, parse_time

MEMORY_FILE = "MEMORY.md"
SESSIONS = "sessions"
PINNED = "Pinned"
SUPERSEDE = 0.7  # Jaccard of subjects at which a newer note replaces an older one
_PINNED_HINT = "<!-- Your own notes: kept when this file is regenerated, always injected when memory is on. -->"


@dataclass(frozen=True)
class MemoryItem:
    """One note with its provenance; ``superseded_by`` names the newer session that replaced it."""

    kind: str  # decisions | preferences | facts | tasks | pinned
    text: str
    session_id: str | None
    time: int  # ms: when the session last changed (pinned: when MEMORY.md changed)
    message_id: str | None = None
    path: str = ""
    superseded_by: str | None = None
    title: str = ""


def project_key(directory: str | os.PathLike) -> str:
    """``<last path component>-<8 hex of the full path>``: readable and unique."""
    path = str(Path(directory).expanduser().resolve())
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).name).strip("-.") or "root"
    return f"{name[:40]}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def memory_root(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / "memory"


def project_dir(data_dir: str | os.PathLike, directory: str | os.PathLike) -> Path:
    return memory_root(data_dir) / project_key(directory)


def session_path(folder: Path, session_id: str) -> Path:
    return folder / SESSIONS / f"{session_id}.md"


def _digest(body: str) -> str:
    return hashlib.sha1(body.encode()).hexdigest()[:16]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# session files


def _front_value(value: object) -> str:
    return " ".join(str(value).split()).replace("---", "—")


def render_session(
    extraction: Extraction,
    *,
    session_id: str,
    title: str,
    directory: str,
    updated: int,
    extractor: str,
) -> str:
    body = f"# {title} · {iso_date(updated)}\n\n" + render_sections(extraction)
    meta = {
        "session": session_id,
        "title": title,
        "directory": directory,
        "updated": iso_time(updated),
        "extractor": extractor,
        "digest": _digest(body),
    }
    head = "\n".join(f"{k}: {_front_value(v)}" for k, v in meta.items())
    return f"---\n{head}\n---\n{body}"


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, text
    meta = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    return meta, text[end + 5 :]


def edited(path: Path) -> bool:
    """Whether the user changed the file since we wrote it."""
    try:
        meta, body = split_front_matter(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    return bool(meta.get("digest")) and meta["digest"] != _digest(body)


def write_session(
    folder: Path,
    extraction: Extraction,
    *,
    session_id: str,
    title: str,
    directory: str,
    updated: int,
    extractor: str,
    force: bool = False,
) -> tuple[Path, str]:
    """Write (or replace) a session's file; returns (path, what happened).

    What happened: "written", "kept-edited" (the user edited it; pass ``force``),
    or "empty" (nothing worth remembering and no earlier file).
    """
    path = session_path(folder, session_id)
    if not force and edited(path):
        return path, "kept-edited"
    if count(extraction) == 0 and not path.exists():
        return path, "empty"
    _write(
        path,
        render_session(
            extraction,
            session_id=session_id,
            title=title,
            directory=directory,
            updated=updated,
            extractor=extractor,
        ),
    )
    return path, "written"


def read_session(path: Path) -> list[MemoryItem]:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    meta, body = split_front_matter(text)
    parsed = parse_sections(body, strict=False) or {}
    session_id = meta.get("session") or path.stem
    when = parse_time(meta.get("updated", "")) or int(path.stat().st_mtime * 1000)
    title = meta.get("title", "")
    return [
        MemoryItem(kind, note.text, session_id, when, note.message_id, str(path), title=title)
        for kind in KINDS
        for note in parsed.get(kind, ())
    ]


# --------------------------------------------------------------------------
# consolidation


def pinned_text(folder: Path) -> str:
    """The user's ``## Pinned`` section of MEMORY.md (without the heading), "" if none."""
    try:
        text = (folder / MEMORY_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    match = re.search(rf"^##\s+{PINNED}\s*$(.*?)(?=^##\s|\Z)", text, re.M | re.S)
    if not match:
        return ""
    return match.group(1).replace(_PINNED_HINT, "").strip()


def pinned_items(folder: Path) -> list[MemoryItem]:
    body = pinned_text(folder)
    if not body:
        return []
    path = folder / MEMORY_FILE
    when = int(path.stat().st_mtime * 1000)
    items = []
    for line in body.splitlines():
        line = re.sub(r"^\s*(?:[-*+•]|\d+[.)])\s+", "", line).strip()
        if line and not line.startswith("<!--"):
            items.append(MemoryItem("pinned", line, None, when, path=str(path)))
    return items


def session_items(folder: Path) -> list[MemoryItem]:
    try:
        paths = sorted((folder / SESSIONS).glob("*.md"))
    except FileNotFoundError:
        return []
    items: list[MemoryItem] = []
    for path in paths:
        items.extend(read_session(path))
    return mark_superseded(items)


def _group(kind: str) -> str:
    return "tasks" if kind == "tasks" else "knowledge"


def mark_superseded(items: list[MemoryItem]) -> list[MemoryItem]:
    """Set ``superseded_by`` on every note a newer session restated (same subject).

    Tasks only supersede tasks; decisions, preferences and facts supersede each
    other. Candidates come from an inverted index of subject terms, so this is
    far from quadratic on real memories.
    """
    order = sorted(range(len(items)), key=lambda i: (items[i].time, items[i].session_id or ""))
    subjects = [subject(item.text) for item in items]
    frequency: dict[str, int] = {}
    for found in subjects:
        for term in found:
            frequency[term] = frequency.get(term, 0) + 1
    index: dict[tuple[str, str], list[int]] = {}
    result = list(items)
    for i in order:
        item = items[i]
        group = _group(item.kind)
        terms = sorted(subjects[i], key=lambda t: (frequency[t], t))
        # prefix filter: a Jaccard of at least SUPERSEDE shares ceil(SUPERSEDE * n) of the n terms,
        # so it shares one of the n - ceil(SUPERSEDE * n) + 1 rarest
        prefix = terms[: len(terms) - math.ceil(SUPERSEDE * len(terms)) + 1]
        candidates: set[int] = set()
        for term in prefix:
            candidates.update(index.get((group, term), ()))
        for j in candidates:
            older = items[j]
            if older.session_id == item.session_id or result[j].superseded_by:
                continue
            if older.time <= item.time and supersedes(item.text, older.text, SUPERSEDE):
                result[j] = replace(result[j], superseded_by=item.session_id)
        for term in terms:
            index.setdefault((group, term), []).append(i)
    return result


def all_items(folder: Path) -> list[MemoryItem]:
    return pinned_items(folder) + session_items(folder)


def consolidate(folder: Path, directory: str = "") -> Path:
    """Regenerate MEMORY.md from the session files, keeping the Pinned section."""
    items = session_items(folder)
    pinned = pinned_text(folder)
    by_session = {item.session_id: item.time for item in items}
    lines = [
        f"# Project memory{' — ' + directory if directory else ''}",
        "",
        "<!-- Generated from sessions/*.md by jupyter-session-agent (%agent remember). To correct the memory,",
        "     edit or delete bullets in those files; write your own notes under Pinned — they are kept. -->",
        "",
        f"## {PINNED}",
        "",
        _PINNED_HINT,
        pinned,
        "",
    ]
    current = sorted(
        (i for i in items if not i.superseded_by), key=lambda i: (-i.time, i.session_id or "")
    )
    for kind in KINDS:
        lines.append(f"## {TITLES[kind]}")
        lines.append("")
        notes = [i for i in current if i.kind == kind]
        lines.extend(f"- {i.text} _({iso_date(i.time)} · {i.session_id})_" for i in notes)
        if not notes:
            lines.append("- (none)")
        lines.append("")
    old = sorted((i for i in items if i.superseded_by), key=lambda i: (-i.time, i.session_id or ""))
    if old:
        lines += [
            "## Superseded",
            "",
            "<!-- Replaced by a newer session on the same subject; kept for review. -->",
        ]
        lines.extend(
            f"- ~~{i.text}~~ _({iso_date(i.time)} · {i.session_id} → "
            f"{iso_date(by_session.get(i.superseded_by))} · {i.superseded_by})_"
            for i in old
        )
        lines.append("")
    path = folder / MEMORY_FILE
    _write(path, "\n".join(lines).rstrip() + "\n")
    return path


def signature(folder: Path) -> tuple:
    """Changes whenever a memory file is added, removed or rewritten."""
    out = []
    for path in _files(folder):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _files(folder: Path) -> Iterable[Path]:
    yield folder / MEMORY_FILE
    try:
        yield from sorted((folder / SESSIONS).glob("*.md"))
    except FileNotFoundError:
        return


def project_folders(data_dir: str | os.PathLike) -> list[Path]:
    root = memory_root(data_dir)
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except FileNotFoundError:
        return []


__all__ = [
    "MemoryItem",
    "Note",
    "project_key",
    "project_dir",
    "write_session",
    "read_session",
    "consolidate",
    "all_items",
    "session_items",
    "pinned_items",
    "signature",
    "edited",
    "mark_superseded",
]
