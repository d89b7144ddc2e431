"""What the model sees: stored history → OpenAI chat messages.

Ports OpenCode's ``MessageV2.toModelMessages`` (which parts of which messages the model
sees, and as what) and ``filterCompacted`` (nothing before the last completed compaction is
sent again) to the chat-completions wire format. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    ReasoningPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
)

PRUNED_OUTPUT = "[Old tool result content cleared]"
INTERRUPTED_OUTPUT = "[Tool execution was interrupted]"
COMPACTION_QUESTION = "What did we do so far?"
SUBTASK_TEXT = "The following tool was executed by the user"
MAX_STEPS_TEXT = (
    "CRITICAL - MAXIMUM STEPS REACHED\n\n"
    "The maximum number of steps allowed for this task has been reached. Tools are "
    "disabled until the next user input. Respond with text only.\n\n"
    "Summarise the work done so far, list any remaining tasks that were not completed, "
    "and recommend what should be done next."
)
_MEDIA_PREFIXES = ("image/", "application/pdf")

Chat = dict[str, Any]


def filter_compacted(history: Sequence[WithParts]) -> list[WithParts]:
    """The history after the last completed compaction (OpenCode's ``filterCompacted``).

    Walk newest→oldest; a finished, error-free summary marks its parent request
    as completed; stop (inclusive) at a completed request that carries a
    compaction part. A failed summary leaves the old history visible.

    With a ``tail_start_id`` on that compaction part (the verbatim tail upstream added
    after v1.2.16), the walk goes
    on past the request down to that message, leaving out earlier compaction
    requests and summaries, and the result is ordered
    ``[request, summary, tail…, newer…]``.
    """
    completed: set[str] = set()
    kept: list[WithParts] = []
    items = list(history)
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        kept.append(item)
        info = item.info
        if isinstance(info, AssistantMessage) and info.summary and info.finish and not info.error:
            completed.add(info.parent_id)
        if (
            isinstance(info, UserMessage)
            and info.id in completed
            and any(isinstance(p, CompactionPart) for p in item.parts)
        ):
            kept.reverse()
            tail_start = next(
                (
                    p.tail_start_id
                    for p in item.parts
                    if isinstance(p, CompactionPart) and p.tail_start_id
                ),
                None,
            )
            return _with_tail(items[:index], kept, tail_start) if tail_start else kept
    kept.reverse()
    return kept


def _with_tail(
    older: Sequence[WithParts], kept: list[WithParts], tail_start: str
) -> list[WithParts]:
    """``[request, summary, tail…, newer…]`` where the tail is ``older`` from ``tail_start`` on."""
    tail = []
    for item in reversed(older):
        if item.info.id < tail_start:  # ids sort by creation; a deleted start message ends it too
            break
        if isinstance(item.info, AssistantMessage) and item.info.summary:
            continue
        if isinstance(item.info, UserMessage) and any(
            isinstance(p, CompactionPart) for p in item.parts
        ):
            continue
        tail.append(item)
    tail.reverse()
    request, rest = kept[0], kept[1:]
    summary = next(
        (
            m
            for m in reversed(rest)
            if isinstance(m.info, AssistantMessage)
            and m.info.summary
            and m.info.finish
            and not m.info.error
            and m.info.parent_id == request.info.id
        ),
        None,
    )
    if summary is None:
        return [request, *tail, *rest]
    return [request, summary, *tail, *(m for m in rest if m is not summary)]


def without_failed_compactions(history: Sequence[WithParts]) -> list[WithParts]:
    """``history`` without failed compaction attempts: summaries with an error, and the
    requests none of whose summaries completed. OpenCode leaves them visible (the model then
    sees an unanswered "What did we do so far?"); the stored messages are unchanged."""
    completed: set[str] = set()
    failed: set[str] = set()
    for item in history:
        info = item.info
        if isinstance(info, AssistantMessage) and info.summary:
            (failed if info.error else completed if info.finish else set()).add(info.parent_id)
    drop = failed - completed
    return [
        item
        for item in history
        if not (isinstance(item.info, AssistantMessage) and item.info.summary and item.info.error)
        and not (item.info.id in drop and any(isinstance(p, CompactionPart) for p in item.parts))
    ]


def to_chat_messages(history: Iterable[WithParts], *, strip_media: bool = False) -> list[Chat]:
    """OpenAI chat messages for ``history`` (system prompt not included)."""
    out: list[Chat] = []
    for item in history:
        if not item.parts:
            continue
        if isinstance(item.info, UserMessage):
            message = _user_message(item, strip_media)
            if message:
                out.append(message)
        elif _keep_assistant(item):
            out.extend(_assistant_messages(item))
    return out


def _user_message(item: WithParts, strip_media: bool) -> Chat | None:
    content: list[Chat] = []
    for part in item.parts:
        if isinstance(part, TextPart) and not part.ignored:
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, CompactionPart):
            content.append({"type": "text", "text": COMPACTION_QUESTION})
        elif isinstance(part, SubtaskPart):
            content.append({"type": "text", "text": SUBTASK_TEXT})
        elif isinstance(part, FilePart) and sends_content(part):
            content.append(_file_content(part, strip_media))
    if not content:
        return None
    if all(c["type"] == "text" for c in content):
        return {"role": "user", "content": "\n\n".join(c["text"] for c in content)}
    return {"role": "user", "content": content}


def sends_content(part: FilePart) -> bool:
    """Whether a user message's file part is sent itself. Text files and directories were
    expanded into (synthetic) text parts when attached, as OpenCode does; so was any file
    part that points at a file (``file:`` URL: a PDF's text) rather than carrying its data."""
    return part.mime not in ("text/plain", "application/x-directory") and not part.url.startswith(
        "file:"
    )


def _file_content(part: FilePart, strip_media: bool) -> Chat:
    """An image as image content (a placeholder under ``strip_media``: after a context
    overflow, and for a model that takes no images); any other file as its placeholder."""
    if strip_media or not part.mime.startswith("image/"):
        return {"type": "text", "text": attached_placeholder(part)}
    return {"type": "image_url", "image_url": {"url": part.url}}


def attached_placeholder(part: FilePart) -> str:
    return f"[Attached {part.mime}: {part.filename or 'file'}]"


def _keep_assistant(item: WithParts) -> bool:
    """Errored assistants are dropped, except aborted ones that produced content."""
    info = item.info
    if not isinstance(info, AssistantMessage) or not info.error:
        return True
    if info.error.get("name") != "MessageAbortedError":
        return False
    return any(not isinstance(p, (StepStartPart, ReasoningPart)) for p in item.parts)


# Vendors whose thinking mode needs the assistant's reasoning sent back, as
# ``reasoning_content``, with its tool calls (DeepSeek answers 400 without it)
REASONING_BACK_PROVIDERS = frozenset({"deepseek"})


def _assistant_messages(item: WithParts) -> list[Chat]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[Chat] = []
    results: list[Chat] = []
    for part in item.parts:
        if isinstance(part, TextPart) and not part.ignored and part.text:
            texts.append(part.text)
        elif isinstance(part, ReasoningPart) and part.text:
            reasoning.append(part.text)
        elif isinstance(part, ToolPart):
            call: Chat = {
                "id": part.call_id,
                "type": "function",
                "function": {"name": part.tool, "arguments": json.dumps(part.state.input)},
            }
            signature = (part.metadata or {}).get("thoughtSignature")
            if signature:  # Gemini: the call's thought signature goes back with it
                call["extra_content"] = {"google": {"thought_signature": signature}}
            calls.append(call)
            results.append(
                {"role": "tool", "tool_call_id": part.call_id, "content": tool_result_text(part)}
            )
    if not texts and not calls:
        return []  # e.g. only step-start / reasoning parts
    # No "content": null for a call-only message: llama.cpp's server rejects it (500).
    message: Chat = {"role": "assistant"}
    if texts:
        message["content"] = "".join(texts)
    if calls:
        message["tool_calls"] = calls
        if reasoning and getattr(item.info, "provider_id", None) in REASONING_BACK_PROVIDERS:
            message["reasoning_content"] = "".join(reasoning)
    return [message, *results]


def tool_result_text(part: ToolPart) -> str:
    """The text the model gets for a tool part, whatever its state."""
    state = part.state
    if isinstance(state, ToolCompleted):
        if state.time_compacted:
            # ours: a pruned output stays recoverable; the exact OpenCode text comes first
            path = (state.metadata or {}).get("outputPath")
            return f"{PRUNED_OUTPUT} — full output: {path}" if path else PRUNED_OUTPUT
        return state.output
    if isinstance(state, ToolError):
        return state.error
    return INTERRUPTED_OUTPUT


def visible(history: Iterable[WithParts], revert: dict | None) -> list[WithParts]:
    """``history`` without what a pending revert hides (OpenCode hides it until the next prompt)."""
    if not revert:
        return list(history)
    mid, pid = revert["messageID"], revert.get("partID")
    out = []
    for item in history:
        if item.info.id < mid:
            out.append(item)
        elif item.info.id == mid and pid:
            out.append(WithParts(item.info, tuple(p for p in item.parts if p.id < pid)))
    return out


def history_model(history: Iterable[WithParts]) -> str:
    """The newest ``provider/model`` a history used ("" when it has no messages)."""
    spec = ""
    for item in history:
        info = item.info
        spec = str(info.model) if isinstance(info, (UserMessage, AssistantMessage)) else spec
    return spec
