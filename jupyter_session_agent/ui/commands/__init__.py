"""``%agent <subcommand>`` handlers, one module per feature.

Each module registers its handlers with :func:`subcommand`; ``magics.py``
only calls :func:`dispatch`. A handler gets the ``AgentMagics`` instance, the argument
words (shell-split) and the raw text after the subcommand name, and returns
what the cell should display (or ``None``). Modules are imported on the first
``%agent`` call, not at ``%load_ext``, so loading the extension stays cheap.

Bad input is the dispatcher's business, for every subcommand: unbalanced quotes, a NUL
character, an argparse failure (:func:`parse` is the one-line parser to use) and an
``OSError`` on a path the user gave (a folder that cannot be written, a file that is a
folder, …) become one :class:`UsageError` line naming the fix, never a traceback. IPython's
``$var``/``{expr}`` expansion applies to a subcommand's text unless it registers with
``expand=False`` (``sql``: the query reaches DuckDB as typed).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import shlex
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...core.errors import AgentError, UsageError
from ...core.settings import SettingInfo

Handler = Callable[[Any, list[str], str], Any]

# Feature modules under this package, each with the subcommands it registers on import: a
# command loads only its own module (and what that module imports), so the first ``%agent
# sessions`` does not load memory, the exporters or the MCP client; ``help`` loads them all.
MODULES: dict[str, str] = {
    "core": "help new use sessions sql",
    "display": "show budget browse",
    "permissions": "permit",
    "lifecycle": "fork revert unrevert turns archive unarchive delete export import import-opencode",
    "compaction": "compact compaction",
    "memory": "remember recall memory",
    "analytics": "plot report export-parquet export-duckdb",
    "mcp": "mcp",
    "context": "fix code",
    "replay": "record replay",
}
OWNER = {name: module for module, names in MODULES.items() for name in names.split()}


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str  # e.g. "use ID"
    help: str  # one line
    handler: Handler
    expand: bool = True  # IPython's $var / {expr} expansion of the text after the name
    split: bool = True  # shell-split the words (False: whitespace-split; the handler reads raw)


REGISTRY: dict[str, Subcommand] = {}


def subcommand(
    name: str, usage: str, help: str, *, expand: bool = True, split: bool = True
) -> Callable[[Handler], Handler]:
    """Register ``fn`` as ``%agent name``; ``usage`` and ``help`` feed ``%agent help``.

    ``expand=False``: the text reaches the handler as typed; ``split=False``: quotes in it
    are not shell syntax (the handler reads ``raw``)."""

    def register(fn: Handler) -> Handler:
        REGISTRY[name] = Subcommand(name, usage, help, fn, expand, split)
        return fn

    return register


def dispatch(magics: Any, line: str, expand: Callable[[str], str] | None = None) -> Any:
    """Run ``%agent LINE``: the subcommand named by its first word, with the rest.

    ``expand`` is IPython's variable expansion (applied unless the subcommand opted out).
    Every failure caused by the input is one :class:`UsageError` line; the original
    exception is its ``__cause__``.
    """
    if "\x00" in line:
        raise UsageError("the arguments hold a NUL character — remove it")
    head = line.strip().split(None, 1)
    name, rest = (head[0], head[1] if len(head) > 1 else "") if head else ("help", "")
    command = load(name)
    if command is None:
        raise UsageError(
            f"unknown or not yet available subcommand '{name}' — %agent help lists them"
        )
    raw = (expand(rest) if expand is not None and command.expand else rest).strip()
    words = split_words(raw, f"%agent {command.usage}") if command.split else raw.split()
    try:
        return command.handler(magics, words, raw)
    except AgentError:
        raise
    except argparse.ArgumentError as err:
        raise UsageError(f"{err} — usage: %agent {command.usage}") from err
    except SystemExit as err:  # a plain argparse parser printed its usage and exited
        raise UsageError(f"wrong arguments — usage: %agent {command.usage}") from err
    except OSError as err:
        raise UsageError(os_error_line(f"%agent {name}", err, command.usage)) from err


def split_words(text: str, usage: str) -> list[str]:
    """Shell-split ``text``; an unbalanced quote or a trailing backslash is a one-line error."""
    try:
        return shlex.split(text)
    except ValueError as err:
        if "escaped" in str(err):
            fix = "a backslash at the end escapes nothing — remove it, or double it (\\\\)"
        else:
            fix = (
                "a quote is not closed — close it, or escape a literal quote with a backslash (\\')"
            )
        raise UsageError(f"{fix} — usage: {usage}") from err


_OS_HINTS = {
    errno.EACCES: "choose a folder you may write to, or fix its permissions",
    errno.EPERM: "choose a folder you may write to, or fix its permissions",
    errno.EROFS: "the file system is read-only — choose another folder",
    errno.ENOENT: "check the path: it does not exist",
    errno.ENOTDIR: "a part of the path is a file, not a folder — check the path",
    errno.EISDIR: "that is a folder — give a file",
    errno.EEXIST: "it exists already — choose another name",
    errno.ENOSPC: "the disk is full — free some space and run it again",
    errno.EDQUOT: "the disk quota is used up — free some space and run it again",
    errno.ENAMETOOLONG: "the name is too long — choose a shorter path",
    errno.ELOOP: "the path loops through symbolic links — check the path",
}


def os_error_line(what: str, err: OSError, usage: str) -> str:
    """One line for an ``OSError`` on a path the user gave: what failed, on which file, the fix."""
    where = f" ({err.filename})" if err.filename else ""
    hint = _OS_HINTS.get(err.errno or 0, f"check the path — usage: %agent {usage}")
    return f"{what}: {err.strerror or err}{where} — {hint}"


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors are one :class:`UsageError` line naming the usage."""

    def error(self, message):  # one line naming the fix, not argparse's usage dump + SystemExit
        raise UsageError(f"{message} — usage: %agent {self.prog}")


