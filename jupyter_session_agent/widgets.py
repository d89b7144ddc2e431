"""Interactive views built from stock ipywidgets (no extra front-end code).

* :class:`BudgetGauge` — the context gauge (a progress bar from 0 to ``usable``,
  coloured as it fills), the prune / compaction triggers, a per-step sparkline
  and the cost.
* :class:`SessionBrowser` — every stored session (title, model, turns, tokens,
  cost, compactions, last update, computed with SQL over the history); picking
  one shows its budget and its transcript (the MIME bundle of ``display.py``).

Widgets take clicks only while the kernel is idle, which is when a browser is
used; during a ``%%agent`` run the cell shows the live MIME view instead.
Importing this module imports ipywidgets: only ``%agent browse`` does.
"""

from __future__ import annotations

import html
import time
from typing import Any, Sequence

import ipywidgets as W

from .display import TranscriptView, budget_lines
from .report import BudgetReport, SessionRow, budget_report, history_model, session_rows, settings_model_info

_CSS = """<style>
.jsa-browser select { font-family: var(--jp-code-font-family, monospace); font-size: 12px; }
.jsa-browser .jsa-head { font-family: var(--jp-code-font-family, monospace); font-size: 12px; white-space: pre; }
</style>"""


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
        self.bar = W.FloatProgress(value=0.0, min=0.0, max=1.0, description="context",
                                   layout=W.Layout(width="100%"))
        self.summary = W.HTML()
        self.triggers = W.HTML()
        self.history = W.HTML()
        self.report: BudgetReport | None = None
        super().__init__([self.bar, self.summary, self.triggers, self.history], **kwargs)
        if report is not None:
            self.update(report)

    def __repr__(self) -> str:
        return "\n".join(budget_lines(self.report)) if self.report is not None else "Budget gauge (no session)"

    def update(self, report: BudgetReport) -> None:
        self.report = report
        self.bar.max = float(max(report.usable, report.used, 1))
        self.bar.value = float(report.used)
        self.bar.bar_style = bar_style(report)
        ctx, triggers, history, *spark = budget_lines(report)
        self.summary.value = f"<b>{html.escape(ctx)}</b>"
        self.triggers.value = html.escape(triggers)
        self.history.value = html.escape(history) + (
            f"<br><code>{html.escape(spark[0])}</code>" if spark else "")


def row_label(row: SessionRow) -> str:
    """One fixed-width line per session for the list."""
    title = (row.title or row.id)[:38]
    model = row.model[:26]
    updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.time_updated / 1000)) if row.time_updated else ""
    return (f"{title:<38} {model:<26} {row.turns:>5} {row.tokens:>10,} {row.cost:>9.4f}"
            f" {row.compactions:>4}  {updated}")


HEADER = f"{'title':<38} {'model':<26} {'turns':>5} {'tokens':>10} {'cost $':>9} {'cmp':>4}  updated"


class SessionBrowser(W.VBox):
    """A list of sessions; selecting one shows its budget and transcript below."""

    def __init__(self, store: Any, *, settings: Any = None, current: str | None = None,
                 limit: int = 500, **kwargs: Any):
        from .settings import Settings

        self.store = store
        self.settings = settings or Settings(data_dir=store.data_dir)
        self.limit = limit
        self.rows: list[SessionRow] = []
        self.selected: str | None = None
        self.filter = W.Text(placeholder="filter: title, model or id", layout=W.Layout(width="50%"))
        self.refresh_button = W.Button(description="Refresh", icon="refresh", layout=W.Layout(width="auto"))
        self.count = W.HTML()
        self.header = W.HTML(f'<div class="jsa-head">  {html.escape(HEADER)}</div>')
        self.select = W.Select(options=[], rows=8, layout=W.Layout(width="100%"))
        self.gauge = BudgetGauge()
        self.output = W.Output()
        self.filter.observe(lambda change: self._fill(), names="value")
        self.refresh_button.on_click(lambda button: self.refresh())
        self.select.observe(self._on_select, names="value")
        children = [W.HTML(_CSS), W.HBox([self.filter, self.refresh_button, self.count]),
                    self.header, self.select, self.gauge, self.output]
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
        return (f"Session browser: {len(self.rows)} sessions"
                f"{f', showing {self.selected}' if self.selected else ''} — run %agent browse to use it")

    def _fill(self) -> None:
        needle = self.filter.value.strip().lower()
        rows = [r for r in self.rows
                if not needle or needle in f"{r.title} {r.model} {r.id}".lower()]
        keep = self.select.value
        self.select.options = [(row_label(r), r.id) for r in rows]
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
        """Show one session's budget and transcript below the list."""
        info, history, report = self.load(session_id)
        self.selected = info.id
        self.gauge.update(report)
        self.output.outputs = ()
        self.output.append_display_data(TranscriptView(history, session=info, report=report))
