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

SQL goes through the catalog (:class:`_Catalog`): the rows of every file,
newest revision per id and typed, as tables ``_store.<kind>`` of that
in-memory database, brought up to date incrementally before each query
(Parquet files once, journals from the byte offset already read), so the
views (``_VIEWS``, docs/analytics.md) are plain table scans.

This is the only module that imports duckdb (and pandas), always lazily.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import glob
import json
import os
import re
import secrets
import shutil
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Literal

from . import messages as M
from .errors import ReadOnlyError, SessionNotFoundError, UsageError
from .messages import Session, ToolError, ToolPart, WithParts, now_ms
from .redact import redact as _redact

Kind = Literal["session", "message", "part", "event"]  # event: e.g. compaction.CompactionEvent

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


# --------------------------------------------------------------------------
# the catalog's tables (_store.<kind>) and the public views over them

KINDS = ("session", "message", "part", "event")  # journal kinds; the catalog keeps one table for each
_BASE = ("id", "session_id", "message_id", "rev", "writer", "time_created", "time_updated", "data")
_RAW_SPEC = json.dumps({"kind": "VARCHAR", "id": "VARCHAR", "session_id": "VARCHAR", "message_id": "VARCHAR",
                        "rev": "BIGINT", "writer": "VARCHAR", "deleted": "BOOLEAN", "time_created": "BIGINT",
                        "time_updated": "BIGINT", "data": "JSON"})

_I, _S, _F, _B = "BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN"
_TOKENS = {"input": _I, "output": _I, "reasoning": _I, "cache": {"read": _I, "write": _I}, "total": _I,
           "estimated": _B}
_TOKEN_COLUMNS = (("input_tokens", "j.tokens.input"), ("output_tokens", "j.tokens.output"),
                  ("reasoning_tokens", "j.tokens.reasoning"), ("cache_read_tokens", "j.tokens.cache.read"),
                  ("cache_write_tokens", "j.tokens.cache.write"), ("total_tokens", "j.tokens.total"),
                  ("tokens_estimated", "j.tokens.estimated"))

# Typed columns of each kind, computed once per row when the catalog ingests it:
# ``from_json(data, spec)`` parses the JSON once into ``j`` (a value of the wrong type reads
# as NULL), and each column is an expression over ``j`` and the row. A typed column may
# replace a base column of the same name (a session's times come from its data).
_TYPED: dict[str, tuple[dict, tuple[tuple[str, str], ...]]] = {
    "session": (
        {"projectID": _S, "workspaceID": _S, "parentID": _S, "slug": _S, "directory": _S, "title": _S,
         "version": _S, "time": {"created": _I, "updated": _I, "archived": _I},
         "titleUsage": {"model": _S, "cost": _F, "time": _I, "tokens": _TOKENS}},
        (("project_id", "j.projectID"), ("workspace_id", "j.workspaceID"), ("parent_id", "j.parentID"),
         ("slug", "j.slug"), ("directory", "j.directory"), ("title", "j.title"), ("version", "j.version"),
         ("time_created", "j.time.created"), ("time_updated", "j.time.updated"),
         ("time_archived", "j.time.archived"), ("title_model", "j.titleUsage.model"),
         ("title_cost", "j.titleUsage.cost"), ("title_time", "j.titleUsage.time"),
         *((f"title_{name}", f"j.titleUsage.{path[2:]}") for name, path in _TOKEN_COLUMNS))),
    "message": (
        {"role": _S, "parentID": _S, "agent": _S, "mode": _S, "providerID": _S, "modelID": _S,
         "model": {"providerID": _S, "modelID": _S}, "cost": _F, "finish": _S, "summary": "JSON",
         "error": {"name": _S, "data": {"message": _S}}, "time": {"completed": _I}, "tokens": _TOKENS},
        (("role", "j.role"), ("parent_id", "j.parentID"), ("agent", "j.agent"), ("mode", "j.mode"),
         ("provider_id", "coalesce(j.providerID, j.model.providerID)"),
         ("model_id", "coalesce(j.modelID, j.model.modelID)"), ("cost", "j.cost"), ("finish", "j.finish"),
         ("summary", "CASE WHEN json_type(j.summary) = 'BOOLEAN' THEN j.summary::BOOLEAN END"),
         ("error_name", "j.error.name"), ("error_message", "j.error.data.message"),
         ("time_completed", "j.time.completed"), *_TOKEN_COLUMNS)),
    "part": (
        {"type": _S, "tool": _S, "callID": _S, "text": _S, "synthetic": _B, "reason": _S, "cost": _F, "auto": _B,
         "overflow": _B,
         "attempt": _I, "time": {"start": _I, "end": _I}, "tokens": _TOKENS,
         "metadata": {"latencyMs": _F, "firstTokenMs": _F, "attempts": _I},
         "state": {"status": _S, "title": _S, "output": _S, "error": _S,
                   "time": {"start": _I, "end": _I, "compacted": _I}, "metadata": {"interrupted": _B}}},
        (("type", "j.type"), ("tool", "j.tool"), ("call_id", "j.callID"), ("status", "j.state.status"),
         ("title", "j.state.title"), ("text_length", "length(j.text)"),
         ("output_length", "length(j.state.output)"), ("time_start", "coalesce(j.state.time.start, j.time.start)"),
         ("time_end", "coalesce(j.state.time.\"end\", j.time.\"end\")"), ("compacted_at", "j.state.time.compacted"),
         ("reason", "j.reason"), ("cost", "j.cost"), *_TOKEN_COLUMNS,
         ("latency_ms", "round(j.metadata.latencyMs)::BIGINT"),
         ("first_token_ms", "round(j.metadata.firstTokenMs)::BIGINT"), ("attempts", "j.metadata.attempts"),
         ("error", "j.state.error"), ("interrupted", "coalesce(j.state.metadata.interrupted, false)"),
         ("auto", "j.auto"), ("overflow", "j.overflow"), ("attempt", "j.attempt"), ("synthetic", "j.synthetic"))),
}


