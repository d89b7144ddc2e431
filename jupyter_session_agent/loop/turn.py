"""The loop: one LLM call per step until the model has answered the latest prompt.

OpenCode's ``SessionPrompt.loop`` reduced to what a notebook turn
needs: each iteration looks at the visible history (``filter_compacted``),
exits once an assistant message newer than the last user message finished
for a reason other than tool calls, and otherwise runs one step. The last
allowed step gets OpenCode's max-steps instruction and no tools: none are
offered, and a call the model makes anyway is recorded as an error, unrun.

Compaction (``compaction.Compactor``, docs/compaction.md): before the first step, the
proactive check (the newest finished step overflowed); after each step the loop asks
the compactor for a :class:`~.compaction.Decision` (nothing, summarise, or stop, with
the reason): a usage overflow (``count >= usable × threshold``) or a provider's context
overflow error starts a summary compaction, then the loop continues from the
compacted view; at the end of the loop, the prune. With ``compaction.auto``
off, an overflow error is a one-line ``ContextLimitError`` (OpenCode #16882).
A compaction that fails or frees no room is a ``ContextLimitError`` too.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..core import ids
from ..core.budget import ModelInfo
from ..core.chat import MAX_STEPS_TEXT
from ..core.errors import AgentError, ToolFailure
from ..core.messages import AssistantMessage, UserMessage, WithParts, now_ms
from ..core.stream import ToolCall
from ..providers.base import Provider
from ..providers.openai_provider import ChatRequest
from .compaction.decision import CONTINUE_REASONS, NOTHING, Decision, overflow_text
from .compaction.events import CompactionEvent, CompactionResult
from .history import History, model_chat, visible
from .step import Observer, Permit, StepProcessor, StepResult, StepSetup, run_step


class ContextLimitError(AgentError):
    """The conversation no longer fits the model's context window."""


class TurnCompactor(Protocol):
    """What the loop asks of a compactor (``compaction.Compactor``; a replay's records)."""

    def before_turn(self, history: Sequence[WithParts]) -> Decision: ...

    def after_step(self, chat: list[dict], step: StepResult, *, last_step: bool) -> Decision: ...

    def apply(
        self, decision: Decision, history: History, observer: Observer | None = None
    ) -> CompactionResult: ...

    def prune(self, history: History) -> CompactionEvent | None: ...


# (chat messages, last step?) → the request sent (``session/wiring.py``'s ``TurnRequests``)
RequestFactory = Callable[[list[dict], bool], ChatRequest]


@dataclass(frozen=True)
class TurnSetup:
    """What a turn needs, built by the session (``session/wiring.py``), passed whole: what
    every step runs with (``step``), where requests go and how they are made, the system
    prompt, the step limit and the compactor (None: an overflow is a ``ContextLimitError``)."""

    step: StepSetup
    provider: Provider
    request_factory: RequestFactory
    system_prompt: str
    max_steps: int
    cwd: str = "."
    compactor: TurnCompactor | None = None

    @property
    def model(self) -> ModelInfo:
        return self.step.model


def run_turn(
    setup: TurnSetup, history: History | list[WithParts], observer: Observer | None = None
) -> list[WithParts]:
    """Answer the newest user message in ``history``; returns the assistant messages added.

    ``history`` grows as steps finish (a plain list is adopted: ``History.of``). Raises ``ProviderError``
    (after bounded retries), ``ContextLimitError`` or ``KeyboardInterrupt``; in
    every case what was produced is already stored.
    """
    observer = observer or Observer()
    history = History.of(history)
    added: list[WithParts] = []
    step = 0
    compactor = setup.compactor
    if compactor is not None:
        decision = compactor.before_turn(history)
        if decision.action == "summarise":  # one that fails: the turn still runs, uncompacted
            added.extend(compactor.apply(decision, history, observer).added)
    while True:
        seen = visible(history)
        last_user = next(m.info for m in reversed(seen) if isinstance(m.info, UserMessage))
        last = seen[-1].info
        if isinstance(last, AssistantMessage) and _answered(last, last_user):
            break
        step += 1
        last_step = step >= setup.max_steps
        chat, processor, message = _step(setup, seen, last_user, last_step, observer)
        result = run_step(processor, message, history, added)
        decision = _decide(setup, processor, chat, result, last_step)
        if decision.action == "stop":
            raise ContextLimitError(decision.reason)
        if decision.action == "summarise" and compactor is not None:
            compacted = compactor.apply(decision, history, observer)
            added.extend(compacted.added)
            then = decision.then(compacted)
            if then == "raise":  # a request that no longer fits and was not compacted
                raise ContextLimitError(compacted.message)
            if then == "end":
                break
            if then == "again":
                continue
        if result.outcome == "stop" or last_step:
            break
        if result.tool_calls == 0 and result.message.finish in CONTINUE_REASONS:
            break  # "unknown" with nothing to act on: another call would repeat itself
    if compactor is not None:
        compactor.prune(history)  # OpenCode prunes at the end of every loop
    return added


