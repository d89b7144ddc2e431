"""Path helpers shared by the file tools: resolving, ignoring, globbing, binary sniffing.

One module: it is the one place the file tools touch the file system's names, so every tool
resolves, bounds its walks and compiles its globs the same way.

Bounded by construction: :func:`open_regular` refuses FIFOs, sockets and devices (reading
one can block forever or never end) without opening them; :func:`walk_files` looks at a
bounded number of entries, depth and time (:class:`WalkLimits`), iteratively; globs compile
to RE2 (:func:`safe_regex`), whose matching time is linear in the path, whatever the pattern.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from ..core.asks import resolve_path
from ..core.errors import ToolFailure
from ..core.text import safe_text
from .base import ToolContext

# Directories no listing or search descends into: VCS data, caches, environments.
IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".ipynb_checkpoints",
    }
)

# Extensions that are binary whatever their first bytes look like (OpenCode's list, trimmed).
BINARY_EXTENSIONS = frozenset(
    {
        ".zip",
        ".tar",
        ".gz",
        ".bz2",
        ".xz",
        ".7z",
        ".exe",
        ".dll",
        ".so",
        ".dylib",
        ".class",
        ".jar",
        ".war",
        ".doc",
        ".docx",
        ".xls",
        ".xlsx",
        ".ppt",
        ".pptx",
        ".odt",
        ".ods",
        ".odp",
        ".bin",
        ".dat",
        ".obj",
        ".o",
        ".a",
        ".lib",
        ".wasm",
        ".pyc",
        ".pyo",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".bmp",
        ".ico",
        ".webp",
        ".pdf",
        ".parquet",
        ".duckdb",
        ".sqlite",
        ".db",
        ".npy",
        ".npz",
        ".pkl",
    }
)


def resolve(ctx: ToolContext, path: str | None) -> Path:
    """The one path primitive of every file tool: an absolute path with ``~`` expanded,
    relative paths against ``ctx.directory``, and every symbolic link on the way resolved
    *before* the ``..`` that follows it (``data/../x`` with ``data -> /a/b`` is ``/a/x``, as
    the kernel opens it) — the file the permission check looked at: both call
    ``core.asks.resolve_path``. The tools then open what this returns
    with :func:`open_nofollow`, so a link swapped in after the check is refused, not followed."""
    return Path(resolve_path(str(Path(ctx.directory).absolute()), path))


def open_nofollow(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` of the resolved absolute ``path`` one component at a time, each with
    ``O_NOFOLLOW`` relative to its parent's descriptor: no symbolic link anywhere on the
    way is followed (a link put there after the permission check fails with ``ELOOP``, a
    :class:`ToolFailure`), and what is opened is what was checked, without a second lookup
    by name. ``O_CREAT`` applies to the last component only."""
    parts = Path(path).parts
    if not parts or parts[0] != "/":
        raise ValueError(f"open_nofollow needs an absolute path, got {path}")
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    cloexec = getattr(os, "O_CLOEXEC", 0)
    directory = getattr(os, "O_DIRECTORY", 0)
    fd = os.open("/", os.O_RDONLY | directory | cloexec)
    try:
        for name in parts[1:-1]:
            try:
                nxt = os.open(name, os.O_RDONLY | directory | nofollow | cloexec, dir_fd=fd)
            except OSError as err:
                _link_failure(err, path)
                raise
            os.close(fd)
            fd = nxt
        if len(parts) == 1:
            return os.dup(fd)
        try:
            return os.open(parts[-1], flags | nofollow | cloexec, mode, dir_fd=fd)
        except OSError as err:
            _link_failure(err, path)
            raise
    finally:
        os.close(fd)


def _link_failure(err: OSError, path: Path) -> None:
    if err.errno in (errno.ELOOP, errno.ENOTDIR) and any(
        os.path.islink(p) for p in (path, *path.parents)
    ):
        raise ToolFailure(
            f"{path} changed into a symbolic link after the permission check; "
            "call the tool again so the new target is checked"
        ) from None


def real(path: Path) -> Path:
    """``path`` with its symbolic links resolved (missing parts kept as written)."""
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return path


def display(ctx: ToolContext, path: Path) -> str:
    """``path`` relative to the working directory when inside it (for titles)."""
    for root in (Path(ctx.directory).absolute(), real(Path(ctx.directory).absolute())):
        try:
            return str(path.relative_to(root)) or "."
        except ValueError:
            continue
    return str(path)


def escapes(root: Path, path: Path) -> bool:
    """Is ``path`` a symbolic link (or under one) that leads outside ``root``? A listing or
    search of ``root`` never follows such a link: what it reaches was not asked for."""
    target = real(path)
    base = real(root)
    return target != base and base not in target.parents


_SPECIAL = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def special_kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is when it is not a regular file ("a socket"), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in _SPECIAL if test(mode)), "not a regular file")


