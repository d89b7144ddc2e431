"""``python``: run code in the user's kernel, like a notebook cell the model writes.

Contract:

* The code runs in ``ctx.shell.user_ns``, so variables persist across calls
  and are shared with the user's cells. Without a shell, each session gets a
  private namespace kept for the life of the process.
* Statements run in order; if the last one is an expression its ``repr`` is
  the result (skipped when ``None`` or when the code ends with ``;``), as in
  a notebook cell. Code is plain Python: no ``%magics`` or ``!shell`` lines.
* ``sys.stdout``/``sys.stderr`` are captured into the output. The display
  publisher is untouched, so ``display(...)`` and inline matplotlib figures
  still reach the notebook cell. The kernel's cwd is user state: no chdir.
* An exception in the user's code (including ``SyntaxError`` and
  ``SystemExit``) does NOT fail the tool: the call completes, its output holds
  whatever was printed plus the traceback (our own frames removed), and
  ``metadata["error"]`` is the exception class name. Running code that
  raises is a normal outcome the model must read and react to, and the
  prints before the error matter; an ``error`` state would lose them.
  ``KeyboardInterrupt`` propagates untouched.
* Capture swaps the process-wide ``sys.stdout``, so prints from other threads
  during the call land in the output too.
"""

from __future__ import annotations

import ast
import io
import linecache
import traceback
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

from .base import ToolContext, ToolResult

TITLE_LENGTH = 60

# session id → namespace, for contexts without an IPython shell.
_PRIVATE_NAMESPACES: dict[str, dict[str, Any]] = {}


class PythonTool:
    name = "python"
    description = (
        "Run Python code in the user's Jupyter kernel. Variables persist between calls and are "
        "shared with the notebook. Printed output is returned, and the value of the last "
        "expression is shown like a notebook cell. Plain Python only: no %magics or !commands "
        "(use bash for shell commands)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python code to run"},
        },
        "required": ["code"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        code = args["code"]
        namespace = _namespace(ctx)
        filename = f"<python-tool {ctx.call_id}>"
        # Registered so tracebacks show the model's source lines; mtime None
        # keeps linecache.checkcache from evicting it.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)

        out, err = io.StringIO(), io.StringIO()
        result, error = "", None
        with redirect_stdout(out), redirect_stderr(err):
            try:
                value = _execute(code, filename, namespace)
                if value is not None and not code.rstrip().endswith(";"):
                    result = _safe_repr(value)
            except (Exception, SystemExit) as exc:  # user code; KeyboardInterrupt passes
                error = exc
        sections = [("stdout", out.getvalue()), ("stderr", err.getvalue())]
        if error is not None:
            sections.append(("error", _format_error(error, filename)))
        else:
            sections.append(("result", result))
        return ToolResult(
            output=_join(sections),
            title=_title(code),
            metadata={"error": type(error).__name__} if error is not None else {},
        )


def _namespace(ctx: ToolContext) -> dict[str, Any]:
    if ctx.shell is not None:
        return ctx.shell.user_ns
    return _PRIVATE_NAMESPACES.setdefault(ctx.session_id, {"__name__": "__main__"})


def _execute(code: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Exec all statements; evaluate and return a trailing expression, else None."""
    tree = ast.parse(code, filename=filename, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a broken __repr__ must not fail the call
        return f"<{type(value).__name__} object; repr failed: {type(exc).__name__}: {exc}>"


def _format_error(exc: BaseException, filename: str) -> str:
    """The traceback from the model's first frame on (ours are noise to it)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _join(sections: list[tuple[str, str]]) -> str:
    """Non-empty sections; labelled only when more than one (or stderr alone)."""
    present = [(label, text.rstrip("\n")) for label, text in sections if text.strip()]
    if not present:
        return "(no output)"
    if len(present) == 1 and present[0][0] != "stderr":
        return present[0][1]
    return "\n".join(f"[{label}]\n{text}" for label, text in present)


def _title(code: str) -> str:
    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
    return first if len(first) <= TITLE_LENGTH else first[: TITLE_LENGTH - 1] + "…"
