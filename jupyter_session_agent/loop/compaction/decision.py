"""What the loop asks the compactor after each step: :class:`Decision` (nothing, summarise,
or stop the turn, with the reason) and, after a compaction, what the loop does next
(:meth:`Decision.then`); :func:`overflow_text`, the one line of a turn that cannot go on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.messages import AssistantMessage
from .events import CompactionResult

CONTINUE_REASONS = ("tool-calls", "unknown")  # finish reasons after which the model is called again


@dataclass(frozen=True)
class Decision:
    """``action``: "none" (go on), "summarise" (a summary compaction now) or "stop" (the turn
    cannot go on: ``reason`` is the line to show)."""

    action: str
    reason: str = ""
    cause: str = "auto"  # of a summary: "auto" (usage at the trigger) | "overflow" (an error)
    overflow_error: bool = False  # the step failed with the provider's context overflow error
    continue_after: bool = True  # the turn goes on after the summary
    step_tokens: int | None = None  # the step's reported count that triggered it

    def then(self, result: CompactionResult) -> str:
        """What the loop does after this decision's compaction: "raise" (a request that no
        longer fits was not compacted), "end" (the turn is over), "again" (next step from
        the compacted view) or "go on" (finish this step as if nothing happened)."""
        if result.ok:
            return "again" if self.continue_after else "end"
        if self.overflow_error and result.event.outcome != "no-gain":
            return "raise"
        return "again" if result.event.outcome == "no-gain" else "go on"


NOTHING = Decision("none")


def server_reason(message: AssistantMessage) -> str:
    """The server's own words for a context overflow (``This model's maximum context length
    is …``, llama.cpp's ``n_ctx``), from the step's error; empty when there are none."""
    error = message.error or {}
    if error.get("name") != "ContextOverflowError":
        return ""
    detail = error.get("data")
    data = detail if isinstance(detail, dict) else error
    text = str(data.get("message") or "")
    # "context overflow: HTTP 400 Bad Request from URL: <the server's detail>"
    for prefix in ("context overflow: ",):
        text = text.removeprefix(prefix)
    head, sep, detail = text.partition(": ")
    if sep and (head.startswith("HTTP ") or head.startswith("error event from ")):
        text = detail
    return text.strip()


def overflow_text(message: AssistantMessage, model: Any, *, auto: bool = False) -> str:
    """The one line of a request too long for ``model`` that compaction did not fix."""
    used = message.tokens.count
    fix = (
        "compaction could not make room — start a new session with `%%agent --new`"
        if auto
        else "compaction.auto is off — `%agent compact`, or start a new session with `%%agent --new`"
    )
    said = server_reason(message)
    if said:
        return f"the model server refused the request as too long: {said}; {fix}"
    if used:
        return f"the conversation needs {used:,} tokens and {model.model_id} allows {model.context:,}; {fix}"
    return (
        f"the request exceeded {model.model_id}'s context window ({model.context:,} tokens); {fix}"
    )
