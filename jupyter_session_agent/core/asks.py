"""What a tool call asks for: the permissions and patterns the rules are checked against.

:func:`tool_asks` is OpenCode's tool → permission table adapted to our tools: ``edit`` for the
edit family (the path relative to the session directory), ``read`` for the read tools (the
absolute path), ``bash`` for every simple command of a command line (read by
:mod:`.bashparse`, which fails closed), ``external_directory`` first for a path outside the
session directory, and the tool's name for any other tool. Paths are resolved on the disk
(symbolic links followed, bash globs expanded), so this module looks at the file system; the
rules that decide (:mod:`.permission`) do not.

One module: every tool's asks are built from the same path resolution and the same
``external_directory`` merging, so a way around one would be a way around all.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import bashparse
from .redact import before_cut

# Tools whose calls ask another tool's permission (OpenCode: the edit family).
EDIT_TOOLS = ("edit", "write", "patch", "multiedit", "apply_patch")
READ_TOOLS = ("read", "list", "glob", "grep")
# Tools that read no path (the kernel's variables and cells): they ask the read permission
# for "*", so the read rules' "*" entry decides (a `read * deny` hides them too).
KERNEL_READ_TOOLS = ("notebook",)
# The open notebook's tools (tools/notebook_doc.py): an edit asks ``edit`` through its own
# review (the diffs are the question, so the gate does not ask first); running a cell asks
# ``python``, as running code does.
NOTEBOOK_EDIT, NOTEBOOK_RUN = "notebook_edit", "notebook_run"


def permission_of(tool: str) -> str:
    """The permission a tool's calls ask for: ``write`` → ``edit``, ``grep`` → ``read``."""
    if tool in EDIT_TOOLS:
        return "edit"
    if tool in READ_TOOLS or tool in KERNEL_READ_TOOLS:
        return "read"
    if tool == NOTEBOOK_EDIT:
        return "edit"
    if tool == NOTEBOOK_RUN:
        return "python"
    return tool