def _decide(
    setup: TurnSetup,
    processor: StepProcessor,
    chat: list[dict],
    result: StepResult,
    last_step: bool,
) -> Decision:
    """The compactor's decision after a step; without one, an overflow stops the turn. A step
    stopped by a rejected permission ("blocked") is not measured."""
    if setup.compactor is None:
        if result.outcome == "compact":
            return Decision("stop", reason=overflow_text(result.message, setup.model))
        return NOTHING
    if processor.blocked:
        return NOTHING
    return setup.compactor.after_step(chat, result, last_step=last_step)


def _step(
    setup: TurnSetup,
    visible: list[WithParts],
    last_user: UserMessage,
    last_step: bool,
    observer: Observer,
) -> tuple[list[dict], StepProcessor, AssistantMessage]:
    """The chat sent, the processor and the new assistant message of the next step."""
    chat = model_chat(visible, setup.system_prompt, setup.model)
    if last_step:
        chat.append({"role": "assistant", "content": MAX_STEPS_TEXT})
    request = setup.request_factory(chat, last_step)
    permit: Permit | None = None  # the turn's
    if last_step:  # no tool on the last step: none offered, and a call made anyway never runs
        request = _without_tools(request)
        permit = _max_steps_refusal(setup.max_steps)
    message = AssistantMessage(
        id=ids.ascending("message"),
        session_id=last_user.session_id,
        parent_id=last_user.id,
        time_created=now_ms(),
        provider_id=setup.model.provider_id,
        model_id=setup.model.model_id,
        agent=last_user.agent,
        mode=last_user.agent,
        path={"cwd": setup.cwd, "root": setup.cwd},
    )
    processor = StepProcessor(
        setup.step, stream=lambda: setup.provider.stream(request), observer=observer, permit=permit
    )
    return chat, processor, message


def _without_tools(request: ChatRequest) -> ChatRequest:
    """``request`` offering no tools (the provider then sends no ``tools`` field)."""
    return dataclasses.replace(request, tools=())


def _max_steps_refusal(max_steps: int) -> Permit:
    """The permit of the last step: every tool call fails (recorded as its error) unrun."""

    def refuse(tool: str, args: dict, call: ToolCall | None = None) -> None:
        raise ToolFailure(
            f"max steps reached ({max_steps}): tools are disabled on the last step "
            f"of a turn, so {tool} did not run. Answer with text only; the user can "
            "continue in the next cell."
        )

    return refuse


def _answered(assistant: AssistantMessage, user: UserMessage) -> bool:
    if assistant.error:
        return True
    return (
        bool(assistant.finish)
        and assistant.finish not in CONTINUE_REASONS
        and user.id < assistant.id
    )


def system_prompt(cwd: str, tools: list[str]) -> str:
    """The built-in system prompt: short, so small local models keep room to work."""
    today = time.strftime("%Y-%m-%d")
    return (
        "You are a helpful coding and data assistant working inside a Jupyter notebook.\n"
        "Answer concisely. Use a tool when it helps: "
        + ", ".join(tools)
        + ". The `python` tool runs code in the user's live kernel, so variables persist "
        "and the user sees its displays. Do not make up tool results.\n"
        f"Working directory: {cwd}\nPlatform: {platform.system().lower()}\nToday: {today}"
    )
