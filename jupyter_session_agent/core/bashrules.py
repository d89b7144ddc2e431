"""What the commands of a bash line would do: the rules that decide whether the permission gate
asks about a command :mod:`.bashparse` has read.

One module: one table of command knowledge (arity, code builtins, shells, wrappers' options,
risky script commands) and the small functions that read it; most of its lines are the table.

:mod:`.bashparse` turns a line into simple commands and their words; this module knows the
commands themselves: how many words name one for an "always" pattern (:data:`BASH_ARITY`,
:func:`prefix`), which builtins run code (:data:`CODE_BUILTINS`), which programs are shells,
which wrap another command and where that command starts (:func:`wrapped`), and when ``find``,
``sed``, ``awk``, a shell or ``declare`` reach beyond their operands (each ``*_reason``
function returns the one-line reason to ask, or ``None``). Pure: words in, answers out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")

# How many words name a command, for "always" patterns (OpenCode's BashArity, trimmed).
BASH_ARITY: Mapping[str, int] = {
    "git": 2,
    "git config": 3,
    "git remote": 3,
    "git stash": 3,
    "git submodule": 3,
    "git worktree": 3,
    "npm": 2,
    "npm run": 3,
    "npm exec": 3,
    "pnpm": 2,
    "pnpm run": 3,
    "yarn": 2,
    "yarn run": 3,
    "bun": 2,
    "bun run": 3,
    "npx": 2,
    "pip": 2,
    "pip3": 2,
    "uv": 2,
    "uv pip": 3,
    "uv run": 2,
    "conda": 2,
    "mamba": 2,
    "poetry": 2,
    "poetry run": 3,
    "python -m": 3,
    "python3 -m": 3,
    "python -m pip": 4,
    "python3 -m pip": 4,
    "cargo": 2,
    "go": 2,
    "docker": 2,
    "docker compose": 3,
    "kubectl": 2,
    "helm": 2,
    "make": 2,
    "jupyter": 2,
    "apt": 2,
    "apt-get": 2,
    "brew": 2,
    "systemctl": 2,
    "gh": 3,
}
ARITY_WORDS = max(len(key.split()) for key in BASH_ARITY)

# Builtins that run a string or a file as shell code, or change how later words are read.
CODE_BUILTINS = frozenset(
    {
        "eval",
        "source",
        ".",
        "exec",
        "alias",
        "trap",
        "fc",
        "coproc",
        "enable",
        "bind",
        "complete",
        "compgen",
        "let",
        "history",
    }
)
SHELLS = frozenset(
    {
        "bash",
        "sh",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "ash",
        "fish",
        "csh",
        "tcsh",
        "rbash",
    }
)

# Wrappers: the command they run follows their options. Options taking a value are listed;
# any other option ends the analysis as unsupported (a wrapper we cannot read fails closed).
WRAPPERS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    # name: (flags without a value, options with a value)
    "env": (
        frozenset({"-i", "-0", "--ignore-environment", "--null", "-v", "--debug", "-"}),
        frozenset({"-u", "--unset", "-C", "--chdir"}),
    ),
    "command": (frozenset({"-p"}), frozenset()),
    "builtin": (frozenset(), frozenset()),
    "nohup": (frozenset(), frozenset()),
    "time": (frozenset({"-p"}), frozenset()),
    "nice": (frozenset(), frozenset({"-n", "--adjustment"})),
    "setsid": (frozenset({"-f", "-w", "--fork", "--wait"}), frozenset()),
    "stdbuf": (frozenset(), frozenset({"-i", "-o", "-e", "--input", "--output", "--error"})),
    "timeout": (
        frozenset({"--foreground", "--preserve-status", "-v", "--verbose"}),
        frozenset({"-s", "--signal", "-k", "--kill-after"}),
    ),
    "sudo": (
        frozenset(
            {
                "-E",
                "-H",
                "-n",
                "-P",
                "-S",
                "-b",
                "-k",
                "--preserve-env",
                "--non-interactive",
                "--set-home",
            }
        ),
        frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    ),
    "doas": (frozenset({"-n"}), frozenset({"-u"})),
    "xargs": (
        frozenset(
            {
                "-0",
                "-r",
                "-t",
                "-p",
                "-x",
                "--null",
                "--no-run-if-empty",
                "--verbose",
                "--interactive",
                "--exit",
                "--open-tty",
                "-o",
            }
        ),
        frozenset(
            {
                "-a",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "-d",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-lines",
                "--max-procs",
                "--max-chars",
                "--eof",
                "--replace",
            }
        ),
    ),
    "busybox": (frozenset(), frozenset()),
}
WRAPPER_OPERANDS = {"timeout": 1}  # positional words before the command (the duration)
FIND = frozenset({"find"})
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

FIND_WRITES = frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})
AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "busybox awk"})
AWK_RISKY = re.compile(
    r"system|getline|fflush|close|@load|ENVIRON|PROCINFO|\|&|\bprintf?\b[^;{}]*(?:>|\|)"
)


def sed_risky(script: str) -> bool:
    """Does a sed script use ``e``, ``w``/``W``, ``r``/``R`` (as a command or an ``s`` flag)?
    The bodies of ``s`` and ``y`` commands are skipped; anything else holding one of those
    letters counts (a false alarm only asks)."""
    rest = []
    i = 0
    while i < len(script):
        c = script[i]
        if c in "sy" and i + 1 < len(script) and script[i + 1] not in "\\\n;}":
            delim = script[i + 1]
            j, seen = i + 2, 0
            while j < len(script) and seen < 2:
                if script[j] == "\\":
                    j += 2
                    continue
                if script[j] == delim:
                    seen += 1
                j += 1
            flags = re.match(r"[0-9gpIiMme w]*", script[j:])
            taken = flags.group(0) if flags else ""
            if c == "s" and re.search(r"[ew]", taken.split(" ")[0] if taken else ""):
                return True
            i = j + len(taken.split(" ")[0]) if taken else j
            continue
        if c == "/" or c == "\\":  # an address /re/ or \cREc: skip to its end
            delim = "/" if c == "/" else (script[i + 1] if i + 1 < len(script) else "")
            j = i + (1 if c == "/" else 2)
            while j < len(script) and script[j] != delim:
                j += 2 if script[j] == "\\" else 1
            i = j + 1
            continue
        rest.append(c)
        i += 1
    return re.search(r"[ewWrRF]", "".join(rest)) is not None


def prefix(words: Sequence[str]) -> str:
    """The arity prefix of a command's words (assignments skipped):
    ``git checkout main`` → ``git checkout``."""
    tokens = list(words)
    while tokens and ASSIGNMENT.match(tokens[0]):
        tokens = tokens[1:]
    if not tokens:
        return " ".join(words)
    for length in range(min(len(tokens), ARITY_WORDS), 0, -1):
        arity = BASH_ARITY.get(" ".join(tokens[:length]))
        if arity is not None:
            return " ".join(tokens[:arity])
    return tokens[0]


def builtin_reason(name: str, args: Sequence[str | None]) -> str | None:
    """Why a builtin runs code the checker cannot see (``eval``, ``mapfile -C``), or ``None``."""
    base = name.rsplit("/", 1)[-1]
    if base in CODE_BUILTINS or name in CODE_BUILTINS:
        return f"`{base}` runs code the checker cannot see"
    if base in ("mapfile", "readarray") and any(w and w[:1] == "-" and "C" in w for w in args):
        return f"`{base} -C` runs a callback"
    return None


def wrapped(name: str, args: Sequence[str | None]) -> int | str | None:
    """Where the command a wrapper (``env``, ``sudo``, ``xargs``…) runs starts in ``args``; a
    reason to ask (``str``) for an option the checker does not know; ``None`` when it runs
    nothing (``command -v``)."""
    flags, valued = WRAPPERS[name]
    i = 0
    operands = WRAPPER_OPERANDS.get(name, 0)
    while i < len(args):
        word = args[i]
        if word is None:
            return f"`{name}` with a computed option"
        if word == "--":
            i += 1
            break
        if word.startswith("-") and word != "-" or (name == "env" and word == "-"):
            option = word.split("=", 1)[0]
            if name == "command" and option in ("-v", "-V"):
                return None  # a lookup, runs nothing
            if option in flags:
                i += 1
                continue
            if option in valued:
                i += 1 if "=" in word else 2
                continue
            attached = option[:2]
            if len(option) > 2 and not option.startswith("--") and attached in valued:
                i += 1
                continue
            if name == "xargs" and option.startswith(("-i", "-l", "-e")):
                i += 1  # -i[R], -l[N], -e[EOF]: optional attached values
                continue
            return f"`{name} {word}` (an option the checker does not know)"
        break
    if name == "env":
        while i < len(args) and args[i] is not None and ASSIGNMENT.match(args[i] or ""):
            i += 1
    return i + operands


def find_actions(args: Sequence[str | None]) -> tuple[list[tuple[str, int, int]], str | None]:
    """The commands ``find`` runs (``-exec cmd … ;``: the option and the span of ``args`` that
    holds the command) up to the first action that writes or deletes, and the reason to ask
    for that action (or ``None``)."""
    spans: list[tuple[str, int, int]] = []
    i = 0
    while i < len(args):
        if args[i] in FIND_WRITES:
            return spans, f"`find {args[i]}` (writes or deletes what it finds)"
        if args[i] in FIND_EXEC:
            start = i + 1
            end = start
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            spans.append((str(args[i]), start, end))
            i = end
        i += 1
    return spans, None


def sed_reason(args: Sequence[str | None]) -> str | None:
    """A sed script is code: ``e`` runs a command, ``w``/``W`` (and the ``w`` flag of
    ``s``) write a file, ``r``/``R`` read one, ``-f`` takes the script from a file. Any of
    them, or a script the checker cannot read, is a reason to ask."""
    scripts: list[str | None] = []
    explicit = False
    i = 0
    while i < len(args):
        word = args[i]
        if word is None:
            scripts.append(None)
        elif word in ("-e", "--expression"):
            explicit = True
            scripts.append(args[i + 1] if i + 1 < len(args) else None)
            i += 1
        elif word.startswith("--expression="):
            explicit = True
            scripts.append(word.split("=", 1)[1])
        elif word.startswith("-e") and not word.startswith("--"):
            explicit = True
            scripts.append(word[2:])
        elif word in ("-f", "--file") or word.startswith(("--file=", "-f")):
            return "`sed -f` (a script read from a file)"
        elif word.startswith("-") and word != "-":
            if word[1:2] != "-" and "f" in word[1:] and "i" not in word[1:2]:
                return f"`sed {word}` (a script read from a file)"
        elif not explicit and not scripts:
            scripts.append(word)
        i += 1
    for script in scripts:
        if script is None or sed_risky(script):
            shown = "a computed script" if script is None else repr(script[:40])
            return f"`sed` {shown} (runs commands or reads/writes files)"
    return None


def awk_reason(name: str, args: Sequence[str | None]) -> str | None:
    """An awk program is code: ``system``, pipes, redirections and ``getline`` reach
    beyond its operands; ``-f`` takes the program from a file."""
    for word in args:
        if word is None:
            return f"`{name}` with a computed argument"
        if word.startswith("-f") or word.startswith("--file") or word.startswith("-E"):
            return f"`{name} {word}` (a program read from a file)"
        if word.startswith("-"):
            continue
        if AWK_RISKY.search(word):
            return f"`{name}` program {word[:40]!r} (runs commands or reads/writes files)"
        return None
    return None


def shell_reason(name: str, args: Sequence[str | None]) -> str | None:
    """A shell runs a string (``-c``), an rc file, or what it reads from its input: only a
    script file named as its operand is read as a command."""
    for word in args:
        if word is None:
            return f"`{name}` with a computed argument"
        if word[:1] == "-" and word[:2] != "--" and set(word) & set("csi"):
            return f"`{name} {word}` runs a string as shell code"
        if word in ("--command", "--init-file", "--rcfile"):
            return f"`{name} {word}`"
        if not word.startswith(("-", "+")):
            return None
    return f"`{name}` reading commands from its input"


def declare_reason(args: Sequence[str]) -> str | None:
    """``declare -i/-n/-a/-A/-f`` (and ``local``, ``export``…) evaluate their values."""
    for word in args:
        if word.startswith(("-", "+")) and set(word[1:]) & set("inaAf"):
            return f"`{word}` (arrays, integers and name references evaluate their values)"
    return None


__all__ = [
    "ASSIGNMENT",
    "AWKS",
    "BASH_ARITY",
    "CODE_BUILTINS",
    "FIND",
    "SHELLS",
    "WRAPPERS",
    "awk_reason",
    "builtin_reason",
    "declare_reason",
    "find_actions",
    "prefix",
    "sed_reason",
    "shell_reason",
    "wrapped",
]
