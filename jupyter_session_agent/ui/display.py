"""Showing sessions in the cell: one MIME bundle, live-updated while a turn streams.

Every view is a bundle of three forms of the same transcript:

* ``application/vnd.jupyter.session-agent+json`` (:data:`MIME_TYPE`): the session
  info, its messages with their parts as OpenCode JSON (``WithParts.to_data()``),
  the budget report and a schema version. The JupyterLab extension in
  ``labextension/`` renders it (collapsible parts, tool status badges, the budget
  gauge, compaction markers, pruned outputs); it is saved in the notebook, so a
  transcript re-renders without a kernel.
* ``text/markdown``: the same, readable in any front end (and on GitHub).
* ``text/plain``: a short plain summary (what nbval compares).

Outputs stay bounded: any string in a part longer than :data:`MAX_FIELD_CHARS`
(text and reasoning: :data:`MAX_TEXT_CHARS`) is cut, and the part gets a
``truncated`` object mapping the field's dotted path to its full length; a
transcript keeps the newest :data:`MAX_MESSAGES` messages and counts the rest.

The live view that re-renders it while a turn streams is :mod:`.live`.

The Markdown and text forms of parts and messages are ``render/``'s (the exports use the
same); this module bounds the JSON form and draws the budget gauge.

One module: the bundle's three forms and the views that give it are one contract with the
JupyterLab renderer (the schema version above).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.messages import (
    Part,
    RetryPart,
    ToolPart,
    WithParts,
)
from ..core.redact import before_cut, clean, clean_value, secret_env_values
from ..render import compact, markdown, plain
from ..render import words as W

MIME_TYPE = "application/vnd.jupyter.session-agent+json"
SCHEMA_VERSION = 1
MAX_FIELD_CHARS = (
    W.MAX_FIELD_CHARS
)  # per string in a part (tool input/output/error, metadata, urls)
MAX_TEXT_CHARS = W.MAX_TEXT_CHARS  # per text / reasoning part
MAX_MESSAGES = 500  # per transcript; older ones are counted, not sent
# step points a bundle's budget carries, the newest (the gauge's sparkline draws about this
# many); the others are counted in ``steps_omitted``, so a saved cell stays small however long
# the session
BUDGET_STEPS = 30


class Markdown:
    """A display object with Markdown and plain-text forms (nbval compares text)."""

    def __init__(self, text: str):
        self.text = clean(text)  # shown in the cell: redacted and encodable

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


# --------------------------------------------------------------------------
# the JSON form


def part_data(part: Part) -> dict[str, Any]:
    """``part.to_data()`` with long strings cut; ``truncated`` maps each cut field to its length."""
    data = part.to_data()
    truncated: dict[str, int] = {}
    for key, value in list(data.items()):
        limit = MAX_TEXT_CHARS if key == "text" else MAX_FIELD_CHARS
        data[key] = _bound(value, limit, key, truncated)
    if truncated:
        data["truncated"] = truncated
    return data


def _bound(value: Any, limit: int, path: str, truncated: dict[str, int], depth: int = 0) -> Any:
    if isinstance(value, str):
        value = before_cut(value, limit)
        if len(value) > limit:
            truncated[path] = len(value)
            return value[:limit]
        return value
    if depth > 8:
        return value
    if isinstance(value, dict):
        return {
            k: _bound(v, MAX_FIELD_CHARS, f"{path}.{k}", truncated, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _bound(v, MAX_FIELD_CHARS, f"{path}.{i}", truncated, depth + 1)
            for i, v in enumerate(value)
        ]
    return value


def message_data(item: WithParts, unsaved: frozenset = frozenset()) -> dict[str, Any]:
    """A message and its bounded parts as JSON, cleaned (made once per message value)."""
    flag = W.is_unsaved(item, unsaved)

    def make() -> dict[str, Any]:
        data: dict[str, Any] = {
            "info": item.info.to_data(),
            "parts": [part_data(p) for p in item.parts],
        }
        if flag and not data["info"].get("error"):  # shown, never stored
            data["info"]["error"] = {"name": W.NOT_SAVED, "data": {"message": W.NOT_SAVED_WHY}}
        return clean_value(data)

    return _MEMO.get("json", flag, (item.info, *item.parts), make)


def budget_data(report: Any, max_steps: int = BUDGET_STEPS) -> dict[str, Any]:
    """A budget report as JSON, cleaned, with its newest ``max_steps`` step points (the
    fields are numbers and flags but for the model's names and the steps' ids)."""
    data = {
        k: clean(v) if isinstance(v, str) else v for k, v in report.to_data(max_steps=0).items()
    }
    steps = report.steps[-max_steps:] if max_steps else ()
    data["steps"] = [_MEMO.get("step", False, (s,), lambda s=s: _step_data(s)) for s in steps]
    data["steps_omitted"] = len(report.steps) - len(steps)
    return data


def _step_data(step: Any) -> dict[str, Any]:
    return {k: clean(v) if isinstance(v, str) else v for k, v in step.to_data().items()}


class _Memo:
    """Cleaned forms of frozen values, each made once: a message's JSON, Markdown and line, a
    step point's JSON. Keyed by the values themselves (a message by its info and its parts, so
    the one that streams is the only one made again), kept while they are held here; forgotten
    when a new secret becomes known (what was clean may hold it) and beyond ``size`` entries."""

    def __init__(self, size: int = 4_096) -> None:
        self._size = size
        self._entries: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()
        self._secrets: Any = None
        self._lock = threading.Lock()  # the title-following thread renders too

    def get(self, form: str, flag: bool, values: tuple, make: Any) -> Any:
        key = (form, flag, *map(id, values))  # the values are held below: no id is reused
        with self._lock:
            secrets = secret_env_values()
            if secrets is not self._secrets:
                self._entries.clear()
                self._secrets = secrets
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[1]
        made = make()
        with self._lock:
            self._entries[key] = (values, made)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return made


_MEMO = _Memo()


def transcript_data(
    history: Sequence[WithParts],
    *,
    session: Any = None,
    report: Any = None,
    live: bool = False,
    view: str = "transcript",
    max_messages: int = MAX_MESSAGES,
    omitted: int = 0,
    unsaved: frozenset = frozenset(),
    detail: str = "full",
    progress: dict[str, Any] | None = None,
    asking: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The :data:`MIME_TYPE` payload (schema :data:`SCHEMA_VERSION`), cleaned.

    ``session`` is a ``messages.Session`` (or ``None``), ``report`` a
    ``report.BudgetReport`` (or ``None``); ``omitted`` counts messages before
    ``history`` that the caller left out (the live view shows one turn).

    ``detail``: ``"full"`` (every part inline, the gauge open) or ``"compact"`` (the answer,
    one line per tool call, a footer folding the telemetry); a compact payload also carries
    ``footer`` (its line, and why the gauge opens by itself or ``None``). ``tools`` maps each
    tool part's id to the input summary, the code's language, the failure line, the decision.
    ``progress`` (a running turn: ``elapsed`` ms, what it ``waiting`` for, a ``detail``) and
    ``asking`` (the call waiting for approval) are set while the turn runs.
    """
    shown = list(history)
    if max_messages and len(shown) > max_messages:
        omitted += len(shown) - max_messages
        shown = shown[-max_messages:]
    data = {
        "version": SCHEMA_VERSION,
        "view": view,
        "live": live,
        "session": (
            _MEMO.get("session", False, (session,), lambda: clean_value(session.to_data()))
            if session is not None
            else None
        ),
        "messages": [message_data(m, unsaved) for m in shown],
        "omitted": omitted,
        "budget": budget_data(report) if report is not None else None,
        "detail": detail,
    }
    tools = {
        p.id: _MEMO.get("tool", False, (p,), lambda p=p: clean_value(tool_data(p)))
        for m in shown
        for p in m.parts
        if isinstance(p, ToolPart)
    }
    if tools:
        data["tools"] = tools
    if detail == "compact":
        data["footer"] = {
            "text": clean(compact.footer_line(shown, report)),
            "open": compact.gauge_opens(shown, report),
        }
    if progress is not None:
        data["progress"] = clean_value(progress)
    if asking is not None:
        data["asking"] = clean_value(asking)
    return data


