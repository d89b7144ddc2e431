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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core import ids
from ..core.chat import (
    MAX_STEPS_TEXT,
    filter_compacted,
    to_chat_messages,
    without_failed_compactions,
)
from ..core.errors import AgentError, ToolFailure
from ..core.messages import AssistantMessage, UserMessage, WithParts, now_ms
from .compaction import Compactor
from .compaction.decision import CONTINUE_REASONS, NOTHING, Decision, overflow_text
from .history import History
from .step import Observer, StepProcessor, StepResult, run_step


class ContextLimitError(AgentError):
    """The conversation no longer fits the model's context window."""


@dataclass
class TurnSetup:
    """What a turn needs; built by the session API, consumed here."""

    store: Any
    provider: Any  # provider.OpenAIProvider
    request_factory: Callable[[list[dict], bool], Any]  # (chat messages, last step?) → ChatRequest
    model: Any  # budget.ModelInfo
    tools: dict[str, Any]
    run_tool: Callable[[Any, dict, Any], Any]
    system_prompt: str
    max_steps: int
    max_retries: int
    auto_compact: bool = True
    reserved: int | None = None
    cwd: str = "."
    permit: Callable[[str, dict, Any], Any] | None = (
        None  # permission.Gate: checked before each tool runs
    )
    snapshot: Any = None  # snapshot.Snapshot: file snapshots around each step, for revert
    compactor: Compactor | None = None  # None: an overflow is a ContextLimitError
    max_retry_wait: float = 60.0  # seconds a retry may wait; a longer retry-after fails at once


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
        visible = without_failed_compactions(filter_compacted(history))
        last_user = next(m.info for m in reversed(visible) if isinstance(m.info, UserMessage))
        last = visible[-1].info
        if isinstance(last, AssistantMessage) and _answered(last, last_user):
            break
        step += 1
        last_step = step >= setup.max_steps
        chat, processor, message = _step(setup, visible, last_user, last_step, observer)
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
    if getattr(processor, "blocked", False):
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
    # a model that takes no images gets "[Attached image/png: name]" in their place
    images = bool(getattr(setup.model, "images", False))
    chat = [
        {"role": "system", "content": setup.system_prompt},
        *to_chat_messages(visible, strip_media=not images),
    ]
    if last_step:
        chat.append({"role": "assistant", "content": MAX_STEPS_TEXT})
    request = setup.request_factory(chat, last_step)
    permit = setup.permit
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
        store=setup.store,
        stream=lambda: setup.provider.stream(request),
        model=setup.model,
        tools=setup.tools,
        run_tool=setup.run_tool,
        observer=observer,
        max_retries=setup.max_retries,
        max_retry_wait=setup.max_retry_wait,
        auto_compact=setup.auto_compact,
        reserved=setup.reserved,
        permit=permit,
        snapshot=setup.snapshot,
    )
    return chat, processor, message


def _without_tools(request: Any) -> Any:
    """``request`` offering no tools (the provider then sends no ``tools`` field)."""
    fields = dataclasses.fields(request) if dataclasses.is_dataclass(request) else ()
    if any(f.name == "tools" for f in fields):
        return dataclasses.replace(request, tools=())
    return request


def _max_steps_refusal(max_steps: int) -> Callable[[str, dict, Any], None]:
    """The permit of the last step: every tool call fails (recorded as its error) unrun."""

    def refuse(tool: str, args: dict, call: Any = None) -> None:
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
