"""``%agent <subcommand>`` handlers, one module per feature.

Each module registers its handlers with :func:`subcommand`; ``magics.py``
only dispatches. A handler gets the ``AgentMagics`` instance, the argument
words (shell-split) and the raw text after the subcommand name, and returns
what the cell should display (or ``None``). Modules are imported on the first
``%agent`` call, not at ``%load_ext``, so loading the extension stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

Handler = Callable[[Any, list[str], str], Any]

# Feature modules under this package; each registers its subcommands on import.
MODULES = ("core", "display", "permissions", "lifecycle", "compaction", "memory", "analytics")


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str  # e.g. "use ID"
    help: str  # one line
    handler: Handler


REGISTRY: dict[str, Subcommand] = {}


def subcommand(name: str, usage: str, help: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` as ``%agent name``; ``usage`` and ``help`` feed ``%agent help``."""

    def register(fn: Handler) -> Handler:
        REGISTRY[name] = Subcommand(name, usage, help, fn)
        return fn

    return register


def load_all() -> dict[str, Subcommand]:
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY


def help_text() -> str:
    commands = load_all()
    width = max(len(c.usage) for c in commands.values()) + 2
    lines = ["%%agent [-s SESSION] [-n/--new] [--fork] [-m MODEL] [-o VAR] [-p RULE]   run the cell body as a prompt"]
    lines += [f"%agent {c.usage:<{width}} {c.help}" for c in sorted(commands.values(), key=lambda c: c.name)]
    lines.append("%%agent_sql [VAR <<]   read-only SQL for a whole cell; VAR << stores the DataFrame")
    lines.append("Settings: %config AgentMagics.<name> — model, data_dir, model_overrides, compaction, "
                 "max_steps, max_retries, local_context, permission, titles, title_model, subagents, "
                 "subagent_model, snapshot, memory")
    return "\n".join(lines)
