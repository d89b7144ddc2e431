"""How a session's turn runs one tool call: the :class:`ToolCaller` the loop is given (the
context a call runs in, errors redacted) and the bash :func:`confinement` the gate allows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core import permission as P
from ..core.errors import ToolFailure
from ..core.redact import redact, redact_value
from ..core.settings import Settings
from ..core.stream import ToolCall
from ..loop.history import History
from ..tools import ToolContext, run_tool
from ..tools.base import Tool, ToolResult
from ..tools.sandbox import Confinement, confinement_for, writable_from_rules


@dataclass(frozen=True)
class ToolCaller:
    """The turn's ``ToolRunner``: one tool call in the session's folder and kernel, under the
    turn's gate (what ``read`` may open, how ``bash`` is confined); an error's text reaches
    the model and the history, so it is redacted (no keys in it)."""

    session_id: str
    history: History  # the context names the newest message
    directory: Path
    settings: Settings
    shell: object
    gate: P.Gate

    def __call__(self, tool: Tool, args: dict, call: ToolCall) -> ToolResult:
        ctx = ToolContext(
            session_id=self.session_id,
            message_id=self.history[-1].info.id,
            call_id=call.call_id,
            directory=self.directory,
            data_dir=Path(self.settings.data_dir),
            shell=self.shell,
            may_read=self.gate.reader(),
            decide=self.gate.decides,
            sandbox=confinement(self.settings, self.gate) if tool.name == "bash" else None,
        )
        try:
            return run_tool(tool, args, ctx)
        except ToolFailure as err:
            details = err.metadata  # e.g. an MCP call's server
            raise ToolFailure(
                redact(str(err), refresh=True),
                redact_value(details, refresh=True) if isinstance(details, dict) else None,
            ) from None
        except Exception as err:
            raise ToolFailure(redact(f"{type(err).__name__}: {err}", refresh=True)) from None


def confinement(settings: Settings, gate: P.Gate) -> Confinement:
    """How the next bash call runs (``tools/sandbox.py``): writable are the session folder
    and the folders the user allowed (``external_directory`` allow rules; the saved tool
    outputs excluded), network only when the ``network`` permission allows it."""
    outputs = os.path.realpath(os.path.join(os.path.abspath(settings.data_dir), "tool-output"))
    writable = tuple(
        w for w in writable_from_rules(gate.effective()) if os.path.realpath(w) != outputs
    )
    return confinement_for(settings.sandbox, writable, gate.allows("network"))
