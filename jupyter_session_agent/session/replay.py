"""Record a notebook's agent turns once and replay them anywhere, with no model (docs/replay.md).

A *record* is a JSON file next to the notebook: the bundles (``exchange.transfer.bundle``) of
the sessions a kernel's ``%%agent`` cells ran, in the order the cells first used them
(:func:`write_record`); a single-session bundle from ``%agent export --format json`` is a
record too. :func:`load_record` reads either into :class:`RecordedSession` values.

A :class:`Replayer` answers cells from a record, matched by session and order: the first
session a replaying kernel uses is the record's first session, the next new one its second,
and the n-th cell of a session is that session's n-th recorded turn, whose prompt must equal
the cell's up to the runner's cell numbers (else one line: where the prompt changed).
:class:`TurnReplay` runs a
:class:`RecordedTurn` through the loop unchanged: the provider is a
``providers.replay.ReplayProvider``, the tools named by the ``replay_rerun`` setting run for
real (their permission checked as always) and a result that differs from the record is
reported, every other tool's result is the recorded one (nothing runs, so nothing is asked;
a recorded refusal stops the turn again; the files it changed are listed in the step's patch),
and a recorded compaction's messages come back after the same step (:class:`RecordedCompaction`:
nothing is summarised; the end-of-loop prune runs as when recording).

One module: a record is written, read, matched to cells and replayed through one turn here,
so its format and its use stay together.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import ToolFailure, UsageError
from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    PatchPart,
    Session,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
)
from ..core.messages import replace as replace_part
from ..core.permission import PermissionFailure, RejectedError
from ..core.redact import clean_value
from ..exchange import transfer
from ..loop.compaction.decision import NOTHING, Decision
from ..loop.history import History
from ..loop.turn import TurnSetup
from ..providers.replay import RERECORD, ReplayProvider
from ..tools import ToolResult

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
        return _short(("…" if start else "") + cut + ("…" if at + context < len(text) else ""), 80)

    return (
        f"asks {_short(recorded)}; it differs at character {at + 1}: recorded {piece(recorded)}, "
        f"this cell {piece(now)}"
    )


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


@dataclass
class NotebookRecord:
    """One kernel's record and replay: the file ``%agent record`` named, the sessions its
    cells ran since (in order), and the :class:`Replayer` of the record being replayed."""

    path: Path | None = None
    sessions: list[str] = field(default_factory=list)
    replayer: Replayer | None = None

    def name(self, path: str | os.PathLike) -> Path:
        """Keep this notebook's turns in ``path`` from now on (``%agent record FILE``)."""
        self.path = Path(path).expanduser().absolute()
        self.sessions = []
        return self.path

    def source(self, mode: str) -> Replayer | None:
        """The replayer for the ``replay`` setting's resolved ``mode`` (None: off)."""
        if not mode:
            self.replayer = None
            return None
        if mode == "on" and self.path is None:
            raise ReplayError(
                "replay is on but this notebook names no record — add %agent record FILE "
                "before its %%agent cells, or %agent replay FILE"
            )
        if mode == "on":
            assert self.path is not None  # refused above
            path = self.path
        else:
            path = Path(mode).expanduser().absolute()
        if self.replayer is None or self.replayer.path != path:
            self.replayer = Replayer.open(path)
        return self.replayer

    def start_turn(self, session: Any, prompt: str, settings: Any) -> tuple[Any, str]:
        """(the :class:`TurnReplay` answering this cell, or None; the cell's first line)."""
        replayer = self.source(settings.replay)
        if replayer is not None:
            turn = replayer.turn(session.info.id, prompt, first=not session.history)
            return TurnReplay(turn, tuple(settings.replay_rerun)), banner(turn)
        if self.path is not None:
            return None, recording_line(session, self.sessions, self.path)
        return None, ""

    def after_turn(self, session: Any, store: Any) -> None:
        """After a turn against a model: rewrite the record with this kernel's sessions."""
        if self.path is None or session is None:
            return
        if session.info.id not in self.sessions:
            self.sessions.append(session.info.id)
            session.wait_title(10.0)  # the first turn's title, when one is generated
        write_record(store, self.sessions, self.path)


# --------------------------------------------------------------------------
# one replayed turn


