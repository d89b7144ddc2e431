"""The summary input: the head of the history as a text transcript, tool
outputs cut at ``TOOL_OUTPUT_MAX_CHARS`` (3× fewer tokens than the raw history in
CompactBench). (Named ``transcribe`` so the module does not shadow :func:`transcript`.)"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ...core.chat import COMPACTION_QUESTION, PRUNED_OUTPUT, attached_placeholder
from ...core.compaction_config import TOOL_OUTPUT_MAX_CHARS
from ...core.messages import (
    CompactionPart,
    FilePart,
    ReasoningPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
)


def transcript(
    items: Sequence[WithParts], *, tool_chars: int = TOOL_OUTPUT_MAX_CHARS, originals: bool = True
) -> str:
    """The head as text, as OpenCode sends it: ``[User]:``, ``[Assistant]:``, ``[Assistant reasoning]:``,
    ``[Assistant tool call]: name(json)``, ``[Tool result]:``. Tool output is cut at
    ``tool_chars`` (+ ``[truncated]`` and where the full text is). With ``originals``
    (ours) a pruned output is shown as it was, since the summariser has not seen it."""
    lines: list[str] = []
    for item in items:
        info = item.info
        if isinstance(info, UserMessage):
            for part in item.parts:
                if isinstance(part, TextPart) and not part.ignored and part.text:
                    lines.append(f"[User]: {part.text}")
                elif isinstance(part, FilePart) and part.mime not in (
                    "text/plain",
                    "application/x-directory",
                ):
                    lines.append(f"[User]: {attached_placeholder(part)}")
                elif isinstance(part, CompactionPart):
                    lines.append(f"[User]: {COMPACTION_QUESTION}")
            continue
        if info.error and info.error.get("name") != "MessageAbortedError":
            continue
        for part in item.parts:
            if isinstance(part, TextPart) and part.text and not part.ignored:
                lines.append(f"[Assistant]: {part.text}")
            elif isinstance(part, ReasoningPart) and part.text:
                lines.append(f"[Assistant reasoning]: {part.text}")
            elif isinstance(part, ToolPart):
                lines.append(
                    f"[Assistant tool call]: {part.tool}({json.dumps(part.state.input, ensure_ascii=False)})"
                )
                lines.append(f"[Tool result]: {_transcript_output(part, tool_chars, originals)}")
    return "\n\n".join(lines)


def _transcript_output(part: ToolPart, limit: int, originals: bool) -> str:
    state = part.state
    if isinstance(state, ToolError):
        return state.error
    if not isinstance(state, ToolCompleted):
        return "[Tool execution was interrupted]"
    if state.time_compacted and not originals:
        return PRUNED_OUTPUT
    text = state.output
    if len(text) > limit:  # the full text is in the session's archive (pinned on the summary)
        text = text[:limit] + "\n[truncated]"
    return text