@dataclass(frozen=True)
class Ask:
    """One permission a call needs: every pattern must be allowed (or approved).

    ``unsure`` names what the checker could not account for (a bash construct it cannot
    read, a path it cannot resolve): such an ask is asked even when a rule allows its
    patterns, unless the rules allow that permission for everything (a last ``*`` allow).
    """

    permission: str
    patterns: tuple[str, ...]
    always: tuple[str, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    unsure: str = ""


def tool_asks(tool: str, args: Mapping[str, Any], directory: str) -> list[Ask]:
    """The permissions a call of ``tool`` with ``args`` needs, in the order they are asked.

    ``edit``/``write``: ``edit`` with the path relative to ``directory`` (always
    ``*``); ``read``/``list``/``glob``/``grep``: ``read`` with the absolute path
    (always: that path); ``bash``: ``bash`` with each simple command of the
    command line (always: its arity prefix + ``" *"``); ``python``: the code
    (always ``*``); any other tool: its name with ``*``. A path outside
    ``directory`` first asks ``external_directory`` with ``<dir>/*``.

    Paths are resolved on the disk (symbolic links followed): a link inside the
    directory that points outside asks ``external_directory``, and the rules see
    both the path as written and the file it reaches (a link to ``.env`` asks as
    ``.env`` does).
    """
    directory = _norm(directory)
    args = args or {}
    asks: list[Ask] = []
    permission = permission_of(tool)
    if tool in EDIT_TOOLS:
        target = _abs(directory, args.get("filePath") or args.get("path") or "")
        real = real_path(target)
        asks += _external(directory, real, directory_kind=False, tool=tool)
        relative = _relative(directory, target)
        patterns = tuple(dict.fromkeys([relative, _relative(real_path(directory), real)]))
        asks.append(Ask("edit", patterns, ("*",), {"tool": tool, "summary": relative}))
    elif tool in READ_TOOLS:
        if tool == "read":
            target, is_dir = _abs(directory, args.get("filePath") or ""), False
        else:
            target, is_dir = _abs(directory, args.get("path") or ""), True
            if tool == "glob":
                target = _glob_root(target, str(args.get("pattern") or ""))
        real = real_path(target)
        asks += _external(directory, real, directory_kind=is_dir, tool=tool)
        summary = target if tool == "read" else f"{target} ({args.get('pattern') or tool})"
        if real != target:
            summary += f" → {real}"
        patterns = tuple(dict.fromkeys([target, real]))
        asks.append(Ask("read", patterns, patterns, {"tool": tool, "summary": summary}))
    elif tool == "bash":
        command = str(args.get("command") or "")
        asks += _bash_asks(command, directory, tool)
    elif tool == "python":
        code = str(args.get("code") or "")
        asks.append(Ask("python", (code,), ("*",), {"tool": tool, "summary": code, "code": code}))
    elif tool == NOTEBOOK_EDIT:
        pass  # asked by the tool: the review of its diffs is the question (Gate.decides)
    elif tool == NOTEBOOK_RUN:
        cell = short_text(str(args.get("cell") or ""), 80)
        summary = f"run notebook cell {cell}"
        asks.append(
            Ask("python", (summary,), ("*",), {"tool": tool, "summary": summary, "cell": cell})
        )
    else:
        # any other tool (task, recall, an MCP server's `<server>_<tool>`): its name, and the
        # question shows its input
        summary = f"{tool} {short_text(canonical_args(args), 200)}" if args else tool
        asks.append(Ask(permission, ("*",), ("*",), {"tool": tool, "summary": summary}))
    return _dedupe_external(asks)


def doom_loop_ask(tool: str, args: Mapping[str, Any]) -> Ask:
    return Ask(
        "doom_loop",
        (tool,),
        (tool,),
        {
            "tool": tool,
            "input": dict(args or {}),
            "summary": f"{tool} called 3 times in a row with the same input",
        },
    )


def _norm(path: str) -> str:
    return posixpath.normpath(str(path).replace("\\", "/"))


def _abs(directory: str, path: str) -> str:
    """``path`` made absolute against ``directory``. A ``..`` is resolved after the symbolic
    links before it, as the kernel does (``data/../x`` with ``data -> /a/b`` is ``/a/x``),
    never removed as text first."""
    path = os.path.expanduser(str(path)).replace("\\", "/")
    if not path:
        return directory
    joined = posixpath.join(directory, path)
    if ".." in joined.split("/"):
        return real_path(joined)
    return _norm(joined)


def resolve_path(directory: str, path: str | None) -> str:
    """The one path resolution of the permission check and the file tools
    (``tools/paths.py`` ``resolve`` calls it): ``~`` expanded, relative to ``directory``,
    every symbolic link resolved before the ``..`` that follows it."""
    return real_path(_abs(_norm(directory), str(path or "")))


def real_path(path: str) -> str:
    """``path`` with every symbolic link on the way resolved (missing parts kept as written)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _relative(directory: str, path: str) -> str:
    return posixpath.relpath(path, directory) if path != directory else "."


def _inside(directory: str, path: str) -> bool:
    """Is ``path`` (resolved) inside ``directory`` (resolved: a link to the directory counts)?"""
    for root in dict.fromkeys([directory, real_path(directory)]):
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def _external(directory: str, target: str, *, directory_kind: bool, tool: str) -> list[Ask]:
    if _inside(directory, target):
        return []
    parent = target if directory_kind else posixpath.dirname(target)
    glob = posixpath.join(parent, "*")
    return [
        Ask(
            "external_directory",
            (glob,),
            (glob,),
            {"tool": tool, "summary": f"{glob} ({tool} {target})"},
        )
    ]


def _dedupe_external(asks: list[Ask]) -> list[Ask]:
    """One external_directory question per call, naming every directory."""
    external = [a for a in asks if a.permission == "external_directory"]
    if len(external) <= 1:
        return asks
    patterns = tuple(dict.fromkeys(p for a in external for p in a.patterns))
    unsure = "; ".join(a.unsure for a in external if a.unsure)
    merged = Ask(
        "external_directory",
        patterns,
        patterns,
        {"tool": external[0].metadata.get("tool"), "summary": ", ".join(patterns)},
        unsure,
    )
    return [merged] + [a for a in asks if a.permission != "external_directory"]


def _glob_root(root: str, pattern: str) -> str:
    """The literal leading directories of a glob pattern, joined to ``root``."""
    pattern = os.path.expanduser(pattern).replace("\\", "/")
    parts = pattern.split("/")
    literal = []
    for part in parts[:-1]:
        if any(c in part for c in "*?[{"):
            break
        literal.append(part)
    if not literal:
        return root
    prefix = "/".join(literal) or "/"
    return _abs(root, prefix)


# -- bash ---------------------------------------------------------------------

_HARMLESS_PATHS = frozenset(
    {
        "/dev/null",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/stdin",
        "/dev/tty",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
    }
)
_FD_PATH = re.compile(r"/dev/fd/[0-9]+")
GLOB_LIMIT = 1000  # matches of one glob word looked at; more: the word is unresolved
GLOB_ENTRIES = 20_000  # directory entries one glob word may look at; more: unresolved
GLOB_SECONDS = 0.5  # time one glob word may take to expand; more: unresolved


def bash_prefix(command: str) -> str:
    """The command's arity prefix: ``git checkout main`` → ``git checkout``, ``ls -la`` → ``ls``."""
    commands = bashparse.analyse(command).commands
    return commands[0].prefix if commands else command.strip()


def split_commands(command: str) -> list[str]:
    """The simple commands of a command line as the rules see them (:mod:`.bashparse`):
    lists, pipelines, groups, loops and substitutions split, each command on its own.

    A rule like ``"echo *"`` must not allow ``echo hi && rm -rf ~``: each part
    is its own pattern, and every pattern must be allowed.
    """
    return [c.text for c in bashparse.analyse(command).commands]


def _bash_asks(command: str, directory: str, tool: str) -> list[Ask]:
    """``external_directory`` for the paths outside ``directory`` (and words that cannot be
    resolved), then ``bash`` for every simple command; unsure when the parser could not
    account for the whole line."""
    analysis = bashparse.analyse(command, pwd=directory)
    asks: list[Ask] = []
    outside: list[str] = []
    existing: list[str] = []
    unresolved = [f"`{short_text(w, 60)}`" for w in analysis.unresolved]
    for word in analysis.paths:
        found, complete, named = _path_targets(directory, word)
        outside += found
        existing += named
        if not complete:
            unresolved.append(f"`{short_text(word.value, 60)}` (a glob the checker cannot expand)")
    globs = _covering(outside)
    if globs or unresolved or analysis.opaque:
        if unresolved:
            words = ", ".join(dict.fromkeys(unresolved))
            unsure = f"cannot tell which files {words} will name"
        elif analysis.opaque:
            unsure = f"cannot tell which files the command touches ({'; '.join(analysis.opaque)})"
        else:
            unsure = ""
        summary = ", ".join(globs) if globs else "paths the checker cannot resolve"
        asks.append(
            Ask(
                "external_directory",
                globs,
                globs,
                {
                    "tool": tool,
                    "summary": f"{summary} (bash {short_text(command, 80)})",
                    "command": command,
                },
                unsure,
            )
        )
    if existing:
        # A file a command names is checked as a read of it: the sensitive-path rules (and
        # any read rule) apply to bash as to every tool (`cat .env` under a `cat *` allow asks).
        files = tuple(dict.fromkeys(existing))
        asks.append(
            Ask(
                "read",
                files,
                files,
                {"tool": tool, "summary": f"{', '.join(files)} (bash {short_text(command, 80)})"},
            )
        )
    commands = analysis.commands
    patterns = tuple(dict.fromkeys(c.text for c in commands)) or (command.strip(),)
    always = tuple(dict.fromkeys(c.prefix + " *" for c in commands if c.prefix)) or patterns
    unsupported = "; ".join(analysis.unsupported)
    metadata = {"tool": tool, "summary": command.strip(), "command": command}
    asks.append(
        Ask(
            "bash",
            patterns,
            always,
            metadata,
            f"cannot account for {unsupported}" if unsupported else "",
        )
    )
    return asks


def _covering(globs: Iterable[str]) -> tuple[str, ...]:
    """``<dir>/*`` patterns without those another one covers (``/a/*`` covers ``/a/b/*``)."""
    kept: list[str] = []
    for glob in sorted(dict.fromkeys(globs), key=len):
        if not any(glob.startswith(k[:-1]) for k in kept):
            kept.append(glob)
    order = {g: i for i, g in enumerate(dict.fromkeys(globs))}
    return tuple(sorted(kept, key=order.__getitem__))


def _path_targets(directory: str, word: Any) -> tuple[list[str], bool, list[str]]:
    """The ``<dir>/*`` globs of what ``word`` names outside ``directory`` (symbolic links
    followed, glob words expanded on the disk), whether that is known for sure, and the
    existing files it names (resolved)."""
    value = str(word.value)
    if value in _HARMLESS_PATHS or _FD_PATH.fullmatch(value):
        return [], True, []  # only `/dev/fd/N`: `/dev/fd/../cwd/..` is /proc/self, not a fd
    joined = posixpath.join(directory, value)
    candidates = [joined]
    complete = True
    if word.glob:
        matches, complete = _glob_matches(joined) if getattr(word, "exact", True) else ([], False)
        candidates = matches + [_glob_literal_root(joined)]
    found = []
    files = []
    for candidate in candidates:
        real = real_path(candidate)
        if real in _HARMLESS_PATHS:
            continue
        if os.path.isfile(real):
            files.append(real)
        if _inside(directory, real):
            continue
        is_dir = os.path.isdir(real) or value.endswith("/")
        found.append(posixpath.join(real if is_dir else posixpath.dirname(real), "*"))
    return found, complete, files


def _glob_literal_root(pattern: str) -> str:
    parts = pattern.split("/")
    literal = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    return "/".join(literal) or "/"


def _glob_matches(pattern: str) -> tuple[list[str], bool]:
    """What bash would expand ``pattern`` to (at most :data:`GLOB_LIMIT`); ``False`` when
    that cannot be known: too many matches, a segment that may match ``..``, or more than
    :data:`GLOB_ENTRIES` directory entries or :data:`GLOB_SECONDS` seconds to find out
    (``ls /*/*/*/*/*/*/*/nomatch`` would walk the whole disk)."""
    parts = pattern.split("/")
    for part in parts:
        if part.startswith(".") and any(c in part for c in "*?["):
            return [], False  # bash before 5.2 lets ".*" match ".."
    deadline = time.monotonic() + GLOB_SECONDS
    budget = GLOB_ENTRIES
    found = ["/" if pattern.startswith("/") else ""]
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "" and index == 0:
            continue
        if not any(c in part for c in "*?["):
            found = [posixpath.join(f, part) if f else part for f in found]
            if not last:
                found = [f for f in found if os.path.isdir(f)]
            continue
        regex = re.compile(fnmatch.translate(part.replace("[^", "[!")))
        nxt = []
        for base in found:
            try:
                with os.scandir(base or ".") as entries:
                    for entry in entries:
                        budget -= 1
                        if budget < 0 or time.monotonic() > deadline:
                            return [], False
                        name = entry.name
                        if name.startswith(".") or not regex.match(name):
                            continue  # bash's `*` never matches a leading dot
                        if not last and not entry.is_dir():
                            continue
                        nxt.append(posixpath.join(base, name) if base else name)
                        if len(nxt) > GLOB_LIMIT:
                            return [], False
            except OSError:
                continue
        found = sorted(nxt)
    if not pattern.endswith("/"):
        found = [f for f in found if os.path.lexists(f)]
    return found[:GLOB_LIMIT], len(found) <= GLOB_LIMIT


def short_text(text: str, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    text = before_cut(" ".join(str(text).split()), limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def canonical_args(args: Mapping[str, Any]) -> str:
    """A tool call's input as one canonical string (equal inputs, equal strings)."""
    try:
        return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(args)
