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

A model's limits without a running server come from
:func:`..providers.registry.model_info_for`; every stored session summarised for
the browser from :mod:`..analytics.sessions`. Nothing here imports IPython or widgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..core import budget as _budget
from ..core.messages import (
    CompactionPart,
    StepFinishPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
)

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
            steps=[asdict(s) for s in steps],
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
    compaction: Mapping[str, Any] | None = None,
) -> BudgetReport:
    """The budget of ``history`` (oldest first) for ``model`` and the compaction settings."""
    from ..core.compaction_config import CompactionConfig
    from ..core.errors import ConfigError

    try:
        config = CompactionConfig.from_settings(
            {k: v for k, v in (compaction or {}).items() if k in CompactionConfig.USER_KEYS}, model
        )
    except (
        ConfigError
    ):  # a view never fails on a setting the loop would reject with its own message
        config = CompactionConfig()
    auto, prune_on = config.auto, config.prune
    protect, minimum = config.prune_limits(model)
    limits = config.budget(model)

    steps: list[StepPoint] = []
    cost = 0.0
    tin = tout = treason = tcache = 0
    compactions = summaries = turns = 0
    pruned_parts = pruned_tokens = 0
    last = None
    after_summary = False
    for item in history:
        info = item.info
        if isinstance(info, UserMessage):
            if any(isinstance(p, CompactionPart) for p in item.parts):
                compactions += 1
            elif any(isinstance(p, TextPart) and not p.synthetic for p in item.parts):
                turns += 1
            continue
        cost += info.cost
        is_summary = bool(info.summary)
        for part in item.parts:
            if isinstance(part, StepFinishPart):
                t = part.tokens
                steps.append(
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
        if is_summary and info.finish and not info.error:
            summaries += 1
            after_summary = True

    # the loop's own prune walk and selection: "due" exactly when the loop's prune would clear
    from .compaction.prune import prune_selection, walk_prune

    walk = walk_prune(history, protect=protect, protected_tools=config.protected_tools)
    walked, prunable = walk.counted, walk.prunable
    due, _ = prune_selection(history, config, model, limits=(protect, minimum), walk=walk)
    used = last.count if last is not None else 0
    return BudgetReport(
        model=f"{model.provider_id}/{model.model_id}",
        model_source=model.source,
        context=model.context,
        input_limit=model.input,
        max_output=limits.max_output,
        reserved=limits.reserved,
        usable=limits.usable,
        compaction_at=config.trigger(model),
        used=used,
        used_estimated=bool(last is not None and last.estimated),
        overflow=last is not None and config.is_overflow(last, model),
        auto_compact=auto,
        prune=prune_on,
        prune_protect=protect,
        prune_minimum=minimum,
        tool_output_tokens=walked,
        prunable_tokens=prunable,
        prune_due=bool(due),
        pruned_parts=pruned_parts,
        pruned_tokens=pruned_tokens,
        compactions=compactions,
        summaries=summaries,
        turns=turns,
        messages=len(history),
        cost=cost,
        input_tokens=tin,
        output_tokens=tout,
        reasoning_tokens=treason,
        cache_read_tokens=tcache,
        steps=tuple(steps),
    )


# --------------------------------------------------------------------------
# model limits without a running server


# --------------------------------------------------------------------------
# every session, for the browser
