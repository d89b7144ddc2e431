"""The pinned section on a summary (ours): a deterministic part that keeps what the user said
and what the assistant concluded verbatim, the files the agent changed, and the session's
archive of every output that left the view (``tool-output/<session>.outputs``);
:func:`water_fill` fits the words to the budget.

No word list decides which of the user's sentences matter: every sentence of every earlier user
message is kept, oldest first, except those that recur. A sentence that resembles those of
two other messages (most of its words shared, :func:`recurring`) is a routine request: the
newest of its kind is kept, and only when room remains. What the user said once (a rule, a
preference, a changed name, however it is worded) stays. The assistant's own sentences (its
text, not its tool calls) are read the same way: a status or a decision it stated once stays;
its recurring phrases ("Here is what … shows") do not.

One module: choosing the sentences and fitting them to the budget are one decision (what is
kept depends on how much room each group gets), so they stay together."""

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
from ..history import History
from ..step import Observer
from .items import is_real_user, is_summary, user_text

CHANGE_TOOLS = ("edit", "write")  # their filePath goes into the pinned "files changed" list
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W\d_]{2,}")  # words without digits: "[T07]", ids and sizes do not count
RECUR = 0.5  # two sentences sharing at least this share of their words (Jaccard) are one kind
RECUR_MESSAGES = 3  # a kind recurs when sentences of this many different messages are of it
OWN_WORDS = 4  # a recurring sentence with this many words no other of its kind has is kept
REPLY_WORDS = 3  # a user message of at most this many words is pinned with what it answers
MIN_VERBATIM = 40  # characters: below this room, no verbatim sentences are pinned
CLEARED_CHARS = 120  # a cleared output in the view: the placeholder and where it is saved
OVERHEAD_CHARS = 400  # the section's header, notes and archive line


def _chars(item: WithParts) -> int:
    """The characters a message takes in the view: its text, its tool calls' arguments, its
    tool outputs (a cleared one as its placeholder and pointer)."""
    size = 0
    for p in item.parts:
        if isinstance(p, TextPart):
            size += len(p.text)
        elif isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted):
            size += len(json.dumps(p.state.input)) + (
                CLEARED_CHARS if p.state.time_compacted else len(p.state.output)
            )
    return size


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


KEEP_CHARS = 160  # when not all fit, each kept sentence keeps at least this head (a negation
# late in a sentence must not be cut off), so fewer of them are kept
LINE_EXTRA = len(" […]") + len("- \n")  # what a listed line adds to its (cut) text


