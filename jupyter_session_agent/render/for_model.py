"""A history as text for a model to read: the summary input (compaction) and the memory
extractor's input, from one walk over the messages.

What differs between the uses is a :class:`TranscriptStyle` value (labels, what is left out,
the limits); :data:`SUMMARY` and :data:`EXTRACTION` are the two, and each caller passes its
own limits with ``dataclasses.replace``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.chat import COMPACTION_QUESTION, INTERRUPTED_OUTPUT, PRUNED_OUTPUT, attached_placeholder
from ..core.compaction_config import TOOL_OUTPUT_MAX_CHARS
from ..core.messages import (
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
from ..core.redact import before_cut

FILES_NOT_SHOWN = ("text/plain", "application/x-directory")  # their text is in a text part


@dataclass(frozen=True, slots=True)
class TranscriptStyle:
    """How a transcript written for a model reads, and where it is cut."""

    user: str  # before a user's text
    assistant: str  # before the assistant's text
    reasoning: str | None  # before the assistant's reasoning; None: reasoning left out
    call: str  # a tool call, ``str.format``-ed with ``tool``, ``args`` and ``result``
    separator: str  # between two entries
    one_line: bool  # a call's input and result on one line each (whitespace collapsed)
    input_chars: int | None  # a call's input is cut here (None: whole)
    output_chars: int | None  # a call's output is cut here
    error_chars: int | None  # a failed call's error is cut here
    error: str  # before a failed call's error
    synthetic: bool  # synthetic texts (injected context, attachments' text) included
    files: bool  # a user's file parts as ``[Attached mime: name]``
    requests: bool  # a compaction request as the question it asks
    failed_messages: bool  # assistant messages that ended in an error (not an abort) included
    originals: bool  # a pruned output as it was (else the placeholder the model saw)
    limit: int | None = None  # the whole text: the first entry and the newest text kept


# The summary input, as OpenCode sends it: "[User]: ", "[Assistant tool call]: name(json)"…
# (a pruned output is shown as it was: the summariser has not seen it)
SUMMARY = TranscriptStyle(
    user="[User]: ",
    assistant="[Assistant]: ",
    reasoning="[Assistant reasoning]: ",
    call="[Assistant tool call]: {tool}({args})\n\n[Tool result]: {result}",
    separator="\n\n",
    one_line=False,
    input_chars=None,
    output_chars=TOOL_OUTPUT_MAX_CHARS,
    error_chars=None,
    error="",
    synthetic=True,
    files=True,
    requests=True,
    failed_messages=False,
    originals=True,
)

# What the memory extractor reads: what was said and done, one line per call, no reasoning
EXTRACTION = TranscriptStyle(
    user="User: ",
    assistant="Assistant: ",
    reasoning=None,
    call="Tool {tool}({args}) → {result}",
    separator="\n",
    one_line=True,
    input_chars=200,
    output_chars=300,
    error_chars=200,
    error="error: ",
    synthetic=False,
    files=False,
    requests=False,
    failed_messages=True,
    originals=True,
    limit=None,  # its caller passes the limit (memory.extract.MAX_TRANSCRIPT_CHARS)
)


def model_transcript(items: Sequence[WithParts], style: TranscriptStyle) -> str:
    """``items`` as text for a model, in ``style``."""
    entries: list[str] = []
    for item in items:
        info = item.info
        user = isinstance(info, UserMessage)
        if not user and not style.failed_messages:
            error = getattr(info, "error", None)
            if error and error.get("name") != "MessageAbortedError":
                continue
        for part in item.parts:
            entry = _entry(part, user, style)
            if entry:
                entries.append(entry)
    return _fit(entries, style)


def _entry(part: object, user: bool, style: TranscriptStyle) -> str:
    if isinstance(part, TextPart):
        if part.ignored or not part.text.strip() or (part.synthetic and not style.synthetic):
            return ""
        return (style.user if user else style.assistant) + part.text.strip()
    if user:
        if isinstance(part, FilePart) and style.files and part.mime not in FILES_NOT_SHOWN:
            return style.user + attached_placeholder(part)
        if isinstance(part, CompactionPart) and style.requests:
            return style.user + COMPACTION_QUESTION
        return ""
    if isinstance(part, ReasoningPart) and part.text and style.reasoning is not None:
        return style.reasoning + part.text
    if isinstance(part, ToolPart):
        args = json.dumps(part.state.input, ensure_ascii=False)
        return style.call.format(
            tool=part.tool, args=_cut(args, style.input_chars, style), result=_result(part, style)
        )
    return ""


def _result(part: ToolPart, style: TranscriptStyle) -> str:
    state = part.state
    if isinstance(state, ToolError):
        return style.error + _cut(state.error, style.error_chars, style)
    if not isinstance(state, ToolCompleted):
        return INTERRUPTED_OUTPUT
    if state.time_compacted and not style.originals:
        return PRUNED_OUTPUT
    return _cut(state.output, style.output_chars, style)


def _cut(text: str, limit: int | None, style: TranscriptStyle) -> str:
    if limit is not None:
        text = before_cut(text, limit)
    if style.one_line:
        text = " ".join(text.split())
        if limit is not None and len(text) > limit:
            return text[: limit - 1].rstrip() + "…"
        return text
    if limit is not None and len(text) > limit:  # the full text is in the session's archive
        return text[:limit] + "\n[truncated]"
    return text


def _fit(entries: list[str], style: TranscriptStyle) -> str:
    text = style.separator.join(entries)
    limit = style.limit
    if limit is None or len(text) <= limit:
        return text
    first = entries[0][: limit // 4]
    return first + "\n[… earlier messages omitted …]\n" + text[-(limit - len(first) - 40) :]
