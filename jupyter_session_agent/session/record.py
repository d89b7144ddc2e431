"""A record of a notebook's agent turns, and the matching of a replaying notebook's cells to
them (docs/replay.md).

A *record* is a JSON file next to the notebook: the bundles (``exchange.transfer.bundle``) of
the sessions a kernel's ``%%agent`` cells ran, in the order the cells first used them
(:func:`write_record`); a single-session bundle from ``%agent export --format json`` is a
record too. :func:`load_record` reads either into :class:`RecordedSession` values.

A :class:`Replayer` answers cells from a record, matched by session and order: the first
session a replaying kernel uses is the record's first session, the next new one its second,
and the n-th cell of a session is that session's n-th recorded turn, whose prompt must equal
the cell's up to the runner's cell numbers (else one line: where the prompt changed). Running
a recorded turn through the loop is :mod:`.replay`'s.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    Session,
    TextPart,
    ToolPart,
    UserMessage,
    WithParts,
)
from ..core.redact import clean_value
from ..exchange import transfer
from ..providers.replay import RERECORD

RECORD_FORMAT = "jupyter-session-agent/replay"
RECORD_VERSION = 1


class ReplayError(UsageError):
    """A cell cannot be replayed from the record (changed prompt, missing turn, no record)."""


class ReplayDiffers(UsageError):
    """A tool the replay ran again gave another result than the record: the turn is stored,
    the cell fails so that a test run sees it."""


# --------------------------------------------------------------------------
# the record


@dataclass(frozen=True)
class RecordedTurn:
    """One recorded turn: the user's message and the assistant messages (steps) answering it."""

    source: str  # the record's file name
    session_number: int  # 1-based, the order of the record's sessions
    number: int  # 1-based, within its session
    session: Session
    user: WithParts
    steps: tuple[WithParts, ...]
    # the compactions of the turn: after how many of its steps, the messages it added
    compactions: tuple[tuple[int, tuple[WithParts, ...]], ...] = ()

    @property
    def where(self) -> str:
        return f"turn {self.number} of recorded session {self.session_number} ({self.source})"

    @property
    def prompt(self) -> str:
        return prompt_text(self.user)

    def tool_state(self, call_id: str, step: int) -> Any:
        """The recorded final state of the call ``call_id`` of step ``step`` (0-based; None: not
        in the record). Call ids are looked up per step: some servers number the calls of each
        response anew (``call_0`` in every step)."""
        for item in self.steps[step : step + 1]:
            for part in item.parts:
                if isinstance(part, ToolPart) and part.call_id == call_id:
                    return part.state
        return None

    def provenance(self) -> dict[str, Any]:
        """What a replayed prompt stores about where its answer came from."""
        return {
            "source": self.source,
            "session": self.session.id,
            "message": self.user.info.id,
            "turn": self.number,
        }


@dataclass(frozen=True)
class RecordedSession:
    info: Session
    turns: tuple[tuple[WithParts, tuple[WithParts, ...]], ...]  # (user, steps) per turn
    compactions: tuple[tuple[tuple[int, tuple[WithParts, ...]], ...], ...] = ()  # per turn


def prompt_text(item: WithParts) -> str:
    """The text a user typed in a message (its non-synthetic text parts)."""
    return "\n".join(p.text for p in item.parts if isinstance(p, TextPart) and not p.synthetic)


def typed(item: WithParts) -> bool:
    """Whether ``item`` is a prompt a user typed (not a compaction request or continuation)."""
    return isinstance(item.info, UserMessage) and (
        not any(isinstance(p, CompactionPart) for p in item.parts)
        and any(isinstance(p, TextPart) and not p.synthetic for p in item.parts)
    )


def turns_of(history: Sequence[WithParts]) -> list[tuple[WithParts, tuple[WithParts, ...]]]:
    """(prompt, the model's steps) per turn a user typed; compaction requests, their summaries
    and synthetic continuations belong to the turn they happened in and are not steps."""
    turns: list[tuple[WithParts, list[WithParts]]] = []
    for item in history:
        info = item.info
        if isinstance(info, UserMessage):
            if typed(item):
                turns.append((item, []))
        elif isinstance(info, AssistantMessage) and turns and not info.summary:
            turns[-1][1].append(item)
    return [(user, tuple(steps)) for user, steps in turns]


def compactions_of(
    history: Sequence[WithParts],
) -> list[tuple[tuple[int, tuple[WithParts, ...]], ...]]:
    """Per turn of :func:`turns_of`: the messages each compaction added (its request, summary
    and continuation), with the number of the turn's steps before it."""
    turns: list[list[tuple[int, list[WithParts]]]] = []
    steps = 0
    for item in history:
        info = item.info
        if typed(item):
            turns.append([])
            steps = 0
        elif not turns:
            continue
        elif isinstance(info, AssistantMessage) and not info.summary:
            steps += 1
        else:
            blocks = turns[-1]
            starts = any(isinstance(p, CompactionPart) for p in item.parts)
            if starts or not blocks or blocks[-1][0] != steps:
                blocks.append((steps, []))
            blocks[-1][1].append(item)
    return [tuple((at, tuple(items)) for at, items in blocks) for blocks in turns]