# Tables derived from parts, kept with them (the rows of ids a batch touched are rebuilt): one
# row per LLM call and per tool call, with the model of their message copied in, so the `step`
# and `tool_call` views are plain table scans. (part type, SELECT over part p and message m).
_PART_AND_MESSAGE = "FROM _store.part p LEFT JOIN _store.message m ON m.id = p.message_id"
_DERIVED: dict[str, tuple[str, str]] = {
    "step": ("step-finish", f"""SELECT p.session_id, p.message_id, p.id, m.provider_id AS provider,
        m.model_id AS model, m.agent, coalesce(m.summary, false) AS summary, p.input_tokens, p.output_tokens,
        p.reasoning_tokens, p.cache_read_tokens, p.cache_write_tokens,
        p.input_tokens + p.cache_read_tokens + p.cache_write_tokens AS prompt_tokens,
        coalesce(p.total_tokens, p.input_tokens + p.output_tokens + p.cache_read_tokens + p.cache_write_tokens)
            AS context_tokens,
        p.cost, coalesce(p.tokens_estimated, false) AS estimated, p.latency_ms, p.first_token_ms, p.attempts,
        p.reason AS finish_reason, make_timestamp(p.time_created * 1000) AS time {_PART_AND_MESSAGE}"""),
    "tool_call": ("tool", f"""SELECT p.session_id, p.message_id, p.id, p.call_id, p.tool,
        CASE WHEN p.interrupted THEN 'interrupted' ELSE p.status END AS status, p.error,
        p.time_end - p.time_start AS duration_ms, p.output_length, p.compacted_at IS NOT NULL AS pruned,
        make_timestamp(p.compacted_at * 1000) AS pruned_at, m.provider_id AS provider, m.model_id AS model,
        make_timestamp(coalesce(p.time_start, p.time_created) * 1000) AS time {_PART_AND_MESSAGE}"""),
}


def _table_columns(kind: str) -> list[str]:
    typed = [name for name, _ in _TYPED.get(kind, ({}, ()))[1]]
    return [c for c in _BASE if c not in typed] + typed


def _latest(kind: str) -> str:
    """Newest revision per id of one kind, tombstones removed: the catalog's table.

    Ends in a WHERE clause so a view can go on with ``AND …``.
    """
    return f"(SELECT *, false AS deleted FROM _store.{kind}) WHERE deleted IS NOT TRUE"


def _num(path: str, typ: str = "BIGINT") -> str:
    return f"TRY_CAST(data{path} AS {typ})"


_VIEWS = {
    "session": """SELECT id, project_id, workspace_id, parent_id, slug, directory, title, version, time_created,
        time_updated, time_archived, data FROM _store.session""",
    "message": """SELECT id, session_id, time_created, time_updated, data, role, parent_id, agent, provider_id,
        model_id, cost, finish, summary, error_name, time_completed, input_tokens, output_tokens, reasoning_tokens,
        cache_read_tokens, cache_write_tokens, total_tokens, tokens_estimated, mode, error_message
        FROM _store.message""",
    "part": """SELECT id, message_id, session_id, time_created, time_updated, data, type, tool, call_id, status,
        title, text_length, output_length, time_start, time_end, compacted_at, reason, cost, input_tokens,
        output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, total_tokens, tokens_estimated,
        latency_ms, first_token_ms, attempts, error, interrupted, auto, overflow, attempt, synthetic
        FROM _store.part""",
    # Cost rollup per session (lifecycle.md): its assistant messages, its title call
    # (data.titleUsage.cost) and, recursively, its subagent sessions (parent_id). UNION, not
    # UNION ALL, so an imported parent cycle cannot recurse forever.
    "session_cost": """WITH RECURSIVE tree(root, id) AS (
            SELECT id, id FROM session
            UNION SELECT tree.root, s.id FROM tree JOIN session s ON s.parent_id = tree.id),
        msg AS (SELECT session_id, sum(cost) cost, count(*) n FROM message WHERE role = 'assistant'
                GROUP BY session_id),
        own AS (SELECT s.id, s.parent_id, coalesce(msg.cost, 0) messages_cost, coalesce(msg.n, 0) llm_messages,
                coalesce(TRY_CAST(s.data->'titleUsage'->>'cost' AS DOUBLE), 0) title_cost
                FROM session s LEFT JOIN msg ON msg.session_id = s.id)
        SELECT o.id session_id, any_value(o.parent_id) parent_id, any_value(o.messages_cost) messages_cost,
            any_value(o.title_cost) title_cost, any_value(o.messages_cost + o.title_cost) own_cost,
            sum(d.messages_cost + d.title_cost) - any_value(o.messages_cost + o.title_cost) children_cost,
            sum(d.messages_cost + d.title_cost) total_cost, count(*) - 1 descendants
        FROM own o JOIN tree t ON t.root = o.id JOIN own d ON d.id = t.id GROUP BY o.id""",
}

