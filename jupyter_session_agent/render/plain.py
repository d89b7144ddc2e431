"""Parts and messages as plain text: the short ``text/plain`` form (one line per message,
what nbval compares and a terminal shows).

:data:`PART` holds one rendering per part class (:func:`part` looks it up). A part gives a
few words in brackets, a text its first characters; the step bookkeeping (step start and
finish, reasoning, snapshots) gives ``""`` here: the line says what happened, the Markdown
form says how.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.messages import (
    AgentPart,
    CompactionPart,
    FilePart,
    PatchPart,
    ReasoningPart,
    RetryPart,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    UnknownPart,
    UserMessage,
    WithParts,
    tool_error_class,
    tool_status,
)
from . import words as W
from .forms import Form

TEXT_CHARS = 200  # of a text part, on its message's line


def _text(part: TextPart) -> str:
    if W.attachment_of(part) or part.ignored or not part.text:
        return ""  # an attachment's text: the [file …] chip stands for it
    return " ".join(part.text.split())[:TEXT_CHARS]


def _tool(part: ToolPart) -> str:
    pruned = (
        " (pruned)" if isinstance(part.state, ToolCompleted) and part.state.time_compacted else ""
    )
    failed = f" {tool_error_class(part)}" if tool_error_class(part) else ""
    return f"[{part.tool} {tool_status(part)}{failed}{pruned}]"


def _nothing(part: object) -> str:
    return ""


def _patch(part: PatchPart) -> str:
    return f"[{len(part.files)} file(s) changed]" if part.files else ""


PART = Form(
    "text",
    {
        TextPart: _text,
        ReasoningPart: _nothing,
        FilePart: lambda p: f"[file {p.filename or p.mime}]",
        ToolPart: _tool,
        StepStartPart: _nothing,
        StepFinishPart: _nothing,
        SnapshotPart: _nothing,
        PatchPart: _patch,
        AgentPart: lambda p: f"[@{p.name}]",
        CompactionPart: lambda p: "[compaction]",
        SubtaskPart: lambda p: f"[subtask {p.agent}]",
        RetryPart: lambda p: f"[{W.retry_label(p)}]",
        UnknownPart: lambda p: f"[unknown {p.stored_type} part]",
    },
    lambda p: f"[{getattr(p, 'type', '') or type(p).__name__} part]",
)


def part(p: object) -> str:
    """One part in a few words ("" for what the line leaves out)."""
    return PART(p)


def role(item: WithParts) -> str:
    info = item.info
    if isinstance(info, UserMessage):
        return "compaction request" if W.is_compaction_request(item) else "user"
    return "summary" if info.summary else "agent"


def message(item: WithParts, *, unsaved: bool = False) -> str:
    """``agent: Hello [python completed]``: the role, then its parts in a few words."""
    who = role(item) + (" (not saved)" if unsaved else "")
    bits = [b for b in (part(p) for p in item.parts) if b]
    return f"{who}: {' '.join(bits)}".rstrip()


def lines(
    history: Sequence[WithParts],
    *,
    session: object = None,
    omitted: int = 0,
    unsaved: frozenset = frozenset(),
    render: Callable[..., str] | None = None,
) -> list[str]:
    """The session's title, how many messages were left out, one line per message (drawn by
    ``render``, default :func:`message`)."""
    draw = render or message
    out = []
    if session is not None:
        out.append(f"Session: {getattr(session, 'title', '')}")
    if omitted:
        out.append(f"({omitted} earlier messages not shown)")
    out += [draw(item, unsaved=W.is_unsaved(item, unsaved)) for item in history]
    return out
