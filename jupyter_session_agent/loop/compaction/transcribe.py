"""The summary input: the head of the history as a text transcript, tool
outputs cut at ``TOOL_OUTPUT_MAX_CHARS`` (3× fewer tokens than the raw history in
CompactBench). (Named ``transcribe`` so the module does not shadow :func:`transcript`.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ...core.compaction_config import TOOL_OUTPUT_MAX_CHARS
from ...core.messages import WithParts
from ...render.for_model import SUMMARY, model_transcript


def transcript(
    items: Sequence[WithParts], *, tool_chars: int = TOOL_OUTPUT_MAX_CHARS, originals: bool = True
) -> str:
    """The head as text, as OpenCode sends it: ``[User]:``, ``[Assistant]:``, ``[Assistant reasoning]:``,
    ``[Assistant tool call]: name(json)``, ``[Tool result]:``. Tool output is cut at
    ``tool_chars`` (+ ``[truncated]``; the full text is in the session's archive). With
    ``originals`` (ours) a pruned output is shown as it was, since the summariser has not seen it."""
    return model_transcript(items, replace(SUMMARY, output_chars=tool_chars, originals=originals))
