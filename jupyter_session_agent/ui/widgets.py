"""Interactive views built from stock ipywidgets (no extra front-end code).

* :class:`BudgetGauge` — the context gauge (a progress bar from 0 to ``usable``,
  coloured as it fills), the prune / compaction triggers, a per-step sparkline
  and the cost.
* :class:`SessionBrowser` — every stored session (title, turns, tokens, cost,
  compactions, last update, model; computed with SQL over the history) in a list
  with aligned columns; picking one shows its transcript with its budget (the MIME
  bundle of ``ui/display.py``, which the JupyterLab extension renders).

Widgets take clicks only while the kernel is idle, which is when a browser is
used; during a ``%%agent`` run the cell shows the live MIME view instead.
Importing this module imports ipywidgets: only ``%agent browse`` does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as W
from IPython.display import display

from ..analytics.sessions import SessionRow, session_rows
from ..core.chat import history_model
from ..core.settings import Settings
from ..loop.budget_report import BudgetReport, budget_report
from ..providers.registry import settings_model_info
from ..render import escape as X
from .display import TranscriptView, WidgetFallback, budget_lines

# The header and the rows share one monospace font and one left inset (the list's border plus
# each row's padding), so the columns line up; both clip at the cell's edge instead of
# scrolling sideways. Colours are JupyterLab's theme variables (light and dark).
_CSS = """<style>
.jsa-browser { max-width: 100%; overflow: hidden; }
.jsa-browser .jsa-head, .jsa-browser .jsa-list select {
  font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 18px;
}
.jsa-browser .jsa-list select { padding: 0; overflow-x: hidden; }
.jsa-browser .jsa-list select option { padding: 0 6px; }
.jsa-browser .jsa-head {
  padding: 0 6px; border: 1px solid transparent; white-space: pre; overflow: hidden;
  color: var(--jp-ui-font-color1); font-weight: 600;
}
.jsa-browser .jsa-head-box, .jsa-browser .jsa-list { margin-top: 0; margin-bottom: 0; }
.jsa-browser .jsa-shown { margin-top: 8px; }
</style>"""

TITLE_WIDTH = 36  # characters of a title in the list (the whole title is in the transcript)
MODEL_WIDTH = 28
LIST_ROWS = 10  # lines the list shows before it scrolls
COLUMNS = (
    ("title", "<"),
    ("turns", ">"),
    ("tokens", ">"),
    ("cost $", ">"),
    ("cmp", ">"),
    ("updated", "<"),
    ("model", "<"),
)


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def row_cells(row: SessionRow) -> tuple[str, ...]:
    """The cells of one session's line, in :data:`COLUMNS` order: the narrow, fixed-format
    numbers first after the title, the model (of any length) last."""
    updated = ""
    if row.time_updated:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.time_updated / 1000))
    return (
        _cut(row.title or row.id, TITLE_WIDTH),
        f"{row.turns:,}",
        f"{row.tokens:,}",
        f"{row.cost:.4f}",
        f"{row.compactions:,}",
        updated,
        _cut(row.model, MODEL_WIDTH),
    )


def table(rows: Sequence[SessionRow]) -> tuple[str, list[str]]:
    """The header line and one line per session; each column as wide as its widest cell."""
    cells = [row_cells(r) for r in rows]
    widths = [max([len(name)] + [len(c[i]) for c in cells]) for i, (name, _) in enumerate(COLUMNS)]

    def line(values: Sequence[str]) -> str:
        padded = (f"{v:{align}{w}}" for v, (_, align), w in zip(values, COLUMNS, widths))
        return "  ".join(padded).rstrip()

    return line([name for name, _ in COLUMNS]), [line(c) for c in cells]


def bar_style(report: BudgetReport) -> str:
    """``success`` below half the usable budget, ``warning`` below 85 %, then ``danger``."""
    if not report.usable:
        return "info"
    if report.overflow or report.fraction >= 0.85:
        return "danger"
    return "warning" if report.fraction >= 0.5 else "success"


class BudgetGauge(W.VBox):
    """The token budget of one session as widgets; :meth:`update` takes a new report."""

    def __init__(self, report: BudgetReport | None = None, **kwargs: Any):
        self.bar = W.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="context", layout=W.Layout(width="100%")
        )
        self.summary = W.HTML()
        self.triggers = W.HTML()
        self.history = W.HTML()
        self.report: BudgetReport | None = None
        super().__init__([self.bar, self.summary, self.triggers, self.history], **kwargs)
        if report is not None:
            self.update(report)

    def __repr__(self) -> str:
        return (
            "\n".join(budget_lines(self.report))
            if self.report is not None
            else "Budget gauge (no session)"
        )

    def update(self, report: BudgetReport) -> None:
        self.report = report
        self.bar.max = float(max(report.usable, report.used, 1))
        self.bar.value = float(report.used)
        self.bar.bar_style = bar_style(report)
        ctx, triggers, history, *spark = budget_lines(report)
        self.summary.value = f"<b>{X.html(ctx)}</b>"
        self.triggers.value = X.html(triggers)
        self.history.value = X.html(history) + (
            f"<br><code>{X.html(spark[0])}</code>" if spark else ""
        )


class SessionBrowser(W.VBox):
    """A list of sessions; selecting one shows its transcript, with its budget, below."""

    def __init__(
        self,
        store: Any,
        *,
        settings: Any = None,
        current: str | None = None,
        limit: int = 500,
        **kwargs: Any,
    ):
        self.store = store
        self.settings = settings or Settings(data_dir=store.data_dir)
        self.limit = limit
        self.rows: list[SessionRow] = []
        self.selected: str | None = None
        self.report: BudgetReport | None = None  # the budget of the session shown
        self.filter = W.Text(
            placeholder="filter: title, model or id",
            layout=W.Layout(flex="1 1 auto", max_width="420px"),
        )
        self.refresh_button = W.Button(
            description="Refresh", icon="refresh", layout=W.Layout(width="auto")
        )
        self.count = W.HTML(layout=W.Layout(flex="0 0 auto"))
        self.header = W.HTML(layout=W.Layout(width="auto", max_width="100%"))
        self.header.add_class("jsa-head-box")
        self.select = W.Select(options=[], rows=8, layout=W.Layout(width="auto", max_width="100%"))
        self.select.add_class("jsa-list")
        self.output = W.Output(layout=W.Layout(max_width="100%"))
        self.output.add_class("jsa-shown")
        self.filter.observe(lambda change: self._fill(), names="value")
        self.refresh_button.on_click(lambda button: self.refresh())
        self.select.observe(self._on_select, names="value")
        children = [
            W.HTML(_CSS),
            W.HBox([self.filter, self.refresh_button, self.count]),
            self.header,
            self.select,
            self.output,
        ]
        super().__init__(children, **kwargs)
        self.add_class("jsa-browser")
        self.refresh()
        if current and any(r.id == current for r in self.rows):
            self.select.value = current

    # data --------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the session list from the history."""
        self.rows = session_rows(self.store, self.limit)
        self._fill()

    def __repr__(self) -> str:
        # What a saved notebook shows where the widget's state was not saved.
        return (
            f"Session browser: {len(self.rows)} sessions"
            f"{f', showing {self.selected}' if self.selected else ''} — run %agent browse to use it"
        )

    def _ipython_display_(self) -> None:
        """The widget, then its static fallback (shown only where the widget cannot be)."""
        display(self._repr_mimebundle_(), raw=True)
        display(self.fallback())

    def fallback(self, rows: int = 50) -> WidgetFallback:
        """The session list as it is now, for a reopened notebook where the widget is gone."""
        head, lines = table(self.rows[:rows])
        more = len(self.rows) - rows
        text = "\n".join([head, *lines] + ([f"… and {more:,} more"] if more > 0 else []))
        note = f"{len(self.rows)} sessions when this cell ran — run %agent browse to pick one"
        return WidgetFallback("Sessions", text, note)

    def _fill(self) -> None:
        needle = self.filter.value.strip().lower()
        rows = [
            r for r in self.rows if not needle or needle in f"{r.title} {r.model} {r.id}".lower()
        ]
        keep = self.select.value
        head, lines = table(rows)
        self.header.value = f'<div class="jsa-head">{X.html(head)}</div>'
        self.select.options = list(zip(lines, [r.id for r in rows]))
        self.select.rows = max(3, min(LIST_ROWS, len(rows)))  # no empty band under a short list
        if keep in {r.id for r in rows}:
            self.select.value = keep
        self.count.value = f"{len(rows)} of {len(self.rows)} sessions"

    def _on_select(self, change: dict) -> None:
        if change.get("new"):
            self.show_session(change["new"])

    def load(self, session_id: str) -> tuple[Any, Sequence[Any], BudgetReport]:
        """(session info, history, budget report) of one session."""
        info = self.store.session(session_id)
        history = self.store.messages(info.id)
        model = settings_model_info(self.settings.model or history_model(history), self.settings)
        return info, history, budget_report(history, model, self.settings.compaction)

    def show_session(self, session_id: str) -> None:
        """Show one session's transcript below the list; its budget ends it (shown once)."""
        info, history, report = self.load(session_id)
        self.selected = info.id
        self.report = report
        self.output.outputs = ()
        self.output.append_display_data(TranscriptView(history, session=info, report=report))
