"""Ready-made reports and plots over the history (``docs/analytics.md``).

One module: each plot draws the DataFrame of one report here (``plot_context`` draws
``context_per_step``), all short SQL over the same views; apart, a query and the figure that
reads its columns would drift.

Reports return pandas DataFrames; plots return matplotlib figures (they
render as PNG in a notebook, with or without ``%matplotlib inline``). Nothing
here displays anything: the ``%agent plot …`` magics do that. Every function
takes ``store``: a :class:`~jupyter_session_agent.store.Store`, a data
directory, or None for the default one (``$JUPYTER_SESSION_AGENT_DIR``).

All of it is SQL over the views ``step``, ``tool_call``, ``compaction_event``,
``session_summary`` and ``daily_cost``, so each report is also a query you can
copy and change.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.settings import resolve_data_dir
from ..store import Store, shared
from ..store import open_export as open_store_export

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    "steps",
    "context_per_step",
    "compactions",
    "cost_per_day",
    "cache_hit_ratio",
    "tool_failure_rates",
    "plot_context",
    "plot_cost",
    "plot_cache",
    "plot_tools",
    "export_parquet",
    "export_duckdb",
    "open_export",
]


def _store(store: Any = None):
    if isinstance(store, Store):
        return store
    return shared(resolve_data_dir(store))


def _session_id(store, session_id: str | None) -> str:
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
    store = _store(store)
    if session_id is None:
        return store.sql("SELECT * FROM step ORDER BY id")
    return store.sql(
        "SELECT * FROM step WHERE session_id = $1 ORDER BY id", [_session_id(store, session_id)]
    )


def context_per_step(store: Any = None, session_id: str | None = None):
    """Context size of every LLM call of a session, with where compactions happened.

    Columns: ``step`` (1, 2, …), ``id``, ``time``, ``model``, ``summary`` (the call
    wrote a compaction summary), ``context_tokens`` (what ``isOverflow`` compares:
    the reported total), ``prompt_tokens`` (input incl. cache), ``output_tokens``,
    ``cost``, and ``compaction``: the kinds of compaction (``prune``/``summary``)
    recorded since the previous step, or None. Default session: the most recent.
    """
    store = _store(store)
    sid = _session_id(store, session_id)
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
    store = _store(store)
    where, params = "", None
    if session_id is not None:
        where, params = "WHERE c.session_id = $1", [_session_id(store, session_id)]
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
    store = _store(store)
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
    return _store(store).sql(f"""
        SELECT {groups[by]}, count(*) AS steps, sum(prompt_tokens)::BIGINT AS prompt_tokens,
            sum(cache_read_tokens)::BIGINT AS cache_read_tokens,
            sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
            sum(cache_read_tokens) / nullif(sum(prompt_tokens), 0) AS cache_hit_ratio
        FROM step GROUP BY ALL ORDER BY prompt_tokens DESC""")


def tool_failure_rates(store: Any = None):
    """Per tool: calls, completed, errors, interrupted, raised (completed, but the code raised),
    ``failure_rate`` (errors, interruptions and raised over finished calls), duration
    percentiles and pruned outputs; worst first."""
    return _store(store).sql("""
        SELECT tool, count(*) AS calls, count(*) FILTER (WHERE status = 'completed') AS completed,
            count(*) FILTER (WHERE status = 'error') AS errors,
            count(*) FILTER (WHERE status = 'interrupted') AS interrupted,
            count(*) FILTER (WHERE error_class IS NOT NULL) AS raised,
            count(*) FILTER (WHERE failed)
                / nullif(count(*) FILTER (WHERE status IN ('completed', 'error', 'interrupted')), 0) AS failure_rate,
            quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms,
            count(*) FILTER (WHERE pruned) AS pruned
        FROM tool_call GROUP BY tool ORDER BY failure_rate DESC NULLS LAST, calls DESC""")


# --------------------------------------------------------------------------
# plots

_FIGURE: Any = None


def _figure(width: float = 8.0, height: float = 3.6):
    """A matplotlib Figure that renders itself as PNG in IPython (no pyplot, no global state)."""
    global _FIGURE
    if _FIGURE is None:
        from matplotlib.figure import Figure

        class AnalyticsFigure(Figure):
            def _repr_png_(self) -> bytes:
                buffer = io.BytesIO()
                # transparent: the notebook's own background shows through (no white panel
                # in a dark theme); text, ticks and frame are a grey both themes read
                self.savefig(buffer, format="png", dpi=100, bbox_inches="tight", transparent=True)
                return buffer.getvalue()

        _FIGURE = AnalyticsFigure
    from matplotlib import rc_context

    with rc_context(THEME):
        return _FIGURE(figsize=(width, height), layout="constrained")


# the plots' colours: a mid grey for text, ticks, frame and grid that reads on JupyterLab's
# light and dark themes alike, on a transparent background
INK = "#8a8a8a"
THEME: dict[RcKeyType, Any] = {
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": INK,
    "axes.titlecolor": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "grid.color": INK,
    "axes.facecolor": "none",
    "figure.facecolor": "none",
    "legend.labelcolor": INK,
}


def _axes(fig):
    """The figure's one axes, in the plots' colours (they are read when the axes is made)."""
    from matplotlib import rc_context

    with rc_context(THEME):
        return fig.add_subplot()


def _short(text: str, limit: int = 48) -> str:
    """``text`` cut at a word to fit a plot's title (``…`` when cut)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:-") + "…"


def _empty(fig, ax, text: str):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=INK)
    ax.set_axis_off()
    return fig


