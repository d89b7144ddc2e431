"""``list``, ``glob`` and ``grep``: finding files and text, pure Python.

All three skip :data:`~.paths.IGNORED_DIRS` (``.git``, ``node_modules``,
``__pycache__``, ``.venv``, …) and cap their results at 100 with a note saying
how to narrow the search, so a small model never floods its context.
"""

from __future__ import annotations

import os
import re
from collections import deque
from pathlib import Path

from ..errors import ToolFailure
from .base import ToolContext, ToolResult
from .paths import IGNORED_DIRS, display, is_binary, matches, resolve, split_glob, walk_files

LIMIT = 100
MAX_LINE_LENGTH = 2000
MAX_GREP_FILE_BYTES = 20 * 1024 * 1024  # bigger files are data, not source


def _directory(ctx: ToolContext, path: str | None, tool: str) -> Path:
    root = resolve(ctx, path)
    if not root.exists():
        raise ToolFailure(f"{tool}: {root} does not exist")
    return root


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
            "path": {"type": "string", "description": "Directory to list (default: working directory)"},
            "ignore": {"type": "array", "items": {"type": "string"},
                       "description": "Extra glob patterns to skip, e.g. [\"*.log\"]"},
        },
        "required": [],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        root = _directory(ctx, args.get("path"), "list")
        if not root.is_dir():
            raise ToolFailure(f"list: {root} is a file, not a directory. Use read to see it.")
        ignore = [p.rstrip("/") for p in args.get("ignore", []) if p.strip("/")]
        entries: list[tuple[str, bool]] = []  # (relative posix path, is_dir)
        queue = deque([""])
        more = False
        while queue and not more:
            rel = queue.popleft()
            try:
                children = sorted(os.scandir(root / rel), key=lambda e: e.name)
            except OSError:
                continue
            for child in children:
                child_rel = f"{rel}/{child.name}" if rel else child.name
                is_dir = child.is_dir()
                if (is_dir and child.name in IGNORED_DIRS) or any(
                    matches(p, child_rel) for p in ignore
                ):
                    continue
                if len(entries) >= LIMIT:
                    more = True
                    break
                entries.append((child_rel, is_dir))
                if is_dir:
                    queue.append(child_rel)

        lines = [f"{root}/"]
        # Sort by path segments so a directory's children follow it directly.
        for rel, is_dir in sorted(entries, key=lambda e: e[0].split("/")):
            depth = rel.count("/") + 1
            lines.append("  " * depth + rel.rsplit("/", 1)[-1] + ("/" if is_dir else ""))
        if more:
            lines.append(f"\n(Showing the first {LIMIT} entries. List a subdirectory to see more.)")
        return ToolResult(
            output="\n".join(lines),
            title=display(ctx, root),
            metadata={"count": len(entries), "truncated": more},
        )


class GlobTool:
    """Files matching a glob, newest first (by modification time), at most 100."""

    name = "glob"
    description = (
        "Find files by name pattern, e.g. \"*.py\" (any depth) or \"src/**/*.ts\". "
        "Returns paths, most recently modified first."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern; without '/' it matches file names at any depth"},
            "path": {"type": "string", "description": "Directory to search (default: working directory)"},
        },
        "required": ["pattern"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        root, pattern = split_glob(resolve(ctx, args.get("path")), args["pattern"])
        root = _directory(ctx, str(root), "glob")
        found = [
            p for p in walk_files(root)
            if matches(pattern, p.relative_to(root).as_posix())
        ]
        found.sort(key=_mtime, reverse=True)
        more = len(found) > LIMIT
        shown = found[:LIMIT]
        if not shown:
            output = "No files found"
        else:
            output = "\n".join(str(p) for p in shown)
            if more:
                output += (f"\n\n(Results are truncated: showing the {LIMIT} most recent of "
                           f"{len(found)} files. Use a more specific path or pattern.)")
        return ToolResult(
            output=output,
            title=display(ctx, root),
            metadata={"count": len(shown), "truncated": more},
        )


class GrepTool:
    """Lines matching a regular expression, grouped by file, newest files first."""

    name = "grep"
    description = (
        "Search file contents with a regular expression (Python re syntax). "
        "Returns matching lines with line numbers. Narrow with include, e.g. \"*.py\"."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for"},
            "path": {"type": "string", "description": "File or directory to search (default: working directory)"},
            "include": {"type": "string", "description": "Only files matching this glob, e.g. \"*.py\" or \"*.{ts,tsx}\""},
        },
        "required": ["pattern"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        try:
            regex = re.compile(args["pattern"])
        except re.error as err:
            raise ToolFailure(f"grep: invalid regular expression {args['pattern']!r}: {err}") from None
        root = _directory(ctx, args.get("path"), "grep")
        include = args.get("include")
        if root.is_file():
            files = [root]
        else:
            files = [
                p for p in walk_files(root)
                if include is None or matches(include, p.relative_to(root).as_posix())
            ]
        # Newest files first, as OpenCode sorts matches by file modification time.
        files.sort(key=_mtime, reverse=True)

        groups: list[tuple[Path, list[str]]] = []
        count = 0
        more = False
        for path in files:
            if count >= LIMIT:
                more = True
                break
            hits = self._search(path, regex, LIMIT - count)
            if hits is None:
                continue
            found, file_more = hits
            if found:
                groups.append((path, found))
                count += len(found)
            more = more or file_more

        if not groups:
            return ToolResult("No files found", title=args["pattern"], metadata={"matches": 0, "truncated": False})
        lines = [f"Found {count} matches"]
        for path, found in groups:
            lines += ["", f"{path}:"] + found
        if more:
            lines.append(f"\n(Results are truncated: showing the first {LIMIT} matches. "
                         "Use a more specific path, include or pattern.)")
        return ToolResult(
            output="\n".join(lines),
            title=args["pattern"],
            metadata={"matches": count, "truncated": more},
        )

    @staticmethod
    def _search(path: Path, regex: re.Pattern[str], room: int) -> tuple[list[str], bool] | None:
        """Up to ``room`` formatted matches in ``path`` and whether more remain;
        ``None`` for files we do not search (binary, huge, unreadable)."""
        try:
            if path.stat().st_size > MAX_GREP_FILE_BYTES or is_binary(path):
                return None
            fh = open(path, encoding="utf-8", errors="replace")
        except OSError:
            return None
        found: list[str] = []
        with fh:
            for number, line in enumerate(fh, start=1):
                line = line.rstrip("\r\n")
                if regex.search(line):
                    if len(found) >= room:
                        return found, True
                    if len(line) > MAX_LINE_LENGTH:
                        line = line[:MAX_LINE_LENGTH] + "..."
                    found.append(f"  Line {number}: {line}")
        return found, False
