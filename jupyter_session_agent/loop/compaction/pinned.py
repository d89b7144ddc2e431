"""The pinned section on a summary (ours): a deterministic part that keeps the user's rules
verbatim (the sentences of their messages that state one), the files the agent changed,
and the session's archive of every output that left the view
(``tool-output/<session>.outputs``); :func:`water_fill` fits the rules to the budget."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import ids
from ...core.compaction_config import OUTPUT_DIR
from ...core.messages import AssistantMessage, TextPart, ToolCompleted, ToolPart, WithParts
from ..step import Observer
from .items import is_real_user, put_back, user_text

CHANGE_TOOLS = ("edit", "write")  # their filePath goes into the pinned "files changed" list
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# A sentence that states a rule, a preference or a changed fact: kept verbatim across compactions.
_RULE = re.compile(
    r"\b(never|always|must|mustn't|do not|don't|should|shouldn't|only|instead|prefer|avoid|make sure|"
    r"remember|from now on|is now|are now|renamed|no longer|keep|use)\b",
    re.IGNORECASE,
)
PINNED_HEADER = "---\n*Pinned from the history (verbatim, not summarised):*"


def water_fill(texts: Sequence[str], budget_chars: int) -> list[str]:
    """Cut the longest texts first so that all of them fit ``budget_chars``; each keeps its head."""
    if sum(len(t) for t in texts) <= budget_chars or not texts:
        return list(texts)
    lengths = sorted(len(t) for t in texts)
    remaining, n, cap = budget_chars, len(texts), 0
    for i, length in enumerate(lengths):
        share = remaining // (n - i)
        if length <= share:
            remaining -= length
            continue
        cap = max(40, share)
        break
    return [t if len(t) <= cap else t[:cap].rstrip() + " […]" for t in texts]


@dataclass
class Pinner:
    """Writes the session's output archive and the pinned section of a summary.

    ``usable`` (the usable window) sizes the section; ``pin_requests``: how many earlier
    requests (their first sentence) are pinned beside the rules."""

    store: Any
    data_dir: Path
    usable: int
    pin_requests: int = 0

    def archive(self, head: Sequence[WithParts]) -> Path | None:
        """Append the head's tool outputs (which leave the model's view now) to the session's
        archive, ``<data_dir>/tool-output/<session id>.outputs``, so one grep finds any of them."""
        path = (
            Path(self.data_dir)
            / OUTPUT_DIR
            / f"{head[0].info.session_id if head else 'session'}.outputs"
        )
        chunks = []
        for item in head:
            for p in item.parts:
                if not (isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)):
                    continue
                full = p.state.output
                saved = (p.state.metadata or {}).get("outputPath")
                if saved and (p.state.metadata or {}).get("truncated"):
                    try:
                        full = Path(saved).read_text(encoding="utf-8", errors="replace")
                    except OSError:
                        pass
                args = json.dumps(p.state.input, ensure_ascii=False)
                chunks.append(f"===== {p.id} · {p.tool} {args[:200]}\n{full}\n")
        if chunks:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8", newline="") as fh:
                fh.write("".join(chunks))
        return path if path.exists() else None

    def pin(
        self,
        history: list[WithParts],
        summary: WithParts,
        *,
        head: Sequence[WithParts],
        tail: Sequence[WithParts],
        replay: WithParts | None,
        observer: Observer,
        archive: Path | None = None,
    ) -> WithParts:
        """Append the deterministic pinned section: the rules the user stated (verbatim), the
        newest earlier requests, and where the earlier tool outputs are saved."""
        tail_ids = {m.info.id for m in tail}
        stop = replay.info.id if replay is not None else (tail[0].info.id if tail else None)
        summary_text = "".join(p.text for p in summary.parts if isinstance(p, TextPart))
        rules: list[str] = []
        requests: list[str] = []
        files: list[str] = []
        for item in history:
            if (
                item.info.id in tail_ids
                or item.info.id >= summary.info.id
                or (stop and item.info.id >= stop)
            ):
                continue
            if is_real_user(item):
                text = user_text(item).strip()
                sentences = [x.strip() for x in _SENTENCE.split(text) if x.strip()]
                for sentence in sentences:
                    if _RULE.search(sentence) and sentence not in rules:
                        rules.append(sentence[:400])
                if sentences:
                    requests.append(sentences[0][:200])
            elif isinstance(item.info, AssistantMessage) and not item.info.summary:
                for p in item.parts:  # files the agent changed: edit/write calls that succeeded
                    if (
                        isinstance(p, ToolPart)
                        and isinstance(p.state, ToolCompleted)
                        and p.tool in CHANGE_TOOLS
                    ):
                        path = p.state.input.get("filePath") or p.state.input.get("path")
                        if isinstance(path, str):
                            if path in files:
                                files.remove(path)
                            files.append(path)
        budget_chars = 4 * max(300, min(3_000, (self.usable or 8_000) // 16))
        rules = [r for r in rules if r not in summary_text]
        lines = [PINNED_HEADER]
        if rules:
            lines.append(
                "The user's rules and changes, oldest first (in force unless a later one changes them):"
            )
            lines += [f"- {r}" for r in water_fill(rules, budget_chars * 2 // 3)]
        used = sum(len(x) for x in lines)
        if files:
            shown_files, size = [], 0
            for path in reversed(files):
                if used + size + len(path) > budget_chars:
                    break
                shown_files.append(path)
                size += len(path) + 2
            lines.append(
                f"Files the agent changed, newest first ({len(shown_files)} of {len(files)}): "
                + ", ".join(shown_files)
            )
            used += size
        shown = []
        for text in reversed(requests[-self.pin_requests :] if self.pin_requests else []):
            if used + len(text) > budget_chars:
                break
            shown.append(f"- {text}")
            used += len(text) + 2
        if shown:
            lines.append(f"Earlier requests, newest first ({len(shown)} of {len(requests)}):")
            lines += shown
        if archive is not None:
            lines.append(
                f"All earlier tool outputs, in full: {archive} (grep it; a `=====` line starts each)."
            )
        if len(lines) == 1:
            return summary
        part = TextPart(
            ids.ascending("part"),
            summary.info.session_id,
            summary.info.id,
            text="\n\n" + "\n".join(lines),
            synthetic=True,
            metadata={"compaction": "pinned"},
        )
        self.store.put(part)
        observer.on_part(part)
        new = WithParts(summary.info, (*summary.parts, part))
        put_back(history, new)
        return new
