"""The history's columns: journal rows, the typed columns parsed out of their JSON, and the rows
derived from them (one per LLM call, one per tool call). Pure SQL text; duckdb is not imported.

A journal line has the raw columns (:data:`RAW`): ``data`` is OpenCode's JSON. Every Parquet
file the store writes (``segment.py``) has the raw columns *and* the typed ones, one physical
column per name for every kind (a kind's rows leave the other kinds' columns NULL), so a query
reads the columns it needs and never parses JSON. A typed column whose name is a raw column's
(a session's ``time_created`` comes from its data) is stored as ``<kind>_<name>``.

One module: the raw, typed and derived columns are one layout (``LAYOUT`` is a hash of all of
them, written into every file), so a change to any of them is a change to it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

Kind = Literal["session", "message", "part", "event"]  # event: e.g. compaction.CompactionEvent
KINDS = ("session", "message", "part", "event")  # journal kinds
# kinds of the rows derived from parts (merged files and the tail): one per LLM call, one per tool
# call, one per session (its totals, what the session browser lists)
DERIVED = ("step", "tool_call", "session_totals")

RAW_TYPES = {
    "kind": "VARCHAR",
    "id": "VARCHAR",
    "session_id": "VARCHAR",
    "message_id": "VARCHAR",
    "rev": "BIGINT",
    "writer": "VARCHAR",
    "deleted": "BOOLEAN",
    "time_created": "BIGINT",
    "time_updated": "BIGINT",
    "data": "JSON",
}
RAW = tuple(RAW_TYPES)
COLUMNS = "{" + ", ".join(f"{name}: '{typ}'" for name, typ in RAW_TYPES.items()) + "}"  # read_json
COLUMN_LIST = ", ".join(RAW)
EMPTY_RELATION = (
    "SELECT " + ", ".join(f"NULL::{typ} {name}" for name, typ in RAW_TYPES.items()) + " WHERE false"
)  # the relation a history with no files yet reads as
_BASE = ("id", "session_id", "message_id", "rev", "writer", "time_created", "time_updated", "data")


SESSION_KEY = "coalesce(session_id, '')"  # a row's session; rows without one sort as ""


def quote(path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


# The longest line read_json accepts (DuckDB's largest setting; 16 MB by default): any part the
# product accepted can be read back. Buffers grow only to the longest line actually read
# (measured: the same memory for 47 MB of short lines with 16 MB or 4 GB).
MAX_LINE = (1 << 32) - 1


def read_json_sql(paths) -> str:
    files = ", ".join(quote(p) for p in paths)
    return (
        f"read_json([{files}], format='newline_delimited', ignore_errors=true, "
        f"maximum_object_size={MAX_LINE}, columns={COLUMNS})"
    )


# --------------------------------------------------------------------------
# typed columns

_I, _S, _F, _B = "BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN"
_TOKENS = {
    "input": _I,
    "output": _I,
    "reasoning": _I,
    "cache": {"read": _I, "write": _I},
    "total": _I,
    "estimated": _B,
}
_TOKEN_COLUMNS = (
    ("input_tokens", "j.tokens.input"),
    ("output_tokens", "j.tokens.output"),
    ("reasoning_tokens", "j.tokens.reasoning"),
    ("cache_read_tokens", "j.tokens.cache.read"),
    ("cache_write_tokens", "j.tokens.cache.write"),
    ("total_tokens", "j.tokens.total"),
    ("tokens_estimated", "j.tokens.estimated"),
)

# Typed columns of each kind: ``from_json(data, spec)`` parses the JSON once into ``j`` (a value
# of the wrong type reads as NULL), and each column is an expression over ``j``.
_TYPED: dict[str, tuple[dict, tuple[tuple[str, str], ...]]] = {
    "session": (
        {
            "projectID": _S,
            "workspaceID": _S,
            "parentID": _S,
            "slug": _S,
            "directory": _S,
            "title": _S,
            "version": _S,
            "time": {"created": _I, "updated": _I, "archived": _I},
            "titleUsage": {"model": _S, "cost": _F, "time": _I, "tokens": _TOKENS},
        },
        (
            ("project_id", "j.projectID"),
            ("workspace_id", "j.workspaceID"),
            ("parent_id", "j.parentID"),
            ("slug", "j.slug"),
            ("directory", "j.directory"),
            ("title", "j.title"),
            ("version", "j.version"),
            ("time_created", "j.time.created"),
            ("time_updated", "j.time.updated"),
            ("time_archived", "j.time.archived"),
            ("title_model", "j.titleUsage.model"),
            ("title_cost", "j.titleUsage.cost"),
            ("title_time", "j.titleUsage.time"),
            *((f"title_{name}", f"j.titleUsage.{path[2:]}") for name, path in _TOKEN_COLUMNS),
        ),
    ),
    "message": (
        {
            "role": _S,
            "parentID": _S,
            "agent": _S,
            "mode": _S,
            "providerID": _S,
            "modelID": _S,
            "model": {"providerID": _S, "modelID": _S},
            "cost": _F,
            "finish": _S,
            "summary": "JSON",
            "error": {"name": _S, "data": {"message": _S}},
            "time": {"completed": _I},
            "tokens": _TOKENS,
        },
        (
            ("role", "j.role"),
            ("parent_id", "j.parentID"),
            ("agent", "j.agent"),
            ("mode", "j.mode"),
            ("provider_id", "coalesce(j.providerID, j.model.providerID)"),
            ("model_id", "coalesce(j.modelID, j.model.modelID)"),
            ("cost", "j.cost"),
            ("finish", "j.finish"),
            ("summary", "CASE WHEN json_type(j.summary) = 'BOOLEAN' THEN j.summary::BOOLEAN END"),
            ("error_name", "j.error.name"),
            ("error_message", "j.error.data.message"),
            ("time_completed", "j.time.completed"),
            *_TOKEN_COLUMNS,
        ),
    ),
    "part": (
        {
            "type": _S,
            "tool": _S,
            "callID": _S,
            "text": _S,
            "synthetic": _B,
            "reason": _S,
            "cost": _F,
            "auto": _B,
            "overflow": _B,
            "attempt": _I,
            "time": {"start": _I, "end": _I},
            "tokens": _TOKENS,
            "metadata": {"latencyMs": _F, "firstTokenMs": _F, "attempts": _I, "costSource": _S},
            "state": {
                "status": _S,
                "title": _S,
                "output": _S,
                "error": _S,
                "time": {"start": _I, "end": _I, "compacted": _I},
                "metadata": {"interrupted": _B, "error": _S},
            },
        },
        (
            ("type", "j.type"),
            ("tool", "j.tool"),
            ("call_id", "j.callID"),
            ("status", "j.state.status"),
            ("title", "j.state.title"),
            ("text_length", "length(j.text)"),
            ("output_length", "length(j.state.output)"),
            ("time_start", "coalesce(j.state.time.start, j.time.start)"),
            ("time_end", 'coalesce(j.state.time."end", j.time."end")'),
            ("compacted_at", "j.state.time.compacted"),
            ("reason", "j.reason"),
            ("cost", "j.cost"),
            *_TOKEN_COLUMNS,
            ("latency_ms", "round(j.metadata.latencyMs)::BIGINT"),
            ("first_token_ms", "round(j.metadata.firstTokenMs)::BIGINT"),
            ("attempts", "j.metadata.attempts"),
            ("cost_source", "j.metadata.costSource"),
            ("error", "j.state.error"),
            ("interrupted", "coalesce(j.state.metadata.interrupted, false)"),
            # the exception a completed call's code raised (the python tool's state.metadata.error)
            (
                "error_class",
                "CASE WHEN j.state.status = 'completed' THEN nullif(j.state.metadata.error, '') END",
            ),
            ("auto", "j.auto"),
            ("overflow", "j.overflow"),
            ("attempt", "j.attempt"),
            ("synthetic", "j.synthetic"),
        ),
    ),
}


def physical(kind: str, name: str) -> str:
    """The stored column of ``kind``'s typed column ``name``."""
    return f"{kind}_{name}" if name in RAW else name