def fit(texts: Sequence[str], budget_chars: int) -> tuple[list[str], int]:
    """Fit ``texts`` (oldest first) into ``budget_chars`` as listed lines: :func:`water_fill`
    when every text can keep ``KEEP_CHARS`` of its head; otherwise only as many as fit so, the
    oldest half and the newest half (a long session's first rules and latest changes), and how
    many in the middle were left out. The lines never take more than the budget."""
    if sum(len(t) + 3 for t in texts) <= budget_chars:
        return list(texts), 0
    room = max(0, budget_chars - len("[… 99999 more …]"))

    def chosen(k: int) -> list[str]:
        return list(texts[: k - k // 2]) + (list(texts[-(k // 2) :]) if k // 2 else [])

    def cost(k: int) -> int:
        return sum(min(len(t), KEEP_CHARS) + LINE_EXTRA for t in chosen(k))

    low, high = 0, len(texts)  # the most texts whose heads fit: cost grows with k
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if cost(mid) <= room else (low, mid - 1)
    kept = chosen(low)
    return water_fill(kept, room - 3 * len(kept)), len(texts) - len(kept)


def listed(texts: Sequence[str], budget_chars: int) -> list[str]:
    """``texts`` as ``- `` lines within ``budget_chars`` (:func:`fit`), with a line saying how
    many were left out between the oldest and the newest."""
    kept, left_out = fit(texts, budget_chars)
    if not left_out:
        return [f"- {t}" for t in kept]
    head = len(kept) - len(kept) // 2
    return (
        [f"- {t}" for t in kept[:head]]
        + [f"[… {left_out} more …]"]
        + [f"- {t}" for t in kept[head:]]
    )


def recurring(sentences: Sequence[tuple[int, str]]) -> tuple[list[str], list[str]]:
    """Split ``(message index, sentence)`` pairs, oldest first, into the sentences said once
    (oldest first) and one sentence per recurring kind (the newest of each, newest kind first).

    A kind recurs when sentences of at least ``RECUR_MESSAGES`` different messages share most
    of their words (Jaccard ≥ ``RECUR`` over words without digits; ids, numbers and markers do
    not count): a frame used again and again, not two statements that happen to look alike.
    A sentence of a recurring kind that carries ``OWN_WORDS`` words no other sentence of its
    kind has (a rule added to a routine request) counts as said once."""
    kinds: list[tuple[set[str], list[tuple[int, str, set[str]]]]] = []
    for index, sentence in sentences:
        words = {w.lower() for w in _WORD.findall(sentence)}
        for seen, members in kinds:
            union = words | seen
            if union and len(words & seen) / len(union) >= RECUR:
                members.append((index, sentence, words))
                break
        else:
            kinds.append((words, [(index, sentence, words)]))
    once: list[tuple[int, str]] = []
    routine: list[tuple[int, str]] = []
    for _, members in kinds:
        if len({i for i, _, _ in members}) < RECUR_MESSAGES:
            once.extend((i, x) for i, x, _ in members)
            continue
        counts: dict[str, int] = {}
        for _, _, words in members:
            for w in words:
                counts[w] = counts.get(w, 0) + 1
        for i, x, words in members:  # a routine frame that carries words of its own is not routine
            if sum(1 for w in words if counts[w] == 1) >= OWN_WORDS:
                once.append((i, x))
        last = members[-1]
        routine.append((last[0], last[1]))
    once.sort(key=lambda x: x[0])
    routine.sort(key=lambda x: -x[0])
    return [s for _, s in once], [s for _, s in routine]


@dataclass
class Pinner:
    """Writes the session's output archive and the pinned section of a summary.

    ``usable`` (the usable window) sizes the section; ``pin_requests``: how many earlier
    requests (their first sentence) are pinned beside what the user said."""

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
        history: History | list[WithParts],
        summary: WithParts,
        *,
        head: Sequence[WithParts],
        tail: Sequence[WithParts],
        replay: WithParts | None,
        observer: Observer,
        archive: Path | None = None,
    ) -> WithParts:
        """Append the deterministic pinned section: what the user said (verbatim, recurring
        requests last), what the assistant concluded (its sentences said once), the files
        changed, the newest earlier requests, and where the earlier tool outputs are saved."""
        tail_ids = {m.info.id for m in tail}
        stop = replay.info.id if replay is not None else (tail[0].info.id if tail else None)
        summary_text = "".join(p.text for p in summary.parts if isinstance(p, TextPart))
        said: list[tuple[int, str]] = []
        concluded: list[tuple[int, str]] = []  # the assistant's own words (text, not tools)
        requests: list[str] = []
        asked = ""  # the assistant's newest sentence, which a short user reply answers
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
                if asked and len(_WORD.findall(text)) <= REPLY_WORDS:
                    # a bare reply ("yes", "ok, do that") means nothing alone: pin what it answers
                    sentences = [f'{text} (in reply to: "{asked[:200]}")']
                said += [(len(requests), x[:400]) for x in sentences]
                if sentences:
                    requests.append(sentences[0][:200])
            elif isinstance(item.info, AssistantMessage) and not item.info.summary:
                text = " ".join(
                    p.text
                    for p in item.parts
                    if isinstance(p, TextPart) and not p.synthetic and not p.ignored
                )
                index = len(concluded)
                own = [x.strip() for x in _SENTENCE.split(text) if x.strip()]
                concluded += [(index, x[:400]) for x in own]
                asked = own[-1] if own else asked
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
        # the summary with its section must stay smaller than what it replaces (the head as the
        # view shows it and the previous summary): the verbatim words get at most what is left
        previous = next(
            (m for m in reversed(history) if m.info.id < summary.info.id and is_summary(m)),
            None,
        )
        replaced = sum(_chars(m) for m in head) + (_chars(previous) if previous else 0)
        verbatim = min(budget_chars, replaced - len(summary_text) - OVERHEAD_CHARS)
        if verbatim < MIN_VERBATIM:
            said, concluded = [], []
        once, routine = recurring([(i, x) for i, x in said if x not in summary_text])
        answers, _ = recurring([(i, x) for i, x in concluded if x not in summary_text])
        lines = [PINNED_HEADER]
        room = verbatim // 2
        # the newest of each recurring kind has a quarter of the room set aside (a rule the user
        # repeated in three messages is one of them: sentences said once must not crowd it
        # out), and whatever the sentences said once leave
        reserved, _ = fit(routine, room // 4)
        room -= sum(len(r) + 3 for r in reserved)
        if once:
            lines.append(
                "What the user said, oldest first (in force unless a later message changes it):"
            )
            said_lines = listed(once, room)
            lines += said_lines
            room -= sum(len(x) + 1 for x in said_lines)
        shown_routine, _ = fit(routine, room + sum(len(r) + 3 for r in reserved))
        if answers:  # what the assistant concluded once (statuses, decisions), in its words
            lines.append("What the assistant concluded, oldest first:")
            lines += listed(answers, verbatim // 3)
        if shown_routine:
            lines.append("Recurring requests, the newest of each kind, newest first:")
            lines += [f"- {r}" for r in shown_routine]
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
        History.of(history).put_back(new)
        return new
