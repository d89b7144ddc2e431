"""Compaction settings: :class:`CompactionConfig` (the user's ``compaction`` settings,
validated, plus the policy switches that reproduce OpenCode v1.2.16 with the same code
via :meth:`CompactionConfig.opencode`), the trigger threshold and the per-model limits
(usable window, prune protect/minimum, tail, summary target), and their constants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from . import budget as B
from .errors import ConfigError
from .messages import Tokens, replace

PRUNE_MINIMUM = 20_000
PRUNE_PROTECT = 40_000
PRUNE_PROTECTED_TOOLS = ("skill",)
TOOL_OUTPUT_MAX_CHARS = 2_000  # transcript cut, as OpenCode's
TAIL_MIN, TAIL_MAX = 2_000, 15_000  # preserve_recent_tokens = clamp(usable × 0.25, …)
OUTPUT_DIR = "tool-output"
SUMMARY_AGENT = "compaction"
MAX_CONSECUTIVE = 2  # auto compactions in a row with no step in between
SUMMARY_MIN = 300  # tokens: the smallest summary ours asks for


@dataclass(frozen=True)
class CompactionConfig:
    """Resolved compaction settings. The first block are user settings
    (``%config AgentMagics.compaction = {...}``); the second are policy switches
    the benchmark uses to reproduce OpenCode v1.2.16 with the same code."""

    auto: bool = True
    prune: bool = True
    reserved: int | None = None
    threshold: float = 1.0  # compact when the last step's count >= usable × threshold
    prune_protect: int = PRUNE_PROTECT
    prune_minimum: int = PRUNE_MINIMUM
    protected_tools: tuple[str, ...] = PRUNE_PROTECTED_TOOLS
    tail_turns: int = (
        1  # the current (or just finished) turn; the latest request is restated if cut
    )
    preserve_recent_tokens: int | None = None
    model: str | None = None  # "provider/model" for the summary calls

    summary_input: str = "transcript"  # or "messages" (v1.2.16: the raw history)
    scale_prune: bool = True  # cap protect/minimum by the window
    pin: bool = True  # pinned user messages + saved-output pointers on the summary
    prune_tail: bool = True  # at a summary, clear (recoverably) all outputs but the newest few
    tail_output_share: float = (
        0.01  # ours: the newest outputs kept verbatim ≈ usable × share (≤ 4000)
    )
    restate: bool = True  # the continue message restates a summarised latest request
    fallbacks: bool = True  # shrink the summary request instead of giving up
    guard: bool = True  # no-gain / consecutive / inflation guards
    smart_replay: bool = True  # replay the request only if the overflow hit the turn's first step
    skip_turn_end_continue: bool = True  # no continue message when the turn already finished
    legacy_reserved: bool = (
        False  # v1.2.16's isOverflow: reserved not subtracted without an input limit
    )
    pin_requests: int = 0  # ours: earlier requests (first sentence) pinned beside the rules
    manual_tail: bool = True  # as OpenCode 1.18: a manual compaction keeps the turns that fit
    summary_share: float = 0.03  # ours: summary target ≈ usable × share (clamped 300..4000)

    USER_KEYS: ClassVar[tuple[str, ...]] = (
        "auto",
        "prune",
        "reserved",
        "threshold",
        "prune_protect",
        "prune_minimum",
        "protected_tools",
        "tail_turns",
        "preserve_recent_tokens",
        "model",
    )

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any] | None, model: B.ModelInfo | None = None
    ) -> CompactionConfig:
        """Validate ``settings`` (``Settings.compaction``); a model's ``compaction_threshold`` override wins."""
        s = dict(settings or {})
        unknown = sorted(set(s) - set(cls.USER_KEYS))
        if unknown:
            raise ConfigError(
                f"unknown compaction setting(s) {unknown}; valid: {sorted(cls.USER_KEYS)}"
            )
        kw: dict[str, Any] = {}
        for key in ("auto", "prune"):
            if key in s and s[key] is not None:
                if not isinstance(s[key], bool):
                    raise ConfigError(f"compaction[{key!r}] must be True or False, got {s[key]!r}")
                kw[key] = s[key]
        for key in (
            "reserved",
            "prune_protect",
            "prune_minimum",
            "tail_turns",
            "preserve_recent_tokens",
        ):
            if key in s and s[key] is not None:
                value = s[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(
                        f"compaction[{key!r}] must be a whole number >= 0, got {value!r}"
                    )
                kw[key] = value
        threshold = s.get("threshold")
        if model is not None and model.extra.get("compaction_threshold") is not None:
            threshold = model.extra["compaction_threshold"]
        if threshold is not None:
            kw["threshold"] = _check_threshold(threshold, "compaction['threshold']")
        if s.get("protected_tools") is not None:
            tools = s["protected_tools"]
            if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):
                raise ConfigError(
                    f"compaction['protected_tools'] must be a list of tool names, got {tools!r}"
                )
            kw["protected_tools"] = tuple(tools)
        if s.get("model"):
            if not isinstance(s["model"], str) or "/" not in s["model"]:
                raise ConfigError(
                    f"compaction['model'] must be a 'provider/model' id, got {s['model']!r}"
                )
            kw["model"] = s["model"]
        return cls(**kw)

    @classmethod
    def opencode(cls, **changes: Any) -> CompactionConfig:
        """OpenCode v1.2.16 as specified: prune at loop end, summary of everything, no tail."""
        base = dict(
            tail_turns=0,
            summary_input="messages",
            scale_prune=False,
            pin=False,
            prune_tail=False,
            restate=False,
            fallbacks=False,
            guard=False,
            smart_replay=False,
            skip_turn_end_continue=False,
            manual_tail=False,
        )
        base.update(changes)
        return cls(**base)

    def with_changes(self, **changes: Any) -> CompactionConfig:
        return replace(self, **changes)

    # -- numbers for one model ------------------------------------------------

    def budget(self, model: B.ModelInfo) -> B.Budget:
        limits = B.budget(model, self.reserved)
        if self.legacy_reserved and not model.input:
            return B.Budget(
                limits.context,
                limits.max_output,
                limits.reserved,
                max(0, model.context - limits.max_output),
            )
        return limits

    def trigger(self, model: B.ModelInfo) -> int:
        """The last step's token count at which auto compaction starts."""
        return int(self.budget(model).usable * self.threshold)

    def is_overflow(self, tokens: Tokens, model: B.ModelInfo) -> bool:
        if not self.auto or model.context == 0:
            return False
        return tokens.count >= self.trigger(model)

    def prune_limits(self, model: B.ModelInfo) -> tuple[int, int]:
        """(protect, minimum) in estimated tokens, capped by the window for ours."""
        if not self.scale_prune or model.context == 0:
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