def tool_data(part: ToolPart) -> dict[str, Any]:
    """What the compact view shows of a tool call besides its part (``render/compact.py``)."""
    return {
        "summary": compact.input_summary(part),
        "language": compact.code_language(part),
        "code": compact.input_code(part),
        "problem": compact.tool_problem(part),
        "decision": compact.tool_decision(part),
    }


# --------------------------------------------------------------------------
# the Markdown and text forms: render/ (the exports use the same renderers)

render_part = markdown.part  # one part as Markdown


def markdown_transcript(
    history: Iterable[WithParts],
    report: Any = None,
    omitted: int = 0,
    unsaved: frozenset = frozenset(),
) -> str:
    """A history as Markdown, message by message, with the budget at the end; cleaned."""
    text = markdown.messages(history, omitted=omitted, unsaved=unsaved, render=_markdown_message)
    if report is not None:
        text += "\n\n---\n\n" + clean(budget_markdown(report))
    return text


def _markdown_message(item: WithParts, **kw: Any) -> str:
    if _ticking(item):
        return clean(markdown.message(item, **kw))
    return _MEMO.get(
        f"md{kw}", False, (item.info, *item.parts), lambda: clean(markdown.message(item, **kw))
    )


def _compact_message(item: WithParts, unsaved: frozenset) -> tuple[str, tuple[str, ...]]:
    def make() -> tuple[str, tuple[str, ...]]:
        text, telemetry = compact.message_markdown(item, unsaved)
        return clean(text), tuple(clean(line) for line in telemetry)

    if _ticking(item):
        return make()
    flag = W.is_unsaved(item, unsaved)
    return _MEMO.get("compact", flag, (item.info, *item.parts), make)


