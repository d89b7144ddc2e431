"""Prune (OpenCode's, exactly): :func:`plan_prune` is the walk that picks the old tool outputs
to clear; :func:`prune_selection` is what the loop's prune would clear now (the one selection:
the budget gauge asks it too); :class:`Pruner` clears them recoverably (the output is saved to
``<data_dir>/tool-output/<part id>`` unless truncation already saved it, and the model sees
a placeholder naming that file) and records a :class:`CompactionEvent`. Protect/minimum
are capped by the window (``CompactionConfig.prune_limits``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import budget as B
from ...core.compaction_config import (
    OUTPUT_DIR,
    PRUNE_MINIMUM,
    PRUNE_PROTECT,
    PRUNE_PROTECTED_TOOLS,
    CompactionConfig,
)
from ...core.messages import ToolCompleted, ToolPart, UserMessage, WithParts, now_ms, replace
from ..history import History
from .events import CompactionEvent, EventLog
from .items import is_summary


@dataclass(frozen=True)
class PruneWalk:
    """What one prune walk saw: the outputs beyond the protected newest tokens (``chosen``,
    ``prunable`` tokens) and every output it counted (``counted`` tokens)."""

    chosen: tuple[ToolPart, ...]
    counted: int
    prunable: int

    def selection(self, minimum: int) -> tuple[list[ToolPart], int]:
        """What the prune clears: the chosen outputs when they are more than ``minimum``."""
        return (list(self.chosen), self.prunable) if self.prunable > minimum else ([], 0)


def walk_prune(
    history: Sequence[WithParts],
    *,
    protect: int = PRUNE_PROTECT,
    protected_tools: Sequence[str] = PRUNE_PROTECTED_TOOLS,
) -> PruneWalk:
    """OpenCode's prune walk. Newest → oldest: skip until two user messages were seen, stop at
    a summary or at an output already cleared, count every tool output (but those of
    ``protected_tools``), keep the newest ``protect`` tokens of them, choose the rest."""
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
    return PruneWalk(tuple(chosen), total, pruned)


def plan_prune(
    history: Sequence[WithParts],
    *,
    protect: int = PRUNE_PROTECT,
    minimum: int = PRUNE_MINIMUM,
    protected_tools: Sequence[str] = PRUNE_PROTECTED_TOOLS,
) -> tuple[list[ToolPart], int]:
    """The tool parts the prune walk clears and their estimated tokens: those beyond the
    newest ``protect`` tokens of tool output, if they are more than ``minimum`` (else none)."""
    walk = walk_prune(history, protect=protect, protected_tools=protected_tools)
    return walk.selection(minimum)


def prune_selection(
    history: Sequence[WithParts],
    config: CompactionConfig,
    model: B.ModelInfo,
    *,
    limits: tuple[int, int] | None = None,
    walk: PruneWalk | None = None,
) -> tuple[list[ToolPart], int]:
    """The tool outputs the loop's prune would clear now and their estimated tokens (none when
    prune is off). ``limits``: (protect, minimum); default ``config.prune_limits(model)``;
    ``walk``: the walk of ``history`` with that ``protect``, when the caller has it already."""
    if not config.prune or not history:
        return [], 0
    protect, minimum = limits if limits is not None else config.prune_limits(model)
    if walk is None:
        walk = walk_prune(history, protect=protect, protected_tools=config.protected_tools)
    return walk.selection(minimum)


@dataclass
class Pruner:
    """Clears old tool outputs recoverably and records the prune.

    ``limits``: (protect, minimum) of the walk; ``size(history)``: the next request's size in
    tokens (for the event's before / after)."""

    store: Any
    data_dir: Path
    config: CompactionConfig
    model: B.ModelInfo
    limits: tuple[int, int]
    size: Callable[[Sequence[WithParts]], int]
    log: EventLog

    def due(self, history: Sequence[WithParts]) -> tuple[list[ToolPart], int]:
        """What :meth:`prune` would clear now (parts, estimated tokens)."""
        return prune_selection(history, self.config, self.model, limits=self.limits)

    def prune(
        self, history: History | list[WithParts], *, cause: str = "auto"
    ) -> CompactionEvent | None:
        """OpenCode's end-of-loop prune; records an event when something was cleared."""
        start = time.monotonic()
        parts, tokens = self.due(history)
        if not parts:
            return None
        before = self.size(history)
        self.clear(history, parts)
        event = self.log.event(
            history,
            "prune",
            cause=cause,
            outcome="ok",
            start=start,
            tokens_before=before,
            tokens_after=self.size(history),
            parts_pruned=len(parts),
            tokens_pruned=tokens,
        )
        return self.log.record(event)

    def clear(self, history: History | list[WithParts], parts: Sequence[ToolPart]) -> int:
        """Mark ``parts`` pruned (saving their output once) and write them; returns tokens cleared."""
        if not parts:
            return 0
        now = now_ms()
        wanted = {p.id for p in parts}
        updated: dict[str, ToolPart] = {}
        cleared = 0
        for item in history:
            if not any(p.id in wanted for p in item.parts):
                continue
            for part in item.parts:
                if (
                    part.id in wanted
                    and isinstance(part, ToolPart)
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
        History.of(history).update_parts(updated.values())
        if updated:
            self.store.put(*updated.values())
            self.store.flush(sync=False)
        return cleared

    def _save_output(self, part: ToolPart) -> str:
        assert isinstance(part.state, ToolCompleted)
        path = Path(self.data_dir) / OUTPUT_DIR / part.id
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(part.state.output, encoding="utf-8", newline="")
        return str(path)