# Compaction events (compaction.CompactionEvent, journal kind "event"): one row per prune or summary.
_VIEWS["compaction_event"] = f"""SELECT id, session_id, time_created, data->>'kind' kind,
    data->>'cause' cause, data->>'outcome' outcome, {_num("->>'tokensBefore'")} tokens_before,
    {_num("->>'tokensAfter'")} tokens_after,
    {_num("->>'tokensBefore'")} - {_num("->>'tokensAfter'")} tokens_freed,
    {_num("->>'usable'")} usable, {_num("->>'trigger'")} trigger, {_num("->>'stepTokens'")} step_tokens,
    {_num("->>'partsPruned'")} parts_pruned, {_num("->>'tokensPruned'")} tokens_pruned,
    {_num("->>'headMessages'")} head_messages, {_num("->>'headTokens'")} head_tokens,
    {_num("->>'tailMessages'")} tail_messages, {_num("->>'tailTokens'")} tail_tokens,
    {_num("->>'summaryTokens'")} summary_tokens, {_num("->>'summaryInputTokens'")} summary_input_tokens,
    {_num("->>'summaryOutputTokens'")} summary_output_tokens, {_num("->>'llmCalls'")} llm_calls,
    {_num("->>'durationMs'")} duration_ms, {_num("->>'cost'", "DOUBLE")} cost,
    data->>'summaryInput' summary_input, data->>'model' model, data->>'requestId' request_id,
    data->>'summaryId' summary_id, data->>'tailStartId' tail_start_id, data->>'error' error, data
    FROM {_latest('event')} AND data->>'type' = 'compaction'"""

# Analytics views (docs/analytics.md): one row per LLM call, tool call, session, and day × model.
# Plain SQL over the views above; times are UTC TIMESTAMPs; costs in USD.
_UTC = "make_timestamp({} * 1000)"  # epoch milliseconds → TIMESTAMP (UTC)
_VIEWS["step"] = "SELECT * FROM _store.step"  # rows kept by the catalog (_DERIVED)
_VIEWS["tool_call"] = "SELECT * FROM _store.tool_call"
_VIEWS["session_summary"] = f"""WITH
    steps AS (SELECT session_id, count(*) steps, arg_max(model, id) model, arg_max(provider, id) provider,
        sum(input_tokens)::BIGINT input_tokens, sum(output_tokens)::BIGINT output_tokens,
        sum(reasoning_tokens)::BIGINT reasoning_tokens,
        sum(cache_read_tokens)::BIGINT cache_read_tokens, sum(cache_write_tokens)::BIGINT cache_write_tokens,
        max(context_tokens) max_context_tokens, sum(cost) FILTER (WHERE summary) summary_cost
        FROM step GROUP BY session_id),
    msgs AS (SELECT session_id, count(*) FILTER (WHERE error_name IS NOT NULL) errors,
        max(time_created) last_message FROM message GROUP BY session_id),
    turns AS (SELECT m.session_id, count(DISTINCT m.id) turns FROM message m JOIN part p ON p.message_id = m.id
        WHERE m.role = 'user' AND p.type = 'text' AND NOT coalesce(p.synthetic, false) GROUP BY m.session_id),
    tools AS (SELECT session_id, count(*) tool_calls,
        count(*) FILTER (WHERE status IN ('error', 'interrupted')) tool_errors FROM tool_call GROUP BY session_id),
    compactions AS (SELECT session_id, count(*) FILTER (WHERE kind = 'summary' AND outcome = 'ok') compactions,
        count(*) FILTER (WHERE kind = 'prune') prunes FROM compaction_event GROUP BY session_id)
    SELECT s.id AS session_id, s.title, s.parent_id, s.directory, st.model, st.provider,
        coalesce(turns.turns, 0) AS turns, coalesce(st.steps, 0) AS steps,
        coalesce(tools.tool_calls, 0) AS tool_calls, coalesce(tools.tool_errors, 0) AS tool_errors,
        coalesce(msgs.errors, 0) AS errors, coalesce(c.compactions, 0) AS compactions,
        coalesce(c.prunes, 0) AS prunes, coalesce(st.input_tokens, 0) AS input_tokens,
        coalesce(st.output_tokens, 0) AS output_tokens, coalesce(st.reasoning_tokens, 0) AS reasoning_tokens,
        coalesce(st.cache_read_tokens, 0) AS cache_read_tokens,
        coalesce(st.cache_write_tokens, 0) AS cache_write_tokens, st.max_context_tokens,
        sc.messages_cost - coalesce(st.summary_cost, 0) AS cost, coalesce(st.summary_cost, 0) AS summary_cost,
        sc.title_cost, sc.children_cost AS subagent_cost, sc.total_cost, sc.descendants AS subagents,
        {_UTC.format('s.time_created')} AS time_created,
        {_UTC.format('greatest(s.time_updated, msgs.last_message)')} AS time_updated
    FROM session s JOIN session_cost sc ON sc.session_id = s.id
    LEFT JOIN steps st ON st.session_id = s.id LEFT JOIN msgs ON msgs.session_id = s.id
    LEFT JOIN turns ON turns.session_id = s.id LEFT JOIN tools ON tools.session_id = s.id
    LEFT JOIN compactions c ON c.session_id = s.id"""
_VIEWS["daily_cost"] = f"""WITH calls AS (
        SELECT CAST(time AS DATE) AS day, provider, model, 'step' AS kind, session_id, input_tokens, output_tokens,
            reasoning_tokens, cache_read_tokens, cache_write_tokens, cost FROM step
        UNION ALL
        SELECT CAST({_UTC.format('coalesce(title_time, time_created)')} AS DATE), split_part(title_model, '/', 1),
            substr(title_model, length(split_part(title_model, '/', 1)) + 2), 'title', id, title_input_tokens,
            title_output_tokens, title_reasoning_tokens, title_cache_read_tokens, title_cache_write_tokens, title_cost
        FROM _store.session WHERE title_model IS NOT NULL OR title_cost IS NOT NULL)
    SELECT day, provider, model, count(*) AS calls, count(*) FILTER (WHERE kind = 'title') AS title_calls,
        count(DISTINCT session_id) AS sessions, sum(input_tokens)::BIGINT AS input_tokens,
        sum(output_tokens)::BIGINT AS output_tokens, sum(reasoning_tokens)::BIGINT AS reasoning_tokens,
        sum(cache_read_tokens)::BIGINT AS cache_read_tokens, sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
        sum(cost) AS cost
    FROM calls GROUP BY day, provider, model"""

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
    if getattr(type(value), "JOURNAL_KIND", None) == "event":  # immutable records, e.g. compaction events
        return "event"
    raise UsageError(f"cannot store a {type(value).__name__} — put() takes a Session, message, part or event")


