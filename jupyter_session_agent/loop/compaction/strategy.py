"""The policy of a summary compaction: :class:`CompactionStrategy`, the decisions where one
compaction policy differs from another, and :class:`ProductStrategy`, this package's.

The :class:`~.compactor.Compactor` runs the same steps for every policy (prune, previous
summary / head / tail / replay, the summary call, the event); a strategy answers the
questions along the way: how large the window is, how much tool output a prune keeps,
whether a compaction is refused before any work, what is replayed after an overflow error,
which outputs leave the view at a summary, how long the verbatim tail is, how the head is
sent to the summariser (and the smaller requests tried when it does not fit), what is
pinned on the summary, when a summary or its result is rejected, and what follows it.
A benchmark passes another strategy (CompactBench's OpenCode v1.2.16 baseline); the
session always uses :class:`ProductStrategy`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ...core import budget as B
from ...core import compaction_config as C
from ...core.compaction_config import MAX_CONSECUTIVE, SUMMARY_MIN, TOOL_OUTPUT_MAX_CHARS
from ...core.messages import AssistantMessage, TextPart, ToolCompleted, ToolPart, WithParts
from ..history import History
from ..step import Observer
from .items import is_real_user, user_text
from .pinned import Pinner
from .prompts import PREVIOUS_INTRO, SUMMARY_SYSTEM, TRANSCRIPT_INTRO, continue_text
from .transcribe import transcript

Level = tuple[list[WithParts], int]  # (the head to send, tool outputs cut at this many chars)


@dataclass(frozen=True)
class SummaryInput:
    """What one summary request is built from."""

    request: WithParts  # the compaction request (a user message with a compaction part)
    previous: WithParts | None  # the previous summary, if any
    pair: Sequence[WithParts]  # the visible earlier request and summary
    head: Sequence[WithParts]  # the messages to summarise (at this fallback level)
    replay: WithParts | None  # the request replayed after an overflow error, if any
    tool_chars: int  # tool outputs cut at this many characters
    prompt: str  # the summary template with the target and the user's instructions


@dataclass(frozen=True)
class PinInput:
    """What the pinned section of a summary is written from."""

    history: History | list[WithParts]
    head: Sequence[WithParts]
    tail: Sequence[WithParts]
    replay: WithParts | None
    observer: Observer


class CompactionStrategy(Protocol):
    """The decisions of a compaction policy (see the module docstring)."""

    summary_input: str  # the label recorded on the event: "transcript" or "messages"

    def budget(self, config: C.CompactionConfig, model: B.ModelInfo) -> B.Budget:
        """The window: context, output, reserved, usable."""
        ...

    def prune_limits(self, config: C.CompactionConfig, model: B.ModelInfo) -> tuple[int, int]:
        """(protect, minimum) of the prune walk, in estimated tokens."""
        ...

    def refusal(
        self, *, fixed: int, before: int, consecutive: int, trigger: int
    ) -> tuple[int, str] | None:
        """(tokens, why) when an auto compaction is refused before any work, else None."""
        ...

    def replay_target(self, items: Sequence[WithParts]) -> WithParts | None:
        """The request replayed after an overflow error (None: continue instead)."""
        ...

    def outputs_to_clear(
        self, items: Sequence[WithParts], config: C.CompactionConfig, model: B.ModelInfo
    ) -> list[ToolPart]:
        """The tool outputs a summary compaction clears (recoverably) besides the head's."""
        ...

    def tail_limits(
        self,
        config: C.CompactionConfig,
        model: B.ModelInfo,
        *,
        turns: int,
        auto: bool,
        fixed: int,
        trigger: int,
    ) -> tuple[int, int]:
        """(turns, tokens) the verbatim tail may keep; ``turns``: the real user turns there are."""
        ...

    def summary_target(
        self,
        config: C.CompactionConfig,
        model: B.ModelInfo,
        *,
        head: Sequence[WithParts],
        previous_tokens: int,
    ) -> int:
        """The summary size asked for, in tokens (0: none asked, no pinned section)."""
        ...

    def summary_levels(self, head: list[WithParts]) -> list[Level]:
        """The summary inputs to try in turn, largest first (one: no fallback)."""
        ...

    def summary_chat(self, summary: SummaryInput) -> list[dict]:
        """The chat messages of one summary request."""
        ...

    def pin(self, pinner: Pinner, summary: WithParts, pin: PinInput) -> WithParts:
        """The summary with whatever this policy pins on it."""
        ...

    def accepts(self, *, summary_tokens: int, replaced: int) -> bool:
        """Whether a summary of ``summary_tokens`` may replace ``replaced`` tokens."""
        ...

    def no_gain(self, *, after: int, trigger: int) -> bool:
        """Whether an auto compaction that leaves ``after`` tokens made no room."""
        ...

    def continue_text(
        self, *, latest: WithParts | None, tail: Sequence[WithParts], overflow: bool
    ) -> str | None:
        """The synthetic continue message after an auto compaction (None: none is sent)."""
        ...

    def continue_after(self, *, finished: bool, last_step: bool) -> bool:
        """Whether the turn goes on after a compaction at the end of a step."""
        ...


