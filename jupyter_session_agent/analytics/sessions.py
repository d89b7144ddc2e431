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


# One row per session: its totals are kept up to date by the store (``session_totals``), so a
# listing reads the sessions and their totals, never their messages or parts.
SESSION_ROWS_SQL = """
SELECT s.id, s.title, coalesce(t.model, '') AS model, coalesce(t.turns, 0) AS turns,
       coalesce(t.messages, 0) AS messages, coalesce(t.tokens, 0) AS tokens,
       coalesce(t.context, 0) AS context, coalesce(t.cost, 0) AS cost,
       coalesce(t.compactions, 0) AS compactions, s.time_created,
       greatest(s.time_updated, coalesce(t.last_message, 0)) AS time_updated, s.parent_id
FROM session s LEFT JOIN session_totals t ON t.session_id = s.id
WHERE s.time_archived IS NULL
ORDER BY time_updated DESC, s.id {limit}
"""


def session_rows(store: Any, limit: int | None = None) -> list[SessionRow]:
    """Live sessions with their model, turns, tokens, cost and compactions, newest first;
    ``limit``: the newest that many (by the session's last update)."""
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