def _merge_spec(into: dict, spec: dict, path: str = "") -> dict:
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(into.get(key, {}), dict):
            into[key] = _merge_spec(into.get(key, {}), value, f"{path}.{key}")
        elif into.setdefault(key, value) != value:
            raise AssertionError(f"typed columns: {path}.{key} has two types")
    return into


def _spec() -> str:
    merged: dict = {}
    for spec, _ in _TYPED.values():
        _merge_spec(merged, spec)
    return json.dumps(merged)


_SPEC = _spec()  # every kind's spec in one: each row's JSON is parsed once


def _typed_columns() -> dict[str, str]:
    """physical name → one expression over ``b`` (the row) and ``j`` (its parsed data)."""
    cases: dict[str, list[tuple[str, str]]] = {}
    for kind, (_, columns) in _TYPED.items():
        for name, expr in columns:
            cases.setdefault(physical(kind, name), []).append((kind, expr))
    return {
        name: "CASE b.kind " + " ".join(f"WHEN '{k}' THEN {e}" for k, e in whens) + " END"
        for name, whens in cases.items()
    }


TYPED = _typed_columns()


def typed(source: str) -> str:
    """SELECT the raw and typed columns of the rows of ``source`` (a relation of raw columns,
    ``data`` JSON): the JSON is parsed once per row."""
    typed_list = ", ".join(f"{expr} AS {name}" for name, expr in TYPED.items())
    raw = ", ".join(f"b.{name}" for name in RAW)
    return (
        f"SELECT {raw}, {typed_list} FROM (SELECT *, from_json(data, {quote(_SPEC)}) j "
        f"FROM ({source})) b"
    )


