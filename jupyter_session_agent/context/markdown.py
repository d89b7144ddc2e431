"""Where the code is in Markdown text, and the last python block of an answer.

A prompt's code is sent as typed: fenced blocks (a line starting with three or more backticks
or tildes, up to a closing fence of the same character at least as long, or the end) and
inline code spans (a run of backticks up to the next run of the same length) are neither
interpolated (``{x}`` in pasted code stays ``{x}``) nor searched for ``@path`` mentions (a
decorator stays a decorator). :func:`code_spans` finds them; :func:`outside_code` walks the
text between them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})([^\n]*)$", re.M)
_TICKS = re.compile(r"`+")
PYTHON_INFO = ("python", "py", "python3", "ipython", "ipython3", "pycon")


def fenced_blocks(text: str) -> list[tuple[int, int, str, str]]:
    """``(start, end, info, body)`` of each fenced block (``end`` after its closing fence)."""
    blocks: list[tuple[int, int, str, str]] = []
    pos = 0
    while True:
        opening = _FENCE.search(text, pos)
        if opening is None:
            return blocks
        fence, info = opening.group(1), opening.group(2).strip()
        if fence[0] == "`" and "`" in info:  # not a fence: an inline span at a line start
            pos = opening.end()
            continue
        closing = re.compile(rf"^[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        body_start = min(len(text), opening.end() + 1)
        close = closing.search(text, body_start)
        end = close.end() if close else len(text)
        body = text[body_start : close.start() if close else len(text)]
        blocks.append((opening.start(), end, info, body.removesuffix("\n")))
        pos = end


def code_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every fenced block and inline code span, in order."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for start, end, _, _ in fenced_blocks(text):
        spans += _inline(text, pos, start)
        spans.append((start, end))
        pos = end
    spans += _inline(text, pos, len(text))
    return spans


def _inline(text: str, start: int, stop: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = start
    while True:
        opening = _TICKS.search(text, pos, stop)
        if opening is None:
            return spans
        run = opening.group(0)
        closing = re.compile(rf"(?<!`){re.escape(run)}(?!`)").search(text, opening.end(), stop)
        if closing is None:
            pos = opening.end()  # an unmatched run is literal backticks
            continue
        spans.append((opening.start(), closing.end()))
        pos = closing.end()


def outside_code(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, piece)`` for each stretch of ``text`` outside code (see :func:`code_spans`)."""
    pos = 0
    for start, end in code_spans(text):
        if start > pos:
            yield pos, text[pos:start]
        pos = end
    if pos < len(text):
        yield pos, text[pos:]


def last_python_block(text: str) -> str | None:
    """The body of the answer's last fenced python block (``python``, ``py``, ``ipython`` …);
    without one, of its last fenced block that names no language; else ``None``. A block
    tagged with another language (``bash``, ``json`` …) is never taken."""
    blocks = fenced_blocks(text or "")
    for wanted in (
        lambda info: info.split()[0].lower() in PYTHON_INFO if info else False,
        lambda info: not info,
    ):
        chosen = [body for _, _, info, body in blocks if wanted(info) and body.strip()]
        if chosen:
            return chosen[-1].strip("\n")
    return None


def fence(body: str, info: str = "") -> str:
    """``body`` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(m.group(0)) for m in _TICKS.finditer(body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{body.rstrip(chr(10))}\n{ticks}"