def _encode(row: dict) -> bytes:
    """One journal line. A lone surrogate would make DuckDB drop the whole line, so replace it.
    Secrets are redacted (``redact.py``): nothing written to a journal may hold an API key."""
    text = _redact(json.dumps(row, ensure_ascii=False, separators=(",", ":"))) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


# --------------------------------------------------------------------------
# decoding: messages.decoder() is from_data compiled once per class


@functools.cache
def _decoders():
    """(UserMessage decoder, AssistantMessage decoder, part type → decoder)."""
    return (M.decoder(M.UserMessage), M.decoder(M.AssistantMessage),
            {name: M.decoder(cls) for name, cls in M.PART_TYPES.items()})


@contextlib.contextmanager
def _gc_paused():
    """No collection while decoding; afterwards the new (long-lived, cached) objects go
    straight to the oldest generation.

    Otherwise the first allocation after ``gc.enable()`` traverses every object just
    made (60-100 ms for a 10,000-message session), and later young collections do it
    again. ``freeze()`` + ``unfreeze()`` moves all tracked objects to the oldest
    generation and resets the young count, without a traversal; cyclic garbage made
    before the call is then found by the next full collection instead of a young one.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _decode(kind: str, data: dict):
    """A value from OpenCode JSON: ``kind`` is "session", "message" or "part"."""
    if kind == "part":
        return M.decoder(M.PART_TYPES[data["type"]])(data)
    if kind == "message":
        return M.decoder(M.UserMessage if data.get("role") == "user" else M.AssistantMessage)(data)
    return M.decoder(Session)(data)


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
        con.execute("SET enable_progress_bar=false")
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
# the catalog: every file's rows, newest revision per id, typed, in DuckDB tables


def _newer(a: str, b: str, *, strict: bool = False) -> str:
    """SQL: row ``a`` is a newer revision than row ``b`` (rev, then writer, as the events order)."""
    return f"({a}.rev > {b}.rev OR ({a}.rev = {b}.rev AND {a}.writer {'>' if strict else '>='} {b}.writer))"


class _Catalog:
    """The deduplicated, typed rows of the history as ``_store.<kind>`` tables in one DuckDB.

    ``refresh()`` brings them up to date incrementally, so the public views are plain table
    scans: a Parquet file is read once (they are written whole and never change); a journal
    is read from the byte offset reached last time up to its last newline (a torn or
    half-written tail waits for the rest of its line). Each batch is deduplicated (newest
    ``rev``, then ``writer``), then replaces older revisions of the same ids. Tombstones are
    kept in ``_store.tombstone`` so that an older revision arriving later (another writer's
    late flush, a journal compacted to Parquet) cannot bring a deleted id back. A file that
    vanishes without a Parquet successor means the history was deleted or rewritten: the
    next refresh rebuilds everything.
    """

    WHOLE_FILE = 1 << 20  # a journal first seen this large is parsed by read_json, not line by line

    def __init__(self, con) -> None:
        self.parquet: dict[str, tuple] = {}  # path → (inode, size, mtime) ingested
        self.journals: dict[str, tuple[int, int]] = {}  # path → (inode, byte offset ingested)
        self.loaded = False  # refreshed at least once (until then the tables are empty)
        self._create(con)

    def _create(self, con) -> None:
        """Empty tables (the views bind to them), and no file read yet."""
        con.execute("CREATE SCHEMA IF NOT EXISTS _store")
        con.execute("DROP VIEW IF EXISTS _store.batch")
        for scratch in ("rows", "loser", "hit", "touched"):
            con.execute(f"DROP TABLE IF EXISTS _store.{scratch}")
        for kind in KINDS:
            con.execute(f"CREATE OR REPLACE TABLE _store.{kind} AS {_empty_table(kind)}")
        con.execute("CREATE OR REPLACE TABLE _store.tombstone (id VARCHAR, rev BIGINT, writer VARCHAR)")
        for name, (_, select) in _DERIVED.items():
            con.execute(f"CREATE OR REPLACE TABLE _store.{name} AS {select} WHERE false")
        self.parquet, self.journals, self.loaded, self.empty = {}, {}, False, True

    def refresh(self, con, live: tuple[str, ...], parquet: tuple[str, ...]) -> bool:
        """Ingest what changed since the last refresh; True if anything was read."""
        stems, listed = {Path(p).stem for p in parquet}, {*live, *parquet}
        if any(p not in listed for p in self.parquet) or any(
                p not in listed and Path(p).stem not in stems for p in self.journals):
            self._create(con)  # files vanished without a successor: start again
        self.loaded = True
        new_parquet: dict[str, tuple] = {}
        for path in parquet:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # rewritten meanwhile; the caller lists again
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.parquet.get(path) != key:
                new_parquet[path] = key
        whole, chunks, offsets = [], [], {}
        for path in live:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # compacted meanwhile: its Parquet file is in the next listing
            try:
                st = os.fstat(fd)
                inode, offset = self.journals.get(path, (st.st_ino, 0))
                if inode != st.st_ino:
                    offset = 0
                if st.st_size <= offset:
                    offsets[path] = (st.st_ino, offset)
                elif offset == 0 and st.st_size >= self.WHOLE_FILE:
                    whole.append(path)  # read_json may see more lines; they are read again later, harmlessly
                    offsets[path] = (st.st_ino, _last_line_end(fd, st.st_size))
                else:
                    data = os.pread(fd, st.st_size - offset, offset)
                    end = data.rfind(b"\n") + 1
                    if end:
                        chunks.append(data[:end])
                    offsets[path] = (st.st_ino, offset + end)
            finally:
                os.close(fd)
        if not (new_parquet or whole or chunks):
            self.journals.update(offsets)
            return False
        sources, params = [], []
        if new_parquet:
            files = ", ".join(_quote(p) for p in new_parquet)
            sources.append(f"SELECT {_NAMES}::JSON AS data, 1 AS src FROM read_parquet([{files}], union_by_name=true)")
        if whole:
            sources.append(f"SELECT {_NAMES}, 0 AS src FROM {_read_json(whole)}")
        if chunks:
            params.append(b"".join(chunks).decode("utf-8", "replace"))
            sources.append(f"SELECT unnest(TRY(from_json(line, {_quote(_RAW_SPEC)}))), 0 AS src "
                           "FROM unnest(string_split($1, chr(10))) t(line) WHERE line <> ''")
        con.execute("BEGIN")
        try:
            con.execute(f"CREATE TABLE _store.rows AS SELECT * FROM ({' UNION ALL '.join(sources)}) "
                        "WHERE id IS NOT NULL", params)
            # several rows of an id in one batch (most batches have none): all but the newest lose; a
            # Parquet file beats the journal it was compacted from (its unfinished tools are settled)
            con.execute("CREATE TABLE _store.loser AS SELECT rowid AS row FROM _store.rows WHERE id IN "
                        "(SELECT id FROM _store.rows GROUP BY id HAVING count(*) > 1) QUALIFY row_number() OVER "
                        "(PARTITION BY id ORDER BY rev DESC, writer DESC, src DESC) > 1")
            lost = con.execute("SELECT count(*) FROM _store.loser").fetchone()[0]
            con.execute("CREATE VIEW _store.batch AS SELECT * FROM _store.rows"
                        + (" WHERE rowid NOT IN (SELECT row FROM _store.loser)" if lost else ""))
            self._apply(con, first=self.empty)
            for scratch in ("VIEW _store.batch", "TABLE _store.rows", "TABLE _store.loser"):
                con.execute(f"DROP {scratch}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.parquet.update(new_parquet)
        self.journals.update(offsets)
        self.empty = False
        return True

    @staticmethod
    def _apply(con, first: bool) -> None:
        """Merge ``_store.batch`` (one newest row per id) into the tables.

        Joins go from the small batch to the big tables (hash tables are built on the
        batch side); the first load, into empty tables, skips them.
        """
        kinds = {kind for (kind,) in con.execute("SELECT DISTINCT kind FROM _store.batch").fetchall()}
        if con.execute("SELECT count(*) FROM _store.batch WHERE deleted").fetchone()[0]:
            con.execute(f"DELETE FROM _store.tombstone t USING _store.batch b "
                        f"WHERE b.deleted AND t.id = b.id AND {_newer('b', 't')}")
            con.execute("INSERT INTO _store.tombstone SELECT id, rev, writer FROM _store.batch b WHERE b.deleted "
                        "AND NOT EXISTS (SELECT 1 FROM _store.tombstone t WHERE t.id = b.id)")
        buried = "false"
        if con.execute("SELECT count(*) FROM _store.tombstone").fetchone()[0]:
            buried = f"EXISTS (SELECT 1 FROM _store.tombstone t WHERE t.id = b.id AND {_newer('t', 'b', strict=True)})"
        for kind in KINDS:
            if kind not in kinds:
                continue
            table = f"_store.{kind}"
            spec = _TYPED.get(kind, ({}, ()))[0]
            parsed = f", from_json(b.data, {_quote(json.dumps(spec))}) j" if spec else ""
            rows = f"SELECT b.*{parsed} FROM _store.batch b WHERE b.kind = '{kind}' AND b.deleted IS NOT TRUE"
            if first:
                con.execute(f"INSERT INTO {table} SELECT {_ingest_columns(kind)} FROM ({rows} AND NOT {buried}) b")
                continue
            # ids the table has already: replace the older revisions, keep the newer ones
            con.execute(f"CREATE OR REPLACE TABLE _store.hit AS SELECT t.id, {_newer('b', 't')} AS newer "
                        f"FROM _store.batch b JOIN {table} t ON t.id = b.id WHERE b.kind = '{kind}'")
            con.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM _store.hit WHERE newer)")
            con.execute(f"INSERT INTO {table} SELECT {_ingest_columns(kind)} FROM ({rows} AND NOT {buried} "
                        "AND b.id NOT IN (SELECT id FROM _store.hit WHERE NOT newer)) b")
        con.execute("DROP TABLE IF EXISTS _store.hit")
        if first:
            for name, (part_type, select) in _DERIVED.items():
                con.execute(f"INSERT INTO _store.{name} {select} WHERE p.type = '{part_type}'")
        elif kinds & {"part", "message"}:  # rebuild the rows of the batch's parts and its messages' parts
            types = ", ".join(f"'{t}'" for t, _ in _DERIVED.values())
            con.execute("CREATE TABLE _store.touched AS SELECT id FROM _store.batch WHERE kind = 'part' "
                        "UNION SELECT p.id FROM _store.part p WHERE p.message_id IN "
                        f"(SELECT id FROM _store.batch WHERE kind = 'message') AND p.type IN ({types})")
            for name, (part_type, select) in _DERIVED.items():
                con.execute(f"DELETE FROM _store.{name} WHERE id IN (SELECT id FROM _store.touched)")
                con.execute(f"INSERT INTO _store.{name} {select} WHERE p.type = '{part_type}' "
                            "AND p.id IN (SELECT id FROM _store.touched)")
            con.execute("DROP TABLE _store.touched")


def _empty_table(kind: str) -> str:
    """A query for no rows, with the columns (and types) of ``_store.<kind>``."""
    spec = _TYPED.get(kind, ({}, ()))[0]
    probe = f"SELECT *, from_json(data, {_quote(json.dumps(spec))}) j FROM ({_EMPTY})" if spec else _EMPTY
    return f"SELECT {_ingest_columns(kind)} FROM ({probe}) b"


def _ingest_columns(kind: str) -> str:
    """The SELECT list that turns batch rows ``b`` (with ``j`` parsed) into a table's columns."""
    typed = dict(_TYPED.get(kind, ({}, ()))[1])
    return ", ".join(f"{typed[c]} AS {c}" if c in typed else f"b.{c}" for c in _table_columns(kind))


