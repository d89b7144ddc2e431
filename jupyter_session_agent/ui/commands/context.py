"""Notebook context: ``%agent fix [N]`` and ``%agent code``.

``fix`` sends the error of cell N (default: the last cell that raised) with that cell's source
to the current session and asks for the cause and a fix; ``-c`` puts the answer's code into
the next cell. The source and the traceback go in fenced blocks longer than any backtick run
inside them, and the prompt is sent without interpolation, so neither a ``{…}`` nor an ``@…``
in them is read as notebook context. ``code`` puts the last python block of the current
session's last answer into the next cell (``set_next_input``).
"""

from __future__ import annotations

from ...context.markdown import fence
from ...context.prompt import code_to_next_cell
from ...core.errors import UsageError
from ...tools.kernel import cell_log
from . import parse, subcommand

FIX_USAGE = "fix [N] [-c]"
FIX_QUESTION = "Explain the cause of this error and propose a fix."


def fix_prompt(number: int, source: str, traceback: str) -> str:
    """What ``%agent fix`` sends for cell ``number``."""
    return (
        f"{FIX_QUESTION}\n\nThe code of cell In [{number}]:\n\n{fence(source, 'python')}\n\n"
        f"The error it raised:\n\n{fence(traceback)}"
    )


@subcommand(
    "fix",
    FIX_USAGE,
    "send the last error (or cell N's) with its source and ask for "
    "the cause and a fix (-c: the fixed code into the next cell)",
    expand=False,
)
def fix(magics, words, raw):
    args = parse(
        FIX_USAGE, words, (("cell",), {"nargs": "?"}), (("-c", "--code"), {"action": "store_true"})
    )
    log = cell_log(magics.shell)
    if args.cell is None:
        error = log.last_error()
        if error is None:
            raise UsageError(
                "no cell has raised an error in this kernel yet — nothing to fix "
                "(%agent fix N names a cell)"
            )
    else:
        try:
            number = int(str(args.cell).strip().lstrip("[").rstrip("]"))
        except ValueError:
            raise UsageError(
                f"%agent fix takes a cell number, not {args.cell!r} — e.g. %agent fix 3"
            ) from None
        if number not in log.numbers():
            raise UsageError(f"%agent fix {number}: {log.missing_cell(number)} — give one of them")
        error = log.error(number)
        if error is None:
            have = [e.number for e in log.errors()]
            some = (
                f"cells with an error: {', '.join(map(str, have[-10:]))}"
                if have
                else "no cell has raised an error yet"
            )
            raise UsageError(
                f"%agent fix {number}: cell {number} raised no error ({some}) — give one of them"
            )
    line = "--no-interpolate" + (" -c" if args.code else "")
    return magics.agent_cell(line, fix_prompt(error.number, error.source, error.traceback))


@subcommand("code", "code", "put the last python code block of the last answer into the next cell")
def code(magics, words, raw):
    if words:
        raise UsageError("%agent code takes no arguments — usage: %agent code")
    answer = magics.session.last_answer() if magics.session is not None else ""
    if not answer:
        raise UsageError("no answer yet in this session — run a %%agent cell first")
    code_to_next_cell(magics.shell, answer)
    return None
