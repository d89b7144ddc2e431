"""Prune (OpenCode's, exactly): :func:`plan_prune` picks the old tool outputs to
clear; the Compactor's prune clears them recoverably (the output is saved to
``<data_dir>/tool-output/<part id>`` unless truncation already saved it, and the model sees
a placeholder naming that file) and records a :class:`CompactionEvent`. Protect/minimum
are capped by the window (``CompactionConfig.prune_limits``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ...core import budget as B
from ...core.compaction_config import (
    OUTPUT_DIR,
    PRUNE_MINIMUM,
    PRUNE_PROTECT,
    PRUNE_PROTECTED_TOOLS,
)
from ...core.messages import ToolCompleted, ToolPart, UserMessage, WithParts, now_ms, replace
from .events import CompactionEvent
from .items import is_summary


def plan_prune(
    history: Sequence[WithParts],
    *,
    protect: int = PRUNE_PROTECT,
    minimum: int = PRUNE_MINIMUM,
    protected_tools: Sequence[str] = PRUNE_PROTECTED_TOOLS,
) -> tuple[list[ToolPart], int]:
    """OpenCode's prune walk: the tool parts to clear and their estimated tokens.

    Newest → oldest: skip until two user messages were seen, stop at a summary
    or at an output already cleared, keep the newest ``protect`` tokens of tool
    output, clear the rest if that is more than ``minimum`` (else nothing).
    """
    turns = total = pruned = 0
    chosen: list[ToolPart] = []
    for item in reversed(history):
        if isinstance(item.info, UserMessage):
            turns += 1
        if turns < 2:
            continue
        if is_summary(item):
            break
        stop = False
        for part in reversed(item.parts):
            if not (isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)):
                continue
            if part.tool in protected_tools:
                continue
            if part.state.time_compacted:
                stop = True
                break
            est = B.estimate(part.state.output)
            total += est
            if total > protect:
                pruned += est
                chosen.append(part)
        if stop:
            break
    if pruned > minimum:
        return chosen, pruned
    return [], 0


class PruneMixin:
    """The prune as :class:`~.compactor.Compactor` applies it (one of its bases)."""

    # -- prune -------------------------------------------------------------------

    def prune(self, history: list[WithParts], *, cause: str = "auto") -> CompactionEvent | None:
        """OpenCode's end-of-loop prune; records an event when something was cleared."""
        if not self.config.prune or not history:
            return None
        start = time.monotonic()
        protect, minimum = self.config.prune_limits(self.model)
        parts, tokens = plan_prune(
            history, protect=protect, minimum=minimum, protected_tools=self.config.protected_tools
        )
        if not parts:
            return None
        before = self.context_tokens(history)
        self._clear(history, parts)
        event = self._event(
            history,
            "prune",
            cause,
            "ok",
            start,
            tokens_before=before,
            tokens_after=self.context_tokens(history),
            parts_pruned=len(parts),
            tokens_pruned=tokens,
        )
        self._record(event)
        return event

    def _clear(self, history: list[WithParts], parts: Sequence[ToolPart]) -> int:
        """Mark ``parts`` pruned (saving their output once) and write them; returns tokens cleared."""
        if not parts:
            return 0
        now = now_ms()
        wanted = {p.id for p in parts}
        updated: dict[str, ToolPart] = {}
        cleared = 0
        for i, item in enumerate(history):
            if not any(p.id in wanted for p in item.parts):
                continue
            new_parts = []
            for part in item.parts:
                if (
                    part.id in wanted
                    and isinstance(part.state, ToolCompleted)
                    and not part.state.time_compacted
                ):
                    metadata = dict(part.state.metadata or {})
                    if not metadata.get("outputPath"):
                        metadata["outputPath"] = self._save_output(part)
                    part = replace(
                        part, state=replace(part.state, time_compacted=now, metadata=metadata)
                    )
                    updated[part.id] = part
                    cleared += B.estimate(part.state.output)
                new_parts.append(part)
            history[i] = WithParts(item.info, tuple(new_parts))
        if updated:
            self.store.put(*updated.values())
            self.store.flush(sync=False)
        return cleared

    def _save_output(self, part: ToolPart) -> str:
        path = Path(self.data_dir) / OUTPUT_DIR / part.id
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(part.state.output, encoding="utf-8", newline="")
        return str(path)
