"""The token budget of a session, as one frozen value: what the gauge shows.

:func:`budget_report` is pure: a history (``WithParts`` list), the model's
``ModelInfo`` and the compaction settings in, a :class:`BudgetReport` out. It
answers "how full is the context, where do prune and compaction trigger, what
did each step use, what has it cost" the way the loop decides them:

* ``used`` is the last step-finish's ``tokens.count`` — what ``isOverflow``
  compares with ``compaction_at`` (``usable`` × the ``threshold`` setting, with
  ``usable`` from ``budget.budget(model, reserved)``);
* the prune numbers come from the loop's own prune walk and selection
  (``compaction.prune.plan_prune`` / ``prune_selection``: newest → oldest, the last two
  turns protected, stop at the last summary or at an already-pruned output) in
  estimated tool-output tokens: outputs beyond ``prune_protect`` are candidates,
  and ``prune_due`` is whether the loop's prune would clear them now.

The limits are the compaction engine's own (``compaction.CompactionConfig``:
threshold, protect/minimum capped by small windows, protected tools), so the
gauge shows where this session's loop will act.

One module: the report, its step points and the tally that keeps it up to date are one value
and the one way it is computed (:func:`budget_report` is a fresh tally), so the gauge, ``%agent
budget`` and the live view cannot disagree.

A model's limits without a running server come from
:func:`..providers.registry.model_info_for`; every stored session summarised for
the browser from :mod:`..analytics.sessions`. Nothing here imports IPython or widgets.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace
from typing import Any

from ..core import budget as _budget
from ..core.compaction_config import CompactionConfig
from ..core.errors import ConfigError
from ..core.messages import (
    CompactionPart,
    StepFinishPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
)
from ..core.settings import CompactionSettings
from .compaction.prune import prune_selection, walk_prune

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One step (one LLM call): the context it used, from its step-finish part."""

    message_id: str
    part_id: str
    tokens: int  # tokens.count: what isOverflow compares
    input: int  # prompt tokens incl. cache reads/writes
    output: int
    cost: float
    estimated: bool = False
    summary: bool = False  # the step of a compaction summary
    after_compaction: bool = False  # the first step after a summary: the context dropped here

    def to_data(self) -> dict[str, Any]:
        """The point as JSON, fields as named here."""
        return {f: getattr(self, f) for f in STEP_FIELDS}


STEP_FIELDS = tuple(StepPoint.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class BudgetReport:
    """Where a session's context stands for its model and compaction settings."""

    model: str  # "provider/model"
    model_source: str  # where the limits came from: catalogue, override, local, unknown, …
    context: int  # the model's window (0: unknown)
    input_limit: int  # an explicit input limit (0: none)
    max_output: int
    reserved: int
    usable: int  # the input budget: window - max output - reserved (or input limit - reserved)
    compaction_at: int  # auto compaction starts when used >= this (usable × threshold)
    used: int  # the last step's tokens.count (0 before the first step)
    used_estimated: bool
    overflow: bool  # used >= compaction_at with auto compaction on (the loop would compact now)
    auto_compact: bool
    prune: bool
    prune_protect: int  # estimated tool-output tokens kept verbatim (as the engine caps it)
    prune_minimum: int  # a prune runs only if it clears more than this (as the engine caps it)
    tool_output_tokens: int  # estimated tokens of unpruned tool output the prune walk counts
    prunable_tokens: int  # what a prune would clear now
    prune_due: bool  # prunable_tokens > prune_minimum (and prune on)
    pruned_parts: int  # tool outputs already pruned (state.time.compacted set)
    pruned_tokens: int  # their estimated size
    compactions: int  # compaction requests (CompactionPart on a user message)
    summaries: int  # finished, error-free summary messages
    turns: int  # user prompts (not compaction requests, not synthetic)
    messages: int
    cost: float  # USD, every assistant message (summaries included)
    input_tokens: int  # summed over steps, prompt side incl. cache
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    steps: tuple[StepPoint, ...] = ()

    @property
    def prune_trigger(self) -> int:
        """Tool-output tokens (in the prune walk) above which a prune frees enough to run."""
        return self.prune_protect + self.prune_minimum

    @property
    def headroom(self) -> int:
        """Tokens left before auto compaction would start."""
        return self.compaction_at - self.used

    @property
    def fraction(self) -> float:
        """``used / usable`` (0 when the window is unknown)."""
        return self.used / self.usable if self.usable else 0.0

    def to_data(self, max_steps: int = 400) -> dict[str, Any]:
        """JSON for the MIME bundle: fields as named here, the newest ``max_steps`` steps."""
        data = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "steps"}
        steps = self.steps[-max_steps:] if max_steps else ()
        data.update(
            prune_trigger=self.prune_trigger,
            headroom=self.headroom,
            fraction=round(self.fraction, 4),
            steps=[s.to_data() for s in steps],
            steps_omitted=len(self.steps) - len(steps),
        )
        return data

    def sparkline(self, width: int = 40) -> str:
        """The newest ``width`` steps as block characters scaled to ``usable``; ``|`` marks a compaction."""
        top = self.usable or max((s.tokens for s in self.steps), default=0) or 1
        out = []
        for s in self.steps[-width:]:
            if s.after_compaction:
                out.append("|")
            level = min(len(SPARK) - 1, int(s.tokens / top * (len(SPARK) - 1) + 0.5))
            out.append(SPARK[level])
        return "".join(out)


def budget_report(
    history: Sequence[WithParts],
    model: _budget.ModelInfo,
    compaction: CompactionSettings | Mapping[str, Any] | None = None,
) -> BudgetReport:
    """The budget of ``history`` (oldest first) for ``model`` and the compaction settings."""
    return BudgetTally().report(history, model, compaction)


