"""The summary call of a summary compaction: :class:`Summariser` sends the summary request
(assistant, ``summary: true``, agent ``compaction``) and, when it does not fit, the smaller
ones the strategy offers (shorter tool outputs, then the oldest head turns dropped);
:class:`SummaryJob` is what it is asked to summarise, :class:`SummaryOutcome` what came of it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core import budget as B
from ...core import ids
from ...core.compaction_config import SUMMARY_AGENT
from ...core.messages import AssistantMessage, TextPart, WithParts, now_ms
from ..history import History
from ..step import Observer, StepProcessor, StepSetup, run_step
from .followups import reject
from .prompts import PINNED_NOTE, SUMMARY_TEMPLATE
from .strategy import CompactionStrategy, SummaryInput


@dataclass(frozen=True)
class SummaryJob:
    """What to summarise: the head after the previous summary, for the compaction ``request``."""

    request: WithParts
    previous: WithParts | None
    pair: Sequence[WithParts]  # the visible earlier request and summary
    head: list[WithParts]
    replay: WithParts | None = None
    instructions: str | None = None  # the user's, for a manual compaction
    target: int = 0  # tokens the summary is asked to stay under (0: no target, no pinned note)


@dataclass(frozen=True)
class SummaryOutcome:
    """The summary (None: none usable), one record per attempt, and the error to show."""

    summary: WithParts | None
    attempts: tuple[dict, ...] = field(default=())
    error: str | None = None

    @property
    def sent(self) -> list[dict]:
        return [a for a in self.attempts if a.get("sent")]


@dataclass
class Summariser:
    """Sends summary requests to ``provider`` as ``model``; ``request_factory(chat,
    max_tokens)`` builds the provider's request."""

    store: Any
    model: B.ModelInfo
    provider: Any  # .stream(request)
    request_factory: Callable[[list[dict], int | None], Any]
    strategy: CompactionStrategy
    max_retries: int = 2
    cwd: str = "."
    sleep: Callable[[float], None] = time.sleep

    def summarise(
        self,
        job: SummaryJob,
        history: History | list[WithParts],
        added: list[WithParts],
        observer: Observer,
    ) -> SummaryOutcome:
        """Try the strategy's summary inputs largest first: one that is estimated not to fit
        is skipped (unless it is the last), one the provider refuses as too long is followed
        by the next; any other failure ends the attempts."""
        limit = B.budget(self.model, None).usable if self.model.context else 0
        levels = self.strategy.summary_levels(job.head)
        prompt = _prompt(job)
        attempts: list[dict] = []
        for level, (head, chars) in enumerate(levels):
            chat = self.strategy.summary_chat(
                SummaryInput(
                    request=job.request,
                    previous=job.previous,
                    pair=job.pair,
                    head=head,
                    replay=job.replay,
                    tool_chars=chars,
                    prompt=prompt,
                )
            )
            est = B.estimate(json.dumps(chat, ensure_ascii=False))
            if limit and est >= limit and level < len(levels) - 1:
                attempts.append(
                    {"level": level, "estimatedTokens": est, "outcome": "skipped", "sent": False}
                )
                continue
            item, outcome = self._call(history, added, job, chat, observer)
            assert isinstance(item.info, AssistantMessage)  # the step's message
            tokens = item.info.tokens
            attempts.append(
                {
                    "level": level,
                    "estimatedTokens": est,
                    "inputTokens": tokens.prompt,
                    "outputTokens": tokens.output,
                    "outcome": outcome,
                    "sent": True,
                }
            )
            if outcome == "ok":
                return SummaryOutcome(item, tuple(attempts))
            if outcome != "overflow":
                err = getattr(item.info, "error", None) or {}
                what = err.get("data", {}).get("message", outcome)
                return SummaryOutcome(None, tuple(attempts), f"compaction failed: {what}")
        return SummaryOutcome(None, tuple(attempts))

    def _call(
        self,
        history: History | list[WithParts],
        added: list[WithParts],
        job: SummaryJob,
        chat: list[dict],
        observer: Observer,
    ) -> tuple[WithParts, str]:
        """One summary call: (the summary message, "ok" | "overflow" | "failed")."""
        model = self.model
        info = AssistantMessage(
            id=ids.ascending("message"),
            session_id=job.request.info.session_id,
            parent_id=job.request.info.id,
            time_created=now_ms(),
            provider_id=model.provider_id,
            model_id=model.model_id,
            agent=SUMMARY_AGENT,
            mode=SUMMARY_AGENT,
            path={"cwd": self.cwd, "root": self.cwd},
            summary=True,
        )
        max_tokens = None
        if job.target and model.output:
            max_tokens = min(model.max_output_tokens, max(1_024, job.target * 2))
        chat_request = self.request_factory(chat, max_tokens)
        setup = StepSetup(
            store=self.store,
            model=model,
            tools={},
            run_tool=_no_tool,
            max_retries=self.max_retries,
            auto_compact=False,
            sleep=self.sleep,
        )
        processor = StepProcessor(
            setup, stream=lambda: self.provider.stream(chat_request), observer=observer
        )
        result = run_step(processor, info, history, added)
        item = history[-1]
        if result.outcome == "compact":
            return item, "overflow"
        message = result.message
        text = "".join(p.text for p in item.parts if isinstance(p, TextPart)).strip()
        problem = None
        if message.error:
            problem = message.error.get("data", {}).get("message", "error")
        elif result.tool_calls:
            problem = "the summariser called a tool"
        elif not text:
            problem = "the summary was empty"
        if problem:
            if not message.error:
                reject(self.store, history, item, problem, name="CompactionFailedError")
            return item, "failed"
        return item, "ok"


def _prompt(job: SummaryJob) -> str:
    prompt = SUMMARY_TEMPLATE
    if job.target:
        prompt += "\n\n" + PINNED_NOTE.format(tokens=job.target)
    if job.instructions:
        prompt += f"\n\nAdditional instructions from the user: {job.instructions}"
    return prompt


def _no_tool(tool, args, call):  # pragma: no cover - the summariser gets no tools
    raise RuntimeError("the compaction agent has no tools")
