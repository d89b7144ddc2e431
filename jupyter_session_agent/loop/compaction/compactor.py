"""The :class:`Compactor` the loop calls: one per turn, it sizes the next request
(calibrated against reported usage), prunes (``prune``) and runs a summary compaction
(``compact``): previous summary / head / tail / replay, the tail's outputs cleared
recoverably, the request, the summary with its fallbacks, the pinned section, the
guards (a context that cannot fit, a third auto compaction in a turn, a summary larger
than what it replaces, a result still above the trigger), then the continue message or
the replayed request, and a :class:`CompactionEvent`. The whole flow is described in the
package docstring (``compaction/__init__.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import budget as B
from ...core import ids
from ...core.chat import filter_compacted, to_chat_messages, without_failed_compactions
from ...core.compaction_config import MAX_CONSECUTIVE, SUMMARY_MIN, CompactionConfig
from ...core.messages import (
    AssistantMessage,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    now_ms,
    replace,
)
from ..step import Observer
from .events import CompactionEvent, CompactionResult
from .items import is_real_user, is_request, is_summary, put_back
from .pinned import PinMixin
from .prune import PruneMixin
from .summary import SummaryMixin
from .tail import select_tail
from .transcribe import transcript


@dataclass
class Compactor(PruneMixin, SummaryMixin, PinMixin):
    """Prune and compact one session's history (a list of ``WithParts``, mutated in place).

    ``request_tokens(chat)`` estimates the main model's request for a chat list
    (system message included), tools schemas added; it is calibrated by
    :meth:`observe` against the usage the server reports.
    """

    config: CompactionConfig
    store: Any
    model: B.ModelInfo
    data_dir: Path
    system_prompt: str
    tools_tokens: int = 0
    summary_provider: Any = None  # .stream(request)
    summary_model: B.ModelInfo | None = None
    summary_request: Callable[[list[dict], int | None], Any] | None = (
        None  # (chat, max_tokens) → ChatRequest
    )
    max_retries: int = 2
    cwd: str = "."
    sleep: Callable[[float], None] = time.sleep
    state: dict = field(
        default_factory=dict
    )  # kept by the session between turns: the calibration ratio
    consecutive: int = 0  # auto compactions since the last step that stayed under the trigger
    disabled: bool = False  # set by the loop after an auto compaction that did not make room

    @property
    def ratio(self) -> float:
        return self.state.get("ratio", 1.0)

    @ratio.setter
    def ratio(self, value: float) -> None:
        self.state["ratio"] = value

    # -- sizes -----------------------------------------------------------------

    @property
    def usable(self) -> int:
        return self.config.budget(self.model).usable

    @property
    def trigger(self) -> int:
        return self.config.trigger(self.model)

    def raw_tokens(self, chat: list[dict]) -> int:
        return B.estimate_chat(chat) + self.tools_tokens  # an image counts as an image, not its URL

    def chat(self, history: Sequence[WithParts]) -> list[dict]:
        """What the main model would be sent next (the loop builds the same list)."""
        visible = without_failed_compactions(filter_compacted(history))
        return [
            {"role": "system", "content": self.system_prompt},
            *to_chat_messages(visible, strip_media=not getattr(self.model, "images", False)),
        ]

    def context_tokens(self, history: Sequence[WithParts]) -> int:
        """The next main request's size, estimated and calibrated."""
        return int(self.raw_tokens(self.chat(history)) * self.ratio)

    def observe(self, chat: list[dict], tokens: Tokens | None) -> None:
        """Calibrate chars/4 against a step's reported prompt tokens (clamped to 0.5–2×)."""
        if tokens is None or tokens.estimated or tokens.prompt <= 0:
            return
        est = self.raw_tokens(chat)
        if est > 0:
            self.ratio = min(2.0, max(0.5, tokens.prompt / est))

    def is_overflow(self, tokens: Tokens) -> bool:
        """Auto compaction is due (and not switched off for this turn by a compaction that failed)."""
        return not self.disabled and self.config.is_overflow(tokens, self.model)

    def step_done(self, tokens: Tokens) -> None:
        """A normal step finished under the trigger: compaction made progress."""
        if not self.is_overflow(tokens):
            self.consecutive = 0

    def _size(self, items: Sequence[WithParts]) -> int:
        return B.estimate_chat(to_chat_messages(items))

    # -- summary compaction ---------------------------------------------------------

    def compact(
        self,
        history: list[WithParts],
        *,
        cause: str,
        auto: bool,
        continue_after: bool = True,
        instructions: str | None = None,
        step_tokens: int | None = None,
        observer: Observer | None = None,
    ) -> CompactionResult:
        """Summarise the head of ``history``; see the module docstring. Never raises for a
        failed compaction (the result says why); a provider error is re-raised after the
        event is recorded."""
        observer = observer or Observer()
        start = time.monotonic()
        cfg = self.config
        added: list[WithParts] = []
        before = self.context_tokens(history)
        if auto and cfg.guard:
            self.consecutive += 1
        common = dict(tokens_before=before, step_tokens=step_tokens)
        fixed = self.raw_tokens([{"role": "system", "content": self.system_prompt}])
        if auto and cfg.guard and self.trigger and int(fixed * self.ratio) >= self.trigger:
            return self._finish(
                history,
                added,
                start,
                cause,
                "no-gain",
                common,
                message=self._limit_text(
                    int(fixed * self.ratio),
                    "the system prompt and tool definitions alone fill the window",
                ),
            )
        if auto and cfg.guard and self.consecutive > MAX_CONSECUTIVE:
            return self._finish(
                history,
                added,
                start,
                cause,
                "no-gain",
                common,
                message=self._limit_text(
                    before, "compaction already ran twice in this turn without making room"
                ),
            )
        last_user = next((m for m in reversed(history) if isinstance(m.info, UserMessage)), None)
        if last_user is None:
            return self._finish(
                history, added, start, cause, "failed", common, message="nothing to compact yet"
            )

        # 1. what is visible now: previous summary / head / tail / replay
        visible = without_failed_compactions(filter_compacted(history))
        previous = next((m for m in visible if is_summary(m)), None)
        items = [m for m in visible if not is_request(m) and not is_summary(m)]
        replay = None
        if cause == "overflow":
            replay = self._replay_target(items)
            if replay is not None:
                idx = items.index(replay)
                if any(is_real_user(m) for m in items[:idx]) or previous is not None:
                    items = items[:idx]
                else:
                    replay = None

        pruned_parts = pruned_tokens = 0
        if cfg.prune_tail and cfg.prune:
            # The head's outputs leave the view with the summary anyway, and the tail keeps its
            # messages verbatim: only its newest outputs (within a small budget) stay as they are;
            # every other output becomes a placeholder naming its saved file.
            room, keep, targets = cfg.tail_output_budget(self.model), True, []
            for m in reversed(items):
                for p in reversed(m.parts):
                    if (
                        not (isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted))
                        or p.state.time_compacted
                        or p.tool in cfg.protected_tools
                    ):
                        continue
                    size = B.estimate(p.state.output)
                    if keep and size <= room:
                        room -= size
                        continue
                    keep = False
                    targets.append(p)
            if targets:
                pruned_parts, pruned_tokens = len(targets), self._clear(history, targets)
                fresh = {m.info.id: m for m in history}
                items = [fresh.get(m.info.id, m) for m in items]
                if previous is not None:
                    previous = fresh.get(previous.info.id, previous)
        common.update(parts_pruned=pruned_parts, tokens_pruned=pruned_tokens)

        turns = sum(1 for m in items if is_real_user(m))
        # the tail: the last tail_turns turns within the budget; a manual compaction (between
        # turns) keeps every recent turn the budget holds, as OpenCode 1.18 does
        tail_turns = min(cfg.tail_turns, turns)
        if replay is not None:
            tail_turns = 0
        elif cfg.manual_tail and not auto and cfg.tail_turns:
            tail_turns = turns
        target = cfg.summary_target(self.model) if cfg.pin else 0
        tail_budget = cfg.tail_budget(self.model)
        if cfg.guard and self.trigger:  # the tail must leave room for the summary and some work
            tail_budget = min(tail_budget, max(0, self.trigger // 2 - fixed - target))
        cut = select_tail(items, turns=tail_turns, budget=tail_budget, size=self._size)
        while cut == 0 and tail_turns > 0:  # everything fits the tail: keep less so there is a head
            tail_turns -= 1
            cut = select_tail(items, turns=tail_turns, budget=tail_budget, size=self._size)
        head, tail = items[:cut], items[cut:]
        if not head:
            return self._finish(
                history,
                added,
                start,
                cause,
                "failed",
                common,
                message="nothing to compact: no messages since the last summary",
            )

        # 2. the request (created now, so that it is newer than every tail message)
        request = self._request(last_user.info, auto=auto, overflow=cause == "overflow")
        history.append(request)
        added.append(request)
        common["request_id"] = request.info.id
        for part in request.parts:
            observer.on_part(part)
        pair = [m for m in visible if is_request(m) or is_summary(m)]
        common.update(
            head_messages=len(head),
            head_tokens=self._size(head),
            tail_messages=len(tail),
            tail_tokens=self._size(tail),
            tail_start_id=tail[0].info.id if tail else None,
            summary_input=cfg.summary_input,
        )

        # 3. the summary, with fallbacks when its request does not fit. Ours asks for about a tenth
        # of what it summarises, at most the window's share: the tail and the pinned rules are kept
        # verbatim beside it, so the summary need not restate them.
        if cfg.pin:
            content = B.estimate(transcript(head)) + (
                self._size([previous]) if previous is not None else 0
            )
            target = min(target, max(SUMMARY_MIN, content // 10))
        summary_item, attempts, error = self._summarise(
            history, added, request, previous, pair, head, replay, instructions, target, observer
        )
        calls = [a for a in attempts if a.get("sent")]
        common.update(
            llm_calls=len(calls),
            attempts=tuple(attempts),
            cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage)),
            summary_input_tokens=sum(a.get("inputTokens", 0) for a in calls),
            summary_output_tokens=sum(a.get("outputTokens", 0) for a in calls),
            model=f"{self._summary_model().provider_id}/{self._summary_model().model_id}",
        )
        if summary_item is None:
            limit = self._summary_model()
            return self._finish(
                history,
                added,
                start,
                cause,
                "failed",
                common,
                message=error
                or (
                    f"the conversation is too large to compact: "
                    f"{'even a shortened' if cfg.fallbacks else 'the'} summary request does not fit "
                    f"{limit.provider_id}/{limit.model_id}'s {limit.context:,}-token context — start a new "
                    "session with %%agent --new"
                ),
            )
        common["summary_id"] = summary_item.info.id

        # 4. pinned section, then the inflation guard
        if cfg.pin:
            archive = self._archive(head)
            summary_item = self._pin(history, summary_item, head, tail, replay, observer, archive)
        summary_tokens = self._size([summary_item])
        common["summary_tokens"] = summary_tokens
        replaced = common["head_tokens"] + (self._size([previous]) if previous is not None else 0)
        if cfg.guard and summary_tokens >= replaced:
            self._reject(
                history,
                summary_item,
                f"the summary ({summary_tokens:,} tokens) is not smaller "
                f"than what it replaces ({replaced:,})",
            )
            return self._finish(
                history,
                added,
                start,
                cause,
                "rejected",
                common,
                message=self._limit_text(
                    before, "the summary would not be smaller than the messages it replaces"
                ),
            )

        # 5. the tail marker, then what follows a summary
        if tail:
            part = replace(request.parts[0], tail_start_id=tail[0].info.id)
            self.store.put(part)
            request = WithParts(request.info, (part, *request.parts[1:]))
            put_back(history, request)
        if auto and replay is not None:
            item = self._replay(replay, request.info)
            history.append(item)
            added.append(item)
        elif auto and continue_after:
            item = self._continue(request.info, history, tail, overflow=cause == "overflow")
            if item is not None:
                history.append(item)
                added.append(item)
        self.store.flush(sync=True)
        after = self.context_tokens(history)
        outcome = "ok"
        message = ""
        if cfg.guard and auto and self.trigger and after >= self.trigger:
            outcome, message = (
                "no-gain",
                self._limit_text(after, "after compaction the kept context still fills the window"),
            )
        return self._finish(
            history, added, start, cause, outcome, common, message=message, tokens_after=after
        )

    def _limit_text(self, tokens: int, why: str) -> str:
        b = self.config.budget(self.model)
        return (
            f"{why}: the conversation needs about {tokens:,} tokens and {self.model.provider_id}/"
            f"{self.model.model_id} allows {b.usable:,} (context {b.context:,} minus output and "
            f"{b.reserved:,} reserved) — start a new session with %%agent --new, or set a larger "
            "context in model_overrides"
        )

    def _finish(
        self, history, added, start, cause, outcome, common, *, message="", tokens_after=None
    ) -> CompactionResult:
        if tokens_after is None:
            tokens_after = self.context_tokens(history)
        event = self._event(
            history,
            "summary",
            cause,
            outcome,
            start,
            tokens_after=tokens_after,
            error=message or None,
            **common,
        )
        self._record(event)
        return CompactionResult(event, added, message)

    def _event(self, history, kind, cause, outcome, start, **values) -> CompactionEvent:
        session_id = history[0].info.session_id if history else ""
        return CompactionEvent(
            id=ids.ascending("event"),
            session_id=session_id,
            kind=kind,
            cause=cause,
            outcome=outcome,
            time_created=now_ms(),
            duration_ms=int((time.monotonic() - start) * 1000),
            usable=self.usable,
            trigger=self.trigger,
            **values,
        )

    def _record(self, event: CompactionEvent) -> None:
        self.store.put(event)
        self.store.flush(sync=True)
