"""Import OpenCode's history (``~/.local/share/opencode``) so our SQL runs on real sessions.

One module: the rows of both layouts (read by :mod:`.opencode_read`) go through one
conversion, one clash check and one report of what was skipped or not brought.

Two layouts are read, both with OpenCode's ids kept:

* ``opencode.db`` (v1.2+): SQLite tables ``session`` (columns),
  ``message`` and ``part`` (``data`` JSON without the ids). Opened read-only;
  if that fails (a WAL database on a read-only mount), a private copy is read.
* ``storage/`` (before v1.2): JSON files. Every layout OpenCode used is found by
  walking ``storage/session``, ``storage/message`` and ``storage/part`` and
  classifying each file by its id prefix (``ses_``, ``msg_``, ``prt_``):
  ``session/info/<id>.json`` or ``session/<projectID>/<id>.json``,
  ``message/<sessionID>/<id>.json``, ``part/<messageID>/<id>.json`` (and the
  older ``session/message/…``, ``session/part/…``).

Rows in both: the database wins. Every part type (the 12 OpenCode has) maps to its
class in :mod:`..core.messages`; a row that cannot be read (an unknown part type
from a newer OpenCode, a field of the wrong type, a file that is not JSON, a
session without a title) is skipped, counted by reason and listed with where
it came from (``OpenCodeImport.skipped_items``), and fields our model does not
keep are listed in the result, so nothing is lost silently. A database whose
tables lack OpenCode's columns is refused with one line. Importing again
updates the same rows (ids are OpenCode's), so a re-import after more OpenCode
work picks up the new sessions.

What OpenCode keeps besides messages and parts comes along too: the session row's own
columns (cost and token totals, agent, model, path, metadata: ``Session``; the
``session_summary`` view shows them where they differ from what the messages add up to), the
``todo`` table (one list per session, view ``todo``; older storage: ``storage/todo/<id>.json``)
and, derived from the compaction requests, summary messages and cleared tool outputs, a
``compaction_event`` row per summary and per prune (``source = 'opencode'``;
``compaction.events_from_history``). Every table, column and storage folder that is not
brought is listed in the report with the reason (``OpenCodeImport.not_imported``).

An OpenCode database is untrusted data, as a bundle is (``transfer.untrusted_session``): its
sessions' permission rules are dropped, they work in the importer's folder (OpenCode's folder is
kept as ``metadata.importedFrom.directory``), and a parent link or a ``task`` call's session link
to a session this import does not bring (and no earlier OpenCode import brought) is dropped; each
is counted in the report. An import never overwrites a session it did not bring (only a session
an earlier OpenCode import wrote is updated), nor moves a stored message or part to another
session: such a clash refuses the whole import in one line before anything is written.

Ids are input from outside: OpenCode's own ids follow our grammar and are kept
as they are; a row whose id (or session, message, parent, call id …) does not
(OpenCode accepts any caller-chosen id with the right prefix, e.g.
``ses_../x``) is skipped and listed, never renamed. A saved-output path
outside this data directory is not kept (``transfer.keep_paths_inside``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import SessionNotFoundError, UsageError
from ..core.messages import Session, message_from_data, part_from_data, replace
from ..loop.compaction import events_from_history, stable_event_id
from .opencode_read import (
    IMPORTED,
    OpenCodeImport,
    TodoList,
    error_detail,
    find_sources,
    read_db,
    read_storage,
)
from .transfer import (
    check_message,
    check_part,
    check_session,
    keep_paths_inside,
    refuse_clashes,
    untrusted_part,
    untrusted_session,
)


def _from_opencode(info: Session) -> bool:
    """Whether a stored session was written by an OpenCode import (which may update it)."""
    mark = info.metadata.get(IMPORTED) if isinstance(info.metadata, dict) else None
    return isinstance(mark, dict) and mark.get("source") == "opencode"


def _stored(store, session_id: str) -> Session | None:
    try:
        info = store.session(session_id)
    except SessionNotFoundError:
        return None
    return info if info.id == session_id else None  # not a prefix match of another one


def _check_clashes(store, rows: dict[str, dict[str, dict]], brought: set[str]) -> set[str]:
    """Refuse (one line, nothing written) an import that would overwrite a session no OpenCode
    import wrote, or move a stored message or part; return the stored sessions an earlier
    OpenCode import wrote (parents a session here may name)."""
    for session_id in sorted(s for s in brought if ids.valid(s, "session")):
        stored = _stored(store, session_id)
        if stored is not None and not _from_opencode(stored):
            raise UsageError(
                f"refusing the import: session {session_id} is already in the history and was "
                "not imported from OpenCode (an import never overwrites a session) — "
                f"`%agent delete {session_id}` first, or import without it (--session …); "
                "nothing was imported"
            )
    messages = {
        r["id"]: r["session_id"]
        for r in rows["message"].values()
        if r["session_id"] in brought and isinstance(r["id"], str)
    }
    parts = {
        r["id"]: r["message_id"]
        for r in rows["part"].values()
        if r["message_id"] in messages and isinstance(r["id"], str)
    }
    refuse_clashes(
        store, "the import", {"message": messages, "part": parts}, lambda kind, id, owner: True
    )
    parents = {
        r["data"].get("parentID")
        for r in rows["session"].values()
        if r["id"] in brought and isinstance(r["data"], dict)
    }
    found: set[str] = set()
    for p in parents - brought:
        if isinstance(p, str) and ids.valid(p, "session"):
            info = _stored(store, p)
            if info is not None and _from_opencode(info):
                found.add(p)
    return found


def _as_imported(info: Session, brought: set[str], home: str, result: OpenCodeImport) -> Session:
    """``info`` as an import may store it (``transfer.untrusted_session``), OpenCode's folder
    kept in ``metadata.importedFrom``; what was dropped is counted in the report."""
    safe, dropped = untrusted_session(info, brought, home)
    for note in dropped:
        kind = "permission rules" if "permission" in note else "parent link (not in this import)"
        result.dropped_fields[f"session: {kind}"] += 1
    metadata = info.metadata if isinstance(info.metadata, dict) else {}
    if info.metadata is not None and not isinstance(info.metadata, dict):
        metadata = {"value": info.metadata}
    mark = {"source": "opencode", "directory": info.directory}
    return replace(safe, metadata={**metadata, IMPORTED: mark})


def import_opencode(
    store,
    path: str | os.PathLike,
    *,
    sessions: list[str] | None = None,
    directory: str | os.PathLike | None = None,
) -> OpenCodeImport:
    """Import every session (or only ``sessions``) found at ``path`` into ``store``; they work
    in ``directory`` (default: the current working directory), never in OpenCode's folder."""
    wanted = {ids.check(s, "session", what="--session") for s in sessions} if sessions else None
    home = str(Path(directory or os.getcwd()).resolve())
    db, storage = find_sources(path)
    rows: dict[str, dict[str, dict]] = {"session": {}, "message": {}, "part": {}, "todo": {}}
    result = OpenCodeImport()
    if storage is not None:
        result.sources.append(str(storage))
        for kind, row in read_storage(storage, result):
            rows[kind][row["id"]] = row
    if db is not None:
        result.sources.append(str(db))
        todo_sessions = set()
        for kind, row in read_db(db, result):
            if kind == "todo" and row["session_id"] not in todo_sessions:  # the database's wins
                todo_sessions.add(row["session_id"])
                rows["todo"] = {
                    k: v for k, v in rows["todo"].items() if v["session_id"] != row["session_id"]
                }
            rows[kind][row["id"]] = row
    brought = {
        row["id"] for row in rows["session"].values() if wanted is None or row["id"] in wanted
    }
    brought |= _check_clashes(store, rows, brought)  # parents an earlier import brought
    for row in rows["session"].values():
        if wanted is not None and row["id"] not in wanted:
            continue
        info = _convert(result, "session", row, Session.from_data, _fill_session, check_session)
        if info is None:
            continue
        info = _as_imported(info, brought, home, result)
        store.put(info, time_created=row.get("created") or info.time_created)
        result.sessions += 1
        result.session_ids.append(info.id)
    imported_sessions, imported_messages = set(result.session_ids), set()
    for row in rows["message"].values():
        if row["session_id"] not in imported_sessions:
            if wanted is None and row["session_id"] not in rows["session"]:
                result.skip("messages of a missing session", row["where"])
            continue
        message = _convert(result, "message", row, message_from_data, _fill_message, check_message)
        if message is None:
            continue
        store.put(message, time_created=row.get("created") or message.time_created)
        imported_messages.add(message.id)
        result.messages += 1
    for row in rows["part"].values():
        if row["message_id"] not in imported_messages:
            if row["session_id"] in imported_sessions:
                result.skip("parts of a missing message", row["where"])
            continue
        part = _convert(result, "part", row, part_from_data, None, check_part)
        if part is None:
            continue
        part, dropped = keep_paths_inside(part, store.data_dir)
        if dropped:
            label = f"part.{part.type}: state.metadata.outputPath (outside this data directory)"
            result.dropped_fields[label] += 1
        part, link = untrusted_part(part, brought)
        if link:
            result.dropped_fields["part.tool: task sessionId (not in this import)"] += 1
        store.put(part, time_created=row.get("created"))
        result.parts += 1
        result.part_types[part.type] += 1
    store.flush(sync=True)
    _import_todos(store, rows["todo"], imported_sessions, result)
    for session_id in result.session_ids:  # what OpenCode did not record as events, derived
        for event in events_from_history(store.messages(session_id), source="opencode"):
            store.put(event, time_created=event.time_created)
            result.events[event.kind] += 1
    store.flush(sync=True)
    return result


