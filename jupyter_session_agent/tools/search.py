"""``list``, ``glob`` and ``grep``: finding files and text, pure Python.

One module: the three tools are one bounded walk over a folder with different outputs, and
share its result cap and the note that tells the model how to narrow a search.

All three skip :data:`~.paths.IGNORED_DIRS` (``.git``, ``node_modules``,
``__pycache__``, ``.venv``, …) and cap their results at 100 with a note saying
how to narrow the search, so a small model never floods its context.

Bounded whatever the folder or the pattern: each call looks at a bounded number of
entries, levels and seconds (:class:`~.paths.WalkLimits`; a partial result says so),
globs and ``grep`` patterns run on RE2 (linear time: no catastrophic backtracking), and
special files (FIFOs, sockets, devices) are never opened.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import deque
from pathlib import Path

from ..core.errors import ToolFailure
from .base import ToolContext, ToolResult
from .paths import (
    IGNORED_DIRS,
    WalkLimits,
    display,
    escapes,
    glob_regex,
    is_binary,
    matches,
    open_regular,
    resolve,
    safe_regex,
    split_glob,
    walk_files,
)

LIMIT = 100
MAX_LINE_LENGTH = 2000
MAX_GREP_FILE_BYTES = 20 * 1024 * 1024  # bigger files are data, not source
GREP_BLOCK = 1 << 20  # bytes searched at once


def _directory(ctx: ToolContext, path: str | None, tool: str) -> Path:
    root = resolve(ctx, path)
    if not root.exists():
        raise ToolFailure(f"{tool}: {root} does not exist")
    return root


def _glob(pattern: str, tool: str) -> None:
    """Compile a glob now, so a pattern RE2 cannot take is one clear error."""
    try:
        glob_regex(pattern)
    except Exception as err:  # re2.error: too large or malformed
        raise ToolFailure(
            f"{tool}: cannot use the glob {pattern[:200]!r} ({err}); use a simpler pattern"
        ) from None


def _notes(*notes: str) -> str:
    text = "\n".join(n for n in notes if n)
    return f"\n\n{text}" if text else ""


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class ListTool:
    """A tree of a directory, breadth first so a capped listing still shows the top level."""

    name = "list"
    description = (
        "List files and directories as a tree. path defaults to the working directory. "
        "Skips .git, node_modules, __pycache__, .venv. Use glob to find files by name."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory to list (default: working directory)",
            },
            "ignore": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'Extra glob patterns to skip, e.g. ["*.log"]',
            },
        },
        "required": [],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        root = _directory(ctx, args.get("path"), "list")
        if not root.is_dir():
            raise ToolFailure(f"list: {root} is a file, not a directory. Use read to see it.")
        ignore = [p.rstrip("/") for p in args.get("ignore", []) if p.strip("/")]
        for pattern in ignore:
            _glob(pattern, "list")
        limits = WalkLimits()
        entries: list[tuple[str, bool]] = []  # (relative posix path, is_dir)
        queue = deque([("", 0)])
        more = False
        while queue and not more and limits.stopped is None:
            rel, depth = queue.popleft()

            def shown(found):  # the folder's entries that are listed, within the limits
                for child in found:
                    if not limits.take():
                        return
                    child_rel = f"{rel}/{child.name}" if rel else child.name
                    try:
                        # a link that leads out of the listed directory is shown, never entered
                        is_dir = child.is_dir() and not (
                            child.is_symlink() and escapes(root, Path(child.path))
                        )
                    except OSError:
                        continue
                    if (is_dir and child.name in IGNORED_DIRS) or any(
                        matches(p, child_rel) for p in ignore
                    ):
                        continue
                    yield child.name, child_rel, is_dir

            try:
                with os.scandir(root / rel) as found:
                    # a folder of a million entries: only the first names are kept, never all
                    children = heapq.nsmallest(LIMIT - len(entries) + 1, shown(found))
            except OSError:
                continue
            for _, child_rel, is_dir in children:
                if len(entries) >= LIMIT:
                    more = True
                    break
                entries.append((child_rel, is_dir))
                if is_dir:
                    if depth + 1 > limits.depth:
                        limits.deep = True
                    else:
                        queue.append((child_rel, depth + 1))

        lines = [f"{root}/"]
        # Sort by path segments so a directory's children follow it directly.
        for rel, is_dir in sorted(entries, key=lambda e: e[0].split("/")):
            depth = rel.count("/") + 1
            lines.append("  " * depth + rel.rsplit("/", 1)[-1] + ("/" if is_dir else ""))
        if more:
            lines.append(f"\n(Showing the first {LIMIT} entries. List a subdirectory to see more.)")
        if limits.note():
            lines.append(limits.note())
        cut = more or bool(limits.note())
        return ToolResult(
            output="\n".join(lines),
            title=display(ctx, root),
            metadata={"count": len(entries), "truncated": cut},
        )


class GlobTool:
    """Files matching a glob, newest first (by modification time), at most 100."""

    name = "glob"
    description = (
        'Find files by name pattern, e.g. "*.py" (any depth) or "src/**/*.ts". '
        "Returns paths, most recently modified first."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Glob pattern; without '/' it matches file names at any depth",
            },
            "path": {
                "type": "string",
                "description": "Directory to search (default: working directory)",
            },
        },
        "required": ["pattern"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        root, pattern = split_glob(resolve(ctx, args.get("path")), args["pattern"])
        root = _directory(ctx, str(root), "glob")
        _glob(pattern, "glob")
        limits = WalkLimits()
        found = [
            p for p in walk_files(root, limits) if matches(pattern, p.relative_to(root).as_posix())
        ]
        found.sort(key=_mtime, reverse=True)
        more = len(found) > LIMIT
        shown = found[:LIMIT]
        if not shown:
            output = "No files found"
        else:
            output = "\n".join(str(p) for p in shown)
            if more:
                output += (
                    f"\n\n(Results are truncated: showing the {LIMIT} most recent of "
                    f"{len(found)} files. Use a more specific path or pattern.)"
                )
        output += _notes(limits.note())
        return ToolResult(
            output=output,
            title=display(ctx, root),
            metadata={"count": len(shown), "truncated": more or bool(limits.note())},
        )


class GrepTool:
    """Lines matching a regular expression, grouped by file, newest files first.

    Patterns run on RE2 (linear time, so no pattern makes a search take exponential time),
    Python ``re`` syntax except what needs backtracking (lookaround, backreferences): such a
    pattern is a clear error. Files are searched a block at a time (a line never spans the
    blocks' seams), special files are never opened, and the whole call is bounded in time
    and in entries looked at (:class:`~.paths.WalkLimits`).
    """

    name = "grep"
    description = (
        "Search file contents with a regular expression (Python re syntax, without lookaround "
        "or backreferences). Returns matching lines with line numbers. Narrow with include, "
        'e.g. "*.py".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for"},
            "path": {
                "type": "string",
                "description": "File or directory to search (default: working directory)",
            },
            "include": {
                "type": "string",
                "description": 'Only files matching this glob, e.g. "*.py" or "*.{ts,tsx}"',
            },
        },
        "required": ["pattern"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        regex = _grep_regex(args["pattern"])
        root = _directory(ctx, args.get("path"), "grep")
        include = args.get("include")
        if include is not None:
            _glob(include, "grep")
        limits = WalkLimits()
        if root.is_file() or not root.is_dir():
            with open_regular(root, "grep"):  # a FIFO or a device named directly: refused
                pass
            files = [root]
        else:
            files = [
                p
                for p in walk_files(root, limits)
                if include is None or matches(include, p.relative_to(root).as_posix())
            ]
        hidden = 0
        if ctx.may_read is not None and not root.is_file():  # a file named directly was asked
            readable = [p for p in files if ctx.may_read(str(p))]
            hidden, files = len(files) - len(readable), readable
        # Newest files first, as OpenCode sorts matches by file modification time.
        files.sort(key=_mtime, reverse=True)

        groups: list[tuple[Path, list[str]]] = []
        count = 0
        more = False
        for path in files:
            if count >= LIMIT:
                more = True
                break
            if limits.out_of_time():
                break
            hits = _search(path, regex, LIMIT - count, limits)
            if hits is None:
                continue
            found, file_more = hits
            if found:
                groups.append((path, found))
                count += len(found)
            more = more or file_more

        note = limits.note()
        if hidden:
            note = "; ".join(
                filter(
                    None,
                    [
                        note,
                        (
                            f"{hidden} file(s) not searched: reading them asks or is denied (e.g. .env); "
                            "use read on one to ask"
                        ),
                    ],
                )
            )
        if not groups:
            return ToolResult(
                "No files found" + _notes(note),
                title=args["pattern"],
                metadata={"matches": 0, "truncated": bool(note)},
            )
        lines = [f"Found {count} matches"]
        for path, found in groups:
            lines += ["", f"{path}:"] + found
        if more:
            lines.append(
                f"\n(Results are truncated: showing the first {LIMIT} matches. "
                "Use a more specific path, include or pattern.)"
            )
        return ToolResult(
            output="\n".join(lines) + _notes(note),
            title=args["pattern"],
            metadata={"matches": count, "truncated": more or bool(note)},
        )


def _grep_regex(pattern: str):
    """``pattern`` for :func:`_search`: invalid Python syntax and what RE2 lacks are two
    different one-line errors (the second says how to do without)."""
    try:
        re.compile(pattern)  # compiling never backtracks: the syntax check the model knows
    except re.error as err:
        raise ToolFailure(f"grep: invalid regular expression {pattern!r}: {err}") from None
    except (OverflowError, RecursionError) as err:
        raise ToolFailure(
            f"grep: regular expression too large ({err}); use a simpler one"
        ) from None
    try:
        return safe_regex(pattern, lines=True, binary=True)
    except Exception as err:  # re2.error
        reason = err.args[0] if err.args else err
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ToolFailure(
            f"grep: the pattern {pattern[:200]!r} is not supported here ({reason}): searches "
            "use a linear-time engine without lookaround (?=…)/(?<=…) or backreferences \\1 — "
            "rewrite it without them, or use bash (grep -P) for this one"
        ) from None


def _search(path: Path, regex, room: int, limits: WalkLimits) -> tuple[list[str], bool] | None:
    """Up to ``room`` formatted matches in ``path`` and whether more remain; ``None`` for
    files we do not search (special, binary, huge, unreadable). Reads a block at a time
    and cuts it after its last newline, so memory stays bounded and lines stay whole;
    ``\\r\\n`` counts as one line end, as Python's text mode reads it."""
    try:
        if is_binary(path):
            return None
        fh = open_regular(path, "grep")
    except (OSError, ToolFailure):
        return None
    found: list[str] = []
    with fh:
        try:
            if os.fstat(fh.fileno()).st_size > MAX_GREP_FILE_BYTES:
                return None
        except OSError:
            return None
        number = 1  # the line number at the start of the block
        carry = b""
        while True:
            try:
                data = fh.read(GREP_BLOCK)
            except OSError:
                break
            if data:
                data = carry + data
                cut = data.rfind(b"\n") + 1
                if not cut:
                    carry = data
                    if len(carry) > MAX_GREP_FILE_BYTES:
                        break
                    continue
                block, carry = data[:cut], data[cut:]
            else:
                block, carry = carry, b""
                if not block:
                    break
            block = block.replace(b"\r\n", b"\n")
            pos, counted = 0, 0
            while pos < len(block):
                match = regex.search(block, pos)
                if match is None:
                    break
                start = block.rfind(b"\n", 0, match.start()) + 1
                if start >= len(block):
                    break  # the empty "line" after the block's last newline
                end = block.find(b"\n", start)
                end = len(block) if end < 0 else end
                number += block.count(b"\n", counted, start)
                counted = start
                if len(found) >= room:
                    return found, True
                line = block[start:end].decode("utf-8", "replace").rstrip("\r")
                if len(line) > MAX_LINE_LENGTH:
                    line = line[:MAX_LINE_LENGTH] + "..."
                found.append(f"  Line {number}: {line}")
                pos = end + 1
            number += block.count(b"\n", counted)
            if not data or limits.out_of_time():
                break
    return found, False
