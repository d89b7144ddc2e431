"""Tool output truncation, as OpenCode's ``Truncate.output`` (spec §4.8).

Output over ``MAX_LINES`` lines or ``MAX_BYTES`` UTF-8 bytes is cut to a
preview (from the head by default, or the tail) and the full text is saved to
``<data_dir>/tool-output/<tool_… ascending id>`` so the model can grep it or
read it in pieces. Nothing is written when the output fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .. import ids

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