def open_regular(path: Path, tool: str) -> BinaryIO:
    """``path`` open for binary reading when it is a regular file; a FIFO, a socket or a
    device is a :class:`ToolFailure` (reading it could block forever or never end). Checked
    before opening (opening some devices does something) and again on the open file (it
    cannot have been swapped in between). Neither the open nor a read ever blocks: the file
    stays non-blocking, so a pseudo-file that would wait for data (``/proc/kmsg``) reads as
    ended (``read`` returns ``None`` or ``b""``)."""
    kind = special_kind(os.stat(path).st_mode)
    if kind is None:
        fd = open_nofollow(real(Path(path).absolute()), os.O_RDONLY | os.O_NONBLOCK)
        try:
            kind = special_kind(os.fstat(fd).st_mode)
            if kind is None:
                return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise ToolFailure(
        f"{tool}: {path} is {kind}, not a regular file; the file tools read and "
        "write regular files only"
    )


def is_binary(path: Path) -> bool:
    """OpenCode's sniff: known extension, a NUL byte, or >30% control bytes in 4 KiB.
    Never blocks: a special file is not sniffed (False; :func:`open_regular` refuses it)."""
    if path.suffix.lower() in BINARY_EXTENSIONS:
        return True
    try:
        with open_regular(path, "read") as fh:
            sample = fh.read(4096)
    except (OSError, ToolFailure):
        return False
    if not sample:
        return False
    if b"\0" in sample:
        return True
    control = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return control / len(sample) > 0.3


class WalkLimits:
    """How much one listing or search may look at: ``entries`` directory entries, ``depth``
    levels below its root and ``seconds`` of time. ``stopped`` says (in words) why a walk
    ended early, ``deep`` that deeper directories were skipped; :meth:`note` is the line a
    tool appends then."""

    ENTRIES = 100_000
    DEPTH = 64
    SECONDS = 10.0

    def __init__(
        self, entries: int | None = None, depth: int | None = None, seconds: float | None = None
    ) -> None:
        self.entries = self.ENTRIES if entries is None else entries
        self.depth = self.DEPTH if depth is None else depth
        self.seconds = self.SECONDS if seconds is None else seconds
        self.deadline = time.monotonic() + self.seconds
        self.seen = 0
        self.stopped: str | None = None
        self.deep = False

    def take(self) -> bool:
        """Count one more entry; False (and ``stopped`` set) once a bound is reached."""
        self.seen += 1
        if self.seen > self.entries:
            self.stopped = self.stopped or f"it looked at {self.entries:,} entries"
        elif self.seen % 64 == 0:
            self.out_of_time()
        return self.stopped is None

    def out_of_time(self) -> bool:
        if self.stopped is None and time.monotonic() > self.deadline:
            self.stopped = f"it ran for {self.seconds:g} s"
        return self.stopped is not None

    def note(self) -> str:
        """'' when the walk saw everything, else one line saying what was left out."""
        if self.stopped:
            return (
                f"(Stopped early: {self.stopped}; results are partial. "
                "Use a more specific path or pattern.)"
            )
        if self.deep:
            return (
                f"(Directories deeper than {self.depth} levels were not searched. "
                "Use a deeper path.)"
            )
        return ""


def walk_files(root: Path, limits: WalkLimits | None = None) -> Iterator[Path]:
    """Every file under ``root`` (sorted per directory, each directory's files before its
    subdirectories, as ``os.walk``), skipping :data:`IGNORED_DIRS` and symbolic links that
    lead outside ``root`` (links to directories are never descended). Iterative, within
    ``limits`` (default :class:`WalkLimits`): huge folders and deep trees end the walk, not
    the process."""
    limits = limits or WalkLimits()
    stack = [(Path(root), 0)]
    while stack and limits.stopped is None:
        directory, depth = stack.pop()
        entries = []
        try:
            with os.scandir(directory) as found:
                for entry in found:
                    if not limits.take():
                        break
                    entries.append(entry)
        except OSError:
            continue
        entries.sort(key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                link = entry.is_symlink()
            except OSError:
                continue
            if is_dir:
                if entry.name not in IGNORED_DIRS and not link:
                    subdirs.append(Path(entry.path))
                continue
            path = Path(entry.path)
            if link and escapes(root, path):
                continue
            yield path
        if subdirs and depth >= limits.depth:
            limits.deep = True
            continue
        stack.extend((d, depth + 1) for d in reversed(subdirs))


def safe_regex(pattern: str, *, lines: bool = False, binary: bool = False) -> Any:
    """``pattern`` compiled by RE2, whose matching takes linear time (no backtracking: no
    catastrophic pattern). ``lines``: ``^``/``$`` at line ends and no match across a newline
    (for searching many lines at once); ``binary``: for ``bytes`` text. Raises ``re2.error``
    for what RE2 does not support (lookaround, backreferences)."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.never_nl = lines
    text = f"(?m){pattern}" if lines else pattern
    return re2.compile(text.encode("utf-8") if binary else text, options=options)


@lru_cache(maxsize=128)
def glob_regex(pattern: str) -> Any:
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
    return safe_regex(f"(?s)^{body}$")  # RE2: "**a**a**a…" cannot take exponential time


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
    """Does the ``/``-separated ``relative`` path match the glob ``pattern``? A latin-1 name
    (``caf\\udce9.txt``) is matched as it is shown (``caf\\xe9.txt``): RE2 takes UTF-8 only."""
    return glob_regex(pattern).match(safe_text(relative)) is not None
