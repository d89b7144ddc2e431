"""A session's turns: :class:`TurnRunner` stores the prompt, wires the turn
(``wiring.turn_setup``), runs the loop (``loop.turn.run_turn``) and what follows it (the title
call, memory), and runs a manual compaction (``%agent compact``).

The runner owns what a running turn sets: whether one runs (``busy``) and its permission gate
(a subagent started during the turn inherits its rules). It changes the session's history
through the ``History``'s methods and its ``info`` through ``update_info``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..context.prompt import Prompt
from ..context.prompt import parts as attachment_parts
from ..core import codeaction, ids
from ..core import permission as P
from ..core.errors import UsageError
from ..core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    TextPart,
    UserMessage,
    WithParts,
    now_ms,
)
from ..core.redact import clean, clean_value
from ..loop.compaction.events import CompactionEvent
from ..loop.step import Observer
from ..loop.turn import ContextLimitError, TurnSetup, run_turn
from ..providers.presets import Resolved
from ..providers.registry import ProviderCache, settings_model_info
from ..providers.replay import ReplayProvider
from . import wiring
from .record import RecordedTurn
from .replay import TurnReplay
from .side_calls import SideCalls
from .subagents import turn_children_cost


@dataclass(frozen=True)
class TurnResult:
    """The outcome of one ``prompt``: the final text and what the turn added."""

    session_id: str
    text: str
    messages: tuple[WithParts, ...]
    cost: float
    steps: int

    def __str__(self) -> str:
        return self.text


class TurnHost(wiring.SessionView, Protocol):
    """What the runner uses of its session (``AgentSession``) beside what the wiring reads."""

    providers: ProviderCache
    calls: SideCalls

    def prepare(self) -> None: ...

    def touch(self) -> None: ...

    def last_model(self) -> str: ...

    def update_info(
        self,
        edit: Callable[[Session], dict] | None = None,
        /,
        *,
        flush: bool = True,
        sync: bool = True,
        **changes: object,
    ) -> Session: ...


class TurnRunner:
    """Runs one session's turns and manual compactions, one at a time."""

    def __init__(self, session: TurnHost):
        self._session = session
        self.busy = False  # a turn (or a compaction) runs now
        self.gate: P.Gate | None = None  # the permission gate of the current (or last) turn

    def prompt(
        self,
        text: str,
        *,
        model: str | None = None,
        observer: Observer | None = None,
        permission: Sequence[P.Rule | Mapping] = (),
        context: Prompt | None = None,
        replay: TurnReplay | None = None,
    ) -> TurnResult:
        """See ``AgentSession.prompt``."""
        session = self._session
        session.prepare()
        if replay is not None:
            chosen = self.replay_model(replay.turn)
        else:
            chosen = wiring.TurnModel.of(
                session.provider(model or session.settings.model or session.last_model())
            )
        while session.providers.fresh:  # which local model runs, and why: one line, once
            print(session.providers.fresh.pop(0), flush=True)
        user = self._store_prompt(text, chosen, context, replay)
        setup = self.setup(chosen, permission, text)
        if replay is not None:
            setup = replay.apply(setup)
        self.busy = True
        try:
            added = run_turn(setup, session.history, observer)
        finally:
            self.busy = False
            if replay is None:
                session.calls.start_title(str(user.model))
            elif session.info.has_default_title and not replay.turn.session.has_default_title:
                session.update_info(title=replay.turn.session.title)  # the recorded title
        session.touch()
        session.store.flush(sync=True)
        if replay is not None:
            replay.check()
        else:
            wiring.memory_after_turn(session)
        return TurnResult(
            session_id=session.info.id,
            text=final_text(added),
            messages=tuple(added),
            cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage))
            + turn_children_cost(added),
            steps=sum(1 for m in added if isinstance(m.info, AssistantMessage)),
        )

    def _store_prompt(
        self,
        text: str,
        chosen: wiring.TurnModel,
        context: Prompt | None,
        replay: TurnReplay | None,
    ) -> UserMessage:
        """The user message and its parts, stored (flushed) and added to the history."""
        session = self._session
        user = UserMessage(
            id=ids.ascending("message"),
            session_id=session.info.id,
            time_created=now_ms(),
            model=ModelRef(chosen.limits.provider_id, chosen.limits.model_id),
        )
        text = context.text if context is not None else text
        meta = clean_value(context.metadata()) if context is not None else None
        if replay is not None:  # where the answer came from, kept with the prompt
            meta = {**(meta or {}), "replay": replay.turn.provenance()}
            # the recorded words: the cell's differ at most by the runner's cell numbers
            text = replay.turn.prompt
        part = TextPart(
            ids.ascending("part"),
            session.info.id,
            user.id,
            text=clean(text, refresh=True),
            metadata=meta,
        )
        parts = (
            part,
            *attachment_parts(context, session.info.id, user.id),
            *(wiring.memory_parts(session, user.id, part.text) if replay is None else ()),
        )  # memory.inject: a new session's first message (a replay adds nothing unrecorded)
        session.store.put(user, *parts)
        session.touch()
        session.history.add(WithParts(user, parts))  # before the flush: if the disk is full,
        session.store.flush(sync=True)  # the prompt stays in memory as in the store's buffer
        return user

    def setup(
        self,
        model: wiring.TurnModel,
        permission: Sequence[P.Rule | Mapping] = (),
        request: str = "",
    ) -> TurnSetup:
        """The next turn's setup; its gate is kept (a subagent started now inherits its rules)."""
        setup, self.gate = wiring.turn_setup(self._session, model, permission, request)
        return setup

    def replay_model(self, turn: RecordedTurn) -> wiring.TurnModel:
        """The model of a replayed turn: the record's steps, the recorded model's limits and
        prices (no server is resolved or started)."""
        step = next((s.info for s in turn.steps if isinstance(s.info, AssistantMessage)), None)
        ref = (
            ModelRef(step.provider_id, step.model_id) if step is not None else turn.user.info.model
        )
        info = settings_model_info(str(ref), self._session.settings)
        preset = Resolved("replay", ref.model_id, None, None, f"replay of {turn.where}")
        return wiring.TurnModel(ReplayProvider(turn.steps, turn.where), info, preset)

    def compact(
        self,
        instructions: str | None = None,
        *,
        model: str | None = None,
        observer: Observer | None = None,
    ) -> CompactionEvent:
        """See ``AgentSession.compact``."""
        session = self._session
        session.prepare()
        if not any(isinstance(m.info, AssistantMessage) for m in session.history):
            raise UsageError("nothing to compact yet — run a %%agent turn first")
        settings = session.settings
        main = wiring.TurnModel.of(
            session.provider(model or settings.model or session.last_model())
        )
        names = wiring.tool_names(settings)
        preset = main.preset
        code = codeaction.enabled(settings.code_actions, preset.provider_id, preset.model_id)
        # what the next turn sends (code mode's prompt, the rules files): what must fit with it
        names = [codeaction.TOOL] if code else names
        prompt_text = wiring.turn_prompt(session, code, names, wiring.reading_gate(session))
        compactor = wiring.compactor(session, main, prompt_text, None, tool_names=names)
        self.busy = True
        try:
            compactor.prune(session.history, cause="manual")
            result = compactor.compact(
                session.history,
                cause="manual",
                auto=False,
                instructions=instructions,
                observer=observer,
            )
        finally:
            self.busy = False
        session.touch()
        session.store.flush(sync=True)
        if not result.ok:
            raise ContextLimitError(result.message)
        return result.event


def final_text(added: Sequence[WithParts]) -> str:
    """The answer's text: the newest assistant message's own text (not a summary's)."""
    for item in reversed(added):
        if not isinstance(item.info, AssistantMessage) or item.info.summary:
            continue  # compaction requests, summaries and continue messages are not the answer
        texts = [
            p.text for p in item.parts if isinstance(p, TextPart) and p.text and not p.synthetic
        ]
        if texts:
            return "\n\n".join(texts)
    return ""