@dataclass
class TurnReplay:
    """A :class:`RecordedTurn` applied to a turn's setup; ``differences`` of re-run tools."""

    turn: RecordedTurn
    rerun: tuple[str, ...]
    differences: list[str] = field(default_factory=list)
    provider: ReplayProvider | None = None
    calls: int = 0  # tool calls run so far

    def apply(self, setup: TurnSetup) -> TurnSetup:
        """``setup`` answering from the record."""
        self.provider = ReplayProvider(self.turn.steps, self.turn.where)
        real_run, real_permit = setup.step.run_tool, setup.step.permit

        def permit(name: str, args: dict, call: Any) -> None:
            if name in self.rerun and real_permit is not None:
                real_permit(name, args, call)  # only what runs for real is asked about

        def run_tool(tool: Any, args: dict, call: Any) -> Any:
            name = getattr(tool, "name", call.name)
            self.calls += 1
            recorded = self.turn.tool_state(call.call_id, self.step)
            if name in self.rerun:
                return self._rerun(real_run, tool, args, call, name, recorded)
            if isinstance(recorded, ToolCompleted):
                return ToolResult(
                    output=recorded.output,
                    title=recorded.title,
                    metadata=dict(recorded.metadata or {}),
                    attachments=tuple(  # inline data only: a record names no local file
                        {"mime": a["mime"], "url": a["url"], "filename": a.get("filename")}
                        for a in recorded.attachments or ()
                        if str(a.get("url", "")).startswith("data:")
                    ),
                )
            if isinstance(recorded, ToolError):
                raise recorded_failure(recorded)
            raise ToolFailure(f"the record holds no result of this {name} call ({self.turn.where})")

        # a recorded call of a tool this kernel does not offer (an MCP server not running here, a
        # tool denied now) is still answered from the record: nothing of it runs
        recorded_names = {
            p.tool for step in self.turn.steps for p in step.parts if isinstance(p, ToolPart)
        }
        tools = dict(setup.step.tools)
        for name in sorted(recorded_names - set(tools) - set(self.rerun)):
            tools[name] = RecordedTool(name)
        snapshot = setup.step.snapshot
        step = dataclasses.replace(
            setup.step,
            tools=tools,
            snapshot=RecordedChanges(snapshot, self) if snapshot is not None else None,
            run_tool=run_tool,
            permit=permit,
            auto_compact=False,
        )
        return dataclasses.replace(
            setup,
            step=step,
            provider=self.provider,
            compactor=RecordedCompaction(self, setup.step.store, setup.compactor),
        )

    @property
    def step(self) -> int:
        """The recorded step being replayed (0-based)."""
        return self.provider.used - 1 if self.provider is not None else 0

    def recorded_changes(self) -> list[str]:
        """The files the recorded step being replayed changed, when one of its tools came from
        the record (a step whose tools all ran again has only its real changes)."""
        if self.provider is None or not self.provider.used:
            return []
        step = self.turn.steps[self.step]
        tools = [p.tool for p in step.parts if isinstance(p, ToolPart)]
        if all(name in self.rerun for name in tools):
            return []
        return [f for p in step.parts if isinstance(p, PatchPart) for f in p.files]

    def _rerun(self, real_run, tool, args, call, name: str, recorded: Any) -> Any:
        """Run the call for real; a result equal to the record up to object addresses shows
        the recorded words (so the transcript is the recorded one), any other is a difference."""
        try:
            result = real_run(tool, args, call)
        except ToolFailure as err:
            if isinstance(recorded, ToolError) and same_text(recorded.error, str(err)):
                if recorded.error != str(err):
                    raise recorded_failure(recorded) from None
            else:
                self._differs(name, _recorded_text(recorded), f"error {err}")
            raise
        if not (isinstance(recorded, ToolCompleted) and same_text(recorded.output, result.output)):
            self._differs(name, _recorded_text(recorded), result.output)
        elif recorded.output != result.output:
            result = dataclasses.replace(result, output=recorded.output)
        return result

    def _differs(self, name: str, recorded: str, now: str) -> None:
        self.differences.append(
            f"the {name} call (tool call {self.calls} of {self.turn.where}) gave "
            f"{_short(now)}, the record {_short(recorded)}"
        )

    def check(self) -> None:
        """One line if a re-run differed from the record (the turn is stored either way)."""
        if self.differences:
            more = len(self.differences) - 1
            also = f" (and {more} more)" if more else ""
            raise ReplayDiffers(
                f"replay differs from the record: {self.differences[0]}{also} — if the new "
                f"result is right, {RERECORD}"
            )