def usage_parser(usage: str) -> OneLineParser:
    """A parser for ``%agent usage``'s words (no ``-h``), to add arguments to."""
    return OneLineParser(prog=usage, add_help=False)


def parse(usage: str, words: list[str], *specs: tuple[tuple[str, ...], dict]) -> argparse.Namespace:
    """``words`` parsed by ``argparse`` with ``specs`` (``(flags, kwargs)`` pairs): unknown
    options, missing values, extra words and bad values are one :class:`UsageError` line."""
    parser = usage_parser(usage)
    for flags, kwargs in specs:
        parser.add_argument(*flags, **kwargs)
    return parser.parse_args(words)


def existing_session(magics: Any, session_id: str | None = None) -> Any:
    """The current session (or ``session_id``, which becomes current); without either, one
    line naming the fix rather than a new empty session."""
    if session_id is not None:
        return magics.current(session_id=session_id)
    if magics.session is None:
        raise UsageError("no current session — run a %%agent cell first, or %agent use ID")
    return magics.current()


def load(name: str) -> Subcommand | None:
    """The subcommand ``name``, its module imported (None: no such subcommand)."""
    module = OWNER.get(name)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY.get(name)


def load_all() -> dict[str, Subcommand]:
    """Every subcommand (``%agent help``), each module imported."""
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY


def setting_lines(settings: Iterable[SettingInfo]) -> list[str]:
    """One ``%agent help`` line per setting: its name, default and help."""
    items = [(f"{s.name} = {s.default!r}", s.help) for s in settings]
    width = max((len(head) for head, _ in items), default=0) + 2
    return [f"  {head:<{width}} {text}" for head, text in items]


def settings_markdown(settings: Iterable[SettingInfo]) -> str:
    """The settings as a Markdown table (``docs/settings.md``): name, default, what it allows
    and its doc; each dict setting's keys follow as ``name['key']`` rows."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| setting | default | allowed | meaning |", "|---|---|---|---|"]
    for s in settings:
        rows.append(
            f"| `{s.name}` | `{cell(repr(s.default))}` | {cell(s.allowed)} | {cell(s.doc)} |"
        )
        for key in s.keys:
            rows.append(
                f"| `{s.name}['{key.name}']` | `{cell(repr(key.default))}` | "
                f"{cell(key.allowed)} | {cell(key.doc)} |"
            )
    return "\n".join(rows)


HELP_WIDTH = 88  # characters per %agent help line: a notebook's output never wraps one mid-word


CELL_HELP = (
    "run the cell body as a prompt",
    "attach files and values ({var} too)",
    "-c: the answer's code into the next cell",
    "-p: a permission rule for this cell",
)
USAGE_WIDTH = 44  # characters of a usage before its help


def cell_usage(parser: argparse.ArgumentParser, name: str = "%%agent") -> list[str]:
    """The cell magic's usage from its own arguments (IPython's ``@argument`` parser), cut
    into lines of at most :data:`USAGE_WIDTH` characters: ``%%agent [-s SESSION] [-n] …``."""
    text = " ".join(parser.format_usage().split())
    options = text.split(" ", 2)[-1]  # after "usage:" and the parser's own name
    tokens, depth, word = [], 0, ""
    for ch in options:  # split at spaces outside brackets: "[-o VAR]" is one token
        depth += (ch == "[") - (ch == "]")
        if ch == " " and depth == 0:
            tokens.append(word)
            word = ""
        else:
            word += ch
    tokens = [t for t in [*tokens, word] if t and t != "[-h]"]
    lines, line = [], name
    for token in tokens:
        if len(line) + 1 + len(token) > USAGE_WIDTH and line.strip():
            lines.append(line)
            line = " " * len(name)
        line += " " + token
    return [*lines, line]


def help_text(
    settings: Iterable[SettingInfo] = (), cell: argparse.ArgumentParser | None = None
) -> str:
    """``%agent help``: every subcommand and the cell magics, one short line each (wrapped at
    :data:`HELP_WIDTH`), ``%%agent``'s usage generated from ``cell``, its argument parser;
    with ``settings``, one line per setting instead (``%agent help settings``)."""
    settings_help = setting_lines(settings)
    if settings_help:
        return "\n".join(
            ["Settings: %config AgentMagics.<name> = value (shown: the default)", *settings_help]
        )

    commands = load_all()
    usage = cell_usage(cell) if cell is not None else ["%%agent"]
    helps = [*CELL_HELP[: len(usage) - 1], "; ".join(CELL_HELP[len(usage) - 1 :])]
    helps += [""] * (len(usage) - len(helps))
    entries = [
        *zip(usage, helps),
        *((f"%agent {c.usage}", c.help) for c in sorted(commands.values(), key=lambda c: c.name)),
        ("%%agent_sql [VAR <<]", "read-only SQL for a whole cell; VAR << keeps the DataFrame"),
    ]
    width = min(max(len(head) for head, _ in entries), USAGE_WIDTH) + 2
    lines = []
    for head, text in entries:
        if len(head) >= width:  # a long usage on its own line, its help below
            lines.append(head)
            head = ""
        if not text:
            lines.append(head.rstrip())
            continue
        lines += textwrap.wrap(
            text,
            HELP_WIDTH,
            initial_indent=f"{head:<{width}}",
            subsequent_indent=" " * width,
            break_long_words=False,
            break_on_hyphens=False,
        )
    lines.append("Settings: %agent help settings")
    return "\n".join(lines)
