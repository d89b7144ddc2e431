"""The history: per-process JSONL journals, queried through an in-memory DuckDB.

Layout (storage.md §4, scheme (c))::

    <data_dir>/history/live/<writer>.jsonl      # one per writing process, O_APPEND
    <data_dir>/history/parquet/<writer>.parquet # a finished journal, compacted

Every line is one snapshot ``{"kind", "id", "session_id", "message_id", "rev",
"writer", "deleted", "time_created", "time_updated", "data"}`` where ``data``
is OpenCode's stored JSON (the value's ``to_data()`` minus its keys). Readers
keep the newest ``rev`` per id and drop tombstones. A writer holds
``flock(LOCK_EX)`` on its journal for as long as it lives, so a journal that
can be locked belongs to a dead process: its running tools were interrupted
and the file is compacted to Parquet (by its owner at close(), otherwise by
the next reader). Nothing ever holds a DuckDB file lock: DuckDB only reads,
from a private in-memory database.

This is the only module that imports duckdb (and pandas), always lazily.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import re
import secrets
import socket
import threading
import time
import weakref
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from . import messages as M
from .errors import ReadOnlyError, SessionNotFoundError, UsageError
from .messages import Session, ToolError, ToolPart, WithParts, now_ms

Kind = Literal["session", "message", "part"]

COLUMNS = (
    "{kind: 'VARCHAR', id: 'VARCHAR', session_id: 'VARCHAR', message_id: 'VARCHAR', rev: 'BIGINT', "
    "writer: 'VARCHAR', deleted: 'BOOLEAN', time_created: 'BIGINT', time_updated: 'BIGINT', data: 'JSON'}"
)
_NAMES = "kind, id, session_id, message_id, rev, writer, deleted, time_created, time_updated, data"
_EMPTY = (  # the typed relation a history with no files yet reads as
    "SELECT NULL::VARCHAR kind, NULL::VARCHAR id, NULL::VARCHAR session_id, NULL::VARCHAR message_id, "
    "NULL::BIGINT rev, NULL::VARCHAR writer, NULL::BOOLEAN deleted, NULL::BIGINT time_created, "
    "NULL::BIGINT time_updated, NULL::JSON data WHERE false"
)


def _latest(kind: str) -> str:
    """Newest revision per id of one kind, tombstones removed."""
    return (f"(SELECT * FROM events WHERE kind = '{kind}' QUALIFY row_number() OVER "
            f"(PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE")


def _num(path: str, typ: str = "BIGINT") -> str:
    return f"TRY_CAST(data{path} AS {typ})"


_VIEWS = {
    "session": f"""SELECT id, data->>'projectID' project_id, data->>'workspaceID' workspace_id,
        data->>'parentID' parent_id, data->>'slug' slug, data->>'directory' directory, data->>'title' title,
        data->>'version' version, {_num("->'time'->>'created'")} time_created,
        {_num("->'time'->>'updated'")} time_updated, {_num("->'time'->>'archived'")} time_archived, data
        FROM {_latest('session')}""",
    "message": f"""SELECT id, session_id, time_created, time_updated, data, data->>'role' role,
        data->>'parentID' parent_id, data->>'agent' agent,
        coalesce(data->>'providerID', data->'model'->>'providerID') provider_id,
        coalesce(data->>'modelID', data->'model'->>'modelID') model_id, {_num("->>'cost'", "DOUBLE")} cost,
        data->>'finish' finish,
        CASE WHEN json_type(data, '$.summary') = 'BOOLEAN' THEN {_num("->>'summary'", "BOOLEAN")} END summary,
        data->'error'->>'name' error_name, {_num("->'time'->>'completed'")} time_completed,
        {_num("->'tokens'->>'input'")} input_tokens, {_num("->'tokens'->>'output'")} output_tokens,
        {_num("->'tokens'->>'reasoning'")} reasoning_tokens,
        {_num("->'tokens'->'cache'->>'read'")} cache_read_tokens,
        {_num("->'tokens'->'cache'->>'write'")} cache_write_tokens, {_num("->'tokens'->>'total'")} total_tokens,
        {_num("->'tokens'->>'estimated'", "BOOLEAN")} tokens_estimated
        FROM {_latest('message')}""",
    "part": f"""SELECT id, message_id, session_id, time_created, time_updated, data, data->>'type' type,
        data->>'tool' tool, data->>'callID' call_id, data->'state'->>'status' status,
        data->'state'->>'title' title, length(data->>'text') text_length,
        length(data->'state'->>'output') output_length,
        coalesce({_num("->'state'->'time'->>'start'")}, {_num("->'time'->>'start'")}) time_start,
        coalesce({_num("->'state'->'time'->>'end'")}, {_num("->'time'->>'end'")}) time_end,
        {_num("->'state'->'time'->>'compacted'")} compacted_at, data->>'reason' reason,
        {_num("->>'cost'", "DOUBLE")} cost, {_num("->'tokens'->>'input'")} input_tokens,
        {_num("->'tokens'->>'output'")} output_tokens, {_num("->'tokens'->>'reasoning'")} reasoning_tokens,
        {_num("->'tokens'->'cache'->>'read'")} cache_read_tokens,
        {_num("->'tokens'->'cache'->>'write'")} cache_write_tokens
        FROM {_latest('part')}""",
}

# Table functions that change state or write files although they run inside a SELECT.
_UNSAFE_FUNCTIONS = re.compile(
    r"\b(enable_logging|disable_logging|truncate_duckdb_logs|enable_profiling|disable_profiling|"
    r"(force_)?checkpoint|json_execute_serialized_sql|\w*external_resource\w*|\w*grammar_extension|"
    r"python_map_function)\s*\(", re.IGNORECASE)
_EXPLAIN = re.compile(r"^\s*EXPLAIN(\s+ANALY[SZ]E)?\s+", re.IGNORECASE)

_rev_lock = threading.Lock()
_last_rev = 0


def _next_rev() -> int:
    """A revision strictly greater than every earlier one in this process."""
    global _last_rev
    with _rev_lock:
        _last_rev = max(time.time_ns(), _last_rev + 1)
        return _last_rev


def _kind(value: Any) -> Kind:
    if isinstance(value, Session):
        return "session"
    if isinstance(value, (M.UserMessage, M.AssistantMessage)):
        return "message"
    if type(value) in M.PART_TYPES.values():
        return "part"
    raise UsageError(f"cannot store a {type(value).__name__} — put() takes a Session, message or part")


def _encode(row: dict) -> bytes:
    """One journal line. A lone surrogate would make DuckDB drop the whole line, so replace it."""
    text = json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


# --------------------------------------------------------------------------
# decoding: messages.from_data without its per-call reflection (about 5x faster)

_DECODERS: dict[type, Any] = {}


def _decoder(cls: type):
    """``cls.from_data`` with the field → path plan computed once per class.

    Only classes that inherit ``_Value.from_data`` unchanged are compiled;
    anything else keeps its own ``from_data``.
    """
    if cls in _DECODERS:
        return _DECODERS[cls]
    if getattr(cls.from_data, "__func__", None) is not M._Value.from_data.__func__:
        _DECODERS[cls] = cls.from_data
        return cls.from_data
    plan = []
    for f in fields(cls):
        head, *rest = M._key(f.name, cls._KEYS).split(".")
        plan.append((f.name, head, tuple(rest), _converter(cls._CONVERT.get(f.name))))
    freeze = M._freeze

    def decode(data):
        kwargs = {}
        for name, head, rest, convert in plan:
            raw = data.get(head)
            for key in rest:
                raw = raw.get(key) if isinstance(raw, dict) else None
            if raw is not None:
                kwargs[name] = convert(raw) if convert else (freeze(raw) if type(raw) is list else raw)
        return cls(**kwargs)

    _DECODERS[cls] = decode
    return decode


def _converter(convert):
    owner = getattr(convert, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, M._Value) and convert.__name__ == "from_data":
        return _decoder(owner)
    if convert is M.tool_state_from_data:
        states = {status: _decoder(cls) for status, cls in M._STATES.items()}
        return lambda raw: states[raw["status"]](raw)
    return convert


def _decode_row(id: str, session_id: str, message_id: str | None, values: dict):
    """A message (``message_id`` None) or part from its stored ``data`` and its keys."""
    values["id"], values["sessionID"] = id, session_id
    if message_id is None:
        return _decode("message", values)
    values["messageID"] = message_id
    return _decode("part", values)


@contextlib.contextmanager
def _gc_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode(kind: str, data: dict):
    """A value from OpenCode JSON: ``kind`` is "session", "message" or "part"."""
    if kind == "part":
        return _decoder(M.PART_TYPES[data["type"]])(data)
    if kind == "message":
        return _decoder(M.UserMessage if data.get("role") == "user" else M.AssistantMessage)(data)
    return _decoder(Session)(data)


# --------------------------------------------------------------------------
# writing


class _Journal:
    """This process's journal: a buffer of snapshot lines and the locked file they go to."""

    def __init__(self, history: Path) -> None:
        self.history = history
        self.writer = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = history / "live" / f"{self.writer}.jsonl"
        self.buffer: dict[str, bytes] = {}  # id → line; last put per id wins
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.pid = os.getpid()
        self.torn = False  # a failed write may have left half a line

    def append(self, sync: bool) -> None:
        with self.lock:
            if not self.buffer or os.getpid() != self.pid:
                return
            if self.fd is not None and os.fstat(self.fd).st_nlink == 0:  # someone deleted the history
                os.close(self.fd)
                self.fd = None
            if self.fd is None:
                self.fd = _create_locked(self.path)
            data = (b"\n" if self.torn else b"") + b"".join(self.buffer.values())
            self.torn = True
            view = memoryview(data)
            while view:  # a regular-file write is whole unless the disk is full
                view = view[os.write(self.fd, view):]
            if sync:
                os.fsync(self.fd)
            self.torn = False
            self.buffer.clear()

    def close(self) -> None:
        """Flush, compact the journal to Parquet, then release the lock (idempotent)."""
        if os.getpid() != self.pid:  # a forked child must not touch its parent's journal
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            return
        try:
            self.append(sync=True)
        finally:
            with self.lock:
                if self.fd is not None:
                    try:
                        _compact(self.path, self.history)
                    except Exception:
                        pass  # the journal stays; a later reader compacts it as a dead writer's
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    os.close(self.fd)
                    self.fd = None


