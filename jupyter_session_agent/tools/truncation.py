"""Tool output truncation, as OpenCode's ``Truncate.output``.

Output over ``MAX_LINES`` lines or ``MAX_BYTES`` UTF-8 bytes is cut to a
preview (from the head by default, or the tail) and the full text is saved to
``<data_dir>/tool-output/<tool_… ascending id>`` so the model can grep it or
read it in pieces. Nothing is written when the output fits.

:class:`OutputSpool` does the same for output that streams in (a command's), in bounded
memory: past the limits the full text goes straight to the saved file, and only a head
and a tail stay in memory.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core import ids
from ..core.redact import clean

MAX_LINES = 2000
MAX_BYTES = 50 * 1024
OUTPUT_DIR = "tool-output"

HINT = (
    "The tool call succeeded but the output was truncated. Full output saved to: {path}\n"
    "Use grep to search the full content or read with offset/limit to view specific sections."
)


@dataclass(frozen=True)
class Truncated:
    content: str
    truncated: bool
    output_path: str | None = None


def truncate(
    text: str,
    data_dir: Path,
    *,
    max_lines: int = MAX_LINES,
    max_bytes: int = MAX_BYTES,
    direction: Literal["head", "tail"] = "head",
) -> Truncated:
    """Return ``text`` unchanged if it fits, else a preview plus
    ``...<N> lines|bytes truncated...`` and a hint naming the saved file."""
    lines = text.split("\n")
    total_bytes = len(text.encode("utf-8"))
    if len(lines) <= max_lines and total_bytes <= max_bytes:
        return Truncated(text, False)

    kept: list[str] = []
    size = 0
    hit_bytes = False
    # Walk from the chosen end; every joining newline counts as one byte.
    order = lines if direction == "head" else reversed(lines)
    for line in order:
        if len(kept) >= max_lines:
            break
        cost = len(line.encode("utf-8")) + (1 if kept else 0)
        if size + cost > max_bytes:
            hit_bytes = True
            break
        kept.append(line)
        size += cost
    if direction == "tail":
        kept.reverse()

    removed = total_bytes - size if hit_bytes else len(lines) - len(kept)
    unit = "bytes" if hit_bytes else "lines"
    preview = "\n".join(kept)

    path = Path(data_dir) / OUTPUT_DIR / ids.ascending("tool")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")

    hint = HINT.format(path=path)
    marker = f"...{removed} {unit} truncated..."
    if direction == "head":
        content = f"{preview}\n\n{marker}\n\n{hint}"
    else:
        content = f"{marker}\n\n{hint}\n\n{preview}"
    return Truncated(content, True, str(path))


class OutputSpool:
    """Output that arrives in pieces (a command's), kept in bounded memory.

    While the text fits (``max_lines`` lines and ``max_bytes`` UTF-8 bytes) it is held as it
    is. Once it does not, the whole text goes to ``<data_dir>/tool-output/<tool_… id>`` as
    it arrives (redacted piece by piece: the file holds no key either) and memory keeps only
    a head and a tail of about ``max_bytes / 2`` each, so a command printing gigabytes costs
    a few hundred kilobytes. :meth:`result` gives what :func:`truncate` would, with the head
    and the tail around the marker: ``...N lines (M bytes) truncated...``. Trailing newlines
    are dropped, as ``text.rstrip("\\n")`` would.
    """

    HOLD = 4096  # chars held back from a line that has no end yet (a key cut in two is not a key)

    def __init__(
        self, data_dir: Path, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.data_dir = Path(data_dir)
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self.lines = 1  # newlines seen + 1, trailing newlines excluded
        self.bytes = 0
        self._newlines = 0  # trailing newlines not yet known to be followed by text
        self._head: list[str] = []  # everything while it fits, then the head
        self._tail: collections.deque[str] = collections.deque()
        self._tail_chars = 0
        self._file: Any = None  # the saved file while it is written
        self._pending = ""  # text not yet redacted and written (no line end yet)
        self.path: Path | None = None  # the saved file, once the text no longer fits

    @property
    def head(self) -> str:
        """The start of the text (all of it while it fits)."""
        return "".join(self._head)

    def write(self, text: str) -> None:
        if not text:
            return
        stripped = text.rstrip("\n")
        if not stripped:
            self._newlines += len(text)
            return
        while self._newlines:  # newlines that turned out not to be trailing, in pieces
            count = min(self._newlines, 65536)
            self._newlines -= count
            self._add("\n" * count)
        self._add(stripped)
        self._newlines = len(text) - len(stripped)

    def _add(self, text: str) -> None:
        self.lines += text.count("\n")
        self.bytes += len(text.encode("utf-8"))
        if self.path is None:
            self._head.append(text)
            if self.lines > self.max_lines or self.bytes > self.max_bytes:
                self._spill()
            return
        self._keep_tail(text)
        self._to_file(text)

    def close(self) -> None:
        """Write what is pending and close the saved file (idempotent)."""
        if self._file is not None:
            self._file.write(clean(self._pending))
            self._pending = ""
            self._file.close()
            self._file = None

    def result(self, notes: str = "") -> Truncated:
        """The text (``notes`` appended after a blank line) or its head and tail with the
        marker and the saved file's hint; the file gets the notes too. Call it once."""
        if self.path is None:
            return Truncated("\n\n".join(x for x in (self.head, notes) if x), False)
        if notes:
            self._to_file("\n\n" + notes)
        self.close()
        head = _fit("".join(self._head).split("\n"), self.max_lines // 2, self.max_bytes // 2)
        tail = _fit(
            list(reversed("".join(self._tail).split("\n"))),
            self.max_lines // 2,
            self.max_bytes // 2,
            tail=True,
        )
        tail.reverse()
        kept_lines = len(head) + len(tail)
        kept_bytes = sum(len(x.encode("utf-8")) + 1 for x in head + tail)
        marker = (
            f"...{max(0, self.lines - kept_lines)} lines "
            f"({max(0, self.bytes - kept_bytes)} bytes) truncated..."
        )
        hint = HINT.format(path=self.path)
        body = "\n".join(head) + f"\n\n{marker}\n\n" + "\n".join(tail)
        content = "\n\n".join(x for x in (body, notes, hint) if x)
        return Truncated(content, True, str(self.path))

    # -- internals ----------------------------------------------------------------------

    def _spill(self) -> None:
        self.path = self.data_dir / OUTPUT_DIR / ids.ascending("tool")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8", newline="")
        text = "".join(self._head)
        self._head = [text[: self.max_bytes]]  # the head never needs more
        self._keep_tail(text)
        self._to_file(text)

    def _keep_tail(self, text: str) -> None:
        self._tail.append(text)
        self._tail_chars += len(text)
        want = self.max_bytes // 2 + 1  # chars >= bytes wanted: the first line may be cut
        while len(self._tail) > 1 and self._tail_chars - len(self._tail[0]) >= want:
            self._tail_chars -= len(self._tail.popleft())
        if self._tail_chars > 4 * want:  # huge pieces: keep their end only
            end = "".join(self._tail)[-want:]
            self._tail = collections.deque([end])
            self._tail_chars = len(end)

    def _to_file(self, text: str) -> None:
        pending = self._pending + text
        cut = pending.rfind("\n") + 1
        if not cut and len(pending) > 16 * self.HOLD:  # a line with no end yet: write most of it
            space = pending.rfind(" ", 0, len(pending) - self.HOLD)
            cut = space + 1 if space > 0 else len(pending) - self.HOLD
        if cut:
            self._file.write(clean(pending[:cut]))
            pending = pending[cut:]
        self._pending = pending


def _fit(lines: list[str], max_lines: int, max_bytes: int, *, tail: bool = False) -> list[str]:
    """Whole lines from the start of ``lines`` within the limits; a first line too long for
    them is cut (its end kept for a ``tail``) and marked with ``…``."""
    kept: list[str] = []
    size = 0
    for line in lines:
        cost = len(line.encode("utf-8")) + 1
        if len(kept) >= max_lines or size + cost > max_bytes:
            if not kept:
                room = max(0, max_bytes - 4)
                raw = line.encode("utf-8")
                if tail:
                    kept.append("…" + raw[-room:].decode("utf-8", "ignore"))
                else:
                    kept.append(raw[:room].decode("utf-8", "ignore") + "…")
            break
        kept.append(line)
        size += cost
    return kept
