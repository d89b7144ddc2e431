"""The compaction policies CompactBench compares, as (settings, strategy) pairs: the
package's own (:class:`ProductStrategy`) and OpenCode v1.2.16 as specified, written as a
:class:`~jupyter_session_agent.loop.compaction.CompactionStrategy` the benchmark passes to
the same :class:`Compactor`:

* prune at the end of a loop with the fixed 40k / 20k protect / minimum (not scaled by the
  window); nothing else is cleared at a summary;
* a summary of everything: no verbatim tail, the raw messages (the earlier request and
  summary included, media stripped) as the summary input, one attempt (no fallbacks), no
  size target and no pinned section;
* no guards (no refusal before a call, no rejected summary, no "no gain");
* after an overflow error, the newest request is replayed even when the turn had already
  run tools; after an auto compaction the continue message always follows (also when the
  turn had ended), without restating the latest request.

:class:`OpenCodeReservedBug` adds v1.2.16's ``isOverflow`` (the reserved tokens are not
subtracted when the model has no input limit); :class:`RawMessagesInput` is ours with the
raw messages as the summary input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jupyter_session_agent.core import budget as B
from jupyter_session_agent.core.chat import to_chat_messages
from jupyter_session_agent.core.compaction_config import TOOL_OUTPUT_MAX_CHARS, CompactionConfig
from jupyter_session_agent.core.messages import ToolCompleted, ToolPart, WithParts, replace
from jupyter_session_agent.loop.compaction import (
    SUMMARY_SYSTEM,
    CompactionStrategy,
    PinInput,
    Pinner,
    ProductStrategy,
    SummaryInput,
    continue_text,
)
from jupyter_session_agent.loop.compaction.items import is_real_user


def messages_chat(summary: SummaryInput) -> list[dict]:
    """v1.2.16's summary request: the filtered history (earlier request and summary included),
    media stripped, the request itself ("What did we do so far?") unless replaying, then the
    prompt."""
    request = [] if summary.replay is not None else [summary.request]
    msgs = [*summary.pair, *summary.head, *request]
    if summary.tool_chars < TOOL_OUTPUT_MAX_CHARS:
        msgs = [_short_outputs(m, summary.tool_chars) for m in msgs]
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        *to_chat_messages(msgs, strip_media=True),
        {"role": "user", "content": summary.prompt},
    ]


class OpenCodeV1216:
    """OpenCode v1.2.16's compaction (see the module docstring)."""

    summary_input = "messages"

    def budget(self, config: CompactionConfig, model: B.ModelInfo) -> B.Budget:
        return config.budget(model)

    def prune_limits(self, config: CompactionConfig, model: B.ModelInfo) -> tuple[int, int]:
        return config.prune_protect, config.prune_minimum

    def refusal(
        self, *, fixed: int, before: int, consecutive: int, trigger: int
    ) -> tuple[int, str] | None:
        return None

    def replay_target(self, items: Sequence[WithParts]) -> WithParts | None:
        return next((m for m in reversed(items) if is_real_user(m)), None)

    def outputs_to_clear(
        self, items: Sequence[WithParts], config: CompactionConfig, model: B.ModelInfo
    ) -> list[ToolPart]:
        return []

    def tail_limits(
        self,
        config: CompactionConfig,
        model: B.ModelInfo,
        *,
        turns: int,
        auto: bool,
        fixed: int,
        trigger: int,
    ) -> tuple[int, int]:
        return 0, config.tail_budget(model)  # no tail: the summary replaces everything

    def summary_target(
        self,
        config: CompactionConfig,
        model: B.ModelInfo,
        *,
        head: Sequence[WithParts],
        previous_tokens: int,
    ) -> int:
        return 0

    def summary_levels(self, head: list[WithParts]) -> list[tuple[list[WithParts], int]]:
        return [(head, TOOL_OUTPUT_MAX_CHARS)]

    def summary_chat(self, summary: SummaryInput) -> list[dict]:
        return messages_chat(summary)

    def pin(self, pinner: Pinner, summary: WithParts, pin: PinInput) -> WithParts:
        return summary

    def accepts(self, *, summary_tokens: int, replaced: int) -> bool:
        return True

    def no_gain(self, *, after: int, trigger: int) -> bool:
        return False

    def continue_text(
        self, *, latest: WithParts | None, tail: Sequence[WithParts], overflow: bool
    ) -> str | None:
        return continue_text(overflow=overflow)

    def continue_after(self, *, finished: bool, last_step: bool) -> bool:
        return not last_step


class OpenCodeReservedBug(OpenCodeV1216):
    """v1.2.16 with its ``isOverflow``: reserved not subtracted without an input limit."""

    def budget(self, config: CompactionConfig, model: B.ModelInfo) -> B.Budget:
        limits = config.budget(model)
        if model.input:
            return limits
        usable = max(0, model.context - limits.max_output)
        return B.Budget(limits.context, limits.max_output, limits.reserved, usable)


class RawMessagesInput(ProductStrategy):
    """Ours with v1.2.16's summary input (the raw messages) instead of a transcript."""

    summary_input = "messages"

    def summary_chat(self, summary: SummaryInput) -> list[dict]:
        return messages_chat(summary)


@dataclass(frozen=True)
class Policy:
    """A compaction policy: the settings and the strategy the compactor runs with."""

    config: CompactionConfig = field(default_factory=CompactionConfig)
    strategy: CompactionStrategy = field(default_factory=ProductStrategy)


OPENCODE = Policy(CompactionConfig(tail_turns=0), OpenCodeV1216())


def _short_outputs(item: WithParts, chars: int) -> WithParts:
    parts = []
    for p in item.parts:
        if (
            isinstance(p, ToolPart)
            and isinstance(p.state, ToolCompleted)
            and len(p.state.output) > chars
        ):
            p = replace(p, state=replace(p.state, output=p.state.output[:chars] + "\n[truncated]"))
        parts.append(p)
    return WithParts(item.info, tuple(parts))
