"""What a history item is, for compaction: a compaction request, a summary, a message
the user wrote (and its text)."""

from __future__ import annotations

from ...core.messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    TextPart,
    UserMessage,
    WithParts,
)


def is_request(item: WithParts) -> bool:
    return isinstance(item.info, UserMessage) and any(
        isinstance(p, CompactionPart) for p in item.parts
    )


def is_real_user(item: WithParts) -> bool:
    """A user message the user wrote: not a compaction request, not only synthetic text."""
    if not isinstance(item.info, UserMessage) or is_request(item):
        return False
    return any(
        (isinstance(p, TextPart) and not p.synthetic and not p.ignored) or isinstance(p, FilePart)
        for p in item.parts
    )


def user_text(item: WithParts) -> str:
    return "\n\n".join(
        p.text for p in item.parts if isinstance(p, TextPart) and not p.synthetic and not p.ignored
    )


def is_summary(item: WithParts) -> bool:
    return isinstance(item.info, AssistantMessage) and bool(item.info.summary)
