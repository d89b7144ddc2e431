"""What a provider's stream yields, one LLM call (one step) at a time.

A provider turns the server's SSE chunks into this small, ordered vocabulary
(the AI SDK's stream parts, reduced to what a chat-completions server can
send). The processor consumes it and owns every part it creates; a provider
never touches storage.

Order guarantees a provider must keep:
- ``TextDelta``/``ReasoningDelta`` may interleave; a kind of text starts with
  its first delta and ends at the next event of another kind or at ``Finish``;
- ``ToolInputStart`` comes once per call, before the call's ``ToolCall``;
- every ``ToolCall`` is yielded before ``Finish``; ``Finish`` is last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .messages import Tokens


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    # the answer text this step streamed so far was reasoning too (a model whose template
    # opens the think block in the prompt sends only its closing ``</think>``): consumers
    # move that text to the reasoning, then append ``text``
    reclaim: bool = False


@dataclass(frozen=True, slots=True)
class ToolInputStart:
    """A tool call has begun streaming (name known, arguments not yet)."""

    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call. ``input`` is the parsed arguments object.

    ``invalid`` holds the parse/validation error when the arguments were not a
    JSON object (small models do this); ``raw`` keeps the text as sent. The
    processor turns an invalid call into a tool ``error`` the model can read.
    """

    call_id: str
    name: str
    input: dict[str, Any]
    raw: str = ""
    invalid: str | None = None
    # what the vendor needs back with the call on the next request (Gemini's
    # ``thoughtSignature``); kept in the tool part's metadata
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """End of the step: finish reason and normalised usage.

    ``reason`` uses OpenCode's vocabulary: ``stop``, ``tool-calls``,
    ``length``, ``content-filter``, ``unknown``. ``tokens.estimated`` is true
    when the server sent no usage and it was counted locally. ``first_token_ms``
    and ``latency_ms`` are measured by the provider from request start.
    """

    reason: str
    tokens: Tokens
    first_token_ms: float | None = None
    latency_ms: float | None = None
    raw_usage: dict[str, Any] | None = None
    # USD the server reported for this call itself (OpenRouter ``usage.cost``, xAI's
    # ``cost_in_usd_ticks``); None: price the tokens from the catalogue
    cost: float | None = None


StreamEvent = TextDelta | ReasoningDelta | ToolInputStart | ToolCall | Finish
