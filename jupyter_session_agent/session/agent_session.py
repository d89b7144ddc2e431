"""The session API: what the magics call, and what a user can call from Python.

``AgentSession.create(...)`` / ``AgentSession.open(id, ...)`` give a session;
``session.prompt(text)`` runs one turn and returns a :class:`TurnResult`.
Everything is stored as it happens; this object only caches the history of
its own session so that a turn does not re-read the store.

The session owns its state: other modules read it and call its methods, never assign its
attributes. :meth:`AgentSession.update_info` is the only writer of ``info`` (under one lock,
shared with the background title call; the new revision is stored at once); lifecycle
operations (``lifecycle.py``) return the values the methods here store. What a turn is
run with is built in ``wiring.py``; subagents in ``subagents.py``.

One module: it is the one class users hold, and its methods are short entry points that
guard and store the session's own state and delegate the work to the modules beside it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import __version__ as VERSION
from ..core import ids
from ..core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    TextPart,
    UserMessage,
    WithParts,
    default_title,
    now_ms,
    replace,
)
from ..core.settings import Settings
from ..loop.step import Observer
from ..loop.turn import TurnSetup, run_turn
from ..providers.base import ModelCall
from ..providers.registry import ProviderCache
from . import wiring
from .subagents import Inheritance, turn_children_cost


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


class AgentSession:
    """One conversation: its stored history plus the provider and tools to continue it."""

    def __init__(
        self,
        info: Session,
        history: list[WithParts],
        settings: Settings,
        store: Any,
        shell: Any = None,
        *,
        approver: Any = None,
        inherit: Inheritance | None = None,
        foreign: Any = None,
    ):
        self.info = info
        self.history = history
        self.settings = settings
        self.store = store
        self.shell = shell
        # (provider, ModelInfo, preset) per model id; a subagent shares its parent's
        self.providers = inherit.providers if inherit is not None else ProviderCache()
        # approval.Approver asked when a tool call's permission is "ask"; None: the kernel's
        # stdin. Users and tests may set it.
        self.approver: Any = inherit.approver if inherit is not None else approver
        self._inherit = inherit
        # the permission gate of the current (or last) turn: a subagent started now inherits it
        self.gate: Any = None
        # lifecycle (lifecycle.py, title.py): the background title call, the lock that orders
        # updates of `info` between it and this thread, the turn-in-progress flag, snapshots
        self._info_lock = threading.RLock()
        self._title_thread: threading.Thread | None = None
        self.title_error: str | None = None
        self._busy = False
        self._snapshot: Any = None
        self._has_children: bool | None = None
        self._compaction_state: dict = {}  # kept by the compactor between turns
        self._calls_cost = 0.0  # what this object's recorded call_model calls cost
        # what other kernels had written to this session when `history` was read (store.foreign);
        # None: not known, the next turn reads the history again
        self._foreign: Any = foreign
        self._tally: Any = None  # loop.budget_report.BudgetTally, made by the first budget_report

    # -- construction ---------------------------------------------------------

    @classmethod
    def create(
        cls,
        settings: Settings | None = None,
        *,
        store: Any = None,
        shell: Any = None,
        directory: str | os.PathLike | None = None,
        title: str | None = None,
        parent_id: str | None = None,
        forked_from: dict | None = None,
        messages: Sequence[WithParts] = (),
        approver: Any = None,
        inherit: Inheritance | None = None,
    ) -> AgentSession:
        """A new session, stored at once. ``messages``: copies of them (new ids) start it
        (a fork; ``forked_from`` says where from); ``inherit``: a subagent's parent's share."""
        settings = settings or Settings()
        store = store or _open_store(settings)
        created = now_ms()
        info = Session(
            id=ids.descending("session"),
            slug=ids.ascending("session").split("_")[1][-8:].lower(),
            directory=str(Path(directory or os.getcwd()).resolve()),
            title=title or default_title(created, child=parent_id is not None),
            version=VERSION,
            time_created=created,
            time_updated=created,
            parent_id=parent_id,
            forked_from=forked_from,
        )
        store.put(info)
        history: list[WithParts] = []
        if messages:
            from .lifecycle import copy_messages

            history = copy_messages(messages, info.id)
            for item in history:
                store.put(item.info, *item.parts)
        store.flush(sync=True)
        return cls(
            info,
            history,
            settings,
            store,
            shell,
            approver=approver,
            inherit=inherit,
            foreign=store.foreign(info.id),
        )

    @classmethod
    def open(
        cls,
        session_id: str,
        settings: Settings | None = None,
        *,
        store: Any = None,
        shell: Any = None,
        approver: Any = None,
        inherit: Inheritance | None = None,
    ) -> AgentSession:
        settings = settings or Settings()
        store = store or _open_store(settings)
        info = store.session(ids.check_ref(session_id, "session"))  # from outside: grammar first
        info = _with_directory(info)
        foreign = store.foreign(info.id)  # before reading: a later write by another kernel moves it
        return cls(
            info,
            store.messages(info.id),
            settings,
            store,
            shell,
            approver=approver,
            inherit=inherit,
            foreign=foreign,
        )

    # -- state: the only writers ---------------------------------------------------

    def update_info(
        self,
        edit: Callable[[Session], dict] | None = None,
        /,
        *,
        flush: bool = True,
        sync: bool = True,
        **changes: Any,
    ) -> Session:
        """Change this session's ``info`` and store the new revision: the only writer of it.

        ``changes`` are fields of ``Session``; ``edit(info)`` returns more of them, computed
        from the current info under the same lock (a read-modify-write the background title
        call cannot interleave with). ``time_updated`` is set; the value kept is what the
        journal keeps (secrets redacted). ``flush=False`` leaves the write in the store's
        buffer (the caller flushes); ``sync=False`` flushes without fsync. Returns the new info.
        """
        from ..core.redact import clean_record

        with self._info_lock:
            if edit is not None:
                changes = {**edit(self.info), **changes}
            stored = clean_record(replace(self.info, **changes, time_updated=now_ms()))
            self.store.put(stored)
            # in memory, the folder as the file system names it (a latin-1 name is stored escaped)
            self.info = _with_directory(stored)
            if flush:
                self.store.flush(sync=sync)
            return self.info

    @contextlib.contextmanager
    def asking_through(self, wrap: Callable[[Any], Any]) -> Iterator[None]:
        """While the block runs, a call that needs an answer is asked through
        ``wrap(approver)`` (the live view shows the pending call around the question)."""
        from .approval import default_approver

        previous = self.approver
        self.approver = wrap(previous or default_approver(self.shell))
        try:
            yield
        finally:
            self.approver = previous

    def use_settings(self, settings: Settings) -> None:
        """Run the next turns with ``settings`` (the magics pass the current ``%config``)."""
        self.settings = settings

    def child_started(self) -> None:
        """A subagent session of this one exists now (``cost`` includes it)."""
        self._has_children = True

    @property
    def busy(self) -> bool:
        """Whether a turn (or a compaction) of this session is running now."""
        return self._busy

    @property
    def permission_bounds(self) -> tuple:
        """Rules every call must also pass: a subagent's parent's (empty for a root session)."""
        return self._inherit.bounds if self._inherit is not None else ()

    # -- turns ------------------------------------------------------------------

    def prompt(
        self,
        text: str,
        *,
        model: str | None = None,
        observer: Observer | None = None,
        permission: Any = (),
        context: Any = None,
        replay: Any = None,
    ) -> TurnResult:
        """Send ``text`` as a user message and run the loop until the model has answered.

        ``permission``: rules for this turn only (``permission.Rule`` or dicts), after the
        defaults, the user's config and the session's rules. ``context``: a
        ``context.prompt.Prompt`` (``%%agent``: interpolated text, its template, attachments);
        its text replaces ``text`` and its attachments become file parts. ``replay``: a
        ``replay.TurnReplay``: the recorded turn answers instead of a model (no server is
        called, no title or memory call is made); a re-run tool that differs from the record
        raises ``ReplayDiffers`` once the turn is stored.
        """
        from ..context.prompt import parts as attachment_parts
        from ..core.redact import clean, clean_value

        self._before_prompt()
        if replay is not None:
            provider, info, spec = self._replay_entry(replay.turn)
        else:
            provider, info, spec = self.provider(model or self.settings.model or self.last_model())
        while self.providers.fresh:  # which local model runs, and why: one line, once
            print(self.providers.fresh.pop(0), flush=True)
        user = UserMessage(
            id=ids.ascending("message"),
            session_id=self.info.id,
            time_created=now_ms(),
            model=ModelRef(info.provider_id, info.model_id),
        )
        text = context.text if context is not None else text
        meta = clean_value(context.metadata()) if context is not None else None
        if replay is not None:  # where the answer came from, kept with the prompt
            meta = {**(meta or {}), "replay": replay.turn.provenance()}
            # the recorded words: the cell's differ at most by the runner's cell numbers
            text = replay.turn.prompt
        part = TextPart(
            ids.ascending("part"),
            self.info.id,
            user.id,
            text=clean(text, refresh=True),
            metadata=meta,
        )
        parts = (
            part,
            *attachment_parts(context, self.info.id, user.id),
            *(wiring.memory_parts(self, user.id, part.text) if replay is None else ()),
        )  # memory.inject: a new session's first message (a replay adds nothing unrecorded)
        self.store.put(user, *parts)
        self._touch()
        self.history.append(WithParts(user, parts))  # before the flush: if the disk is full, the
        self.store.flush(sync=True)  # prompt stays in memory as it stays in the store's buffer
        setup = self._setup(provider, info, spec, permission)
        if replay is not None:
            setup = replay.apply(setup)
        self._busy = True
        try:
            added = run_turn(setup, self.history, observer)
        finally:
            self._busy = False
            if replay is None:
                self._after_turn(str(user.model))
            elif self.info.has_default_title and not replay.turn.session.has_default_title:
                self.update_info(title=replay.turn.session.title)  # the recorded title
        self._touch()
        self.store.flush(sync=True)
        if replay is not None:
            replay.check()
        else:
            wiring.memory_after_turn(self)
        return TurnResult(
            session_id=self.info.id,
            text=_final_text(added),
            messages=tuple(added),
            cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage))
            + turn_children_cost(added),
            steps=sum(1 for m in added if isinstance(m.info, AssistantMessage)),
        )

    def last_answer(self) -> str:
        """The text of the newest answer in this session ("" before the first)."""
        return _final_text(self.history)

    def last_model(self) -> str:
        """The model of the newest user message, or "" (the default) for a new session."""
        for item in reversed(self.history):
            if isinstance(item.info, UserMessage):
                return str(item.info.model)
        return ""

    # -- lifecycle (docs/lifecycle.md; the work is in session/lifecycle.py) --------------

    def fork(self, at: Any = None) -> AgentSession:
        """A new session with copies of the messages before ``at`` (a message id or turn number)."""
        from . import lifecycle

        return lifecycle.fork(self, at)

    def revert(self, message: Any, part_id: str | None = None):
        """Hide ``message``'s turn and later ones, restore the files changed since (not kernel variables)."""
        from . import lifecycle

        result, state, visible = lifecycle.revert(self, message, part_id)
        self.update_info(revert=state)
        self.history[:] = visible
        return result

    def unrevert(self):
        """Undo the pending revert: messages visible again, reverted files back."""
        from . import lifecycle

        result, history = lifecycle.unrevert(self)
        self.update_info(revert=None)
        self.history[:] = history
        return result

    def export(self, format: str = "md", out: Any = None):
        """The session as Markdown, self-contained HTML or a JSON bundle; written to ``out`` if given."""
        from ..exchange import transfer

        self.wait_title()
        return transfer.export(self.store, self.info.id, format, out)

    def snapshot(self):
        """This session's ``snapshot.Snapshot`` (None when ``settings.snapshot["enabled"]`` is false)."""
        from .snapshot import Snapshot

        options = self.settings.snapshot
        if not options.get("enabled", True):
            return None
        if (
            self._snapshot is None
            or self._snapshot.work_tree != Path(self.info.directory).resolve()
        ):
            self._snapshot = Snapshot.for_session(
                self.settings.data_dir, self.info.id, self.info.directory, options
            )
        return self._snapshot

    def wait_title(self, timeout: float | None = None) -> None:
        """Wait for the background title call, if one runs."""
        thread = self._title_thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._title_thread = None

    def _before_prompt(self) -> None:
        from . import lifecycle

        self.wait_title()
        self._catch_up()
        if self.info.revert:  # what a pending revert hides goes now
            _, kept = lifecycle.cleanup(self)
            self.update_info(revert=None)
            self.history[:] = kept

    def _catch_up(self) -> None:
        """Load what another kernel wrote to this session since this one read it, so that
        turns from two kernels never interleave unseen (each model seeing only its half);
        refuse, in one line, while the other kernel's turn is still running."""
        from ..core.errors import UsageError
        from . import lifecycle

        mark = self.store.foreign(self.info.id)
        if mark != self._foreign:
            self.store.flush(sync=False)  # unsaved work (disk full) must not drop out of memory
            history = self.store.messages(self.info.id)
            info = _with_directory(self.store.session(self.info.id))
            with self._info_lock:  # what another kernel stored: read, not a change of ours
                self.info = info
            self.history[:] = lifecycle.visible(history, info.revert)
            self._foreign = mark
        last = self.history[-1] if self.history else None
        if last is not None and _in_progress(last) and self.store.live_writer(last.info.id):
            raise UsageError(
                f"session {self.info.id} has a turn running in another kernel — run "
                "the cell again when it has finished, or start a new session with "
                "%%agent --new"
            )

    def _after_turn(self, model: str) -> None:
        from . import title

        if self._title_thread is None:
            self._title_thread = title.start(self, model, self._title_failed)

    def _title_failed(self, error: str) -> None:
        self.title_error = error

    # -- model calls beside a turn (titles, memory extraction) ---------------------

    def call_model(
        self,
        messages: list[dict],
        *,
        purpose: str,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        local_max_tokens: int | None = None,
        retries: int | None = None,
        max_wait: float | None = None,
        record: bool = True,
        background: bool = False,
    ) -> tuple[str, ModelCall]:
        """One model call (no tools) through this session's provider cache, retried by the
        loop's policy (``core.retry``; by default ``AUX_RETRIES`` times, at most
        ``AUX_MAX_WAIT`` seconds apart: not worth a long wait); (its text, its record).

        ``model``: default the next turn's. ``local_max_tokens``: the output limit when the
        model is the embedded local one. ``record``: store the call's usage and cost (an
        ``llm_call`` row in SQL) for this session; the title call keeps its own on the
        session instead. ``background``: called from another thread, so the provider cache
        is only read (a model not cached yet is resolved for this call alone).
        """
        from ..providers.base import AUX_MAX_WAIT, AUX_RETRIES, call
        from ..providers.openai_provider import ChatRequest

        spec = model if model is not None else (self.settings.model or self.last_model())
        if background:
            from ..providers.registry import default_spec, resolve

            found = self.providers.peek(spec) or resolve(
                spec or default_spec(self.settings), self.settings
            )
        else:
            found = self.provider(spec)
        provider, info, resolved = found
        if resolved.provider_id == "local" and local_max_tokens is not None:
            max_tokens = local_max_tokens
        request = ChatRequest(
            model=resolved.model_id,
            messages=messages,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        text, done = call(
            provider,
            request,
            info,
            session_id=self.info.id,
            purpose=purpose,
            retries=AUX_RETRIES if retries is None else retries,
            max_wait=AUX_MAX_WAIT if max_wait is None else max_wait,
        )
        if record:
            self.store.put(done)
            self.store.flush(sync=False)
            self._calls_cost += done.cost
        return text, done

    def complete(self, messages: list[dict], *, purpose: str, **options: Any) -> str:
        """The text of :meth:`call_model` (its usage and cost stored)."""
        return self.call_model(messages, purpose=purpose, **options)[0]

    # -- permissions ------------------------------------------------------------

    def ruleset(self, cell: Any = ()) -> list:
        """The rules a call is checked against: defaults, user config, session rules, ``cell``.
        A subagent starts from its parent's effective rules instead of the defaults and config
        (its ``Inheritance``, built by ``subagents.subagent_runner``)."""
        from ..core import permission as P

        head = (
            self._inherit.rules()
            if self._inherit is not None
            else P.merge(
                P.defaults(
                    data_dir=os.path.abspath(self.settings.data_dir), sandboxed=self.sandboxed
                ),
                P.from_config(self.settings.permission),
            )
        )
        return P.merge(head, P.from_data(self.info.permission), cell)

    @property
    def sandboxed(self) -> bool:
        """Do this session's bash commands run in the OS sandbox (``tools/sandbox.py``)?"""
        if self.settings.sandbox == "off":
            return False
        from ..tools.sandbox import status

        return status().available

    def allow(self, rules: Any) -> None:
        """Append rules to the session's own (``Session.permission``), stored at once.
        A rule already present moves to the end, so that it wins again."""
        from ..core import permission as P

        added = [P.Rule.of(r).to_dict() for r in rules]

        def appended(info: Session) -> dict:  # under the info lock: the title call writes too
            kept = [r for r in (info.permission or ()) if dict(r) not in added]
            return {"permission": tuple(P.Rule.of(r).to_dict() for r in kept + added) or None}

        self.update_info(appended, sync=False)

    def set_permission(self, rules: Any) -> None:
        """Replace the session's own rules (``None`` or empty: none), stored at once."""
        from ..core import permission as P

        data = tuple(P.Rule.of(r).to_dict() for r in rules or ()) or None
        self.update_info(permission=data, sync=False)

    @property
    def cost(self) -> float:
        """Assistant messages, the title call, the model calls this object made beside its
        turns (memory extraction; SQL's ``session_cost`` has every one stored) and subagent
        sessions (recursively), in USD."""
        own = sum(m.info.cost for m in self.history if isinstance(m.info, AssistantMessage))
        own += float((self.info.title_usage or {}).get("cost") or 0.0) + self._calls_cost
        if self._has_children is None:  # a task part (any state) means a child session may exist
            self._has_children = any(
                p.type == "tool" and p.tool == "task" for m in self.history for p in m.parts
            )
        if self._has_children:
            from ..store.tree import children_cost

            own += children_cost(self.store, self.info.id)
        return own

    def model_info(self, model: str | None = None):
        """Limits and prices of ``model`` (default: the next turn's), without starting a server."""
        from ..providers.registry import model_info_for

        spec = model or self.settings.model or self.last_model()
        ref = ModelRef.parse(spec) if spec else None
        for _, info, _ in self.providers.values():
            if ref is not None and (info.provider_id, info.model_id) == (
                ref.provider_id,
                ref.model_id,
            ):
                return info
        return model_info_for(
            spec,
            model_overrides=self.settings.model_overrides,
            local_context=self.settings.local_context,
        )

    def budget_report(
        self,
        model: str | None = None,
        *,
        history: Sequence[WithParts] | None = None,
        info: Any = None,
    ):
        """The token budget now: a frozen ``report.BudgetReport`` (``%agent budget`` shows it).

        ``history``: this session's history as a view shows it (the live view's, with the running
        turn merged in); ``info``: the ``ModelInfo`` when the caller has it. The session keeps
        one ``BudgetTally``, so a report folds only the messages new since the last one."""
        from ..loop.budget_report import BudgetTally

        if self._tally is None:
            self._tally = BudgetTally()
        return self._tally.report(
            self.history if history is None else history,
            info if info is not None else self.model_info(model),
            self.settings.compaction,
        )

    # -- wiring -----------------------------------------------------------------

    def provider(self, spec: str):
        """``(provider, ModelInfo, preset)`` for a model id ("" = the default), from the
        session's cache (shared with its subagents)."""
        return self.providers.get(spec, self.settings)

    def _replay_entry(self, turn: Any) -> tuple:
        """(provider, ModelInfo, preset) of a replayed turn: the record's steps, the recorded
        model's limits and prices (no server is resolved or started)."""
        from ..providers.presets import Resolved
        from ..providers.registry import settings_model_info
        from ..providers.replay import ReplayProvider

        step = next((s.info for s in turn.steps if isinstance(s.info, AssistantMessage)), None)
        ref = (
            ModelRef(step.provider_id, step.model_id) if step is not None else turn.user.info.model
        )
        info = settings_model_info(str(ref), self.settings)
        spec = Resolved("replay", ref.model_id, None, None, f"replay of {turn.where}")
        return ReplayProvider(turn.steps, turn.where), info, spec

    def _setup(self, provider: Any, info: Any, spec: Any, permission: Any = ()) -> TurnSetup:
        setup, gate = wiring.turn_setup(
            self, provider, info, spec, permission, self._compaction_state
        )
        self.gate = gate  # this turn's permission gate: a subagent started now inherits its rules
        return setup

    # -- compaction (compaction/) -------------------------------------------------

    def compaction_config(self, model: str | None = None):
        """The resolved ``compaction.CompactionConfig`` for ``model`` (default: the next turn's):
        its ``trigger(info)``, ``prune_limits(info)`` and ``tail_budget(info)`` are what the loop uses."""
        from ..core.compaction_config import CompactionConfig

        return CompactionConfig.from_settings(self.settings.compaction, self.model_info(model))

    def compact(
        self,
        instructions: str | None = None,
        *,
        model: str | None = None,
        observer: Observer | None = None,
    ):
        """Compact now (``%agent compact``): prune, then summarise the head and keep the tail.

        Returns the ``compaction.CompactionEvent`` (also stored: ``compaction_event`` in SQL);
        raises ``ContextLimitError`` (one line) when nothing could be compacted.
        """
        from ..core import codeaction
        from ..core.errors import UsageError
        from ..loop.turn import ContextLimitError

        self._before_prompt()
        if not any(isinstance(m.info, AssistantMessage) for m in self.history):
            raise UsageError("nothing to compact yet — run a %%agent turn first")
        main = self.provider(model or self.settings.model or self.last_model())
        names = wiring.tool_names(self.settings)
        spec = main[2]
        code = codeaction.enabled(self.settings.code_actions, spec.provider_id, spec.model_id)
        # what the next turn sends (code mode's prompt, the rules files): what must fit with it
        names = [codeaction.TOOL] if code else names
        prompt_text = wiring.turn_prompt(self, code, names, wiring.reading_gate(self))
        compactor = wiring.compactor(
            self, main, prompt_text, None, self._compaction_state, tool_names=names
        )
        self._busy = True
        try:
            compactor.prune(self.history, cause="manual")
            result = compactor.compact(
                self.history,
                cause="manual",
                auto=False,
                instructions=instructions,
                observer=observer,
            )
        finally:
            self._busy = False
        self._touch()
        self.store.flush(sync=True)
        if not result.ok:
            raise ContextLimitError(result.message)
        return result.event

    def compaction_events(self):
        """This session's compaction events, oldest first (a pandas DataFrame)."""
        return self.store.sql(
            f"SELECT * FROM compaction_event WHERE session_id = '{self.info.id}' ORDER BY id"
        )

    def _touch(self) -> None:
        self.update_info(flush=False)  # the caller flushes


def _with_directory(info: Session) -> Session:
    """``info`` with its directory as the file system names it: a latin-1 folder name is stored
    escaped (``caf\\xe9``, core/text.py); opened again, the session works in that folder."""
    from ..core.text import file_name

    directory = file_name(info.directory or "")
    if directory == info.directory or os.path.isdir(info.directory) or not os.path.isdir(directory):
        return info
    return replace(info, directory=directory)


def _open_store(settings: Settings):
    from ..store import Store

    return Store(settings.data_dir)


def _in_progress(item: WithParts) -> bool:
    """A turn not finished: its prompt not answered yet, or its reply still being written."""
    return isinstance(item.info, UserMessage) or not item.info.time_completed


def _final_text(added: list[WithParts]) -> str:
    for item in reversed(added):
        if not isinstance(item.info, AssistantMessage) or item.info.summary:
            continue  # compaction requests, summaries and continue messages are not the answer
        texts = [
            p.text for p in item.parts if isinstance(p, TextPart) and p.text and not p.synthetic
        ]
        if texts:
            return "\n\n".join(texts)
    return ""
