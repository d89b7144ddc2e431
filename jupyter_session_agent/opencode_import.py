"""Import OpenCode's history (``~/.local/share/opencode``) so our SQL runs on real sessions.

Two layouts are read, both with OpenCode's ids kept:

* ``opencode.db`` (v1.2+, spec §1.5): SQLite tables ``session`` (columns),
  ``message`` and ``part`` (``data`` JSON without the ids). Opened read-only;
  if that fails (a WAL database on a read-only mount), a private copy is read.
* ``storage/`` (before v1.2): JSON files. Every layout OpenCode used is found by
  walking ``storage/session``, ``storage/message`` and ``storage/part`` and
  classifying each file by its id prefix (``ses_``, ``msg_``, ``prt_``):
  ``session/info/<id>.json`` or ``session/<projectID>/<id>.json``,
  ``message/<sessionID>/<id>.json``, ``part/<messageID>/<id>.json`` (and the
  older ``session/message/…``, ``session/part/…``).

Rows in both: the database wins. Every part type (the 12 of §1.4) maps to its
class in :mod:`.messages`; a row that cannot be read (an unknown part type
from a newer OpenCode, a field of the wrong type) is skipped and counted, and
fields our model does not keep are listed in the result, so nothing is lost
silently. Importing again updates the same rows (ids are OpenCode's), so a
re-import after more OpenCode work picks up the new sessions.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .errors import UsageError
from .messages import Session, message_from_data, part_from_data

_SESSION_COLUMNS = {  # session table column → path in Session.Info JSON
    "project_id": "projectID", "workspace_id": "workspaceID", "parent_id": "parentID", "slug": "slug",
    "directory": "directory", "title": "title", "version": "version", "revert": "revert",
    "permission": "permission", "time_created": "time.created", "time_updated": "time.updated",
    "time_compacting": "time.compacting", "time_archived": "time.archived",
}
_JSON_COLUMNS = {"revert", "permission", "summary_diffs"}


@dataclass
class OpenCodeImport:
    sources: list[str] = field(default_factory=list)
    sessions: int = 0
    messages: int = 0
    parts: int = 0
    part_types: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)  # reason → rows
    dropped_fields: Counter = field(default_factory=Counter)  # "part.text: foo" → rows
    session_ids: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        types = ", ".join(f"{t} {n}" for t, n in sorted(self.part_types.items()))
        line = (f"imported {self.sessions} session(s), {self.messages} message(s), {self.parts} part(s) from "
                f"{' + '.join(self.sources)}" + (f" — parts: {types}" if types else ""))
        if self.skipped:
            line += "; skipped: " + ", ".join(f"{n} {r}" for r, n in self.skipped.most_common(5))
        if self.dropped_fields:
            line += "; fields not kept: " + ", ".join(f"{f} ({n})" for f, n in self.dropped_fields.most_common(5))
        return line + " — try `%agent sessions` or SQL over session/message/part"


def find_sources(path: str | os.PathLike) -> tuple[Path | None, Path | None]:
    """(opencode.db, storage dir) under ``path`` (a data dir, the db file or the storage dir)."""
    root = Path(path).expanduser()
    if root.is_file():
        return root, None
    if not root.is_dir():
        raise UsageError(f"no OpenCode data at {str(root)!r} — give its data directory, "
                         "e.g. ~/.local/share/opencode")
    db = root / "opencode.db"
    storage = root if root.name == "storage" else root / "storage"
    found = (db if db.is_file() else None, storage if (storage / "session").is_dir() else None)
    if found == (None, None):
        raise UsageError(f"{root} holds neither opencode.db nor storage/session — give OpenCode's data "
                         "directory, e.g. ~/.local/share/opencode")
    return found


def import_opencode(store, path: str | os.PathLike, *, sessions: list[str] | None = None) -> OpenCodeImport:
    """Import every session (or only ``sessions``) found at ``path`` into ``store``."""
    db, storage = find_sources(path)
    rows: dict[str, dict[str, dict]] = {"session": {}, "message": {}, "part": {}}
    result = OpenCodeImport()
    if storage is not None:
        result.sources.append(str(storage))
        for kind, row in _read_storage(storage):
            rows[kind][row["id"]] = row
    if db is not None:
        result.sources.append(str(db))
        for kind, row in _read_db(db):
            rows[kind][row["id"]] = row
    wanted = set(sessions) if sessions else None
    for row in rows["session"].values():
        if wanted is not None and row["id"] not in wanted:
            continue
        info = _convert(result, "session", row["data"], Session.from_data, _fill_session)
        if info is None:
            continue
        store.put(info, time_created=row.get("created") or info.time_created)
        result.sessions += 1
        result.session_ids.append(info.id)
    imported_sessions, imported_messages = set(result.session_ids), set()
    for row in rows["message"].values():
        if row["session_id"] not in imported_sessions:
            if wanted is None and row["session_id"] not in rows["session"]:
                result.skipped["messages of a missing session"] += 1
            continue
        message = _convert(result, "message", row["data"], message_from_data, _fill_message)
        if message is None:
            continue
        store.put(message, time_created=row.get("created") or message.time_created)
        imported_messages.add(message.id)
        result.messages += 1
    for row in rows["part"].values():
        if row["message_id"] not in imported_messages:
            if row["session_id"] in imported_sessions:
                result.skipped["parts of a missing message"] += 1
            continue
        part = _convert(result, "part", row["data"], part_from_data, None)
        if part is None:
            continue
        store.put(part, time_created=row.get("created"))
        result.parts += 1
        result.part_types[part.type] += 1
    store.flush(sync=True)
    return result


# --------------------------------------------------------------------------
# reading


def _read_db(path: Path) -> Iterator[tuple[str, dict]]:
    con, tmp = _open_db(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "session" not in tables:
            raise UsageError(f"{path} has no session table — is it OpenCode's opencode.db?")
        for row in con.execute("SELECT * FROM session"):
            row = dict(row)
            yield "session", {"id": row["id"], "created": row.get("time_created"), "data": _session_info(row)}
        if "message" in tables:
            for row in con.execute("SELECT id, session_id, time_created, data FROM message"):
                data = _json(row["data"])
                yield "message", {"id": row["id"], "session_id": row["session_id"], "created": row["time_created"],
                                  "data": {**data, "id": row["id"], "sessionID": row["session_id"]}}
        if "part" in tables:
            for row in con.execute("SELECT id, message_id, session_id, time_created, data FROM part"):
                data = _json(row["data"])
                yield "part", {"id": row["id"], "session_id": row["session_id"], "message_id": row["message_id"],
                               "created": row["time_created"],
                               "data": {**data, "id": row["id"], "sessionID": row["session_id"],
                                        "messageID": row["message_id"]}}
    except sqlite3.DatabaseError as err:
        raise UsageError(f"cannot read {path}: {err}") from None
    finally:
        con.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _open_db(path: Path) -> tuple[sqlite3.Connection, str | None]:
    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        con.row_factory = sqlite3.Row
        return con, None
    except sqlite3.Error:
        tmp = tempfile.mkdtemp(prefix="opencode-import-")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(path) + suffix)
            if src.exists():
                shutil.copy2(src, Path(tmp) / (path.name + suffix))
        con = sqlite3.connect(Path(tmp) / path.name)
        con.row_factory = sqlite3.Row
        return con, tmp


def _session_info(row: dict) -> dict:
    """A ``session`` table row → OpenCode's Session.Info JSON."""
    info: dict[str, Any] = {"id": row["id"]}
    for column, path in _SESSION_COLUMNS.items():
        value = row.get(column)
        if value is None:
            continue
        if column in _JSON_COLUMNS:
            value = _json(value)
        _set(info, path, value)
    if row.get("share_url"):
        info["share"] = {"url": row["share_url"]}
    summary = {k: row.get(f"summary_{k}") for k in ("additions", "deletions", "files")}
    if any(v is not None for v in summary.values()) or row.get("summary_diffs"):
        info["summary"] = {k: v for k, v in summary.items() if v is not None}
        if row.get("summary_diffs"):
            info["summary"]["diffs"] = _json(row["summary_diffs"])
    return info


