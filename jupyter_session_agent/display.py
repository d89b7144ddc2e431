"""Showing a turn in the cell: a Markdown transcript, live-updated while it streams.

``LiveView`` is the processor's observer: it keeps the parts of the running
turn in order and re-renders them into one display (display-id updates),
throttled so a fast stream does not flood the front end. ``transcript`` renders
any stored history the same way, for ``%agent show``. Rich rendering (widgets,
the JupyterLab MIME renderer) builds on these functions later.
"""

from __future__ import annotations

import json
import time
from typing import Iterable

from .messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    Part,
    ReasoningPart,
    RetryPart,
    StepFinishPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
    replace,
)
from .processor import Observer

MIN_INTERVAL = 0.1  # seconds between live re-renders of a streaming part
OUTPUT_PREVIEW_LINES = 12
_STATUS_ICON = {"pending": "⏳", "running": "⚙️", "completed": "✅", "error": "❌"}


class Markdown:
    """A display object with Markdown and plain-text forms (nbval compares text)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


class LiveView(Observer):
    """Renders the running turn into one cell output, updating it in place."""

    def __init__(self, live: bool = True):
        self.live = live
        self.parts: dict[str, Part] = {}
        self.streams: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self._handle = None
        self._last = 0.0

    # Observer ---------------------------------------------------------------

    def on_message(self, message: AssistantMessage) -> None:
        self._render(force=True)

    def on_part(self, part: Part) -> None:
        self.parts[part.id] = part
        if isinstance(part, (TextPart, ReasoningPart)) and part.time_end:
            self.streams.pop(part.id, None)  # the stored text is final now
        self._render(force=not isinstance(part, (TextPart, ReasoningPart)))

    def on_delta(self, part: Part, delta: str) -> None:
        self.parts.setdefault(part.id, part)
        self.streams.setdefault(part.id, []).append(delta)
        self._render()

    def on_part_removed(self, part_id: str) -> None:
        self.parts.pop(part_id, None)
        self.streams.pop(part_id, None)

    def on_retry(self, attempt: int, delay: float, reason: str) -> None:
        self.notes.append(f"⟳ retry {attempt} in {delay:.1f} s — {reason}")
        self._render(force=True)

    # rendering --------------------------------------------------------------

    def markdown(self) -> str:
        chunks = []
        for part in self.parts.values():
            if part.id in self.streams and isinstance(part, (TextPart, ReasoningPart)):
                part = replace(part, text="".join(self.streams[part.id]))
            chunks.append(render_part(part))
        chunks.extend(self.notes)
        return "\n\n".join(c for c in chunks if c) or "…"

    def finish(self) -> None:
        """Final render; shows the transcript once when live updates were off."""
        self._render(force=True, final=True)

    def _render(self, force: bool = False, final: bool = False) -> None:
        if not self.live and not final:
            return
        now = time.monotonic()
        if not force and now - self._last < MIN_INTERVAL:
            return
        self._last = now
        from IPython.display import display

        obj = Markdown(self.markdown())
        if self._handle is None:
            self._handle = display(obj, display_id=True)
        else:
            self._handle.update(obj)


def render_part(part: Part) -> str:
    """One part as Markdown."""
    if isinstance(part, TextPart):
        return "" if part.ignored else part.text
    if isinstance(part, ReasoningPart):
        return f"<details><summary>reasoning</summary>\n\n{part.text}\n\n</details>" if part.text else ""
    if isinstance(part, ToolPart):
        return _render_tool(part)
    if isinstance(part, StepFinishPart):
        t = part.tokens
        est = " (estimated)" if t.estimated else ""
        return (
            f"<sub>step · {t.prompt:,} in / {t.output:,} out{est}"
            f"{f' / {t.reasoning:,} reasoning' if t.reasoning else ''} · ${part.cost:.4f} · {part.reason}</sub>"
        )
    if isinstance(part, RetryPart):
        return f"<sub>⟳ retry {part.attempt}: {part.error.get('data', {}).get('message', '')}</sub>"
    if isinstance(part, CompactionPart):
        return f"**— compaction requested ({'auto' if part.auto else 'manual'}) —**"
    if isinstance(part, FilePart):
        return f"📎 {part.filename or part.url} ({part.mime})"
    return ""


def _render_tool(part: ToolPart) -> str:
    state = part.state
    icon = _STATUS_ICON.get(state.status, "")
    status = "interrupted" if isinstance(state, ToolError) and state.interrupted else state.status
    args = json.dumps(state.input, ensure_ascii=False)
    head = f"{icon} **{part.tool}** `{status}` `{args[:200]}`"
    if isinstance(state, ToolCompleted):
        head += f" · {(state.time_end - state.time_start) / 1000:.2f} s"
        if state.time_compacted:
            return head + "\n\n*(output pruned)*"
        return head + "\n\n" + _code_block(state.output)
    if isinstance(state, ToolError):
        return head + "\n\n" + _code_block(state.error)
    return head


def _code_block(text: str) -> str:
    lines = text.splitlines()
    if len(lines) > OUTPUT_PREVIEW_LINES:
        hidden = len(lines) - OUTPUT_PREVIEW_LINES
        lines = lines[:OUTPUT_PREVIEW_LINES] + [f"… {hidden} more lines"]
    body = "\n".join(lines).replace("```", "`\u200b``")
    return f"```\n{body}\n```"


def transcript(history: Iterable[WithParts]) -> str:
    """A stored history as Markdown, message by message."""
    out = []
    for item in history:
        info = item.info
        if isinstance(info, UserMessage):
            texts = [render_part(p) for p in item.parts]
            out.append("**You:** " + "\n\n".join(t for t in texts if t))
        else:
            label = "summary" if info.summary else f"{info.provider_id}/{info.model_id}"
            body = "\n\n".join(t for t in (render_part(p) for p in item.parts) if t)
            err = f"\n\n❗ {info.error['name']}: {info.error.get('data', {}).get('message', '')}" if info.error else ""
            out.append(f"**Agent** <sub>({label})</sub>\n\n{body}{err}")
    return "\n\n---\n\n".join(out) or "*(empty session)*"
