"""Path helpers shared by the file tools: resolving, ignoring, globbing, binary sniffing."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from .base import ToolContext

# Directories no listing or search descends into: VCS data, caches, environments.
IGNORED_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".ipynb_checkpoints",
})

# Extensions that are binary whatever their first bytes look like (OpenCode's list, trimmed).
BINARY_EXTENSIONS = frozenset({
    ".zip", ".tar", ".gz", ".bz2", ".xz", ".7z", ".exe", ".dll", ".so", ".dylib",
    ".class", ".jar", ".war", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx",
    ".odt", ".ods", ".odp", ".bin", ".dat", ".obj", ".o", ".a", ".lib", ".wasm",
    ".pyc", ".pyo", ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp",
    ".pdf", ".parquet", ".duckdb", ".sqlite", ".db", ".npy", ".npz", ".pkl",
})


def resolve(ctx: ToolContext, path: str | None) -> Path:
    """An absolute path: ``~`` expanded, relative paths against ``ctx.directory``."""
    if not path:
        return Path(ctx.directory).absolute()
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path(ctx.directory) / p).absolute()


def display(ctx: ToolContext, path: Path) -> str:
    """``path`` relative to the working directory when inside it (for titles)."""
    try:
        return str(path.relative_to(Path(ctx.directory).absolute())) or "."
    except ValueError:
        return str(path)


def is_binary(path: Path) -> bool:
    """OpenCode's sniff: known extension, a NUL byte, or >30% control bytes in 4 KiB."""
    if path.suffix.lower() in BINARY_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as fh:
            sample = fh.read(4096)
    except OSError:
        return False
    if not sample:
        return False
    if b"\0" in sample:
        return True
    control = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return control / len(sample) > 0.3


def walk_files(root: Path) -> Iterator[Path]:
    """Every file under ``root`` (sorted per directory), skipping :data:`IGNORED_DIRS`."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for name in sorted(filenames):
            yield Path(dirpath) / name


@lru_cache(maxsize=128)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a ripgrep-style glob to a regex over ``/``-separated relative paths.

    ``*`` and ``?`` stay within one path segment, ``**`` crosses segments,
    ``[...]`` is a character class and ``{a,b}`` an alternation. A pattern
    without ``/`` matches the file's base name at any depth (``*.py`` finds
    every Python file), as ripgrep's ``--glob`` does; ``./*.py`` only at the top.
    """
    text = pattern.replace("\\", "/")
    anchored = "/" in text  # "./name" is how a caller anchors a lone name
    while text.startswith("./"):
        text = text[2:]
    body = _translate(text.lstrip("/"))
    if not anchored:
        body = f"(?:.*/)?{body}"
    return re.compile(f"^{body}$", re.DOTALL)


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0  # inside {...}
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                inner = pattern[i + 1 : end]
                if inner[:1] == "!":
                    inner = "^" + inner[1:]
                out.append(f"[{inner.replace(chr(92), chr(92) * 2)}]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    out.extend(")" * depth)
    return "".join(out)


def split_glob(root: Path, pattern: str) -> tuple[Path, str]:
    """Move a pattern's literal leading directories into the root.

    ``/abs/src/*.py`` → (``/abs/src``, ``*.py``); ``./src/**/*.ts`` →
    (``root/src``, ``**/*.ts``). Models often send absolute patterns.
    """
    parts = Path(pattern.replace("\\", "/")).parts
    literal = 0
    while literal < len(parts) - 1 and not any(c in parts[literal] for c in "*?[{"):
        literal += 1
    if literal == 0:
        return root, pattern
    rest = "/".join(parts[literal:])
    # A lone name left over ("*.py") keeps its match-at-any-depth meaning only
    # when the pattern had none of its own directories; "src/*.py" must not recurse.
    if "/" not in rest:
        rest = "./" + rest
    return (root / Path(*parts[:literal])), rest


def matches(pattern: str, relative: str) -> bool:
    """Does the ``/``-separated ``relative`` path match the glob ``pattern``?"""
    return glob_regex(pattern).match(relative) is not None