def _last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline before ``size`` (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        at = block.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


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
        self._catalog: _Catalog | None = None  # created by the first sql() query
        self._next_sweep = 0.0

    # ---- writing -----------------------------------------------------------

    def put(self, *values: Any, time_created: int | None = None) -> None:
        """Buffer a snapshot of each value; the last put of an id before flush() wins.

        ``time_created`` (ms) is the rows' creation time for ids this process has not
        written before (imports keep their source's times); default: now.
        """
        now = now_ms()
        for value in values:
            kind = _kind(value)
            data = value.to_data()
            data.pop("id", None)
            session_id = value.id if kind == "session" else data.pop("sessionID", None)
            message_id = data.pop("messageID", None) if kind == "part" else None
            rev, created = self._buffer(kind, value.id, session_id, message_id, data, False, now, time_created)
            if kind in ("message", "part"):
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

    def _buffer(self, kind, id, session_id, message_id, data, deleted, now, created=None) -> tuple[int, int]:
        known = self._known.get(id)
        if known is None:  # first sight in this process: keep a creation time read from the history
            hit = self._cache.get(session_id, {}).get(id)
            known = (session_id, message_id, created or (hit[1] if hit else now))
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
            self._con, self._files, self._catalog = None, None, None

    # ---- reading -----------------------------------------------------------
    #
    # Two sources answer the same questions. The catalog (``_store.*`` tables, kept current
    # by ``_Catalog.refresh``) is loaded by the first sql() query; until then, reads go
    # straight to the files (``_events_sql``), filtered to what they need (Parquet row
    # groups of other sessions are skipped), so a fresh store opens one session without
    # first loading the whole history.

    def session(self, session_id: str) -> Session:
        """The session with this id, or with this unique id prefix."""
        rows = self._read(
            "SELECT id, data::VARCHAR FROM session WHERE starts_with(id, $1) ORDER BY id = $1 DESC, id LIMIT 2",
            _from_files("session", "starts_with(id, $1)") + " ORDER BY id = $1 DESC, id LIMIT 2",
            [session_id]) if session_id else []
        if not rows:
            raise SessionNotFoundError(f"no session {session_id!r} — `%agent sessions` lists them")
        if len(rows) > 1 and rows[0][0] != session_id:
            raise UsageError(f"{session_id!r} matches several sessions — give more of the id")
        return self._session(*rows[0])

    def sessions(self, *, include_archived: bool = False) -> list[Session]:
        """All sessions, newest first (descending ids sort newest first)."""
        where = "true" if include_archived else "time_archived IS NULL"
        files_where = "true" if include_archived else "TRY_CAST(data->'time'->>'archived' AS BIGINT) IS NULL"
        rows = self._read(f"SELECT id, data::VARCHAR FROM session WHERE {where} ORDER BY id",
                          f"{_from_files('session', 'true')} AND {files_where} ORDER BY id")
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
        # Few columns and no ORDER BY on purpose: fetching is most of DuckDB's share of the time,
        # and Python sorts the ids faster than DuckDB sorts and hands over the rows.
        cache = self._session_cache(session_id)
        if not cache:  # cold: everything in one query
            rows = self._read(*_message_rows(data=True), [session_id])
        else:  # warm: the keys, then the data of what is not cached at that revision
            rows = self._read(*_message_rows(data=False), [session_id])
            stale = {row[0] for row in rows if (hit := cache.get(row[0])) is None or hit[0] != row[2]}
            fresh = {row[0]: row for row in self._read(*_message_rows(data=True, ids=True),
                                                       [session_id, list(stale)])} if stale else {}
            rows = [fresh.get(row[0], row) for row in rows if row[0] in fresh or row[0] not in stale]
        rows.sort()
        infos: dict[str, Any] = {}
        parts: dict[str, list] = {}
        unfinished: list[ToolPart] = []
        with _gc_paused():  # tens of thousands of acyclic objects: collection passes are pure cost
            if cache:
                values = [hit[2] if (hit := cache.get(row[0])) is not None and hit[0] == row[2] else None
                          for row in rows]
                stale = [i for i, value in enumerate(values) if value is None]
            else:
                values, stale = [None] * len(rows), range(len(rows))
            if stale:  # one json.loads for all of them is ~30% cheaper than one per row
                decoded = json.loads("[" + ",".join([rows[i][5] for i in stale]) + "]")
                user, assistant, part = _decoders()
                for i, data in zip(stale, decoded):
                    row = rows[i]
                    data["id"] = id = row[0]
                    data["sessionID"] = session_id
                    if row[1] is None:
                        value = (user if data.get("role") == "user" else assistant)(data)
                    else:
                        data["messageID"] = row[1]
                        value = part[data["type"]](data)
                    values[i] = value
                    cache[id] = (row[2], row[3], value)
                del decoded  # freed now, before the collector sees it
            writers = {}
            for row, value in zip(rows, values):
                if row[1] is None:
                    infos[row[0]] = value
                else:
                    bucket = parts.get(row[1])
                    if bucket is None:
                        parts[row[1]] = [value]
                    else:
                        bucket.append(value)
                    if type(value) is ToolPart and value.state.status in ("pending", "running"):
                        unfinished.append(value)
                        writers[row[0]] = row[4]
            del rows, values
            unfinished = [p for p in unfinished if p.message_id in infos]  # orphans drop out
            empty = ()
            history = [WithParts(info, tuple(parts.get(id, empty))) for id, info in infos.items()]
        fixed = self._interrupt(unfinished, writers) if unfinished else None
        if fixed:
            history = [WithParts(m.info, tuple(fixed.get(p.id, p) for p in m.parts)) for m in history]
        return history

    def _interrupt(self, unfinished: list[ToolPart], writers: dict[str, str]) -> dict[str, ToolPart]:
        """Fix (and persist) tool parts left pending/running by writers that are gone."""
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
        """(session_id, message_id, time_created) of the newest revision of ``id``, tombstones included."""
        with self._read_lock:
            rows = self._over_files(self._prepare(), lambda con, events: con.execute(
                f"SELECT session_id, message_id, time_created FROM {events} WHERE id = $1 ORDER BY rev DESC LIMIT 1",
                [id]).fetchall())
        return rows[0] if rows else None

    # ---- SQL -----------------------------------------------------------------

    def sql(self, query: str, params: list | dict | None = None):
        """Run read-only SQL over the history's views (``docs/analytics.md`` lists them).

        Returns a pandas DataFrame of the last statement; ``params`` fill ``$1``/``$name``
        placeholders. Anything but SELECT (and EXPLAIN SELECT, DESCRIBE, SHOW,
        SUMMARIZE) raises ReadOnlyError; DuckDB errors become a one-line UsageError.
        The first query loads the catalog (every file, once); later ones read only
        what was appended since.
        """
        import duckdb

        with self._read_lock:
            _check_read_only(self._connection(), query)
            con = self._prepare()
            run = (lambda c, *_: c.execute(query, params).df()) if params else (lambda c, *_: c.execute(query).df())
            try:
                self._refresh(con)
                if _EVENTS.search(query):  # the raw revisions: read from the files themselves
                    return self._over_files(con, run, view=True)
                return run(con)
            except duckdb.Error as err:
                raise UsageError(_one_line(err)) from None

    def export_parquet(self, directory: str | os.PathLike, *, user: str | None = None) -> dict[str, int]:
        """Write the history as Parquet, Hive-partitioned by day, for DuckDB, Spark or Trino.

        Layout (``docs/analytics.md``): ``<directory>/<kind>/date=YYYY-MM-DD/<user>-<host>-<n>.parquet``
        for kind session, message, part and event; the rows are the catalog's (newest revision,
        typed columns, ``data`` as JSON text) plus ``user`` (default: this login) and ``host``
        (of the writing process), so many users' exports can share one directory. A new export
        by the same user and machine replaces its earlier files. ``views.sql`` recreates every
        view over the directory. Returns the rows written per kind.
        """
        import duckdb

        out = Path(directory).expanduser().absolute()
        user = user or _login()
        prefix = re.sub(r"[^A-Za-z0-9_.@-]+", "_", f"{user}-{socket.gethostname()}")
        self._prepare()
        tmp = out / f".export-{secrets.token_hex(4)}"
        tmp.mkdir(parents=True)
        con = duckdb.connect()
        try:
            con.execute("SET autoinstall_known_extensions=false")
            con.execute("SET autoload_known_extensions=false")
            con.execute("SET enable_progress_bar=false")
            catalog = _Catalog(con)
            for _ in range(10):  # as in _refresh: a journal compacted meanwhile means list again
                files = self._listing()
                try:
                    catalog.refresh(con, *files)
                except duckdb.IOException:
                    if self._listing() == files:
                        raise
                    continue
                break
            counts = {}
            for kind in KINDS:
                columns = ", ".join(f"{c}::VARCHAR AS {c}" if c == "data" else c for c in _table_columns(kind))
                counts[kind] = con.execute(f"SELECT count(*) FROM _store.{kind}").fetchone()[0]
                if not counts[kind]:
                    continue
                con.execute(
                    f"COPY (SELECT {columns}, $1 AS user, "
                    "regexp_extract(writer, '^(.*)-[0-9]+-[0-9a-f]+$', 1) AS host, "
                    f"CAST(make_timestamp(time_created * 1000) AS DATE) AS date FROM _store.{kind}) "
                    f"TO {_quote(tmp / kind)} (FORMAT parquet, PARTITION_BY (date), "
                    f"FILENAME_PATTERN {_quote(prefix + '-{i}')})", [user])
        finally:
            con.close()
        for kind in KINDS:  # replace this user's earlier files, partition by partition
            for old in (out / kind).glob(f"date=*/{glob.escape(prefix)}-*.parquet"):
                old.unlink()
            for new in (tmp / kind).glob("date=*/*.parquet"):
                target = out / kind / new.parent.name / new.name
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(new, target)
        shutil.rmtree(tmp, ignore_errors=True)
        (out / "views.sql").write_text(export_views_sql(out))
        return counts

    def _read(self, tables_sql: str, files_sql: str, params: list | None = None) -> list[tuple]:
        """Rows of ``tables_sql`` over the catalog once it is loaded, else of ``files_sql`` over the files."""
        with self._read_lock:
            con = self._prepare()
            if self._catalog is not None and self._catalog.loaded:
                self._refresh(con)
                return con.execute(tables_sql, params or []).fetchall()
            return self._over_files(con, lambda c, events: c.execute(
                files_sql.replace("__events__", events), params or []).fetchall())

    def _prepare(self):
        """The connection, after writing this process's buffer (read your own writes) and,
        every 10 s, compacting the journals of writers that have finished."""
        journal = self._journal
        if journal is not None and journal.buffer:
            journal.append(sync=False)
        con = self._connection()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + 10.0
            self._sweep()
        return con

    def _refresh(self, con) -> None:
        """Bring the catalog up to date with the files.

        A compaction can remove a journal between listing and reading it; then
        the listing has changed and the refresh goes again, so it also reads the
        Parquet file that replaced the journal. An I/O error with an unchanged
        listing is real and raised.
        """
        import duckdb

        if self._catalog is None:  # the first query: the tables, then the views over them
            self._catalog = _Catalog(con)
            for name, body in _VIEWS.items():
                con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
        for _ in range(100):
            files = self._listing()
            try:
                self._catalog.refresh(con, *files)
            except duckdb.IOException:
                if self._listing() == files:
                    raise
                continue
            if self._listing() == files:
                return
        raise UsageError("the history keeps changing under the query — try again")

    def _over_files(self, con, fn, *, view: bool = False):
        """``fn(con, events)``: ``events`` is a relation over the current files, the ``events``
        view when ``view`` (for users' SQL), else a subquery (one bind instead of two).
        Retried as in _refresh."""
        import duckdb

        for _ in range(100):  # each retry means another writer's journal was compacted
            files = self._listing()
            try:
                if not view:
                    return fn(con, f"({_events_sql(*files)})")
                if files != self._files:
                    self._files = None
                    con.execute(f"CREATE OR REPLACE VIEW events AS {_events_sql(*files)}")  # opens them
                    self._files = files
                return fn(con, "events")
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
                "SET enable_progress_bar=false",  # long first loads must not print into the cell
                f"SET allowed_directories=[{_quote(str(self._root) + os.sep)}]",
                "SET enable_external_access=false",
                "SET lock_configuration=true",
            ):
                con.execute(setting)
            con.execute(f"CREATE VIEW events AS {_EMPTY}")
            self._con, self._con_pid, self._files, self._catalog = con, os.getpid(), (), None
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


