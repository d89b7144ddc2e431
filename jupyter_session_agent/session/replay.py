"""Record a notebook's agent turns once and replay them anywhere, with no model (docs/replay.md).

The record (its file, written by :func:`.record.write_record` and read by
:func:`.record.load_record`) and the :class:`.record.Replayer` that matches a replaying
notebook's cells to its turns are :mod:`.record`'s; this module runs a matched turn, and
:class:`NotebookRecord` is one kernel's use of both.
:class:`TurnReplay` runs a
:class:`RecordedTurn` through the loop unchanged: the provider is a
``providers.replay.ReplayProvider``, the tools named by the ``replay_rerun`` setting run for
real (their permission checked as always) and a result that differs from the record is
reported, every other tool's result is the recorded one (nothing runs, so nothing is asked;
a recorded refusal stops the turn again; the files it changed are listed in the step's patch),
and a recorded compaction's messages come back after the same step (:class:`RecordedCompaction`:
nothing is summarised; the end-of-loop prune runs as when recording).

One module: one recorded turn run through the loop unchanged — its provider, its tools (recorded
or re-run and compared), its compactions and its file changes all stand in for the live ones
from the same :class:`.record.RecordedTurn`, and :class:`TurnReplay` sets them up together.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import ToolFailure
from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    PatchPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
)
from ..core.messages import replace as replace_part
from ..core.permission import PermissionFailure, RejectedError
from ..loop.compaction.decision import NOTHING, Decision
from ..loop.history import History
from ..loop.turn import TurnSetup
from ..providers.replay import RERECORD, ReplayProvider
from ..tools import ToolResult
from .record import (
    RecordedTurn,
    ReplayDiffers,
    Replayer,
    ReplayError,
    load_record,
    same_text,
    short_repr,
    turns_of,
    typed,
    write_record,
)


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
            f"{short_repr(now)}, the record {short_repr(recorded)}"
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


# the record's names that callers of this module used before it was split out
__all__ = [
    "NotebookRecord",
    "RecordedChanges",
    "RecordedCompaction",
    "RecordedTool",
    "ReplayDiffers",
    "ReplayError",
    "TurnReplay",
    "load_record",
    "recorded_failure",
    "write_record",
]
