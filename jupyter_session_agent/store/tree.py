"""The session tree in the history: a session's child sessions (subagents) and what
they cost, title calls included.
"""

from __future__ import annotations

from .schema import quote


def children(store, session_id: str) -> list:
    """Direct child sessions (subagents) of ``session_id``, archived ones included."""
    return [s for s in store.sessions(include_archived=True) if s.parent_id == session_id]


def children_cost(store, session_id: str) -> float:
    """What the subagent sessions below ``session_id`` cost, title calls included (recursive)."""
    frame = store.sql(
        f"SELECT coalesce(sum(total_cost), 0) AS cost FROM session_cost "
        f"WHERE parent_id = {quote(session_id)}"
    )
    return float(frame["cost"][0])
