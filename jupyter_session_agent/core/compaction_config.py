"""Compaction settings: :class:`CompactionConfig` (the user's ``compaction`` settings,
validated, and the compactor's tuning numbers), the trigger threshold and the per-model
limits (usable window, prune protect/minimum, tail, summary target), and their constants.
How a compaction is done (the policy) is the compactor's strategy, not a setting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from . import budget as B
from .errors import ConfigError
from .messages import Tokens, replace
from .settings import COMPACTION_DEFAULTS, COMPACTION_SCHEMA

# The user's keys, their defaults and their checks are declared once (CompactionSettings)
PRUNE_MINIMUM: int = COMPACTION_DEFAULTS["prune_minimum"]
PRUNE_PROTECT: int = COMPACTION_DEFAULTS["prune_protect"]
PRUNE_PROTECTED_TOOLS: tuple[str, ...] = COMPACTION_DEFAULTS["protected_tools"]
TOOL_OUTPUT_MAX_CHARS = 2_000  # transcript cut, as OpenCode's
TAIL_MIN, TAIL_MAX = 2_000, 15_000  # preserve_recent_tokens = clamp(usable × 0.25, …)
OUTPUT_DIR = "tool-output"
SUMMARY_AGENT = "compaction"
MAX_CONSECUTIVE = 2  # auto compactions in a row with no step in between
SUMMARY_MIN = 300  # tokens: the smallest summary ours asks for


@dataclass(frozen=True)
class CompactionConfig:
    """Resolved compaction settings. The first block are user settings
    (``%config AgentMagics.compaction = {...}``); the second are the compactor's tuning
    numbers (shares of the usable window)."""

    auto: bool = COMPACTION_DEFAULTS["auto"]
    prune: bool = COMPACTION_DEFAULTS["prune"]
    reserved: int | None = COMPACTION_DEFAULTS["reserved"]
    threshold: float = COMPACTION_DEFAULTS["threshold"]  # compact at usable × threshold
    prune_protect: int = PRUNE_PROTECT
    prune_minimum: int = PRUNE_MINIMUM
    protected_tools: tuple[str, ...] = PRUNE_PROTECTED_TOOLS
    tail_turns: int = COMPACTION_DEFAULTS["tail_turns"]  # the latest request restated if cut
    preserve_recent_tokens: int | None = COMPACTION_DEFAULTS["preserve_recent_tokens"]
    model: str | None = COMPACTION_DEFAULTS["model"]  # "provider/model" for the summary calls

    tail_output_share: float = 0.01  # the newest outputs kept verbatim ≈ usable × share (≤ 4000)
    pin_requests: int = 0  # earlier requests (first sentence) pinned beside the rules
    summary_share: float = 0.03  # summary target ≈ usable × share (clamped 300..4000)

    USER_KEYS: ClassVar[tuple[str, ...]] = tuple(COMPACTION_SCHEMA.fields)

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any] | None, model: B.ModelInfo | None = None
    ) -> CompactionConfig:
        """``settings`` (``Settings.compaction``; a key set to None keeps its default) checked
        as the ``compaction`` setting is; a model's ``compaction_threshold`` override wins."""
        kw = {k: v for k, v in dict(settings or {}).items() if v is not None}
        COMPACTION_SCHEMA.check(kw, "compaction")  # one line naming the key and the fix
        if model is not None and model.extra.get("compaction_threshold") is not None:
            kw["threshold"] = model.extra["compaction_threshold"]
        if "threshold" in kw:
            kw["threshold"] = _check_threshold(kw["threshold"], "compaction['threshold']")
        if "protected_tools" in kw:
            kw["protected_tools"] = tuple(kw["protected_tools"])
        return cls(**kw)

    def with_changes(self, **changes: Any) -> CompactionConfig:
        return replace(self, **changes)

    # -- numbers for one model ------------------------------------------------

    def budget(self, model: B.ModelInfo) -> B.Budget:
        return B.budget(model, self.reserved)

    def trigger(self, model: B.ModelInfo, limits: B.Budget | None = None) -> int:
        """The last step's token count at which auto compaction starts (``limits``: another
        reading of the window than :meth:`budget`)."""
        return int((limits or self.budget(model)).usable * self.threshold)

    def is_overflow(self, tokens: Tokens, model: B.ModelInfo, trigger: int | None = None) -> bool:
        if not self.auto or model.context == 0:
            return False
        return tokens.count >= (self.trigger(model) if trigger is None else trigger)

    def prune_limits(self, model: B.ModelInfo) -> tuple[int, int]:
        """(protect, minimum) in estimated tokens, capped by the window."""
        if model.context == 0:
            return self.prune_protect, self.prune_minimum
        usable = self.budget(model).usable
        return min(self.prune_protect, max(2_000, usable // 4)), min(
            self.prune_minimum, max(1_000, usable // 8)
        )

    def tail_budget(self, model: B.ModelInfo) -> int:
        if self.preserve_recent_tokens is not None:
            return self.preserve_recent_tokens
        return min(TAIL_MAX, max(TAIL_MIN, self.budget(model).usable // 4))

    def summary_target(self, model: B.ModelInfo) -> int:
        return min(4_000, max(SUMMARY_MIN, int(self.budget(model).usable * self.summary_share)))

    def tail_output_budget(self, model: B.ModelInfo) -> int:
        return min(4_000, int(self.budget(model).usable * self.tail_output_share))


def _check_threshold(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(
            f"{what} must be a ratio of the usable window, 0 < r <= 1 (e.g. 0.8), got {value!r}"
        )
    return float(value)
