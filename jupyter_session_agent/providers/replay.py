"""A provider that answers from a record: the assistant messages of one recorded turn, in order.

:class:`ReplayProvider` satisfies :class:`~.base.Provider` without a server: each ``stream``
call yields the next recorded assistant message (one step) as ``core.stream`` events — its
reasoning, text and tool calls with their recorded call ids, then ``Finish`` with the recorded
finish reason, tokens and timings. The loop, the tools, the permission gate and the store run
unchanged on these events, so a replayed turn is stored as any other. Nothing is sent anywhere:
``complete`` and ``embed`` refuse, and a step the record does not hold is one
:class:`~..core.errors.UsageError` line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..core.errors import UsageError
from ..core.messages import (
    AssistantMessage,
    ReasoningPart,
    StepFinishPart,
    TextPart,
    ToolPart,
    WithParts,
)
from ..core.stream import (
    Finish,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolInputStart,
)

RERECORD = (
    "re-record with %agent replay off, run the notebook against a model and %agent record FILE"
)


def step_events(item: WithParts) -> list[StreamEvent]:
    """One recorded assistant message (one LLM call) as the events its stream gave."""
    events: list[StreamEvent] = []
    finish: Finish | None = None
    for part in item.parts:
        if isinstance(part, ReasoningPart) and part.text:
            events.append(ReasoningDelta(part.text))
        elif isinstance(part, TextPart) and part.text and not part.synthetic:
            events.append(TextDelta(part.text))
        elif isinstance(part, ToolPart):
            events.append(ToolInputStart(part.call_id, part.tool))
            events.append(ToolCall(part.call_id, part.tool, dict(part.state.input or {})))
        elif isinstance(part, StepFinishPart) and finish is None:
            meta = part.metadata or {}
            finish = Finish(
                part.reason,
                part.tokens,
                first_token_ms=meta.get("firstTokenMs"),
                latency_ms=meta.get("latencyMs"),
            )
    if finish is None:  # a step that ended without usage (an error): its message's own values
        info = item.info
        assert isinstance(info, AssistantMessage)
        finish = Finish(info.finish or "stop", info.tokens)
    events.append(finish)
    return events


class ReplayProvider:
    """The recorded steps of one turn, one per ``stream`` call; ``where`` names the turn in
    errors (e.g. "turn 2 of recorded session 1")."""

    provider_id = "replay"
    base_url = None

    def __init__(self, steps: Sequence[WithParts], where: str):
        self.steps = list(steps)
        self.where = where
        self.used = 0

    def stream(self, request: Any, *, deadline: float | None = None) -> Iterator[StreamEvent]:
        if self.used >= len(self.steps):
            raise UsageError(
                f"the record of {self.where} has {len(self.steps)} step(s) and the loop asked "
                f"for another (max_steps or the tools differ from the recording) — {RERECORD}"
            )
        item = self.steps[self.used]
        self.used += 1
        yield from step_events(item)

    def complete(self, request: Any) -> str:
        raise UsageError(f"a replay calls no model ({self.where}) — {RERECORD}")

    def embed(self, texts: list[str], *, model: str) -> list[list[float]]:
        raise UsageError(f"a replay calls no model ({self.where}) — {RERECORD}")