def _import_todos(store, rows: dict[str, dict], sessions: set[str], result: OpenCodeImport) -> None:
    """A :class:`TodoList` per imported session with todos (the table's rows, or a storage file)."""
    lists: dict[str, list[dict]] = {}
    for row in rows.values():
        if row["session_id"] in sessions:
            lists.setdefault(row["session_id"], []).append(row["data"])
    for session_id, items in lists.items():
        items.sort(key=lambda item: item["position"])
        info = store.session(session_id)
        store.put(
            TodoList(
                stable_event_id(info.time_created, f"{session_id}:todos"),
                session_id,
                tuple(items),
                info.time_created,
            ),
            time_created=info.time_created,
        )
        result.todos += len(items)


# --------------------------------------------------------------------------
# converting


def _convert(result: OpenCodeImport, kind: str, row: dict, decode, fill, check):
    data, where = row["data"], row.get("where") or f"{kind} {ids.shown(row.get('id'))}"
    try:
        value = decode(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        if fill is None:
            result.skip(_reason(kind, data, err), where, error_detail(err))
            return None
        try:
            value = decode(fill(data))
        except (KeyError, TypeError, ValueError, AttributeError) as err2:
            result.skip(_reason(kind, data, err2), where, error_detail(err2))
            return None
    try:
        check(value)
    except ids.InvalidIdError as err:
        result.skip(f"{kind}s with an id outside the id grammar", where, str(err).split(" — ")[0])
        return None
    kept = set(_leaves(value.to_data()))
    for leaf in _leaves(data):
        if leaf not in kept and not any(leaf.startswith(k + ".") for k in kept):
            label = f"{kind}.{data.get('type') or data.get('role') or ''}".rstrip(".")
            result.dropped_fields[f"{label}: {leaf}"] += 1
    return value


def _reason(kind: str, data: dict, err: Exception) -> str:
    if (
        kind == "part"
        and isinstance(err, KeyError)
        and data.get("type")
        and str(err).strip("'") == data.get("type")
    ):
        return f"parts of unknown type {data['type']!r}"
    if kind == "session" and isinstance(err, _Malformed):
        return "sessions without a title or a creation time"
    return f"unreadable {kind}s ({type(err).__name__})"


class _Malformed(ValueError):
    """A session row without what every OpenCode session has: not filled in, skipped."""


def _fill_session(data: dict) -> dict:
    """Old storage sessions lack a directory (and some ``time.updated``): filled in. A title and a
    creation time every OpenCode session has; without them the row is skipped, never imported
    as an empty "(untitled)" session."""
    time = dict(data.get("time") or {}) if isinstance(data.get("time"), dict) else {}
    if not isinstance(data.get("title"), str) or not isinstance(time.get("created"), int):
        raise _Malformed("no title or no time.created")
    time.setdefault("updated", time["created"])
    return {"directory": "", **data, "time": time}


def _fill_message(data: dict) -> dict:
    created = (data.get("time") or {}).get("created") or 0
    if data.get("role") == "user":
        return {
            "model": {"providerID": "unknown", "modelID": "unknown"},
            **data,
            "time": {"created": created, **(data.get("time") or {})},
        }
    return {
        "parentID": "",
        "providerID": "unknown",
        "modelID": "unknown",
        **data,
        "time": {"created": created, **(data.get("time") or {})},
    }


def _leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else key)
    elif prefix:
        yield prefix


__all__ = ["import_opencode", "OpenCodeImport", "TodoList", "find_sources"]
