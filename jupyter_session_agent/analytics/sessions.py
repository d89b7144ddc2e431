"""Every stored session summarised for the session browser (``%agent browse``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    title: str
    model: str
    turns: int
    messages: int
    tokens: int  # summed step tokens (total, or the sum of the parts)
    context: int  # the newest step's tokens: the context in use
    cost: float
    compactions: int
    time_created: int
    time_updated: int
    parent_id: str | None = None


SESSION_ROWS_SQL = """
WITH last AS MATERIALIZED (  -- a light pass: the newest message time of every session
    SELECT session_id, max(coalesce(time_completed, time_created)) AS last_message
    FROM message GROUP BY session_id
), s AS MATERIALIZED (  -- the sessions listed: the newest ones
    SELECT s.id, s.title, s.time_created, s.parent_id,
           greatest(s.time_updated, coalesce(last.last_message, 0)) AS time_updated
    FROM session s LEFT JOIN last ON last.session_id = s.id
    WHERE s.time_archived IS NULL ORDER BY time_updated DESC, s.id {limit}
), msg AS (  -- only their messages and parts are read in full
    SELECT session_id,
           count(*) AS messages,
           coalesce(sum(cost), 0) AS cost,
           coalesce(sum(coalesce(total_tokens, coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
               + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0))) FILTER (WHERE role = 'assistant'), 0)
               AS tokens,
           arg_max(coalesce(total_tokens, coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
               + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0)), id)
               FILTER (WHERE role = 'assistant' AND finish IS NOT NULL) AS context,
           arg_max(provider_id || '/' || model_id, id) AS model
    FROM message WHERE session_id IN (SELECT id FROM s) GROUP BY session_id
), prompts AS MATERIALIZED (  -- their user messages
    SELECT id FROM message WHERE role = 'user' AND session_id IN (SELECT id FROM s)
), their AS MATERIALIZED (  -- their text and compaction parts (typed columns: no JSON parsed)
    SELECT session_id, message_id, type, synthetic FROM part
    WHERE session_id IN (SELECT id FROM s) AND type IN ('compaction', 'text')
), prt AS (
    SELECT p.session_id,
           count(*) FILTER (WHERE p.type = 'compaction') AS compactions,
           count(DISTINCT p.message_id) FILTER (
               WHERE p.type = 'text' AND NOT coalesce(p.synthetic, false)) AS turns
    FROM their p WHERE p.message_id IN (SELECT id FROM prompts)
    GROUP BY p.session_id
)
SELECT s.id, s.title, coalesce(msg.model, '') AS model, coalesce(prt.turns, 0) AS turns,
       coalesce(msg.messages, 0) AS messages, coalesce(msg.tokens, 0) AS tokens,
       coalesce(msg.context, 0) AS context, coalesce(msg.cost, 0) AS cost,
       coalesce(prt.compactions, 0) AS compactions, s.time_created,
       s.time_updated, s.parent_id
FROM s
LEFT JOIN msg ON msg.session_id = s.id
LEFT JOIN prt ON prt.session_id = s.id
ORDER BY time_updated DESC, s.id
"""


def session_rows(store: Any, limit: int | None = None) -> list[SessionRow]:
    """Live sessions with their model, turns, tokens, cost and compactions, newest first;
    ``limit``: the newest that many (by the session's last update), and only their messages
    and parts are read."""
    frame = store.sql(SESSION_ROWS_SQL.replace("{limit}", f"LIMIT {int(limit)}" if limit else ""))
    rows = []
    for rec in frame.to_dict("records"):
        rows.append(
            SessionRow(
                id=rec["id"],
                title=rec["title"] or "",
                model=rec["model"] or "",
                turns=_int(rec["turns"]),
                messages=_int(rec["messages"]),
                tokens=_int(rec["tokens"]),
                context=_int(rec["context"]),
                cost=float(rec["cost"] or 0.0),
                compactions=_int(rec["compactions"]),
                time_created=_int(rec["time_created"]),
                time_updated=_int(rec["time_updated"]),
                parent_id=rec["parent_id"] if isinstance(rec["parent_id"], str) else None,
            )
        )
    return rows


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):  # None / NaN from an outer join
        return 0