class ProductStrategy:
    """This package's policy: the window-scaled prune, the guards, the tail, a transcript
    as the summary input with fallbacks, the pinned section, the restated request."""

    summary_input = "transcript"

    def budget(self, config: C.CompactionConfig, model: B.ModelInfo) -> B.Budget:
        return config.budget(model)

    def prune_limits(self, config: C.CompactionConfig, model: B.ModelInfo) -> tuple[int, int]:
        return config.prune_limits(model)

    def refusal(
        self, *, fixed: int, before: int, consecutive: int, trigger: int
    ) -> tuple[int, str] | None:
        if trigger and fixed >= trigger:
            return fixed, "the system prompt and tool definitions alone fill the window"
        if consecutive > MAX_CONSECUTIVE:
            return before, "compaction already ran twice in this turn without making room"
        return None

    def replay_target(self, items: Sequence[WithParts]) -> WithParts | None:
        """The newest real user message, only when the overflow hit the turn's first step
        (everything after it is the failed step): replaying a turn that had already run
        tools would run them again and overflow again."""
        users = [i for i, m in enumerate(items) if is_real_user(m)]
        if not users:
            return None
        after = items[users[-1] + 1 :]
        if any(isinstance(m.info, AssistantMessage) and not m.info.error for m in after):
            return None
        return items[users[-1]]

    def outputs_to_clear(
        self, items: Sequence[WithParts], config: C.CompactionConfig, model: B.ModelInfo
    ) -> list[ToolPart]:
        """The head's outputs leave the view with the summary anyway, and the tail keeps its
        messages verbatim: only its newest outputs (within a small budget) stay as they are;
        every other output becomes a placeholder naming its saved file."""
        room, keep, targets = config.tail_output_budget(model), True, []
        for m in reversed(items):
            for p in reversed(m.parts):
                if (
                    not (isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted))
                    or p.state.time_compacted
                    or p.tool in config.protected_tools
                ):
                    continue
                size = B.estimate(p.state.output)
                if keep and size <= room:
                    room -= size
                    continue
                keep = False
                targets.append(p)
        return targets

    def tail_limits(
        self,
        config: C.CompactionConfig,
        model: B.ModelInfo,
        *,
        turns: int,
        auto: bool,
        fixed: int,
        trigger: int,
    ) -> tuple[int, int]:
        """The last ``tail_turns`` turns within the tail budget; a manual compaction (between
        turns) keeps every recent turn the budget holds; the tail leaves room for the summary
        and some work."""
        tail_turns = turns if not auto and config.tail_turns else min(config.tail_turns, turns)
        budget = config.tail_budget(model)
        if trigger:
            budget = min(budget, max(0, trigger // 2 - fixed - config.summary_target(model)))
        return tail_turns, budget

    def summary_target(
        self,
        config: C.CompactionConfig,
        model: B.ModelInfo,
        *,
        head: Sequence[WithParts],
        previous_tokens: int,
    ) -> int:
        """About a tenth of what it summarises, at most the window's share: the tail and the
        pinned words are kept verbatim beside it, so the summary need not restate them."""
        content = B.estimate(transcript(head)) + previous_tokens
        return min(config.summary_target(model), max(SUMMARY_MIN, content // 10))

    def summary_levels(self, head: list[WithParts]) -> list[Level]:
        """Ever smaller summary inputs: full; short tool outputs; the oldest half of the head
        dropped (×3)."""
        levels = [(head, TOOL_OUTPUT_MAX_CHARS), (head, 300)]
        part = head
        for _ in range(3):
            starts = [i for i, m in enumerate(part) if is_real_user(m)]
            if len(part) < 2:
                break
            mid = len(part) // 2
            cut = next((s for s in starts if s >= mid), mid)
            part = part[cut:] or part[-1:]
            levels.append((part, 300))
        return levels

    def summary_chat(self, summary: SummaryInput) -> list[dict]:
        return transcript_chat(summary)

    def pin(self, pinner: Pinner, summary: WithParts, pin: PinInput) -> WithParts:
        archive = pinner.archive(pin.head)
        return pinner.pin(
            pin.history,
            summary,
            head=pin.head,
            tail=pin.tail,
            replay=pin.replay,
            observer=pin.observer,
            archive=archive,
        )

    def accepts(self, *, summary_tokens: int, replaced: int) -> bool:
        return summary_tokens < replaced

    def no_gain(self, *, after: int, trigger: int) -> bool:
        return bool(trigger) and after >= trigger

    def continue_text(
        self, *, latest: WithParts | None, tail: Sequence[WithParts], overflow: bool
    ) -> str | None:
        """None when the tail already ends with the unanswered request (the model answers
        it); the latest request restated when it was summarised."""
        in_tail = latest is not None and any(m.info.id == latest.info.id for m in tail)
        if latest is not None and in_tail and tail[-1].info.id == latest.info.id:
            return None
        restate = None if latest is None or in_tail else user_text(latest)
        return continue_text(overflow=overflow, restate=restate)

    def continue_after(self, *, finished: bool, last_step: bool) -> bool:
        """No continue call when the turn had ended (or could not go on)."""
        return not (last_step or finished)


def transcript_chat(summary: SummaryInput) -> list[dict]:
    """The head as a text transcript (after the previous summary), then the prompt."""
    blocks = []
    if summary.previous is not None:
        text = "\n\n".join(
            p.text
            for p in summary.previous.parts
            if isinstance(p, TextPart) and not p.synthetic and p.text
        )
        blocks.append(f"{PREVIOUS_INTRO}\n\n<previous-summary>\n{text}\n</previous-summary>")
    body = transcript(summary.head, tool_chars=summary.tool_chars)
    blocks.append(f"{TRANSCRIPT_INTRO}\n\n<transcript>\n{body}\n</transcript>")
    blocks.append(summary.prompt)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {"role": "user", "content": "\n\n".join(blocks)},
    ]
