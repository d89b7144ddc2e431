"""The ready-made reports: short SQL over the history's views, each a pandas DataFrame.

Every function takes ``store``: a :class:`~jupyter_session_agent.store.Store`, a data
directory, or None for the default one (``$JUPYTER_SESSION_AGENT_DIR``); each is also a query
you can copy and change (``docs/analytics.md``).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import UsageError
from ..core.settings import resolve_data_dir
from ..store import Store, shared


def store_of(store: Any = None):
    if isinstance(store, Store):
        return store
    return shared(resolve_data_dir(store))


def session_id_of(store, session_id: str | None) -> str:
    """A full session id from an id or prefix; None: the most recently updated root session."""
    if session_id:
        return store.session(session_id).id
    frame = store.sql(
        "SELECT session_id FROM session_summary WHERE parent_id IS NULL AND steps > 0 "
        "ORDER BY time_updated DESC LIMIT 1"
    )
    if frame.empty:
        raise UsageError("no session with LLM calls yet — run a %%agent cell first")
    return str(frame.session_id[0])


# --------------------------------------------------------------------------
# reports


def steps(store: Any = None, session_id: str | None = None):
    """The ``step`` view (one row per LLM call), oldest first; one session's when given."""
    store = store_of(store)
    if session_id is None:
        return store.sql("SELECT * FROM step ORDER BY id")
    return store.sql(
        "SELECT * FROM step WHERE session_id = $1 ORDER BY id", [session_id_of(store, session_id)]
    )


def context_per_step(store: Any = None, session_id: str | None = None):
    """Context size of every LLM call of a session, with where compactions happened.

    Columns: ``step`` (1, 2, …), ``id``, ``time``, ``model``, ``summary`` (the call
    wrote a compaction summary), ``context_tokens`` (what ``isOverflow`` compares:
    the reported total), ``prompt_tokens`` (input incl. cache), ``output_tokens``,
    ``cost``, and ``compaction``: the kinds of compaction (``prune``/``summary``)
    recorded since the previous step, or None. Default session: the most recent.
    """
    store = store_of(store)
    sid = session_id_of(store, session_id)
    return store.sql(
        """
        WITH s AS (SELECT row_number() OVER (ORDER BY id) step, id, time, model, summary, context_tokens,
                       prompt_tokens, output_tokens, cost, epoch_ms(time) ms,
                       lag(epoch_ms(time), 1, 0) OVER (ORDER BY id) prev_ms
                   FROM step WHERE session_id = $1)
        SELECT step, id, time, model, summary, context_tokens, prompt_tokens, output_tokens, cost,
            (SELECT string_agg(DISTINCT kind, ',' ORDER BY kind) FROM compaction_event c
             WHERE c.session_id = $1 AND c.time_created - coalesce(c.duration_ms, 0) > s.prev_ms
               AND c.time_created - coalesce(c.duration_ms, 0) <= s.ms) AS compaction
        FROM s ORDER BY step""",
        [sid],
    )


def compactions(store: Any = None, session_id: str | None = None):
    """The ``compaction_event`` rows (one session's when given), oldest first, with
    ``after_step``: how many LLM calls of the session had finished when it started
    (its own summary call comes after)."""
    store = store_of(store)
    where, params = "", None
    if session_id is not None:
        where, params = "WHERE c.session_id = $1", [session_id_of(store, session_id)]
    return store.sql(
        f"""
        SELECT c.*, (SELECT count(*) FROM step s WHERE s.session_id = c.session_id
                     AND epoch_ms(s.time) < c.time_created - coalesce(c.duration_ms, 0)) AS after_step
        FROM compaction_event c {where} ORDER BY c.time_created""",
        params,
    )


def cost_per_day(store: Any = None, days: int | None = None):
    """The ``daily_cost`` view (day × provider × model, title calls included), oldest day
    first; only the last ``days`` days when given."""
    store = store_of(store)
    where = f"WHERE day > current_date - INTERVAL {int(days)} DAY" if days else ""
    return store.sql(f"SELECT * FROM daily_cost {where} ORDER BY day, provider, model")


def cache_hit_ratio(store: Any = None, by: str = "model"):
    """Share of prompt tokens served from the provider's cache, per ``model``, ``day`` or ``session``.

    ``cache_hit_ratio = cache_read_tokens / prompt_tokens`` (prompt = input + cache
    reads + cache writes, the OTel convention); NULL where nothing was sent.
    """
    groups = {
        "model": "provider, model",
        "day": "CAST(time AS DATE) AS day",
        "session": "session_id",
    }
    if by not in groups:
        raise UsageError(f"cache_hit_ratio(by={by!r}) — by is 'model', 'day' or 'session'")
    return store_of(store).sql(f"""
        SELECT {groups[by]}, count(*) AS steps, sum(prompt_tokens)::BIGINT AS prompt_tokens,
            sum(cache_read_tokens)::BIGINT AS cache_read_tokens,
            sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
            sum(cache_read_tokens) / nullif(sum(prompt_tokens), 0) AS cache_hit_ratio
        FROM step GROUP BY ALL ORDER BY prompt_tokens DESC""")


def tool_failure_rates(store: Any = None):
    """Per tool: calls, completed, errors, interrupted, raised (completed, but the code raised),
    ``failure_rate`` (errors, interruptions and raised over finished calls), duration
    percentiles and pruned outputs; worst first."""
    return store_of(store).sql("""
        SELECT tool, count(*) AS calls, count(*) FILTER (WHERE status = 'completed') AS completed,
            count(*) FILTER (WHERE status = 'error') AS errors,
            count(*) FILTER (WHERE status = 'interrupted') AS interrupted,
            count(*) FILTER (WHERE error_class IS NOT NULL) AS raised,
            count(*) FILTER (WHERE failed)
                / nullif(count(*) FILTER (WHERE status IN ('completed', 'error', 'interrupted')), 0) AS failure_rate,
            quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms,
            count(*) FILTER (WHERE pruned) AS pruned
        FROM tool_call GROUP BY tool ORDER BY failure_rate DESC NULLS LAST, calls DESC""")


__all__ = [
    "cache_hit_ratio",
    "compactions",
    "context_per_step",
    "cost_per_day",
    "session_id_of",
    "steps",
    "store_of",
    "tool_failure_rates",
]
