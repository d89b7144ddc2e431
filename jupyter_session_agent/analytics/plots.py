"""The plots: each draws the DataFrame of one report of :mod:`.reports` (``plot_context``
draws ``context_per_step``) as a matplotlib figure, which renders as PNG in a notebook with
or without ``%matplotlib inline``. Nothing here displays anything: the ``%agent plot …``
magics do that.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from .reports import (
    cache_hit_ratio,
    compactions,
    context_per_step,
    cost_per_day,
    session_id_of,
    store_of,
    tool_failure_rates,
)

if TYPE_CHECKING:  # matplotlib loads with the first plot
    from matplotlib.typing import RcKeyType

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
    store = store_of(store)
    sid = session_id_of(store, session_id)
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


__all__ = ["plot_cache", "plot_context", "plot_cost", "plot_tools"]
