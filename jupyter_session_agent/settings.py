"""Resolved settings for a session: one frozen value built from the magics' traitlets.

The traitlets on ``AgentMagics`` are the user-facing form (``%config``); the
loop and the session API take this plain value so they can run without IPython.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

DATA_DIR_ENV = "JUPYTER_SESSION_AGENT_DIR"

COMPACTION_DEFAULTS: Mapping[str, Any] = {
    "auto": True,
    "prune": True,
    "reserved": None,  # None: min(20_000, max output tokens), as OpenCode
    "prune_protect": 40_000,
    "prune_minimum": 20_000,
    "tail_turns": 2,
    "preserve_recent_tokens": None,
}


def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$JUPYTER_SESSION_AGENT_DIR``, else the XDG data dir."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "jupyter-session-agent"


@dataclass(frozen=True)
class Settings:
    """Everything a session needs besides the store and the shell."""

    model: str = ""  # "provider/model"; "" → presets.default_model(env)
    data_dir: Path = field(default_factory=resolve_data_dir)
    model_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    compaction: Mapping[str, Any] = field(default_factory=lambda: dict(COMPACTION_DEFAULTS))
    max_steps: int = 25
    max_retries: int = 4
    request_timeout: float = 300.0
    local_context: int = 8192
    temperature: float | None = None
    system_prompt: str | None = None  # replaces the built-in one when set
    tools: tuple[str, ...] | None = None  # None: every built-in tool

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigError("max_steps must be at least 1 — %config AgentMagics.max_steps = 25")
        if self.max_retries < 0:
            raise ConfigError("max_retries must be 0 or more — %config AgentMagics.max_retries = 4")
        unknown = set(self.compaction) - set(COMPACTION_DEFAULTS)
        if unknown:
            raise ConfigError(
                f"unknown compaction setting(s) {sorted(unknown)}; valid: {sorted(COMPACTION_DEFAULTS)}"
            )
        object.__setattr__(self, "compaction", {**COMPACTION_DEFAULTS, **self.compaction})
        object.__setattr__(self, "data_dir", Path(self.data_dir))
