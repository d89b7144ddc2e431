"""``read``, ``write`` and ``edit``: the model's view of and changes to text files.

One module: the three tools share one way of reading and writing a text file (decoding,
refusing special files, the diff metadata), and ``edit`` must match the text ``read`` showed.

Paths may be absolute or relative to the session's working directory. Errors
the model can fix (missing file, directory, binary file, ambiguous edit) raise
:class:`ToolFailure` with a message that says what to do next.

Bounded: ``read`` streams the file and keeps only the lines it returns (each cut at
2,000 characters before it is decoded), so paging through a file of any size costs
kilobytes; FIFOs, sockets and devices are refused by every tool here (reading or writing
one can block forever); ``edit`` works on files up to :data:`MAX_EDIT_BYTES`, and the
``diff`` metadata is left out for files over :data:`MAX_DIFF_BYTES`.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import BinaryIO

from ..core.errors import ToolFailure
from ..core.sensitive import sensitive_path
from .base import ToolContext, ToolResult
from .paths import display, is_binary, open_nofollow, open_regular, resolve, special_kind
from .truncation import MAX_BYTES

DEFAULT_READ_LIMIT = 2000
MAX_LINE_LENGTH = 2000
READ_BLOCK = 1 << 16
MAX_EDIT_BYTES = 20 * 1024 * 1024  # edit holds the whole file (and its new text) in memory
MAX_DIFF_BYTES = 1024 * 1024  # a diff of bigger files is slow and too long to show


def _read_text(path: Path, tool: str = "read") -> str:
    # newline="" keeps \r\n as is, so edits write back exactly what was there.
    with open_regular(path, tool) as fh:
        return (fh.read() or b"").decode("utf-8", errors="replace")


def _refuse_special(path: Path, tool: str) -> None:
    """Writing to a FIFO blocks until a reader comes; a device is not a file to write."""
    try:
        kind = special_kind(os.stat(path).st_mode)
    except OSError:
        return  # missing: it will be created
    if kind is not None and kind != "a directory":
        raise ToolFailure(
            f"{tool}: {path} is {kind}, not a regular file; the file tools read "
            "and write regular files only"
        )


def _write_text(path: Path, text: str) -> None:
    """Write the resolved ``path`` without following a link anywhere on the way
    (``paths.open_nofollow``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with open(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def _no_diff(path: str) -> str:
    return f"(no diff: {path} is over {MAX_DIFF_BYTES // (1024 * 1024)} MB)"


def _diff(path: str, before: str, after: str) -> str:
    """The unified diff shown for a change. Of a sensitive file (``.env``, a key:
    ``core/sensitive.py``) only the changed lines, without context, and never the lines a
    whole-file write replaced: the rest of its secrets stay out of the history."""
    if len(before) > MAX_DIFF_BYTES or len(after) > MAX_DIFF_BYTES:
        return _no_diff(path)
    context = 3
    if sensitive_path(path):
        context = 0
    return "".join(
        difflib.unified_diff(
            before.splitlines(True),
            after.splitlines(True),
            fromfile=path,
            tofile=path,
            n=context,
        )
    )


def _page(fh: BinaryIO, offset: int, limit: int) -> tuple[list[str], bool, int | None]:
    """Lines ``offset`` .. ``offset + limit - 1`` (0-based) of ``fh``, numbered, cut at
    :data:`MAX_LINE_LENGTH` characters, within :data:`MAX_BYTES`; whether the page stopped
    at the byte cap; and the file's line count when the read reached its end (None: more
    lines follow). Reads a block at a time and keeps only the lines returned."""
    keep = MAX_LINE_LENGTH * 4 + 4  # bytes that surely decode to more than MAX_LINE_LENGTH chars
    shown: list[str] = []
    size = 0
    index = 0  # 0-based number of the line being read
    line = bytearray()
    started = False  # the current line has bytes (a last line without a newline counts)
    while True:
        block = fh.read(READ_BLOCK)
        if not block:
            break
        pos, end = 0, len(block)
        while pos < end:
            if index < offset:  # skipping: count newlines, keep nothing
                newlines = block.count(b"\n", pos)
                if index + newlines < offset:
                    index += newlines
                    started = block[-1:] != b"\n"
                    break
                while index < offset:
                    pos = block.index(b"\n", pos) + 1
                    index += 1
                started = False
                continue
            if index >= offset + limit:
                return shown, False, None  # bytes remain: more lines follow
            newline = block.find(b"\n", pos)
            stop = end if newline < 0 else newline
            if len(line) < keep:
                line += block[pos : min(stop, pos + keep - len(line))]
            started = True
            if newline < 0:
                break
            pos = newline + 1
            text = _numbered(index, line)
            cost = len(text.encode("utf-8")) + 1
            if size + cost > MAX_BYTES:
                return shown, True, None
            shown.append(text)
            size += cost
            index += 1
            line, started = bytearray(), False
    if started:  # the last line has no newline
        if offset <= index < offset + limit:
            text = _numbered(index, line)
            cost = len(text.encode("utf-8")) + 1
            if size + cost > MAX_BYTES:
                return shown, True, None
            shown.append(text)
        index += 1
    return shown, False, index


def _numbered(index: int, raw: bytearray) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if len(text) > MAX_LINE_LENGTH:
        text = text[:MAX_LINE_LENGTH] + "..."
    return f"{index + 1:05d}| {text}"


def _not_found(path: Path) -> ToolFailure:
    """File-not-found, with up to three similarly named siblings as suggestions."""
    msg = f"File not found: {path}"
    try:
        base = path.name.lower()
        near = [
            str(p)
            for p in sorted(path.parent.iterdir())
            if base in p.name.lower() or p.name.lower() in base
        ][:3]
    except OSError:
        near = []
    if near:
        msg += "\n\nDid you mean one of these?\n" + "\n".join(near)
    return ToolFailure(msg)


class ReadTool:
    """Numbered lines of a text file, OpenCode style (``00001| text`` in ``<file>``).

    ``offset`` is the 0-based first line, ``limit`` the line count (2000 by
    default); lines are cut at 2000 characters and the output at 50 KB. The
    tool sets ``metadata["truncated"]`` itself (more lines remain), so
    ``run_tool`` does not truncate it again.
    """

    name = "read"
    description = (
        "Read a text file. Returns numbered lines. Use offset (0-based line) and limit "
        "to page through long files. Use list for directories."
    )
    parameters = {
        "type": "object",
        "properties": {
            "filePath": {"type": "string", "description": "Path of the file to read"},
            "offset": {"type": "integer", "description": "0-based line number to start from"},
            "limit": {"type": "integer", "description": "Number of lines to read (default 2000)"},
        },
        "required": ["filePath"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        path = resolve(ctx, args["filePath"])
        offset = args.get("offset", 0)
        limit = args.get("limit", DEFAULT_READ_LIMIT)
        if offset < 0 or limit < 1:
            raise ToolFailure("read: offset must be >= 0 and limit >= 1")
        if path.is_dir():
            raise ToolFailure(
                f"{path} is a directory, not a file. Use the list tool to see its contents."
            )
        if not path.exists():
            raise _not_found(path)
        with open_regular(path, "read") as fh:  # a FIFO, socket or device: refused, never opened
            if is_binary(path):
                raise ToolFailure(
                    f"Cannot read binary file: {path}. Use the python tool to inspect it."
                )
            shown, cut, total = _page(fh, offset, limit)
        if total is not None and offset and offset >= total:
            raise ToolFailure(f"read: offset {offset} is past the end of {path} ({total} lines)")

        last = offset + len(shown)
        if cut:
            note = f"(Output truncated at {MAX_BYTES} bytes. Use 'offset' parameter to read beyond line {last})"
        elif total is None:
            note = f"(File has more lines. Use 'offset' parameter to read beyond line {last})"
        else:
            note = f"(End of file - total {total} lines)"
        output = "<file>\n" + "\n".join(shown) + f"\n\n{note}\n</file>"
        return ToolResult(
            output=output,
            title=display(ctx, path),
            metadata={
                "preview": "\n".join(line.split("| ", 1)[1] for line in shown[:20]),
                "truncated": cut or total is None,
            },
        )


class WriteTool:
    """Write ``content`` to a file, creating parent directories; overwrites."""

    name = "write"
    description = (
        "Write a file with the given content, replacing it if it exists. "
        "Creates parent directories. Prefer edit for small changes to existing files."
    )
    parameters = {
        "type": "object",
        "properties": {
            "filePath": {"type": "string", "description": "Path of the file to write"},
            "content": {"type": "string", "description": "The full new content of the file"},
        },
        "required": ["filePath", "content"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        path = resolve(ctx, args["filePath"])
        if path.is_dir():
            raise ToolFailure(f"{path} is a directory; give a file path to write.")
        _refuse_special(path, "write")
        existed = path.exists()
        big = existed and path.stat().st_size > MAX_DIFF_BYTES  # not read for a diff
        before = _read_text(path, "write") if existed and not big and not is_binary(path) else ""
        _write_text(path, args["content"])
        title = display(ctx, path)
        if sensitive_path(str(path)):
            before = ""  # a whole-file write of a secret file: its old lines are not shown
        diff = _no_diff(title) if big else _diff(title, before, args["content"])
        return ToolResult(
            output="Wrote file successfully.",
            title=title,
            metadata={"filepath": str(path), "exists": existed, "diff": diff},
        )


class EditTool:
    """Replace ``oldString`` with ``newString`` in a file.

    ``oldString`` must match exactly once unless ``replaceAll``. When there is
    no exact match, a match ignoring each line's leading/trailing whitespace
    is tried (small models often get indentation wrong); it follows the same
    once-or-replaceAll rule. ``oldString == ""`` creates a missing (or fills
    an empty) file with ``newString``.
    """

    name = "edit"
    description = (
        "Replace exact text in a file. oldString must match the file exactly (copy it from "
        "read output, without line numbers) and be unique unless replaceAll is true. "
        "With oldString empty, creates a new file containing newString."
    )
    parameters = {
        "type": "object",
        "properties": {
            "filePath": {"type": "string", "description": "Path of the file to modify"},
            "oldString": {"type": "string", "description": "The text to replace"},
            "newString": {"type": "string", "description": "The text to replace it with"},
            "replaceAll": {
                "type": "boolean",
                "description": "Replace every occurrence (default false)",
            },
        },
        "required": ["filePath", "oldString", "newString"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        path = resolve(ctx, args["filePath"])
        old, new = args["oldString"], args["newString"]
        replace_all = args.get("replaceAll", False)
        if old == new:
            raise ToolFailure("edit: oldString and newString are the same; nothing to change.")
        if path.is_dir():
            raise ToolFailure(f"{path} is a directory; give a file path to edit.")
        _refuse_special(path, "edit")
        if path.exists() and path.stat().st_size > MAX_EDIT_BYTES:
            raise ToolFailure(
                f"edit: {path} is {path.stat().st_size / 1024 / 1024:.0f} MB; edit rewrites files "
                f"up to {MAX_EDIT_BYTES // (1024 * 1024)} MB — use bash (sed -i) or python for "
                "bigger files."
            )

        before = _read_text(path, "edit") if path.exists() else None
        if old == "":
            if before:
                raise ToolFailure(
                    f"edit: {path} already exists and is not empty; give the oldString to replace, "
                    "or use write to replace the whole file."
                )
            after, count = new, 1
        else:
            if before is None:
                raise _not_found(path)
            after, count = _replace(before, old, new, replace_all, path)

        _write_text(path, after)
        title = display(ctx, path)
        return ToolResult(
            output="Edit applied successfully.",
            title=title,
            metadata={
                "filepath": str(path),
                "replacements": count,
                "diff": _diff(title, before or "", after),
            },
        )


def _replace(text: str, old: str, new: str, replace_all: bool, path: Path) -> tuple[str, int]:
    spans = _exact_spans(text, old) or _trimmed_spans(text, old)
    if not spans:
        raise ToolFailure(
            f"edit: oldString not found in {path}. Read the file and copy the exact text "
            "(including whitespace, without line numbers)."
        )
    if len(spans) > 1 and not replace_all:
        raise ToolFailure(
            f"edit: oldString found {len(spans)} times in {path}. Include more surrounding "
            "lines to make it unique, or set replaceAll to true."
        )
    out, pos = [], 0
    for start, end in spans:
        out += [text[pos:start], new]
        pos = end
    out.append(text[pos:])
    return "".join(out), len(spans)


def _exact_spans(text: str, old: str) -> list[tuple[int, int]]:
    spans, i = [], text.find(old)
    while i != -1:
        spans.append((i, i + len(old)))
        i = text.find(old, i + len(old))
    return spans


def _trimmed_spans(text: str, old: str) -> list[tuple[int, int]]:
    """Blocks of whole lines equal to ``old``'s lines once each side is stripped."""
    want = [line.strip() for line in old.strip("\n").split("\n")]
    if not any(want):
        return []
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    spans = []
    i = 0
    while i + len(want) <= len(lines):
        if all(lines[i + j].strip() == w for j, w in enumerate(want)):
            end = starts[i + len(want)] - 1  # the last line's end, before its newline
            spans.append((starts[i], end))
            i += len(want)
        else:
            i += 1
    return spans