def _plain_message(item: WithParts, **kw: Any) -> str:
    if _ticking(item):
        return clean(plain.message(item, **kw))
    return _MEMO.get(
        f"txt{kw}", False, (item.info, *item.parts), lambda: clean(plain.message(item, **kw))
    )


def _ticking(item: WithParts) -> bool:
    """A message whose words change with the clock (a retry counting down): drawn each time."""
    return any(isinstance(p, RetryPart) for p in item.parts)


def transcript(history: Iterable[WithParts]) -> str:
    """A stored history as Markdown (no budget)."""
    return markdown_transcript(history)


def _bar(fraction: float, width: int = 24) -> str:
    filled = max(0, min(width, int(fraction * width + 0.5)))
    return "█" * filled + "░" * (width - filled)


def budget_lines(report: Any) -> list[str]:
    """The budget as a few plain lines (the Markdown and text forms share them)."""
    r = report
    if r.usable:
        ctx = (
            f"Context {r.used:,} / {r.usable:,} usable ({r.fraction:.0%}) [{_bar(r.fraction)}]"
            f"{' (estimated)' if r.used_estimated else ''}"
        )
        window = f"window {r.context:,}" if r.context else "window unknown"
        if r.input_limit:
            window += f", input limit {r.input_limit:,}"
        ctx += f" · reserved {r.reserved:,} · max output {r.max_output:,} · {window}"
    else:
        ctx = f"Context {r.used:,} tokens · window unknown for {r.model} (set model_overrides)"
    if r.auto_compact and r.usable:
        compaction = f"compaction at {r.compaction_at:,} ({max(0, r.headroom):,} left)"
        if r.overflow:
            compaction = f"compaction due now ({r.used:,} ≥ {r.compaction_at:,})"
    else:
        compaction = "automatic compaction off"
    if r.prune:
        prune = (
            f"prune above {r.prune_trigger:,} tool-output tokens (now {r.tool_output_tokens:,}"
            f"{f', {r.prunable_tokens:,} prunable' if r.prunable_tokens else ''})"
        )
        if r.prune_due:
            prune += " — due"
    else:
        prune = "pruning off"
    done = (
        f" · {r.pruned_parts} output{'' if r.pruned_parts == 1 else 's'} pruned ({r.pruned_tokens:,} tokens)"
        if r.pruned_parts
        else ""
    )
    history = (
        f"{len(r.steps)} steps · {r.turns} turns · {r.compactions} compactions"
        f" · cost ${r.cost:.4f} · model {r.model}"
    )
    lines = [ctx, f"{compaction} · {prune}{done}", history]
    if r.steps:
        lines.append(f"per step: {r.sparkline()}")
    return lines


def budget_markdown(report: Any) -> str:
    ctx, triggers, history, *spark = budget_lines(report)
    out = [f"**📊 {ctx}**", triggers, history]
    if spark:
        out.append(f"`{spark[0]}`")
    return "  \n".join(out)


