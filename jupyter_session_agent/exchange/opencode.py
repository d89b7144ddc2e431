"""Import OpenCode's history (``~/.local/share/opencode``) so our SQL runs on real sessions.

One module: both of OpenCode's layouts are read into the same rows, which go through one
conversion and one report of what was skipped or not brought.

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

import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..core import ids
from ..core.errors import SessionNotFoundError, UsageError
from ..core.messages import Session, message_from_data, part_from_data, replace
from ..loop.compaction import events_from_history, stable_event_id
from .transfer import (
    check_message,
    check_part,
    check_session,
    keep_paths_inside,
    refuse_clashes,
    untrusted_part,
    untrusted_session,
)

_SESSION_COLUMNS = {  # session table column → path in Session.Info JSON
    "project_id": "projectID",
    "workspace_id": "workspaceID",
    "parent_id": "parentID",
    "slug": "slug",
    "directory": "directory",
    "title": "title",
    "version": "version",
    "revert": "revert",
    "permission": "permission",
    "time_created": "time.created",
    "time_updated": "time.updated",
    "time_compacting": "time.compacting",
    "time_archived": "time.archived",
    "path": "path",
    "metadata": "metadata",
    "cost": "cost",
    "agent": "agent",
    "model": "model",
    "tokens_input": "tokens.input",
    "tokens_output": "tokens.output",
    "tokens_reasoning": "tokens.reasoning",
    "tokens_cache_read": "tokens.cache.read",
    "tokens_cache_write": "tokens.cache.write",
}
_SESSION_OTHER = {
    "id",
    "share_url",
    "summary_additions",
    "summary_deletions",
    "summary_files",
    "summary_diffs",
}
_JSON_COLUMNS = {"revert", "permission", "summary_diffs", "metadata", "model"}
_REQUIRED = {  # table → columns every opencode.db has (NOT NULL in OpenCode's schema)
    "session": {"id", "title", "directory", "time_created", "time_updated"},
    "message": {"id", "session_id", "time_created", "data"},
    "part": {"id", "message_id", "session_id", "time_created", "data"},
}
_TODO_COLUMNS = {"session_id", "content", "status", "priority", "position"}
_READ = {  # columns read from each imported table (others are listed as not imported)
    "session": set(_SESSION_COLUMNS) | _SESSION_OTHER,
    "message": {"id", "session_id", "time_created", "data"},
    "part": {"id", "message_id", "session_id", "time_created", "data"},
    "todo": _TODO_COLUMNS | {"time_created", "time_updated"},
}
_WHY_COLUMN = {
    "time_updated": "a row's last write time: the history keeps its own",
}
_EVENT_LOG = "OpenCode's internal event log: the sessions, messages and parts are imported"
_ACCOUNTS = "accounts, tokens and credentials are never copied"
_WHY_TABLE = {  # OpenCode's other tables (1.18), and why the history has no place for them
    "project": "projects: each session keeps its projectID and directory",
    "project_directory": "a project's folders: each session keeps its directory",
    "workspace": "workspaces: each session keeps its workspaceID",
    "permission": "OpenCode's remembered approvals: an import never brings permission rules",
    "account": _ACCOUNTS,
    "account_state": _ACCOUNTS,
    "control_account": _ACCOUNTS,
    "credential": _ACCOUNTS,
    "session_share": "share secrets are never copied (a share URL is kept on its session)",
    "event": _EVENT_LOG,
    "event_sequence": _EVENT_LOG,
    "session_message": "the message log of OpenCode's next session engine (unused by 1.18)",
    "session_input": "prompts queued by OpenCode's next session engine",
    "session_context_epoch": "context snapshots of OpenCode's next session engine",
    "migration": "OpenCode's schema bookkeeping",
    "data_migration": "OpenCode's schema bookkeeping",
    "__drizzle_migrations": "OpenCode's schema bookkeeping",
}
_WHY_STORAGE = "not session history (only storage/session, message, part and todo are read)"
LISTED = 20  # skipped rows named one by one in the report (all are in ``skipped_items``)


@dataclass(frozen=True)
class TodoList:
    """A session's todo list as OpenCode kept it (journal kind ``event``, type ``todos``; one
    per session, so importing again replaces it; SQL view ``todo``, one row per item)."""

    JOURNAL_KIND: ClassVar[str] = "event"

    id: str
    session_id: str
    items: tuple  # {"content", "status", "priority", "position", "time": {"created", "updated"}}
    time_created: int
    source: str = "opencode"

    def to_data(self) -> dict[str, Any]:
        return {
            "type": "todos",
            "id": self.id,
            "sessionID": self.session_id,
            "items": list(self.items),
            "source": self.source,
            "time": {"created": self.time_created},
        }


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
    skipped_items: list[tuple[str, str]] = field(default_factory=list)  # (file or db row, why)
    todos: int = 0  # todo items imported
    events: Counter = field(default_factory=Counter)  # compaction events derived: kind → rows
    not_imported: list[tuple[str, str]] = field(default_factory=list)  # (what, why)

    def skip(self, reason: str, where: str, detail: str = "") -> None:
        self.skipped[reason] += 1
        self.skipped_items.append((where, f"{reason}: {detail}" if detail else reason))

    def report(self, limit: int = LISTED) -> str:
        """The result line, then one line per skipped file or row (the first ``limit``), then what
        was not brought, one line per reason."""
        lines = [str(self)]
        lines += [f"  skipped {where} — {why}" for where, why in self.skipped_items[:limit]]
        if len(self.skipped_items) > limit:
            more = len(self.skipped_items) - limit
            lines.append(f"  … and {more} more (OpenCodeImport.skipped_items)")
        by_reason: dict[str, list[str]] = {}
        for what, why in self.not_imported:
            by_reason.setdefault(why, []).append(what)
        lines += [f"  not imported: {', '.join(what)} — {why}" for why, what in by_reason.items()]
        return "\n".join(lines)

    def __str__(self) -> str:
        types = ", ".join(f"{t} {n}" for t, n in sorted(self.part_types.items()))
        line = (
            f"imported {self.sessions} session(s), {self.messages} message(s), {self.parts} part(s) from "
            f"{' + '.join(self.sources)}" + (f" — parts: {types}" if types else "")
        )
        if self.skipped:
            line += "; skipped: " + ", ".join(f"{n} {r}" for r, n in self.skipped.most_common(5))
        if self.todos or self.events:
            derived = ", ".join(f"{n} {k}" for k, n in sorted(self.events.items()))
            line += f"; {self.todos} todo(s)"
            line += f", compaction events: {derived}" if derived else ""
        if self.dropped_fields:
            line += "; fields not kept: " + ", ".join(
                f"{f} ({n})" for f, n in self.dropped_fields.most_common(5)
            )
        return line + " — try `%agent sessions` or SQL over session/message/part"


def find_sources(path: str | os.PathLike) -> tuple[Path | None, Path | None]:
    """(opencode.db, storage dir) under ``path`` (a data dir, the db file or the storage dir)."""
    root = Path(path).expanduser()
    if root.is_file():
        return root, None
    if not root.is_dir():
        raise UsageError(
            f"no OpenCode data at {str(root)!r} — give its data directory, "
            "e.g. ~/.local/share/opencode"
        )
    db = root / "opencode.db"
    storage = root if root.name == "storage" else root / "storage"
    found = (db if db.is_file() else None, storage if (storage / "session").is_dir() else None)
    if found == (None, None):
        raise UsageError(
            f"{root} holds neither opencode.db nor storage/session — give OpenCode's data "
            "directory, e.g. ~/.local/share/opencode"
        )
    return found


IMPORTED = "importedFrom"  # Session.metadata key: {"source": "opencode", "directory": OpenCode's}


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
        for kind, row in _read_storage(storage, result):
            rows[kind][row["id"]] = row
    if db is not None:
        result.sources.append(str(db))
        todo_sessions = set()
        for kind, row in _read_db(db, result):
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
# reading


def _read_db(path: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
    """Every row, read in full before any is yielded: a damaged file is refused as a whole
    (one line), never half imported."""
    con, tmp = _open_db(path)
    out: list[tuple[str, dict]] = []
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "session" not in tables:
            raise UsageError(f"{path} has no session table — is it OpenCode's opencode.db?")
        for table, required in _REQUIRED.items():
            if table not in tables:
                continue
            columns = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            if not required <= columns:
                missing = ", ".join(sorted(required - columns))
                raise UsageError(
                    f"{path}: its {table} table lacks the columns {missing} — is it "
                    "OpenCode's opencode.db (v1.2 or later)? Nothing was imported"
                )
        _inventory(con, tables, result)
        todo_columns = {r[1] for r in con.execute("PRAGMA table_info(todo)")}
        if "todo" in tables and todo_columns >= _TODO_COLUMNS:
            for row in con.execute("SELECT * FROM todo ORDER BY session_id, position"):
                row = dict(row)
                where = f"opencode.db todo {ids.shown(row['session_id'])}#{row['position']}"
                item = _todo_item(row, where, result)
                if item is not None:
                    key = f"{row['session_id']}#{row['position']}"
                    out.append(
                        (
                            "todo",
                            {
                                "id": key,
                                "session_id": row["session_id"],
                                "where": where,
                                "data": item,
                            },
                        )
                    )
        for row in con.execute("SELECT * FROM session"):
            row = dict(row)
            out.append(
                (
                    "session",
                    {
                        "id": row["id"],
                        "created": row.get("time_created"),
                        "where": f"opencode.db session {ids.shown(row['id'])}",
                        "data": _session_info(row),
                    },
                )
            )
        if "message" in tables:
            for row in con.execute("SELECT id, session_id, time_created, data FROM message"):
                where = f"opencode.db message {ids.shown(row['id'])}"
                data = _json(row["data"])
                if not isinstance(data, dict):
                    result.skip("messages whose data is not a JSON object", where)
                    continue
                ids_ = {"id": row["id"], "sessionID": row["session_id"]}
                out.append(
                    (
                        "message",
                        {
                            "id": row["id"],
                            "session_id": row["session_id"],
                            "created": row["time_created"],
                            "where": where,
                            "data": {**data, **ids_},
                        },
                    )
                )
        if "part" in tables:
            for row in con.execute(
                "SELECT id, message_id, session_id, time_created, data FROM part"
            ):
                where = f"opencode.db part {ids.shown(row['id'])}"
                data = _json(row["data"])
                if not isinstance(data, dict):
                    result.skip("parts whose data is not a JSON object", where)
                    continue
                ids_ = {
                    "id": row["id"],
                    "sessionID": row["session_id"],
                    "messageID": row["message_id"],
                }
                out.append(
                    (
                        "part",
                        {
                            "id": row["id"],
                            "session_id": row["session_id"],
                            "message_id": row["message_id"],
                            "where": where,
                            "created": row["time_created"],
                            "data": {**data, **ids_},
                        },
                    )
                )
    except sqlite3.DatabaseError as err:
        raise UsageError(
            f"cannot read {path}: {err} — the file is damaged or not OpenCode's "
            "opencode.db; nothing was imported"
        ) from None
    finally:
        con.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    yield from out


def _inventory(con: sqlite3.Connection, tables: set[str], result: OpenCodeImport) -> None:
    """Every table and column of the database that the import does not bring, with the reason."""
    for table in sorted(tables):
        if table.startswith("sqlite_"):
            continue
        if table in _READ:
            for column in [r[1] for r in con.execute(f"PRAGMA table_info({_quote(table)})")]:
                if column not in _READ[table]:
                    why = _WHY_COLUMN.get(
                        column, "a column this importer does not know (a newer OpenCode?)"
                    )
                    result.not_imported.append((f"{table}.{column}", why))
            continue
        try:
            n = con.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0]
        except sqlite3.DatabaseError:
            n = "?"
        why = _WHY_TABLE.get(table, "a table this importer does not know (a newer OpenCode?)")
        result.not_imported.append((f"table {table} ({n} rows)", why))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _todo_item(row: dict, where: str, result: OpenCodeImport) -> dict | None:
    """A todo row (or storage item) → the item kept; None (and listed) when it is not one."""
    values = {k: row.get(k) for k in ("content", "status", "priority")}
    position = row.get("position")
    if (
        not all(isinstance(v, str) for v in values.values())
        or not isinstance(position, int)
        or isinstance(position, bool)
    ):
        result.skip("todos that are not text with a position", where)
        return None
    item: dict[str, Any] = {**values, "position": row["position"]}
    times = {
        k: row.get(f"time_{k}")
        for k in ("created", "updated")
        if isinstance(row.get(f"time_{k}"), int)
    }
    if times:
        item["time"] = times
    return item


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


def _read_storage(storage: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
    for other in sorted(p.name for p in storage.iterdir() if p.is_dir()):
        if other not in ("session", "message", "part", "todo"):
            result.not_imported.append((f"storage/{other}", _WHY_STORAGE))
    yield from _read_storage_todos(storage / "todo", result)
    for folder in ("session", "message", "part"):
        base = storage / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.json")):
            where = path.relative_to(storage.parent).as_posix()
            if path.is_symlink() or not path.is_file():  # a folder, FIFO or link is never opened
                result.skip("entries that are not regular files", where)
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except OSError as err:
                result.skip("files that cannot be read", where, err.strerror or type(err).__name__)
                continue
            except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
                result.skip("files that are not JSON", where, _detail(err))
                continue
            if not isinstance(data, dict):
                result.skip("files that are not a JSON object", where, type(data).__name__)
                continue
            id = data.get("id") or path.stem
            rel = path.relative_to(storage).parts
            if not isinstance(id, str):
                result.skip("files without an id", where)
            elif id.startswith("ses_"):
                yield "session", {"id": id, "where": where, "data": {**data, "id": id}}
            elif not all(isinstance(data.get(k, ""), str) for k in ("sessionID", "messageID")):
                result.skip("files whose sessionID or messageID is not a string", where)
            elif id.startswith("msg_"):
                session_id = data.get("sessionID") or rel[-2]
                yield (
                    "message",
                    {
                        "id": id,
                        "session_id": session_id,
                        "where": where,
                        "data": {**data, "id": id, "sessionID": session_id},
                    },
                )
            elif id.startswith("prt_"):
                message_id = data.get("messageID") or rel[-2]
                session_id = data.get("sessionID") or (rel[-3] if len(rel) >= 4 else "")
                yield (
                    "part",
                    {
                        "id": id,
                        "session_id": session_id,
                        "message_id": message_id,
                        "where": where,
                        "data": {
                            **data,
                            "id": id,
                            "sessionID": session_id,
                            "messageID": message_id,
                        },
                    },
                )
            else:
                result.skip(
                    "files whose id is not a session, message or part id", where, ids.shown(id)
                )


def _read_storage_todos(folder: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
    """``storage/todo/<sessionID>.json``: the session's list (OpenCode before the database)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        where = path.relative_to(folder.parent.parent).as_posix()
        session_id = path.stem
        try:
            if path.is_symlink() or not path.is_file():
                raise ValueError("not a regular file")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            result.skip("todo files that cannot be read", where, _detail(err))
            continue
        if not isinstance(data, list):
            result.skip("todo files that are not a list", where)
            continue
        for position, entry in enumerate(data):
            item = _todo_item(
                {**entry, "position": position} if isinstance(entry, dict) else {},
                f"{where}#{position}",
                result,
            )
            if item is not None:
                yield (
                    "todo",
                    {
                        "id": f"{session_id}#{position}",
                        "session_id": session_id,
                        "where": where,
                        "data": item,
                    },
                )


# --------------------------------------------------------------------------
# converting


def _convert(result: OpenCodeImport, kind: str, row: dict, decode, fill, check):
    data, where = row["data"], row.get("where") or f"{kind} {ids.shown(row.get('id'))}"
    try:
        value = decode(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        if fill is None:
            result.skip(_reason(kind, data, err), where, _detail(err))
            return None
        try:
            value = decode(fill(data))
        except (KeyError, TypeError, ValueError, AttributeError) as err2:
            result.skip(_reason(kind, data, err2), where, _detail(err2))
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


def _detail(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err)[:80]}"


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


__all__ = ["import_opencode", "OpenCodeImport", "TodoList", "find_sources"]