_EVENTS = re.compile(r"\bevents\b", re.IGNORECASE)
_LATEST_IN_FILES = ("(FROM __events__ WHERE kind = '{kind}' AND {where} QUALIFY row_number() OVER "
                    "(PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE")


def export_views_sql(directory: str | os.PathLike) -> str:
    """SQL that recreates the history's views over an ``export_parquet`` directory."""
    root = Path(directory).absolute()
    lines = [f"-- jupyter-session-agent views over {root} (written by export_parquet)",
             "CREATE SCHEMA IF NOT EXISTS _store;"]
    for kind in KINDS:
        files = _quote(f"{root / kind}/*/*.parquet")
        source = (f"SELECT * REPLACE (data::JSON AS data) FROM read_parquet({files}, hive_partitioning=true, "
                  "union_by_name=true)") if any((root / kind).glob("*/*.parquet")) else _empty_table(kind)
        lines.append(f"CREATE OR REPLACE VIEW _store.{kind} AS {source};")
    lines += [f"CREATE OR REPLACE VIEW _store.{name} AS {select} WHERE p.type = '{part_type}';"
              for name, (part_type, select) in _DERIVED.items()]
    lines += [f"CREATE OR REPLACE VIEW {name} AS {body};" for name, body in _VIEWS.items()]
    return "\n".join(lines) + "\n"