def plain_transcript(
    history: Sequence[WithParts],
    report: Any = None,
    session: Any = None,
    omitted: int = 0,
    limit: int = 4_000,
    unsaved: frozenset = frozenset(),
) -> str:
    """A short plain-text form: one line per message, then the budget; cleaned."""
    lines = plain.lines(
        history, session=session, omitted=omitted, unsaved=unsaved, render=_plain_message
    )
    if session is not None:
        lines[0] = clean(lines[0])  # the title
    if report is not None:
        lines.extend(clean(line) for line in budget_lines(report))
    text = "\n".join(lines) or "(empty session)"
    return text if len(text) <= limit else text[:limit] + " …"


# --------------------------------------------------------------------------
# display objects


class TranscriptView:
    """A session (or a part of one) with its budget, as the three-form bundle."""

    def __init__(
        self,
        history: Sequence[WithParts],
        *,
        session: Any = None,
        report: Any = None,
        live: bool = False,
        max_messages: int = MAX_MESSAGES,
        omitted: int = 0,
        unsaved: frozenset = frozenset(),
        detail: str = "full",
        progress: dict[str, Any] | None = None,
        asking: dict[str, Any] | None = None,
    ):
        self.unsaved = unsaved  # ids whose latest state is not saved yet (store.unsaved())
        history = list(history)
        if max_messages and len(history) > max_messages:
            omitted += len(history) - max_messages
            history = history[-max_messages:]
        self.history, self.session, self.report = history, session, report
        self.live, self.omitted = live, omitted
        self.detail, self.progress, self.asking = detail, progress, asking
        # a notebook tool's request the JupyterLab extension answers (tools/frontend.py)
        self.frontend: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        data = self._data()
        if self.frontend is not None:
            data["frontend"] = clean_value(self.frontend)
        return data

    def _data(self) -> dict[str, Any]:
        return transcript_data(
            self.history,
            session=self.session,
            report=self.report,
            live=self.live,
            omitted=self.omitted,
            max_messages=0,
            unsaved=self.unsaved,
            detail=self.detail,
            progress=self.progress,
            asking=self.asking,
        )

    @property
    def markdown(self) -> str:
        if self.detail == "compact":  # each message cleaned once per value, the rest each time
            return compact.turn(
                self.history,
                self.report,
                unsaved=self.unsaved,
                progress=self.progress,
                asking=self.asking,
                budget=budget_markdown(self.report) if self.report is not None else "",
                render=_compact_message,
                clean=clean,
            )
        return markdown_transcript(self.history, self.report, self.omitted, self.unsaved)

    @property
    def text(self) -> str:
        return plain_transcript(
            self.history, self.report, self.session, self.omitted, unsaved=self.unsaved
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        # every form, live or not: redacted and encodable, whatever the history in memory holds
        # (each message cleaned once per value: a turn re-renders only what changed)
        return {MIME_TYPE: self.data, "text/markdown": self.markdown, "text/plain": self.text}

    def __repr__(self) -> str:
        return self.text


class BudgetView:
    """The budget gauge alone (``%agent budget``)."""

    def __init__(self, report: Any, session: Any = None):
        self.report, self.session = report, session

    @property
    def data(self) -> dict[str, Any]:
        return transcript_data([], session=self.session, report=self.report, view="budget")

    @property
    def markdown(self) -> str:
        return budget_markdown(self.report)

    @property
    def text(self) -> str:
        return "\n".join(budget_lines(self.report))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        # every form, live or not: redacted and encodable, whatever the history in memory holds
        return clean_value(
            {MIME_TYPE: self.data, "text/markdown": self.markdown, "text/plain": self.text}
        )

    def __repr__(self) -> str:
        return clean(self.text)


class WidgetFallback:
    """What a widget's cell shows where the widget itself cannot be (a reopened notebook: the
    widget's state went with its kernel, and JupyterLab would say "Error displaying widget:
    model not found"). Displayed right after the widget: the JupyterLab renderer keeps it hidden
    while the widget lives and shows it, in the widget's place, when the widget is gone; other
    front ends show the one-line ``text/plain``."""

    def __init__(self, title: str, text: str, note: str):
        self.title, self.text, self.note = title, text, note

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        data = {
            "version": SCHEMA_VERSION,
            "view": "widget-fallback",
            "live": False,
            "session": None,
            "messages": [],
            "omitted": 0,
            "budget": None,
            "fallback": {"title": self.title, "text": self.text, "note": self.note},
        }
        return clean_value({MIME_TYPE: data, "text/plain": self.note})

    def __repr__(self) -> str:
        return clean(self.note)