def plot_context(store: Any = None, session_id: str | None = None):
    """Context tokens per LLM call of a session; compactions as vertical lines
    (summary: solid, prune: dotted) and summary calls as squares."""
    store = _store(store)
    sid = _session_id(store, session_id)
    frame = context_per_step(store, sid)
    title = store.session(sid).title
    fig = _figure()
    ax = _axes(fig)
    if frame.empty:
        return _empty(fig, ax, "no LLM calls in this session")
    ax.plot(
        frame.step,
        frame.context_tokens,
        marker="o",
        markersize=3,
        linewidth=1.2,
        label="context tokens",
    )
    summary = frame[frame.summary]
    if not summary.empty:
        ax.scatter(
            summary.step,
            summary.context_tokens,
            marker="s",
            s=40,
            color="tab:purple",
            zorder=3,
            label="summary call",
        )
    kinds = set()
    for event in compactions(
        store, sid
    ).itertuples():  # between the calls before and after it started
        summary_kind = event.kind == "summary"
        kinds.add("compaction" if summary_kind else "prune")
        ax.axvline(
            event.after_step + 0.5,
            color="tab:red" if summary_kind else "0.5",
            linestyle="-" if summary_kind else ":",
            linewidth=1,
            alpha=1 if event.outcome == "ok" else 0.4,
        )
    if "compaction" in kinds:  # the legend names only what is drawn
        ax.plot([], [], color="tab:red", linewidth=1, label="compaction")
    if "prune" in kinds:
        ax.plot([], [], color="0.5", linestyle=":", linewidth=1, label="prune")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # calls are counted: whole numbers
    ax.set_xlabel("LLM call")
    ax.set_ylabel("tokens")
    ax.set_title(f"Context per step — {_short(title)}", loc="left", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(_thousands())
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_cost(store: Any = None, days: int | None = None):
    """Cost per day, stacked by model (title calls included)."""
    frame = cost_per_day(store, days)
    fig = _figure()
    ax = _axes(fig)
    if frame.empty:
        return _empty(fig, ax, "no LLM calls yet")
    if not (frame.cost.fillna(0) > 0).any():  # a free (local) model: nothing to stack
        models = sorted(set(frame.provider.fillna("?") + "/" + frame.model.fillna("?")))
        return _empty(fig, ax, f"no cost: every call was free ({', '.join(models)[:80]})")
    frame["label"] = frame.provider.fillna("?") + "/" + frame.model.fillna("?")
    table = frame.pivot_table(
        index="day", columns="label", values="cost", aggfunc="sum", fill_value=0.0
    )
    bottom = None
    labels = [d.strftime("%m-%d") for d in table.index]
    for column in table.columns:
        ax.bar(labels, table[column], bottom=bottom, label=column)
        bottom = table[column] if bottom is None else bottom + table[column]
    ax.set_ylabel("USD")
    ax.set_title("Cost per day by model", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_cache(store: Any = None, by: str = "model"):
    """Cache hit ratio (cached share of prompt tokens) per model, day or session."""
    frame = cache_hit_ratio(store, by).dropna(subset=["cache_hit_ratio"])
    fig = _figure()
    ax = _axes(fig)
    if frame.empty:
        return _empty(fig, ax, "no prompt tokens recorded yet")
    if by == "model":
        labels = list(frame.provider.fillna("?") + "/" + frame.model.fillna("?"))
    elif by == "day":
        labels = [str(d) for d in frame.day]
    else:
        labels = [str(s)[:12] for s in frame.session_id]
    bars = ax.barh(labels, frame.cache_hit_ratio, color="tab:green")
    for bar, ratio, prompt in zip(bars, frame.cache_hit_ratio, frame.prompt_tokens):
        ax.text(
            bar.get_width() + 0.01,
            bar.get_y() + bar.get_height() / 2,
            f"{ratio:.0%} of {prompt:,} tokens",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, 1.15)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_percent())
    ax.set_title(f"Cache hit ratio by {by}", loc="left", fontsize=10)
    return fig


def plot_tools(store: Any = None):
    """Failure rate per tool (errors, interruptions, code that raised), with call counts."""
    frame = tool_failure_rates(store)
    fig = _figure(height=max(2.0, 0.45 * len(frame) + 1.2))
    ax = _axes(fig)
    if frame.empty:
        return _empty(fig, ax, "no tool calls yet")
    finished = (frame.completed + frame.errors + frame.interrupted).clip(lower=1)
    ax.barh(frame.tool, frame.errors / finished, color="tab:red", label="error")
    ax.barh(
        frame.tool,
        frame.interrupted / finished,
        left=frame.errors / finished,
        color="tab:orange",
        label="interrupted",
    )
    ax.barh(
        frame.tool,
        frame.raised / finished,
        left=(frame.errors + frame.interrupted) / finished,
        color="tab:purple",
        label="code raised",
    )
    for y, (rate, calls) in enumerate(zip(frame.failure_rate.fillna(0), frame.calls)):
        ax.text(rate + 0.01, y, f"{rate:.0%} of {calls} calls", va="center", fontsize=8)
    ax.set_xlim(0, 1.2)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_percent())
    ax.set_title("Tool failure rate", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    return fig


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def _percent():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0)


# --------------------------------------------------------------------------
# export


def export_parquet(
    directory: str | os.PathLike, store: Any = None, *, user: str | None = None
) -> dict[str, int]:
    """Write the history as Hive-partitioned Parquet (see :meth:`Store.export_parquet`)."""
    return _store(store).export_parquet(directory, user=user)


def export_duckdb(path: str | os.PathLike, store: Any = None) -> dict[str, int]:
    """Write the history and its views into a DuckDB database file (see :meth:`Store.export_duckdb`)."""
    return _store(store).export_duckdb(path)


def open_export(directory: str | os.PathLike):
    """A DuckDB connection with every view defined over an export directory (all users' files)."""
    return open_store_export(directory)
