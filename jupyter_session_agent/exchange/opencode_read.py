"""OpenCode's history read: both layouts (``opencode.db`` and the older ``storage/`` JSON
files) into the same ``(kind, row)`` stream, with the import's report value that notes every
row skipped and why (:class:`OpenCodeImport`). Converting and storing the rows is
:mod:`.opencode`'s.

One module: the two layouts' readers share the report they note skipped rows in and the
session-info shape they both produce; read apart, the two would describe a skip differently.
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
from ..core.errors import UsageError

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


def read_db(path: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
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
                data = json_value(row["data"])
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
                data = json_value(row["data"])
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
            value = json_value(value)
        set_path(info, path, value)
    if row.get("share_url"):
        info["share"] = {"url": row["share_url"]}
    summary = {k: row.get(f"summary_{k}") for k in ("additions", "deletions", "files")}
    if any(v is not None for v in summary.values()) or row.get("summary_diffs"):
        info["summary"] = {k: v for k, v in summary.items() if v is not None}
        if row.get("summary_diffs"):
            info["summary"]["diffs"] = json_value(row["summary_diffs"])
    return info


def read_storage(storage: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
    for other in sorted(p.name for p in storage.iterdir() if p.is_dir()):
        if other not in ("session", "message", "part", "todo"):
            result.not_imported.append((f"storage/{other}", _WHY_STORAGE))
    yield from read_storage_todos(storage / "todo", result)
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
                result.skip("files that are not JSON", where, error_detail(err))
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


def read_storage_todos(folder: Path, result: OpenCodeImport) -> Iterator[tuple[str, dict]]:
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
            result.skip("todo files that cannot be read", where, error_detail(err))
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


def error_detail(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err)[:80]}"


def set_path(out: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        out = out.setdefault(p, {})
    out[leaf] = value


def json_value(value: Any) -> Any:
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


__all__ = [
    "IMPORTED",
    "LISTED",
    "OpenCodeImport",
    "TodoList",
    "error_detail",
    "find_sources",
    "json_value",
    "read_db",
    "read_storage",
    "read_storage_todos",
    "set_path",
]