def _read_storage(storage: Path) -> Iterator[tuple[str, dict]]:
    for folder in ("session", "message", "part"):
        base = storage / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict):
                continue
            id = str(data.get("id") or path.stem)
            rel = path.relative_to(storage).parts
            if id.startswith("ses_"):
                yield "session", {"id": id, "data": {**data, "id": id}}
            elif id.startswith("msg_"):
                session_id = data.get("sessionID") or rel[-2]
                yield "message", {"id": id, "session_id": session_id, "data": {**data, "id": id, "sessionID": session_id}}
            elif id.startswith("prt_"):
                message_id = data.get("messageID") or rel[-2]
                session_id = data.get("sessionID") or (rel[-3] if len(rel) >= 4 else "")
                yield "part", {"id": id, "session_id": session_id, "message_id": message_id,
                               "data": {**data, "id": id, "sessionID": session_id, "messageID": message_id}}


# --------------------------------------------------------------------------
# converting


def _convert(result: OpenCodeImport, kind: str, data: dict, decode, fill):
    try:
        value = decode(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        if fill is None:
            result.skipped[_reason(kind, data, err)] += 1
            return None
        try:
            value = decode(fill(data))
        except (KeyError, TypeError, ValueError, AttributeError) as err2:
            result.skipped[_reason(kind, data, err2)] += 1
            return None
    kept = set(_leaves(value.to_data()))
    for leaf in _leaves(data):
        if leaf not in kept and not any(leaf.startswith(k + ".") for k in kept):
            label = f"{kind}.{data.get('type') or data.get('role') or ''}".rstrip(".")
            result.dropped_fields[f"{label}: {leaf}"] += 1
    return value


def _reason(kind: str, data: dict, err: Exception) -> str:
    if kind == "part" and isinstance(err, KeyError) and data.get("type") and str(err).strip("'") == data.get("type"):
        return f"parts of unknown type {data['type']!r}"
    return f"unreadable {kind}s ({type(err).__name__})"


def _fill_session(data: dict) -> dict:
    time = dict(data.get("time") or {})
    created = time.get("created") or 0
    time.setdefault("created", created)
    time.setdefault("updated", created)
    return {"directory": "", "title": "(untitled)", **data, "time": time}


def _fill_message(data: dict) -> dict:
    created = (data.get("time") or {}).get("created") or 0
    if data.get("role") == "user":
        return {"model": {"providerID": "unknown", "modelID": "unknown"}, **data,
                "time": {"created": created, **(data.get("time") or {})}}
    return {"parentID": "", "providerID": "unknown", "modelID": "unknown", **data,
            "time": {"created": created, **(data.get("time") or {})}}


def _leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else key)
    elif prefix:
        yield prefix


def _set(out: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        out = out.setdefault(p, {})
    out[leaf] = value


def _json(value: Any) -> Any:
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


__all__ = ["import_opencode", "OpenCodeImport", "find_sources"]
