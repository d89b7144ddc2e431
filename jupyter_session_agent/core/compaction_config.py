"""Compaction settings for one model: :class:`CompactionConfig` is the ``compaction`` setting
(:class:`~.settings.CompactionSettings`, whose fields it inherits, not restates) resolved for a
model (its ``compaction_threshold`` override), with the compactor's arithmetic: the trigger
threshold and the per-model limits (usable window, prune protect/minimum, tail, summary target),
and their constants. How a compaction is done (the policy) is the compactor's strategy, not a
setting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from . import budget as B
from .messages import Tokens
from .settings import COMPACTION_SCHEMA, CompactionSettings

_DEFAULT = CompactionSettings()
PRUNE_MINIMUM: int = _DEFAULT.prune_minimum
PRUNE_PROTECT: int = _DEFAULT.prune_protect
PRUNE_PROTECTED_TOOLS: tuple[str, ...] = _DEFAULT.protected_tools
TOOL_OUTPUT_MAX_CHARS = 2_000  # transcript cut, as OpenCode's
TAIL_MIN, TAIL_MAX = 2_000, 15_000  # preserve_recent_tokens = clamp(usable × 0.25, …)
OUTPUT_DIR = "tool-output"
SUMMARY_AGENT = "compaction"
MAX_CONSECUTIVE = 2  # auto compactions in a row with no step in between
SUMMARY_MIN = 300  # tokens: the smallest summary ours asks for


@dataclass(frozen=True)
class CompactionConfig(CompactionSettings):
    """The ``compaction`` setting resolved for one model (its fields are the setting's, checked
    as the setting is), and the compactor's tuning numbers (shares of the usable window),
    which are not settings."""

    tail_output_share: ClassVar[float] = 0.01  # newest outputs kept ≈ usable × share (≤ 4000)
    pin_requests: ClassVar[int] = 0  # earlier requests (first sentence) pinned beside the rules
    summary_share: ClassVar[float] = 0.03  # summary target ≈ usable × share (clamped 300..4000)

    USER_KEYS: ClassVar[tuple[str, ...]] = tuple(COMPACTION_SCHEMA.fields)

    @classmethod
    def from_settings(
        cls,
        settings: CompactionSettings | Mapping[str, Any] | None,
        model: B.ModelInfo | None = None,
    ) -> CompactionConfig:
        """``settings`` (``Settings.compaction``, or a dict of its keys checked as the
        ``compaction`` setting is, where a key set to None keeps its default) for ``model``: its
        ``compaction_threshold`` override wins."""
        if isinstance(settings, CompactionSettings):
            kw = {f.name: getattr(settings, f.name) for f in fields(settings)}
        else:
            kw = {k: v for k, v in dict(settings or {}).items() if v is not None}
            COMPACTION_SCHEMA.check(kw, "compaction")  # one line naming the key and the fix
        if model is not None and model.extra.get("compaction_threshold") is not None:
            kw["threshold"] = model.extra["compaction_threshold"]
        return cls(**kw)

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