@dataclass(frozen=True, slots=True)
class _Running:
    """The report's sums over a history's first messages (one per message: the fold so far)."""

    cost: float = 0.0
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    compactions: int = 0
    summaries: int = 0
    turns: int = 0
    pruned_parts: int = 0
    pruned_tokens: int = 0
    last: Any = None  # the newest step-finish's tokens
    after_summary: bool = False  # the next step is the first after a summary
    steps: int = 0  # how many step points the fold has made


class BudgetTally:
    """:func:`budget_report`, kept up to date as a history grows: each message is folded once.

    The fold of every message is remembered with the message value it was made from (values are
    frozen: a message changes by being replaced, as a prune replaces the ones it clears); a
    report folds only the messages from the first one that is not the remembered value on, so
    a turn costs what its own messages cost, not what the session before it holds. The prune
    walk stops at the newest summary or cleared output, as the loop's does."""

    def __init__(self) -> None:
        self._items: list[WithParts] = []  # the messages folded, in order
        self._folds: list[_Running] = []  # the fold after each of them
        self._steps: list[StepPoint] = []

    def report(
        self,
        history: Sequence[WithParts],
        model: _budget.ModelInfo,
        compaction: CompactionSettings | Mapping[str, Any] | None = None,
    ) -> BudgetReport:
        """The budget of ``history`` (oldest first) for ``model`` and the compaction settings."""
        keep = self._unchanged(history)
        del self._items[keep:], self._folds[keep:]
        run = self._folds[-1] if self._folds else _Running()
        del self._steps[run.steps :]
        for item in history[keep:]:
            run = self._fold(run, item)
            self._items.append(item)
            self._folds.append(run)
        return self._assemble(history, run, model, compaction)

    def _unchanged(self, history: Sequence[WithParts]) -> int:
        """How many of ``history``'s first messages are the values already folded."""
        items = self._items
        n = min(len(items), len(history))
        if n and items[n - 1] is history[n - 1] and all(map(operator.is_, items[:n], history[:n])):
            return n
        for i in range(n):
            if items[i] is not history[i]:
                return i
        return n

    def _fold(self, run: _Running, item: WithParts) -> _Running:
        info = item.info
        if isinstance(info, UserMessage):
            if any(isinstance(p, CompactionPart) for p in item.parts):
                return _replace(run, compactions=run.compactions + 1)
            if any(isinstance(p, TextPart) and not p.synthetic for p in item.parts):
                return _replace(run, turns=run.turns + 1)
            return run
        is_summary = bool(info.summary)
        cost, tin, tout, treason, tcache = (
            run.cost + info.cost,
            run.input,
            run.output,
            run.reasoning,
            run.cache_read,
        )
        pruned_parts, pruned_tokens = run.pruned_parts, run.pruned_tokens
        last, after_summary = run.last, run.after_summary
        for part in item.parts:
            if isinstance(part, StepFinishPart):
                t = part.tokens
                self._steps.append(
                    StepPoint(
                        info.id,
                        part.id,
                        t.count,
                        t.prompt,
                        t.output,
                        part.cost,
                        bool(t.estimated),
                        is_summary,
                        after_summary,
                    )
                )
                after_summary = False
                last = t
                tin, tout, treason, tcache = (
                    tin + t.prompt,
                    tout + t.output,
                    treason + t.reasoning,
                    tcache + t.cache_read,
                )
            elif (
                isinstance(part, ToolPart)
                and isinstance(part.state, ToolCompleted)
                and part.state.time_compacted
            ):
                pruned_parts += 1
                pruned_tokens += _budget.estimate(part.state.output)
        summaries = run.summaries
        if is_summary and info.finish and not info.error:
            summaries += 1
            after_summary = True
        return _Running(
            cost,
            tin,
            tout,
            treason,
            tcache,
            run.compactions,
            summaries,
            run.turns,
            pruned_parts,
            pruned_tokens,
            last,
            after_summary,
            len(self._steps),
        )

    def _assemble(
        self,
        history: Sequence[WithParts],
        run: _Running,
        model: _budget.ModelInfo,
        compaction: CompactionSettings | Mapping[str, Any] | None,
    ) -> BudgetReport:
        try:
            config = CompactionConfig.from_settings(compaction, model)
        except ConfigError:  # a view never fails on a setting the loop would reject itself
            config = CompactionConfig()
        protect, minimum = config.prune_limits(model)
        limits = config.budget(model)
        # the loop's own prune walk and selection: "due" exactly when the loop's prune would clear
        walk = walk_prune(history, protect=protect, protected_tools=config.protected_tools)
        due, _ = prune_selection(history, config, model, limits=(protect, minimum), walk=walk)
        last = run.last
        return BudgetReport(
            model=f"{model.provider_id}/{model.model_id}",
            model_source=model.source,
            context=model.context,
            input_limit=model.input,
            max_output=limits.max_output,
            reserved=limits.reserved,
            usable=limits.usable,
            compaction_at=config.trigger(model),
            used=last.count if last is not None else 0,
            used_estimated=bool(last is not None and last.estimated),
            overflow=last is not None and config.is_overflow(last, model),
            auto_compact=config.auto,
            prune=config.prune,
            prune_protect=protect,
            prune_minimum=minimum,
            tool_output_tokens=walk.counted,
            prunable_tokens=walk.prunable,
            prune_due=bool(due),
            pruned_parts=run.pruned_parts,
            pruned_tokens=run.pruned_tokens,
            compactions=run.compactions,
            summaries=run.summaries,
            turns=run.turns,
            messages=len(history),
            cost=run.cost,
            input_tokens=run.input,
            output_tokens=run.output,
            reasoning_tokens=run.reasoning,
            cache_read_tokens=run.cache_read,
            steps=tuple(self._steps),
        )
