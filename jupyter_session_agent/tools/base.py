"""The values every tool shares: what a call gets, what it returns, what a tool is.

Kept apart from ``tools/__init__.py`` so tool modules can import these without
importing each other (``builtin_tools()`` imports the tool modules lazily).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolContext:
    """Where and for whom a tool call runs.

    ``directory`` is the session's working directory: relative paths given by
    the model resolve here (``bash`` also runs here). ``data_dir`` is the
    package data directory; full outputs of truncated calls are saved under
    ``data_dir / "tool-output"``. ``shell`` is the IPython ``InteractiveShell``
    whose ``user_ns`` the ``python`` tool runs in; ``None`` gives it a private
    namespace per session.
    """

    session_id: str
    message_id: str
    call_id: str
    directory: Path
    data_dir: Path
    shell: Any | None = None
    # Would ``read`` of this path pass without asking? Tools that read many files on their
    # own (``grep``) leave out the others; ``None``: no rules apply (tools run directly).
    may_read: Callable[[str], bool] | None = None
    # How ``bash`` runs: a ``tools.sandbox.Confinement`` (inside the OS sandbox, or not and
    # why); ``None``: unconfined, nothing said (tools run directly, outside a session).
    sandbox: Any | None = None
    # What the rules say about ``(permission, pattern)`` now: "allow", "ask" or "deny" (the
    # gate's ``decides``), for a tool whose own review is the question (``notebook_edit``);
    # ``None``: no rules apply.
    decide: Callable[[str, str], str] | None = None


@dataclass(frozen=True)
class ToolResult:
    """A completed call: ``output`` is what the model sees, ``title`` what the
    user sees in the part header, ``metadata`` JSON-able extras for the UI and
    the store (``truncated``/``outputPath`` after truncation). ``attachments``: files the
    call returned (``{mime, url, filename?}``, e.g. an MCP server's images), stored on the
    completed state as OpenCode's file parts."""

    output: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    attachments: tuple = ()


@runtime_checkable
class Tool(Protocol):
    """A tool the model can call. ``parameters`` is a JSON-schema object.

    ``run`` gets arguments already validated by :func:`run_tool` (known keys
    only, types checked, ``null`` optional values removed). It reports errors
    the model should fix by raising :class:`~jupyter_session_agent.core.errors.ToolFailure`.
    """

    name: str
    description: str
    parameters: dict

    def run(self, args: dict, ctx: ToolContext) -> ToolResult: ...
