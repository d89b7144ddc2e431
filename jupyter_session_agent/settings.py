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
    "tail_turns": 1,  # recent turns kept verbatim (the latest request is restated when it does not fit)
    "preserve_recent_tokens": None,  # None: clamp(usable × 0.25, 2_000, 15_000), as upstream
    "threshold": 1.0,  # compact at usable × threshold (0 < r <= 1); per model: model_overrides compaction_threshold
    "protected_tools": ("skill",),  # never pruned
    "model": None,  # "provider/model" for summaries; None: the session's model
}

# File snapshots for revert (docs/lifecycle.md); `%config AgentMagics.snapshot = {...}` overrides keys.
SNAPSHOT_DEFAULTS: Mapping[str, Any] = {
    "enabled": True,
    "max_file_size": 50 * 1024 * 1024,  # bytes; larger files are never hashed nor restored
    "max_files": 20_000,  # files to track on first sight; more turns snapshots off for the session
    "exclude": ("*.ipynb", ".ipynb_checkpoints/", "__pycache__/", "*.pyc"),  # gitignore patterns
}

# Cross-session memory (docs/memory.md); `%config AgentMagics.memory = {...}` overrides keys.
MEMORY_DEFAULTS: Mapping[str, Any] = {
    "enabled": False,  # offer the recall tool and inject memory into new sessions
    "tool": None,  # offer the recall tool; None: as "enabled"
    "inject": None,  # add relevant memory to a new session's first message; None: as "enabled"
    "max_tokens": 800,  # injection budget (estimated tokens)
    "top_k": 5,  # results of the recall tool and of %agent recall
    "threshold": 0.35,  # minimum result score (BM25 / sum of the query terms' idf)
    "auto_remember": False,  # extract the session's memory at the end of every turn
    "extractor": "auto",  # "auto" (the model unless it is the embedded one), "llm" or "rules"
    "scope": "project",  # "project" (this working directory) or "all"
    "history": True,  # search the raw history as well as the memory notes
    "embeddings": None,  # embedding model on the session's provider, e.g. "text-embedding-3-small"
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
    # {permission: action | {pattern: action}} (OpenCode's config form), after the defaults
    permission: Mapping[str, Any] | str = field(default_factory=dict)
    # lifecycle (docs/lifecycle.md): titles, subagents, snapshots
    titles: bool = True  # generate a title from the first prompt
    title_model: str = ""  # "provider/model" for titles; "" → the session's model
    subagents: bool = False  # offer the `task` tool (child sessions)
    subagent_model: str = ""  # "provider/model" for subagents; "" → the caller's model
    snapshot: Mapping[str, Any] = field(default_factory=lambda: dict(SNAPSHOT_DEFAULTS))
    memory: Mapping[str, Any] = field(default_factory=lambda: dict(MEMORY_DEFAULTS))

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
        from .compaction import CompactionConfig

        CompactionConfig.from_settings(self.compaction)  # a bad value is a ConfigError now, not mid-turn
        unknown = set(self.snapshot) - set(SNAPSHOT_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown snapshot setting(s) {sorted(unknown)}; valid: {sorted(SNAPSHOT_DEFAULTS)}")
        object.__setattr__(self, "snapshot", {**SNAPSHOT_DEFAULTS, **self.snapshot})
        unknown = set(self.memory) - set(MEMORY_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown memory setting(s) {sorted(unknown)}; valid: {sorted(MEMORY_DEFAULTS)}")
        object.__setattr__(self, "memory", {**MEMORY_DEFAULTS, **self.memory})
        if self.memory["extractor"] not in ("auto", "llm", "rules") or self.memory["scope"] not in ("project", "all"):
            raise ConfigError("memory: extractor is 'auto', 'llm' or 'rules' and scope 'project' or 'all' — "
                              "%config AgentMagics.memory = {'extractor': 'rules'}")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        from .permission import from_config

        from_config(self.permission)  # a broken rule is a ConfigError now, not at the first tool call
