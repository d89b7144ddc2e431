"""``notebook``: the kernel's variables and recent cells, read by the model.

``{"action": "variables"}`` lists the user's variables — name, type, shape, dtypes, size, a
short repr — leaving out modules, functions, classes, private names and IPython's own
(``kernel.visible_names``); ``names`` picks some and describes each in full (a
DataFrame's schema and first rows). ``{"action": "cells"}`` shows recent cells of this kernel:
``cells`` (numbers, as ``In [n]``) or the ``last`` N before the running one (default 5): each
cell's input, its displayed output (``Out[n]``, its ``repr``) and its error with the traceback
(recorded by ``kernel.CellLog`` since ``%load_ext``). Printed output is not kept by
IPython, so it is not shown.

``{"action": "read"}`` reads the open notebook as a document — every cell with its index, id,
type, execution count, source and outputs, or one ``cell`` — from the JupyterLab extension or
the saved file (``notebook_doc.read``).

Read-only; it asks the ``read`` permission (allowed by default). Output is bounded: at most
:data:`MAX_VARIABLES` rows and :data:`MAX_CELLS` cells, each field capped, and the tools'
truncation (2,000 lines / 50 KB) on top.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ToolFailure
from ..core.redact import remember, secret_name
from . import kernel
from .base import ToolContext, ToolResult
from .notebook_doc import read as read_notebook

MAX_VARIABLES = 200
MAX_CELLS = 20
DEFAULT_LAST = 5
MAX_SOURCE_CHARS = 4_000
MAX_OUTPUT_CHARS = 2_000
MAX_DESCRIBE_CHARS = 6_000


class NotebookTool:
    name = "notebook"
    description = (
        "Look at the user's notebook kernel. action 'variables': the user's variables (name, "
        "type, shape, dtypes, size, short repr); give names to describe some in full (a "
        "DataFrame's schema and first rows). action 'cells': recent cells with their input, "
        "output and error traceback; give cell numbers, or last (default 5). action 'read': "
        "the open notebook as a document — every cell in order with its index, id, type, "
        "execution count, source and outputs — or one cell (cell: its id or index); use it "
        "before notebook_edit or notebook_run. Read-only."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["variables", "cells", "read"],
                "description": "variables, cells (this kernel's history) or read (the notebook)",
            },
            "names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "variables: describe only these, in full",
            },
            "cells": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "cells: these cell numbers (the n of In [n])",
            },
            "last": {"type": "integer", "description": "cells: the last N cells (default 5)"},
            "cell": {"type": "string", "description": "read: one cell, by id or index"},
        },
        "required": ["action"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        shell = ctx.shell
        if shell is None or not isinstance(getattr(shell, "user_ns", None), dict):
            raise ToolFailure(
                "notebook: this session runs without a notebook kernel, so there "
                "are no cells or variables to read; use the python tool"
            )
        _remember_secrets(shell.user_ns)
        action = args.get("action") or "variables"
        if action == "read":
            return read_notebook(shell, args.get("cell"))
        if action == "cells":
            return self._cells(shell, args)
        if action != "variables":
            raise ToolFailure(
                f"notebook: action must be 'variables', 'cells' or 'read', not {action!r}"
            )
        return self._variables(shell, args.get("names") or None)

    # -- variables --------------------------------------------------------------

    def _variables(self, shell: Any, names: list[str] | None) -> ToolResult:
        namespace = shell.user_ns
        if names:
            missing = [n for n in names if n not in namespace]
            blocks = [
                kernel.describe(n, namespace[n], MAX_DESCRIBE_CHARS)
                for n in names[:MAX_CELLS]
                if n in namespace
            ]
            if missing:
                blocks.append(f"Not defined in the notebook: {', '.join(missing)}")
            return ToolResult(
                output="\n\n".join(blocks),
                title=", ".join(names[:5]),
                metadata={"variables": len(blocks) - bool(missing)},
            )
        hidden = getattr(shell, "user_ns_hidden", None)
        visible = kernel.visible_names(namespace, hidden)
        rows = kernel.variables(namespace, visible[:MAX_VARIABLES])
        if not rows:
            return ToolResult(
                output="The notebook defines no variables yet.",
                title="variables (0)",
                metadata={"variables": 0},
            )
        lines = ["name | type | shape | dtypes | size | repr"]
        for row in rows:
            lines.append(
                " | ".join(
                    [
                        row["name"],
                        row["type"],
                        row["shape"] or "-",
                        row["dtypes"] or "-",
                        kernel.human(row["size"]),
                        row["repr"],
                    ]
                )
            )
        if len(visible) > MAX_VARIABLES:
            lines.append(
                f"… {len(visible) - MAX_VARIABLES} more variables not listed; ask for some by name"
            )
        return ToolResult(
            output="\n".join(lines),
            title=f"variables ({len(visible)})",
            metadata={"variables": len(visible)},
        )

    # -- cells ------------------------------------------------------------------

    def _cells(self, shell: Any, args: dict) -> ToolResult:
        log = kernel.cell_log(shell)
        ran = log.numbers()
        if args.get("cells"):
            wanted = list(dict.fromkeys(int(n) for n in args["cells"]))[:MAX_CELLS]
        else:
            last = args.get("last") or DEFAULT_LAST
            if last < 1:
                raise ToolFailure("notebook: last must be at least 1")
            wanted = ran[-min(last, MAX_CELLS) :]
        if not wanted:
            return ToolResult(
                output="No cell has run in this kernel before this one.",
                title="cells",
                metadata={"cells": []},
            )
        blocks = []
        for number in wanted:
            if number not in ran:
                blocks.append(f"In [{number}]: {log.missing_cell(number)}")
                continue
            blocks.append(self._cell(log, number))
        title = f"cells {wanted[0]}–{wanted[-1]}" if len(wanted) > 1 else f"cell {wanted[0]}"
        return ToolResult(output="\n\n".join(blocks), title=title, metadata={"cells": wanted})

    def _cell(self, log: kernel.CellLog, number: int) -> str:
        source = _cap(log.source(number) or "", MAX_SOURCE_CHARS)
        lines = [f"In [{number}]:", source]
        shown, value = log.output(number)
        if shown:
            text = _cap(_repr(value), MAX_OUTPUT_CHARS)
            lines += [f"Out[{number}]:", text]
        error = log.error(number)
        if error is not None:
            lines += [f"Error in [{number}]: {error.name}", _cap(error.traceback, MAX_SOURCE_CHARS)]
        return "\n".join(lines)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as err:
        return f"<repr unavailable: {type(err).__name__}>"


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"


def _remember_secrets(namespace: dict) -> None:
    """Text values of secret-looking names (``db_password``, ``hf_token``, ``API_KEY``: the
    environment's rule, ``redact.secret_name``) are redacted from everything this call shows,
    the cells that assigned them included."""
    for name, value in list(namespace.items()):
        if isinstance(value, str) and not name.startswith("_") and secret_name(name):
            remember(value, name)