def logical(kind: str) -> list[tuple[str, str]]:
    """(stored column, view column) of ``_store.<kind>``: the raw columns but ``kind`` and
    ``deleted`` (a typed column of the same name replaces the raw one), then the typed ones."""
    if kind in DERIVED:
        return [(c, c) for c in DERIVED_COLUMNS[kind]]
    typed_names = [name for name, _ in _TYPED.get(kind, ({}, ()))[1]]
    return [(c, c) for c in _BASE if c not in typed_names] + [
        (physical(kind, name), name) for name in typed_names
    ]


def table_columns(kind: str) -> list[str]:
    return [name for _, name in logical(kind)]


def select_list(kind: str, alias: str = "") -> str:
    """``stored AS name, …`` for ``_store.<kind>`` over a relation of stored columns."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(
        f"{prefix}{stored} AS {name}" if stored != name else f"{prefix}{name}"
        for stored, name in logical(kind)
    )


# --------------------------------------------------------------------------
# derived rows: one per LLM call and per tool call, with the model of their message copied in

_DERIVED_SQL: dict[str, tuple[str, str]] = {
    "step": (
        "step-finish",
        """SELECT p.session_id, p.message_id, p.id, m.provider_id AS provider,
        m.model_id AS model, m.agent, coalesce(m.summary, false) AS summary, p.input_tokens, p.output_tokens,
        p.reasoning_tokens, p.cache_read_tokens, p.cache_write_tokens,
        p.input_tokens + p.cache_read_tokens + p.cache_write_tokens AS prompt_tokens,
        coalesce(p.total_tokens, p.input_tokens + p.output_tokens + p.cache_read_tokens + p.cache_write_tokens)
            AS context_tokens,
        p.cost, p.cost_source, coalesce(p.tokens_estimated, false) AS estimated, p.latency_ms, p.first_token_ms, p.attempts,
        p.reason AS finish_reason, make_timestamp(p.time_created * 1000) AS time""",
    ),
    "tool_call": (
        "tool",
        """SELECT p.session_id, p.message_id, p.id, p.call_id, p.tool,
        CASE WHEN p.interrupted THEN 'interrupted' ELSE p.status END AS status, p.error,
        p.error_class, coalesce(p.status = 'error' OR p.error_class IS NOT NULL, false) AS failed,
        p.time_end - p.time_start AS duration_ms, p.output_length, p.compacted_at IS NOT NULL AS pruned,
        make_timestamp(p.compacted_at * 1000) AS pruned_at, m.provider_id AS provider, m.model_id AS model,
        make_timestamp(coalesce(p.time_start, p.time_created) * 1000) AS time,
        p.data->'state'->'metadata'->'mcp'->>'server' AS mcp_server""",
    ),
}
DERIVED_COLUMNS = {
    "step": (
        "session_id",
        "message_id",
        "id",
        "provider",
        "model",
        "agent",
        "summary",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "prompt_tokens",
        "context_tokens",
        "cost",
        "cost_source",
        "estimated",
        "latency_ms",
        "first_token_ms",
        "attempts",
        "finish_reason",
        "time",
    ),
    "tool_call": (
        "session_id",
        "message_id",
        "id",
        "call_id",
        "tool",
        "status",
        "error",
        "error_class",
        "failed",
        "duration_ms",
        "output_length",
        "pruned",
        "pruned_at",
        "provider",
        "model",
        "time",
        "mcp_server",
    ),
}
PART_TYPES = {kind: part_type for kind, (part_type, _) in _DERIVED_SQL.items()}

# A session's totals: one row per session holding messages, kept up to date wherever its rows are
# (computed again for the sessions a merge rewrites or the tail touches), so that the session
# browser reads one row per session instead of aggregating every part. Its columns are what the
# browser shows; ``tests/test_session_totals.py`` holds them equal to the aggregate over parts.
_TOK = (
    "coalesce(total_tokens, coalesce(input_tokens, 0) + coalesce(output_tokens, 0) "
    "+ coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0))"
)
_TOTALS_SQL = f"""SELECT * FROM (WITH m AS MATERIALIZED (
        SELECT session_id, id, role, cost, provider_id, model_id, finish, time_created,
            time_completed, {_TOK} AS tok FROM {{messages}} WHERE {{where}}),
    prompt_parts AS (
        SELECT session_id, count(*) FILTER (WHERE type = 'compaction') AS compactions,
            count(DISTINCT message_id) FILTER (
                WHERE type = 'text' AND NOT coalesce(synthetic, false)) AS turns
        FROM {{parts}} WHERE ({{where}}) AND type IN ('compaction', 'text')
            AND message_id IN (SELECT id FROM m WHERE role = 'user')
        GROUP BY session_id),
    msg AS (
        SELECT session_id, count(*) AS messages, coalesce(sum(cost), 0) AS cost,
            coalesce(sum(tok) FILTER (WHERE role = 'assistant'), 0) AS tokens,
            arg_max(tok, id) FILTER (WHERE role = 'assistant' AND finish IS NOT NULL) AS context,
            arg_max(provider_id || '/' || model_id, id) AS model,
            max(coalesce(time_completed, time_created)) AS last_message
        FROM m GROUP BY session_id)
    SELECT msg.session_id, msg.messages::BIGINT AS messages, msg.cost::DOUBLE AS cost,
        msg.tokens::BIGINT AS tokens, msg.context::BIGINT AS context, msg.model::VARCHAR AS model,
        coalesce(pp.turns, 0)::BIGINT AS turns, coalesce(pp.compactions, 0)::BIGINT AS compactions,
        msg.last_message::BIGINT AS last_message
    FROM msg LEFT JOIN prompt_parts pp ON pp.session_id = msg.session_id)"""
DERIVED_COLUMNS["session_totals"] = (
    "session_id",
    "messages",
    "cost",
    "tokens",
    "context",
    "model",
    "turns",
    "compactions",
    "last_message",
)
# What identifies a derived row (a part's id; a session's totals: the session)
DERIVED_KEY = {"step": "id", "tool_call": "id", "session_totals": "session_id"}


def derived(kind: str, parts: str, messages: str, where: str = "true") -> str:
    """SELECT the ``kind`` rows derived from the parts in ``parts`` (relations with the part's
    and message's columns): for step and tool_call, those of the parts that match ``where``,
    each with its message from ``messages``; for session_totals, those of the sessions whose
    messages and parts match ``where`` (a condition on ``session_id`` alone)."""
    if kind == "session_totals":
        return _TOTALS_SQL.format(parts=parts, messages=messages, where=where)
    part_type, select = _DERIVED_SQL[kind]
    return (
        f"{select} FROM {parts} p LEFT JOIN {messages} m ON m.id = p.message_id "
        f"WHERE p.type = '{part_type}' AND ({where})"
    )


# A signature of the stored columns: files that share it have the same schema, so one scan reads
# them without unifying their schemas (``union_by_name``, which costs a bind per query). The
# session totals are left out: their files are read on their own (all written by this layout),
# so adding them did not make the files of earlier versions a different layout.
_STORED = [
    *RAW,
    *TYPED,
    *(f"{k}.{c}" for k in DERIVED if k != "session_totals" for c in DERIVED_COLUMNS[k]),
]
LAYOUT = hashlib.sha1("|".join(_STORED).encode()).hexdigest()[:12]
