"""The :class:`Compactor` the loop calls: one per turn, it sizes the next request
(calibrated against reported usage), decides after each step (:meth:`Compactor.after_step`),
prunes (a :class:`~.prune.Pruner`) and runs a summary compaction (:meth:`Compactor.compact`):
the plan (previous summary / head / tail / replay), the request, the summary
(a :class:`~.summary.Summariser`), what the strategy pins on it (a :class:`~.pinned.Pinner`),
the guards, then the continue message or the replayed request, and a
:class:`CompactionEvent`. The policy's decisions come from a
:class:`~.strategy.CompactionStrategy` (default: :class:`~.strategy.ProductStrategy`).

One module: the Compactor is one object whose sizes, decisions for the loop and summary
steps read the same state (the window, the calibration, the guards' counter); the parts
it composes (pruner, summariser, pinner, strategy, event log) live in their own modules."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import budget as B
from ...core.chat import filter_compacted, to_chat_messages
from ...core.compaction_config import CompactionConfig
from ...core.messages import (
    AssistantMessage,
    Tokens,
    ToolPart,
    UserMessage,
    WithParts,
    replace,
)
from ..history import Calibration, History, model_chat, visible
from ..step import Observer, StepResult
from .decision import CONTINUE_REASONS, NOTHING, Decision, overflow_text, server_reason
from .events import CompactionEvent, CompactionResult, EventLog
from .followups import compaction_request, continue_message, reject, replayed_request
from .items import is_real_user, is_request, is_summary
from .pinned import Pinner
from .prune import Pruner
from .strategy import CompactionStrategy, PinInput, ProductStrategy
from .summary import Summariser, SummaryJob, SummaryOutcome
from .tail import select_tail


@dataclass(frozen=True)
class CompactionPlan:
    """What a summary compaction keeps and summarises (the visible history, split)."""

    previous: WithParts | None  # the previous summary
    pair: list[WithParts]  # the visible earlier request and summary
    head: list[WithParts]  # summarised
    tail: list[WithParts]  # kept verbatim
    replay: WithParts | None  # replayed after the summary (an overflow on the first step)
    parts_pruned: int = 0  # outputs the plan cleared (recoverably) beside the head's
    tokens_pruned: int = 0


@dataclass
class Compactor:
    """Prune and compact one session's history (a :class:`~..history.History`, changed through
    its methods; a plain list is adopted by ``History.of``).

    The next request's size is estimated (system message, chat, tool schemas) and calibrated
    by :meth:`observe` against the usage the server reports.
    """

    config: CompactionConfig
    store: Any
    model: B.ModelInfo
    data_dir: Path
    system_prompt: str
    tools_tokens: int = 0
    summary_provider: Any = None  # .stream(request)
    summary_model: B.ModelInfo | None = None
    summary_request: Callable[[list[dict], int | None], Any] | None = None  # (chat, max_tokens)
    max_retries: int = 2
    cwd: str = "."
    sleep: Callable[[float], None] = time.sleep
    calibration: Calibration = field(
        default_factory=Calibration
    )  # the session's, kept between turns
    strategy: CompactionStrategy = field(default_factory=ProductStrategy)
    consecutive: int = 0  # auto compactions since the last step that stayed under the trigger
    server_said: str = ""  # the server's own words for the last context overflow
    disabled: bool = False  # set after an auto compaction that did not make room

    def __post_init__(self) -> None:
        limits = self.strategy.budget(self.config, self.model)
        self.usable = limits.usable
        self.trigger = self.config.trigger(self.model, limits)
        self.log = EventLog(self.store, self.usable, self.trigger)
        self.pruner = Pruner(
            store=self.store,
            data_dir=Path(self.data_dir),
            config=self.config,
            model=self.model,
            limits=self.strategy.prune_limits(self.config, self.model),
            size=self.context_tokens,
            log=self.log,
        )
        self.summariser = Summariser(
            store=self.store,
            model=self.summary_model or self.model,
            provider=self.summary_provider,
            request_factory=self.summary_request or _no_request,
            strategy=self.strategy,
            max_retries=self.max_retries,
            cwd=self.cwd,
            sleep=self.sleep,
        )
        self.pinner = Pinner(self.store, Path(self.data_dir), self.usable, self.config.pin_requests)

    # -- sizes -----------------------------------------------------------------

    @property
    def ratio(self) -> float:
        return self.calibration.ratio

    def raw_tokens(self, chat: list[dict]) -> int:
        return B.estimate_chat(chat) + self.tools_tokens  # an image counts as an image, not its URL

    def chat(self, history: Sequence[WithParts]) -> list[dict]:
        """What the main model would be sent next (``history.model_chat``, as the loop sends)."""
        return model_chat(visible(history), self.system_prompt, self.model)

    def context_tokens(self, history: Sequence[WithParts]) -> int:
        """The next main request's size, estimated and calibrated."""
        return int(self.raw_tokens(self.chat(history)) * self.ratio)

    def observe(self, chat: list[dict], tokens: Tokens | None) -> None:
        """Calibrate chars/4 against a step's reported prompt tokens (clamped to 0.5–2×)."""
        if tokens is None or tokens.estimated or tokens.prompt <= 0:
            return
        est = self.raw_tokens(chat)
        if est > 0:
            self.calibration.set(tokens.prompt / est)

    def is_overflow(self, tokens: Tokens) -> bool:
        """Auto compaction is due (and not switched off for this turn by one that failed)."""
        return not self.disabled and self.config.is_overflow(tokens, self.model, self.trigger)

    def step_done(self, tokens: Tokens) -> None:
        """A normal step finished under the trigger: compaction made progress."""
        if not self.is_overflow(tokens):
            self.consecutive = 0

    # -- what the loop asks ------------------------------------------------------

    def before_turn(self, history: Sequence[WithParts]) -> Decision:
        """Summarise first when the newest finished step (not a summary) overflowed."""
        finished = [
            m.info
            for m in filter_compacted(history)
            if isinstance(m.info, AssistantMessage) and m.info.finish and not m.info.error
        ]
        newest = max(finished, key=lambda info: info.id, default=None)
        if newest is None or newest.summary or not self.is_overflow(newest.tokens):
            return NOTHING
        count = newest.tokens.count
        return Decision(
            "summarise",
            reason=f"the last step used {count:,} tokens, at or above the trigger {self.trigger:,}",
            step_tokens=count or None,
        )

    def after_step(self, chat: list[dict], step: StepResult, *, last_step: bool) -> Decision:
        """Calibrate against the step's usage, then: nothing, a summary (usage at the trigger
        or the provider's context overflow error), or stop (an overflow error that compaction
        may not fix: auto off, or switched off for this turn)."""
        message = step.message
        self.observe(chat, None if message.error else message.tokens)
        overflow = (message.error or {}).get("name") == "ContextOverflowError"
        self.server_said = server_reason(message) if overflow else ""
        if overflow and (not self.config.auto or self.disabled):
            return Decision(
                "stop", reason=overflow_text(message, self.model, auto=self.config.auto)
            )
        if not overflow and (message.error or not self.is_overflow(message.tokens)):
            self.step_done(message.tokens)
            return NOTHING
        finished = not overflow and message.finish not in CONTINUE_REASONS
        count = message.tokens.count
        return Decision(
            "summarise",
            reason="the provider refused the request as too long"
            if overflow
            else f"the step used {count:,} tokens, at or above the trigger {self.trigger:,}",
            cause="overflow" if overflow else "auto",
            overflow_error=overflow,
            continue_after=self.strategy.continue_after(finished=finished, last_step=last_step),
            step_tokens=count or None,
        )

    def apply(
        self,
        decision: Decision,
        history: History | list[WithParts],
        observer: Observer | None = None,
    ) -> CompactionResult:
        """Run the summary ``decision`` asked for; one that fails switches auto compaction off
        for the rest of the turn (it would not make room: never a loop)."""
        result = self.compact(
            history,
            cause=decision.cause,
            auto=True,
            continue_after=decision.continue_after,
            step_tokens=decision.step_tokens,
            observer=observer,
        )
        if not result.ok:
            self.disabled = True
        return result

    def prune_due(self, history: Sequence[WithParts]) -> tuple[list[ToolPart], int]:
        """The tool outputs :meth:`prune` would clear now, and their estimated tokens."""
        return self.pruner.due(history)

    def prune(
        self, history: History | list[WithParts], *, cause: str = "auto"
    ) -> CompactionEvent | None:
        """OpenCode's end-of-loop prune; records an event when something was cleared."""
        return self.pruner.prune(history, cause=cause)

    # -- summary compaction ---------------------------------------------------------

    def compact(
        self,
        history: History | list[WithParts],
        *,
        cause: str,
        auto: bool,
        continue_after: bool = True,
        instructions: str | None = None,
        step_tokens: int | None = None,
        observer: Observer | None = None,
    ) -> CompactionResult:
        """Summarise the head of ``history`` (see the package docstring). Never raises for a
        failed compaction (the result says why); a provider error is re-raised after the
        event is recorded."""
        observer = observer or Observer()
        history = History.of(history)
        run = _Run(self, history, cause, before=self.context_tokens(history))
        run.values["step_tokens"] = step_tokens
        fixed = self.raw_tokens([{"role": "system", "content": self.system_prompt}])
        refused = self._refusal(fixed, run.before) if auto else None
        if refused is not None:
            return run.finish("no-gain", message=self.limit_text(*refused))
        last_user = next((m for m in reversed(history) if isinstance(m.info, UserMessage)), None)
        if last_user is None:
            return run.finish("failed", message="nothing to compact yet")
        plan = self.plan(history, cause=cause, auto=auto, fixed=fixed)
        run.values.update(parts_pruned=plan.parts_pruned, tokens_pruned=plan.tokens_pruned)
        if not plan.head:
            return run.finish(
                "failed", message="nothing to compact: no messages since the last summary"
            )
        assert isinstance(last_user.info, UserMessage)
        request = compaction_request(
            self.store, last_user.info, auto=auto, overflow=cause == "overflow"
        )
        run.add(request, observer)
        run.values.update(
            self._plan_values(plan, request), summary_input=self.strategy.summary_input
        )
        previous_tokens = self._size([plan.previous]) if plan.previous is not None else 0
        job = self._job(plan, request, instructions, previous_tokens)
        outcome = self.summariser.summarise(job, history, run.added, observer)
        run.values.update(self._summary_values(outcome, run.added))
        if outcome.summary is None:
            return run.finish("failed", message=outcome.error or self._too_large(outcome))
        summary = self.strategy.pin(
            self.pinner,
            outcome.summary,
            PinInput(history, plan.head, plan.tail, plan.replay, observer),
        )
        summary_tokens = self._size([summary])
        replaced = run.values["head_tokens"] + previous_tokens
        run.values.update(summary_id=summary.info.id, summary_tokens=summary_tokens)
        if not self.strategy.accepts(summary_tokens=summary_tokens, replaced=replaced):
            why = f"the summary ({summary_tokens:,} tokens) is not smaller than what it replaces"
            reject(self.store, history, summary, f"{why} ({replaced:,})")
            return run.finish(
                "rejected",
                message=self.limit_text(
                    run.before, "the summary would not be smaller than the messages it replaces"
                ),
            )
        request = self._mark_tail(history, request, plan.tail, observer)
        if auto:
            self._follow_up(history, run, request, plan, continue_after, cause == "overflow")
        self.store.flush(sync=True)
        after = self.context_tokens(history)
        if auto and self.strategy.no_gain(after=after, trigger=self.trigger):
            why = "after compaction the kept context still fills the window"
            return run.finish("no-gain", message=self.limit_text(after, why), tokens_after=after)
        return run.finish("ok", tokens_after=after)

    def plan(self, history: History, *, cause: str, auto: bool, fixed: int) -> CompactionPlan:
        """Split the visible history: previous summary / head / tail / replay; the outputs the
        strategy clears at a summary are cleared now (recoverably). ``fixed``: the system
        prompt's and tools' tokens."""
        seen = visible(history)
        previous = next((m for m in seen if is_summary(m)), None)
        items = [m for m in seen if not is_request(m) and not is_summary(m)]
        replay = self.strategy.replay_target(items) if cause == "overflow" else None
        if replay is not None:
            idx = items.index(replay)
            if any(is_real_user(m) for m in items[:idx]) or previous is not None:
                items = items[:idx]
            else:
                replay = None
        targets = self.strategy.outputs_to_clear(items, self.config, self.model)
        targets = targets if self.config.prune else []
        cleared = self.pruner.clear(history, targets)
        if targets:
            fresh = {m.info.id: m for m in history}
            items = [fresh.get(m.info.id, m) for m in items]
            previous = fresh.get(previous.info.id, previous) if previous is not None else None
        turns = sum(1 for m in items if is_real_user(m))
        tail_turns, budget = self.strategy.tail_limits(
            self.config, self.model, turns=turns, auto=auto, fixed=fixed, trigger=self.trigger
        )
        if replay is not None:
            tail_turns = 0
        cut = select_tail(items, turns=tail_turns, budget=budget, size=self._size)
        while (
            cut == 0 and tail_turns > 0
        ):  # everything fits the tail: keep less, so there is a head
            tail_turns -= 1
            cut = select_tail(items, turns=tail_turns, budget=budget, size=self._size)
        return CompactionPlan(
            previous=previous,
            pair=[m for m in seen if is_request(m) or is_summary(m)],
            head=items[:cut],
            tail=items[cut:],
            replay=replay,
            parts_pruned=len(targets),
            tokens_pruned=cleared,
        )

    def limit_text(self, tokens: int, why: str) -> str:
        """One line: ``why``, the tokens needed against the window, and the fix."""
        b = self.strategy.budget(self.config, self.model)
        server = f" (the server said: {self.server_said})" if self.server_said else ""
        return (
            f"{why}: the conversation needs about {tokens:,} tokens and {self.model.provider_id}/"
            f"{self.model.model_id} allows {b.usable:,} (context {b.context:,} minus "
            f"{b.reserved:,} reserved for the answer){server} — start a new session with "
            "%%agent --new, or set a larger context in model_overrides"
        )

    # -- pieces --------------------------------------------------------------------

    def _size(self, items: Sequence[WithParts]) -> int:
        return B.estimate_chat(to_chat_messages(items))

    def _refusal(self, fixed: int, before: int) -> tuple[int, str] | None:
        """Count this auto compaction; (tokens, why) when the strategy refuses it."""
        self.consecutive += 1
        return self.strategy.refusal(
            fixed=int(fixed * self.ratio),
            before=before,
            consecutive=self.consecutive,
            trigger=self.trigger,
        )

    def _job(
        self,
        plan: CompactionPlan,
        request: WithParts,
        instructions: str | None,
        previous_tokens: int,
    ) -> SummaryJob:
        target = self.strategy.summary_target(
            self.config, self.model, head=plan.head, previous_tokens=previous_tokens
        )
        return SummaryJob(
            request=request,
            previous=plan.previous,
            pair=plan.pair,
            head=plan.head,
            replay=plan.replay,
            instructions=instructions,
            target=target,
        )

    def _plan_values(self, plan: CompactionPlan, request: WithParts) -> dict[str, Any]:
        return dict(
            request_id=request.info.id,
            head_messages=len(plan.head),
            head_tokens=self._size(plan.head),
            tail_messages=len(plan.tail),
            tail_tokens=self._size(plan.tail),
            tail_start_id=plan.tail[0].info.id if plan.tail else None,
        )

    def _summary_values(self, outcome: SummaryOutcome, added: list[WithParts]) -> dict[str, Any]:
        model = self.summariser.model
        return dict(
            llm_calls=len(outcome.sent),
            attempts=outcome.attempts,
            cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage)),
            summary_input_tokens=sum(a.get("inputTokens", 0) for a in outcome.sent),
            summary_output_tokens=sum(a.get("outputTokens", 0) for a in outcome.sent),
            model=f"{model.provider_id}/{model.model_id}",
        )

    def _too_large(self, outcome: SummaryOutcome) -> str:
        limit = self.summariser.model
        what = "even a shortened" if len(outcome.attempts) > 1 else "the"
        return (
            f"the conversation is too large to compact: {what} summary request does not fit "
            f"{limit.provider_id}/{limit.model_id}'s {limit.context:,}-token context — start a "
            "new session with %%agent --new"
        )

    def _mark_tail(
        self,
        history: History,
        request: WithParts,
        tail: Sequence[WithParts],
        observer: Observer,
    ) -> WithParts:
        """The request names where the verbatim tail starts (``tail_start_id``); the view shows
        the part as stored."""
        if not tail:
            return request
        part = replace(request.parts[0], tail_start_id=tail[0].info.id)
        self.store.put(part)
        observer.on_part(part)
        request = WithParts(request.info, (part, *request.parts[1:]))
        history.put_back(request)
        return request

    def _follow_up(
        self,
        history: History,
        run: _Run,
        request: WithParts,
        plan: CompactionPlan,
        continue_after: bool,
        overflow: bool,
    ) -> None:
        """After an auto summary: the replayed request, or the continue message."""
        assert isinstance(request.info, UserMessage)
        if plan.replay is not None:
            run.add(replayed_request(self.store, plan.replay))
            return
        if not continue_after:
            return
        latest = next((m for m in reversed(history) if is_real_user(m)), None)
        text = self.strategy.continue_text(latest=latest, tail=plan.tail, overflow=overflow)
        if text is not None:
            run.add(continue_message(self.store, request.info, text))


class _Run:
    """One compaction in progress: the messages it added and the event's values so far."""

    def __init__(self, compactor: Compactor, history: History, cause: str, *, before: int):
        self.compactor, self.history, self.cause, self.before = compactor, history, cause, before
        self.start = time.monotonic()
        self.added: list[WithParts] = []
        self.values: dict[str, Any] = {"tokens_before": before}

    def add(self, item: WithParts, observer: Observer | None = None) -> None:
        self.history.add(item)
        self.added.append(item)
        if observer is not None:
            for part in item.parts:
                observer.on_part(part)

    def finish(
        self, outcome: str, *, message: str = "", tokens_after: int | None = None
    ) -> CompactionResult:
        if tokens_after is None:
            tokens_after = self.compactor.context_tokens(self.history)
        log = self.compactor.log
        event = log.event(
            self.history,
            "summary",
            cause=self.cause,
            outcome=outcome,
            start=self.start,
            tokens_after=tokens_after,
            error=message or None,
            **self.values,
        )
        return CompactionResult(log.record(event), self.added, message)


def _no_request(chat: list[dict], max_tokens: int | None) -> Any:  # pragma: no cover
    raise RuntimeError("this compactor has no summary model (summary_request is not set)")