@dataclass
class RecordedCompaction:
    """The compactor of a replayed turn: after the same step as when recording, a recorded
    compaction's messages (request, summary, continuation) are added again, with new ids, so
    the replayed transcript and budget are the recorded ones; nothing is summarised or sent
    (no summary event is stored). The end-of-loop prune runs for real."""

    replay: TurnReplay
    store: Any
    real: Any = None  # the session's compactor: its end-of-loop prune runs as when recording
    done: set[int] = field(default_factory=set)
    due: int | None = None

    def _decision(self, steps: int) -> Any:
        blocks = dict(self.replay.turn.compactions)
        if steps not in blocks or steps in self.done:
            return NOTHING
        self.due = steps
        last = steps >= len(self.replay.turn.steps)  # the recorded turn ended with it
        return Decision("summarise", reason="recorded", continue_after=not last)

    def before_turn(self, history: Sequence[WithParts]) -> Any:
        return self._decision(0)

    def after_step(self, chat: list[dict], step: Any, *, last_step: bool) -> Any:
        return self._decision(self.replay.step + 1)

    def apply(
        self, decision: Decision, history: History | list[WithParts], observer: Any = None
    ) -> Any:
        assert self.due is not None
        self.done.add(self.due)
        session = history[-1].info.session_id
        parent = next(m.info.id for m in reversed(history) if isinstance(m.info, UserMessage))
        new_ids = self._live_ids(history)  # recorded id → this replay's, for the references
        added = []
        for item in dict(self.replay.turn.compactions)[self.due]:
            info = item.info
            new_ids[info.id] = ids.ascending("message")
            changes: dict[str, Any] = {"id": new_ids[info.id], "session_id": session}
            if isinstance(info, AssistantMessage):
                changes["parent_id"] = new_ids.get(info.parent_id, parent)
            copy = dataclasses.replace(info, **changes)
            parts = tuple(
                replace_part(
                    p,
                    id=ids.ascending("part"),
                    session_id=session,
                    message_id=copy.id,
                    **(
                        {"tail_start_id": new_ids.get(p.tail_start_id, p.tail_start_id)}
                        if isinstance(p, CompactionPart) and p.tail_start_id
                        else {}
                    ),
                )
                for p in item.parts
            )
            self.store.put(copy, *parts)
            added.append(WithParts(copy, parts))
            History.of(history).add(added[-1])
            for part in parts if observer is not None else ():
                observer.on_part(part)
        self.store.flush(sync=True)
        return _Compacted(added)

    def prune(self, history: History | list[WithParts], **_: object) -> Any:
        """The end-of-loop prune, for real: it decides from the tool outputs in the history,
        which are the recorded ones, so it clears what the recording's prune cleared."""
        return self.real.prune(history) if self.real is not None else None

    def _live_ids(self, history: Sequence[WithParts]) -> dict[str, str]:
        """The recorded turn's prompt and steps → the replayed turn's, in order."""
        turn = self.replay.turn
        start = max(i for i, m in enumerate(history) if typed(m))
        live = [
            m.info.id
            for m in history[start + 1 :]
            if isinstance(m.info, AssistantMessage) and not m.info.summary
        ]
        recorded = [s.info.id for s in turn.steps]
        return {turn.user.info.id: history[start].info.id, **dict(zip(recorded, live))}


@dataclass(frozen=True)
class _Compacted:
    """What the loop reads of a compaction's result: it succeeded, and the messages added."""

    added: list[WithParts]
    ok: bool = True


@dataclass(frozen=True)
class RecordedChanges:
    """The session's file snapshot in a replay: a step's patch lists what the live snapshot saw
    change and what the recorded step changed with the tools taken from the record, so a
    replayed turn shows (and stores) the files its recording changed; revert restores from
    the live snapshots."""

    real: Any  # session.snapshot.Snapshot
    replay: TurnReplay

    def track(self) -> str | None:
        return self.real.track()

    def changed(self, before: str, after: str) -> list[str]:
        files = list(self.real.changed(before, after))
        return files + [f for f in self.replay.recorded_changes() if f not in files]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@dataclass
class RecordedTool:
    """A tool known only from the record: its calls are answered by :class:`TurnReplay`."""

    name: str
    description: str = "a tool of the recorded session"
    parameters: Any = field(default_factory=lambda: {"type": "object"})

    def run(self, args: dict, ctx: Any) -> Any:
        raise ToolFailure(f"{self.name} is known only from a record; it cannot run here")


class RecordedFailure(ToolFailure):
    """A recorded tool error, raised again with its recorded metadata (a permission's outcome)."""

    def __init__(self, state: ToolError):
        super().__init__(state.error, state.metadata or None)


class RecordedRejection(RejectedError):
    """A recorded refusal that stopped its turn (the user said no, or could not be asked): it
    stops the replayed turn at the same step."""

    def __init__(self, state: ToolError):
        PermissionFailure.__init__(self, state.error)
        self._metadata = dict(state.metadata or {})

    @property
    def metadata(self) -> dict[str, Any]:
        return self._metadata


def _outcomes(cls: type[PermissionFailure]) -> set[str]:
    return {cls.outcome, *(o for sub in cls.__subclasses__() for o in _outcomes(sub))}


def recorded_failure(state: ToolError) -> ToolFailure:
    """The error a recorded failed call raises when replayed: a refusal that stopped the
    recorded turn stops the replayed one too."""
    permission = (state.metadata or {}).get("permission")
    outcome = permission.get("outcome") if isinstance(permission, dict) else None
    if outcome is not None and outcome in _outcomes(RejectedError):
        return RecordedRejection(state)
    return RecordedFailure(state)


def _recorded_text(state: Any) -> str:
    if isinstance(state, ToolCompleted):
        return state.output
    if isinstance(state, ToolError):
        return f"error {state.error}"
    return "no result"


def banner(turn: RecordedTurn) -> str:
    """The line a replayed cell shows first."""
    return f"▶ replay — no model is called: {turn.where}"


def recording_line(session: Any, recorded: Sequence[str], path: str | os.PathLike) -> str:
    """The line a cell shows first while its turn is recorded: the turn and session numbers
    the replay will show (``recorded``: the record's session ids so far)."""
    ids = list(recorded)
    number = ids.index(session.info.id) + 1 if session.info.id in ids else len(ids) + 1
    turn = len(turns_of(session.history)) + 1
    return f"● recording: turn {turn} of session {number} ({Path(path).name})"