def load_record(path: str | os.PathLike) -> list[RecordedSession]:
    """The sessions of a record (or of a single bundle), in order; bad input is one line."""
    path = Path(path).expanduser()
    hint = "give a record from %agent record FILE or a bundle from %agent export --format json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReplayError(f"no record {str(path)!r} — {hint}") from None
    except (OSError, ValueError) as err:
        raise ReplayError(f"cannot read the record {path}: {str(err)[:120]} — {hint}") from None
    if isinstance(data, dict) and data.get("format") == RECORD_FORMAT:
        if not isinstance(data.get("sessions"), list) or data.get("version") != RECORD_VERSION:
            raise ReplayError(f"{path} is not a record of this version — {RERECORD}")
        bundles = data["sessions"]
    else:
        bundles = [data]
    sessions = []
    for item in bundles:
        if not isinstance(item, dict):  # a bundle inline, never a path to read elsewhere
            raise ReplayError(f"{path} holds a session that is not a bundle — {hint}")
        info, history = transfer.decode(transfer.load_bundle(item))
        sessions.append(
            RecordedSession(info, tuple(turns_of(history)), tuple(compactions_of(history)))
        )
    return sessions


def write_record(store: Any, session_ids: Iterable[str], path: str | os.PathLike) -> Path:
    """Write the sessions ``session_ids`` (in this order) as one record file; returns its path."""
    data = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "sessions": [transfer.bundle(store, sid) for sid in session_ids],
    }
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        json.dumps(clean_value(data), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------
# matching cells to recorded turns


@dataclass
class Replayer:
    """Recorded turns handed to the cells of one kernel, by session and order."""

    path: Path
    sessions: list[RecordedSession] = field(default_factory=list)
    matched: dict[str, int] = field(default_factory=dict)  # live session id → record index
    done: dict[str, int] = field(default_factory=dict)  # live session id → turns replayed

    @classmethod
    def open(cls, path: str | os.PathLike) -> Replayer:
        path = Path(path).expanduser().absolute()
        return cls(path, load_record(path))

    def turn(self, session_id: str, prompt: str, *, first: bool = True) -> RecordedTurn:
        """The recorded turn for the next cell of live session ``session_id`` whose prompt is
        ``prompt``. ``first``: the session has no turn yet (a new one takes the record's next
        unused session). Raises a one-line :class:`ReplayError`."""
        index = self.matched.get(session_id)
        if index is None:
            index = len(set(self.matched.values())) if first else -1
            if index < 0 or index >= len(self.sessions):
                raise ReplayError(
                    f"this cell's session is not in the record {self.path.name} (it holds "
                    f"{len(self.sessions)} session(s)) — {RERECORD}"
                )
        recorded = self.sessions[index]
        number = self.done.get(session_id, 0) + 1
        if number > len(recorded.turns):
            raise ReplayError(
                f"recorded session {index + 1} in {self.path.name} has {len(recorded.turns)} "
                f"turn(s); this cell would be turn {number} — it was not recorded; {RERECORD}"
            )
        user, steps = recorded.turns[number - 1]
        compactions = recorded.compactions[number - 1] if recorded.compactions else ()
        turn = RecordedTurn(
            self.path.name, index + 1, number, recorded.info, user, steps, compactions
        )
        # the cell has its turn even when it fails: the cells after it keep theirs
        self.matched[session_id] = index
        self.done[session_id] = number
        if not same_text(turn.prompt, prompt):
            raise ReplayError(
                "this cell's prompt changed since it was recorded; re-record with %agent replay "
                "off, run the notebook against a model and %agent record FILE (the record's "
                f"{turn.where} {first_difference(turn.prompt.strip(), prompt.strip())})"
            )
        return turn


# what a prompt or a re-run's output may legitimately differ by between the recorded run and a
# replay: the cell numbers the runner gave (`%agent fix` names "cell In [10]", a traceback
# "Cell In[10]"; nbval numbers its cells from 1) and object addresses in a repr or traceback
_RUNNER_NOISE = (
    (re.compile(r"\bIn ?\[\d+\]"), "In[N]"),
    (re.compile(r"\bat 0x[0-9a-fA-F]{6,16}\b"), "at 0xADDRESS"),
)


def same_text(recorded: str, now: str) -> bool:
    """Whether ``now`` (a cell's prompt, a re-run tool's output) is ``recorded`` up to the
    runner's cell numbers and object addresses."""

    def key(text: str) -> str:
        text = text.strip()
        for pattern, replacement in _RUNNER_NOISE:
            text = pattern.sub(replacement, text)
        return text

    return key(recorded) == key(now)


def first_difference(recorded: str, now: str, context: int = 24) -> str:
    """Where ``now`` first departs from ``recorded``, as the clause of a one-line error."""
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, now)) if a != b), min(len(recorded), len(now))
    )
    start = max(0, at - context)

    def piece(text: str) -> str:
        cut = text[start : at + context]
        return short_repr(
            ("…" if start else "") + cut + ("…" if at + context < len(text) else ""), 80
        )

    return (
        f"asks {short_repr(recorded)}; it differs at character {at + 1}: recorded {piece(recorded)}, "
        f"this cell {piece(now)}"
    )


def short_repr(text: str, limit: int = 60) -> str:
    """``text`` on one line, quoted, cut to ``limit`` characters (for one-line messages)."""
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