def open_export(directory: str | os.PathLike):
    """A DuckDB connection (yours: writable) with every view over an ``export_parquet`` directory."""
    import duckdb

    con = duckdb.connect()
    con.execute(export_views_sql(directory))
    return con


def _login() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return "unknown"


_shared: dict[Path, "Store"] = {}
_shared_lock = threading.Lock()


def scratch_connection():
    """A private in-memory DuckDB for derived indexes (memory search): no file, no lock,
    offline settings. It lives here so that this module stays the only one importing duckdb."""
    import duckdb

    con = duckdb.connect()
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions", "enable_progress_bar"):
        con.execute(f"SET {setting}=false")
    return con


def shared(data_dir: str | os.PathLike) -> "Store":
    """The process-wide Store for ``data_dir``: one journal and one catalog per history
    (the magics and ``jupyter_session_agent.sql()`` use it, so the catalog loads once)."""
    key = Path(data_dir).expanduser().absolute()
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = _shared[key] = Store(key)
        return store


def _from_files(kind: str, where: str, columns: str = "id, data::VARCHAR") -> str:
    """SELECT ``columns`` of the newest revision per id of ``kind`` rows matching ``where``, from the files."""
    return f"SELECT {columns} FROM {_LATEST_IN_FILES.format(kind=kind, where=where)}"


def _message_rows(data: bool, ids: bool = False) -> tuple[str, str]:
    """(catalog SQL, files SQL) for a session's messages and parts ($1): ``id, message_id,
    rev, time_created, writer`` [``, data``], only the ids in list $2 when ``ids``."""
    columns = "id, message_id, rev, time_created, writer" + (", coalesce(data::VARCHAR, '{}')" if data else "")
    where = "session_id = $1" + (" AND list_contains($2, id)" if ids else "")
    tables = (f"SELECT {columns} FROM _store.message WHERE {where} "
              f"UNION ALL SELECT {columns} FROM _store.part WHERE {where}")
    files = (f"SELECT {columns} FROM (FROM __events__ WHERE {where} AND kind IN ('message', 'part') QUALIFY "
             "row_number() OVER (PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE")
    return tables, files


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