def _create_locked(path: Path) -> int:
    """Create ``path`` already locked: a reader must never see it unlocked while we live."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, path)
    return fd


def _compact(journal: Path, history: Path) -> None:
    """Journal → ``parquet/<writer>.parquet`` (tmp + rename), then remove the journal.

    Only for a finished writer (the caller holds the journal's lock): keeps
    the newest row per id and turns its pending/running tools into
    interrupted errors. Readers may list both files for a moment; the
    duplicate rows carry the same ``rev`` so they collapse.
    """
    import duckdb

    out_dir = history / "parquet"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{journal.stem}.parquet.tmp"
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false")
        rows = con.execute(
            # Older revisions in one journal can never win, so only the newest per id is kept;
            # sorting by session lets min/max statistics skip row groups of other sessions.
            # Its writer is finished, so its unfinished tools were interrupted: settle them here too.
            f"COPY (SELECT {_NAMES.replace(' data', f' {_SETTLED} AS data')} FROM {_read_json([journal])} "
            f"WHERE id IS NOT NULL QUALIFY row_number() OVER (PARTITION BY id ORDER BY rev DESC) = 1 "
            f"ORDER BY kind, session_id, id) TO {_quote(tmp)} (FORMAT parquet)", [now_ms()]).fetchone()[0]
    finally:
        con.close()
    if rows:
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.rename(tmp, out_dir / f"{journal.stem}.parquet")
        _fsync_dir(out_dir)
    else:
        tmp.unlink(missing_ok=True)
    journal.unlink()


# A pending/running tool part rewritten as the interrupted ToolError messages() would show ($1 = now).
_SETTLED = """CASE WHEN kind = 'part' AND data->>'type' = 'tool' AND data->'state'->>'status' IN ('pending', 'running')
    THEN json_merge_patch(json_merge_patch(data, '{"state": null}'), json_object('state', json_object(
        'status', 'error', 'input', coalesce(data->'state'->'input', '{}'::JSON),
        'error', 'Tool execution was interrupted',
        'time', json_object('start', coalesce(TRY_CAST(data->'state'->'time'->>'start' AS BIGINT), $1), 'end', $1),
        'metadata', json_merge_patch(coalesce(data->'state'->'metadata', '{}'::JSON), '{"interrupted": true}'))))
    ELSE data END"""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _quote(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _read_json(paths) -> str:
    files = ", ".join(_quote(p) for p in paths)
    return f"read_json([{files}], format='newline_delimited', ignore_errors=true, columns={COLUMNS})"


def _alive(path: Path) -> bool:
    """Whether the journal's writer still runs: it holds LOCK_EX on it for life."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # compacted: its writer has finished
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared, so probers never block each other
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the probe's lock


def _claim(path: Path) -> int | None:
    """A dead writer's journal, locked for compaction; None if alive, gone or claimed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino == os.stat(path).st_ino:  # not compacted by someone else meanwhile
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None


def _interrupted(part: ToolPart) -> ToolPart:
    """A dead writer's unfinished tool call, as OpenCode shows it after a crash."""
    state, now = part.state, now_ms()
    metadata = {**(getattr(state, "metadata", None) or {}), "interrupted": True}
    error = ToolError(input=dict(state.input), error="Tool execution was interrupted",
                      time_start=getattr(state, "time_start", None) or now, time_end=now, metadata=metadata)
    return M.replace(part, state=error)


def _one_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# --------------------------------------------------------------------------
# the store


class Store:
    """The history of every session, shared by all processes using ``data_dir``.

    Writing (``put``/``delete``/``flush``) touches only this process's journal
    and never opens DuckDB. Reading sees every row any process has flushed,
    newest revision per id; a read first writes this process's buffer (without
    fsync) so it sees its own puts. Thread-safe; cheap to construct (no I/O
    until used).
    """

    CACHE_SESSIONS = 16  # sessions whose decoded values are kept between messages() calls

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self._history = self.data_dir / "history"
        self._journal: _Journal | None = None
        self._finalizer: weakref.finalize | None = None
        self._write_lock = threading.Lock()
        self._known: dict[str, tuple] = {}  # id → (session, message, time_created) of ids this process wrote
        self._cache: dict[str, dict[str, tuple]] = {}  # session → id → (rev, time_created, value)
        self._read_lock = threading.RLock()
        self._con = None
        self._con_pid = 0
        self._root = self._history  # resolved when DuckDB first reads
        self._files: tuple | None = None
        self._next_sweep = 0.0

    # ---- writing -----------------------------------------------------------

    def put(self, *values: Any) -> None:
        """Buffer a snapshot of each value; the last put of an id before flush() wins."""
        now = now_ms()
        for value in values:
            kind = _kind(value)
            data = value.to_data()
            data.pop("id", None)
            session_id = value.id if kind == "session" else data.pop("sessionID", None)
            message_id = data.pop("messageID", None) if kind == "part" else None
            rev, created = self._buffer(kind, value.id, session_id, message_id, data, False, now)
            if kind != "session":
                self._session_cache(session_id)[value.id] = (rev, created, value)

    def delete(self, kind: Kind, id: str) -> None:
        """Buffer a tombstone: the id disappears from every view and from messages()."""
        if kind not in ("session", "message", "part"):
            raise UsageError(f"cannot delete a {kind!r} — kind is 'session', 'message' or 'part'")
        known = self._known.get(id) or self._lookup(id)
        session_id, message_id = known[:2] if known else (id if kind == "session" else None, None)
        self._buffer(kind, id, session_id, message_id, {}, True, now_ms())
        self._cache.get(session_id, {}).pop(id, None)

    def flush(self, *, sync: bool = True) -> None:
        """Append everything buffered in one write; fsync when ``sync``."""
        self._writer().append(sync)

    def _buffer(self, kind, id, session_id, message_id, data, deleted, now) -> tuple[int, int]:
        known = self._known.get(id)
        if known is None:  # first sight in this process: keep a creation time read from the history
            hit = self._cache.get(session_id, {}).get(id)
            known = (session_id, message_id, hit[1] if hit else now)
            self._known[id] = known
        journal = self._writer()
        rev = _next_rev()
        row = {"kind": kind, "id": id, "session_id": session_id, "message_id": message_id, "rev": rev,
               "writer": journal.writer, "deleted": deleted, "time_created": known[2],
               "time_updated": now, "data": data}
        line = _encode(row)
        with journal.lock:
            journal.buffer[id] = line
        return rev, known[2]

    def _writer(self) -> _Journal:
        """This process's journal; a new one after close() or in a forked child."""
        with self._write_lock:
            if self._journal is None or self._journal.pid != os.getpid():
                if self._journal is not None:
                    self._journal.close()  # in a child: only drops the inherited fd
                self._journal = _Journal(self._history)
                self._finalizer = weakref.finalize(self, self._journal.close)
            return self._journal

    def close(self) -> None:
        """Flush, compact this process's journal, release its lock and the connection."""
        with self._write_lock:
            finalizer, self._journal, self._finalizer = self._finalizer, None, None
        if finalizer is not None:
            finalizer()
        with self._read_lock:
            if self._con is not None and self._con_pid == os.getpid():
                self._con.close()
            self._con, self._files = None, None

    # ---- reading -----------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The session with this id, or with this unique id prefix."""
        rows = self._query("SELECT id, data::VARCHAR FROM session WHERE starts_with(id, $1) "
                           "ORDER BY id = $1 DESC, id LIMIT 2", [session_id]) if session_id else []
        if not rows:
            raise SessionNotFoundError(f"no session {session_id!r} — `%agent sessions` lists them")
        if len(rows) > 1 and rows[0][0] != session_id:
            raise UsageError(f"{session_id!r} matches several sessions — give more of the id")
        return self._session(*rows[0])

    def sessions(self, *, include_archived: bool = False) -> list[Session]:
        """All sessions, newest first (descending ids sort newest first)."""
        where = "" if include_archived else "WHERE time_archived IS NULL"
        rows = self._query(f"SELECT id, data::VARCHAR FROM session {where} ORDER BY id")
        return [self._session(*row) for row in rows]

    @staticmethod
    def _session(id: str, data: str) -> Session:
        return _decode("session", {**json.loads(data), "id": id})

    def messages(self, session_id: str) -> list[WithParts]:
        """The session's messages oldest first, each with its parts in id order.

        A pending/running tool whose writer has died comes back as an
        interrupted ``ToolError``, and that fix is written to the history.
        Decoded values are cached by revision, so repeated calls parse only
        what changed.
        """
        # Few columns on purpose: fetching is most of DuckDB's share of the time.
        rows = self._query(
            "SELECT id, message_id, rev, time_created, coalesce(data::VARCHAR, '{}') FROM (FROM events "
            "WHERE session_id = $1 AND kind IN ('message', 'part') QUALIFY row_number() OVER "
            "(PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE "
            "ORDER BY message_id IS NOT NULL, id", [session_id])
        cache = self._session_cache(session_id)
        infos: dict[str, Any] = {}
        parts: dict[str, list] = {}
        unfinished: list[ToolPart] = []
        with _gc_paused():  # tens of thousands of acyclic objects: collection passes are pure cost
            values = [hit[2] if (hit := cache.get(row[0])) is not None and hit[0] == row[2] else None
                      for row in rows]
            stale = [i for i, value in enumerate(values) if value is None]
            if stale:  # one json.loads for all of them is ~30% cheaper than one per row
                decoded = json.loads("[" + ",".join(rows[i][4] for i in stale) + "]")
                for i, data in zip(stale, decoded):
                    id, message_id, rev, created, _ = rows[i]
                    values[i] = _decode_row(id, session_id, message_id, data)
                    cache[id] = (rev, created, values[i])
            for (id, message_id, *_), value in zip(rows, values):
                if message_id is None:
                    infos[id], parts[id] = value, []
                elif (bucket := parts.get(message_id)) is not None:  # parts of deleted messages drop out
                    bucket.append(value)
                    if type(value) is ToolPart and value.state.status in ("pending", "running"):
                        unfinished.append(value)
        fixed = self._interrupt(session_id, unfinished)
        if fixed:
            parts = {m: [fixed.get(p.id, p) for p in ps] for m, ps in parts.items()}
        return [WithParts(info, tuple(parts[id])) for id, info in infos.items()]

    def _interrupt(self, session_id: str, unfinished: list[ToolPart]) -> dict[str, ToolPart]:
        """Fix (and persist) tool parts left pending/running by writers that are gone."""
        if not unfinished:
            return {}
        writers = dict(self._query(
            "SELECT id, arg_max(writer, rev) FROM events WHERE session_id = $1 AND list_contains($2, id) "
            "GROUP BY id", [session_id, [p.id for p in unfinished]]))
        me = self._journal.writer if self._journal is not None else None
        alive: dict[str, bool] = {}
        fixed = {}
        for part in unfinished:
            writer = writers.get(part.id)
            if writer not in alive:
                alive[writer] = writer == me or writer is None or _alive(self._root / "live" / f"{writer}.jsonl")
            if not alive[writer]:
                fixed[part.id] = _interrupted(part)
        if fixed:
            self.put(*fixed.values())
            self.flush()
        return fixed

    def _session_cache(self, session_id: str) -> dict:
        cache = self._cache.pop(session_id, None) or {}
        self._cache[session_id] = cache  # most recently used last
        while len(self._cache) > self.CACHE_SESSIONS:
            del self._cache[next(iter(self._cache))]
        return cache

    def _lookup(self, id: str):
        rows = self._query("SELECT session_id, message_id, time_created FROM events WHERE id = $1 "
                           "ORDER BY rev DESC LIMIT 1", [id])
        return rows[0] if rows else None

    # ---- SQL -----------------------------------------------------------------

    def sql(self, query: str):
        """Run read-only SQL over the views ``session``, ``message``, ``part`` and ``events``.

        Returns a pandas DataFrame of the last statement. Anything but SELECT
        (and EXPLAIN SELECT, DESCRIBE, SHOW, SUMMARIZE) raises ReadOnlyError;
        DuckDB errors become a one-line UsageError.
        """
        import duckdb

        with self._read_lock:
            _check_read_only(self._connection(), query)
            try:
                return self._run(lambda con: con.execute(query).df())
            except duckdb.Error as err:
                raise UsageError(_one_line(err)) from None

    def _query(self, query: str, params: list | None = None) -> list[tuple]:
        return self._run(lambda con: con.execute(query, params or []).fetchall())

    def _run(self, fn):
        """``fn(con)`` over the current files.

        A compaction can remove a journal between listing and reading it; then
        the listing has changed and the query is retried. An I/O error with an
        unchanged listing is real and raised.
        """
        import duckdb

        journal = self._journal
        if journal is not None and journal.buffer:
            journal.append(sync=False)  # read your own writes
        with self._read_lock:
            con = self._connection()
            if time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + 10.0
                self._sweep()
            for _ in range(100):  # each retry means another writer's journal was compacted
                files = self._listing()
                try:
                    if files != self._files:
                        self._files = None
                        con.execute(f"CREATE OR REPLACE VIEW events AS {_events_sql(*files)}")  # opens them
                        self._files = files
                    return fn(con)
                except duckdb.IOException:
                    if self._listing() == files:
                        raise
            raise UsageError("the history keeps changing under the query — try again")

    def _connection(self):
        """The private in-memory DuckDB (no file, so no lock), locked down to the history folder."""
        if self._con is None or self._con_pid != os.getpid():
            import duckdb

            self._root = self._history.resolve()
            con = duckdb.connect()
            for setting in (
                "SET autoinstall_known_extensions=false",  # offline: fail in 0 s, not 4 s
                "SET autoload_known_extensions=false",
                "SET enable_external_file_cache=false",  # journals grow in place; never serve stale blocks
                f"SET allowed_directories=[{_quote(str(self._root) + os.sep)}]",
                "SET enable_external_access=false",
                "SET lock_configuration=true",
            ):
                con.execute(setting)
            con.execute(f"CREATE VIEW events AS {_EMPTY}")
            for name, body in _VIEWS.items():
                con.execute(f"CREATE VIEW {name} AS {body}")
            self._con, self._con_pid, self._files = con, os.getpid(), ()
        return self._con

    def _listing(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return _listdir(self._root / "live", ".jsonl"), _listdir(self._root / "parquet", ".parquet")

    def _sweep(self) -> None:
        me = self._journal.writer if self._journal is not None else None
        for path in _listdir(self._root / "live", ".jsonl"):
            if Path(path).stem == me:
                continue
            fd = _claim(Path(path))
            if fd is not None:
                try:
                    _compact(Path(path), self._root)
                except Exception:
                    pass  # stays a journal; still readable
                finally:
                    os.close(fd)


def _listdir(folder: Path, suffix: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(e.path for e in os.scandir(folder) if e.name.endswith(suffix) and e.name[0] != "."))
    except FileNotFoundError:
        return ()


def _events_sql(jsonl: tuple[str, ...], parquet: tuple[str, ...]) -> str:
    parts = []
    if jsonl:
        parts.append(f"SELECT {_NAMES} FROM {_read_json(jsonl)} WHERE id IS NOT NULL")
    if parquet:
        files = ", ".join(_quote(p) for p in parquet)
        parts.append(f"SELECT {_NAMES}::JSON AS data FROM read_parquet([{files}], union_by_name=true)")
    return " UNION ALL ".join(parts) or _EMPTY


def _check_read_only(con, query: str) -> None:
    """Raise unless every statement only reads (SELECT, or EXPLAIN of a SELECT)."""
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.ParserException as err:
        raise UsageError(_one_line(err)) from None
    except ValueError:  # a statement type this duckdb build cannot even name
        raise ReadOnlyError("sql() is read-only — only SELECT queries are allowed") from None
    if not statements:
        raise UsageError("empty query — try: SELECT * FROM session")
    for statement in statements:
        kind = statement.type
        if kind == duckdb.StatementType.EXPLAIN:
            inner = _EXPLAIN.sub("", statement.query, count=1)
            if inner == statement.query:
                raise ReadOnlyError("sql() is read-only — use EXPLAIN [ANALYZE] SELECT …")
            _check_read_only(con, inner)
        elif kind != duckdb.StatementType.SELECT:
            raise ReadOnlyError(f"sql() is read-only: {kind.name} is not allowed — only SELECT "
                                "(copy rows into your own duckdb.connect() to change them)")
    match = _UNSAFE_FUNCTIONS.search(query)
    if match:
        raise ReadOnlyError(f"sql() is read-only: {match.group(1)}() is not allowed")
