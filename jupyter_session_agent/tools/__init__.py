"""The agent's built-in tools and the one way to call them.

``run_tool(tool, args, ctx)`` is what the processor calls:

1. validate ``args`` against ``tool.parameters`` (see :mod:`.validation`:
   unknown keys are ignored, light coercion, a :class:`ToolFailure` naming the
   tool and the argument otherwise);
2. ``tool.run(args, ctx)``; every exception propagates unchanged (the processor
   turns it into the part's ``error`` state; ``KeyboardInterrupt`` stops the
   loop);
3. redact API keys from ``output``, ``title`` and ``metadata`` and make them encodable
   (``redact.clean``);
4. truncate ``output`` (as OpenCode does for every built-in tool, :mod:`.truncation`) unless the tool set
   ``metadata["truncated"]`` itself; metadata then gains ``truncated`` and,
   when cut, ``outputPath``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..core.redact import clean, clean_value

if TYPE_CHECKING:
    from .base import Tool, ToolContext, ToolResult
    from .truncation import MAX_BYTES, MAX_LINES, truncate
    from .validation import validate_args

# Imported on first use, so that ``%load_ext`` (which installs ``tools.kernel``'s cell log) does
# not pay for the tool machinery: name -> the module that defines it.
_LAZY = {
    "Tool": "base",
    "ToolContext": "base",
    "ToolResult": "base",
    "MAX_BYTES": "truncation",
    "MAX_LINES": "truncation",
    "truncate": "truncation",
    "validate_args": "validation",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Tool",
    "ToolContext",
    "ToolResult",
    "builtin_tools",
    "run_tool",
    "openai_schema",
    "validate_args",
    "truncate",
    "MAX_LINES",
    "MAX_BYTES",
]

BUILTIN_NAMES = (
    "python",
    "bash",
    "read",
    "write",
    "edit",
    "list",
    "glob",
    "grep",
    "notebook",
    "notebook_edit",
    "notebook_run",
)


def builtin_tools() -> dict[str, Tool]:
    """Fresh instances of the built-in tools (:data:`BUILTIN_NAMES`), keyed by name, in a
    stable order."""
    from .files import EditTool, ReadTool, WriteTool
    from .notebook import NotebookTool
    from .notebook_doc import NotebookEditTool, NotebookRunTool
    from .python import PythonTool
    from .search import GlobTool, GrepTool, ListTool
    from .shell import BashTool

    tools: list[Tool] = [
        PythonTool(),
        BashTool(),
        ReadTool(),
        WriteTool(),
        EditTool(),
        ListTool(),
        GlobTool(),
        GrepTool(),
        NotebookTool(),
        NotebookEditTool(),
        NotebookRunTool(),
    ]
    return {t.name: t for t in tools}


def run_tool(tool: Tool, args: dict, ctx: ToolContext) -> ToolResult:
    """Validate, run, truncate. See the module docstring for the contract."""
    from .base import ToolResult
    from .truncation import truncate
    from .validation import validate_args

    checked = validate_args(tool.name, tool.parameters, args)
    result = redact_result(tool.run(checked, ctx))
    metadata = dict(result.metadata)
    if "truncated" in metadata:
        return result
    cut = truncate(result.output, ctx.data_dir)
    metadata["truncated"] = cut.truncated
    if cut.truncated:
        metadata["outputPath"] = cut.output_path
    return ToolResult(
        output=cut.content, title=result.title, metadata=metadata, attachments=result.attachments
    )


def redact_result(result: ToolResult) -> ToolResult:
    """The result with API keys replaced by ``[REDACTED:<kind>]`` and lone surrogates (latin-1
    file names) escaped (``redact.clean``), before anything is saved (full outputs of
    truncated calls included), shown or sent to the model."""
    from .base import ToolResult

    return ToolResult(
        output=clean(result.output, refresh=True),
        title=clean(result.title),
        metadata=clean_value(dict(result.metadata)),
        attachments=result.attachments,
    )


def openai_schema(tool: Tool) -> dict:
    """The OpenAI chat-completions ``tools`` entry for ``tool``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
