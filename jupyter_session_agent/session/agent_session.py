"""The session API: what the magics call, and what a user can call from Python.

``AgentSession.create(...)`` / ``AgentSession.open(id, ...)`` give a session;
``session.prompt(text)`` runs one turn and returns a :class:`~.turns.TurnResult`.
Everything is stored as it happens; the session only caches the history of its own session
so that a turn does not re-read the store.

``AgentSession`` is the facade users hold; it composes the objects that own the state:

* its ``info`` (written only by :meth:`AgentSession.update_info`, under one lock shared with
  the background title call) and its ``history`` (a ``loop.history.History``: its methods
  are the only writers);
* the turn runner (``turns.py``: a turn, ``%agent compact``, the running turn's gate);
* the side calls (``side_calls.py``: model calls beside a turn, the title thread);
* the spending (``spending.py``: budget report, model limits, cost).

Lifecycle operations (``lifecycle.py``: fork, revert, unrevert) return the values the
methods here store; what a turn is run with is built in ``wiring.py``; subagents in
``subagents.py``. Other modules read the session and call its methods, never assign its
attributes.

One module: the facade users hold; its methods are the documented public API, each storing
the session's own state (info, history, rules) or delegating to the object that owns the rest.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..context.prompt import Prompt
from ..core import __version__ as VERSION
from ..core import ids
from ..core import permission as P
from ..core.budget import ModelInfo
from ..core.compaction_config import CompactionConfig
from ..core.errors import UsageError
from ..core.messages import (
    Session,
    UserMessage,
    WithParts,
    default_title,
    now_ms,
    replace,
)
from ..core.redact import clean_record
from ..core.settings import Settings
from ..core.text import file_name
from ..loop.budget_report import BudgetReport
from ..loop.compaction.events import CompactionEvent
from ..loop.history import History
from ..loop.step import Observer
from ..providers.base import ModelCall, Provider
from ..providers.presets import Resolved
from ..providers.registry import ProviderCache
from ..store import Store
from ..tools.sandbox import status as sandbox_status
from . import lifecycle
from .approval import Approver, default_approver
from .replay import TurnReplay
from .side_calls import SideCalls
from .snapshot import Snapshot
from .spending import Spending
from .subagents import Inheritance
from .turns import TurnResult, TurnRunner, final_text

__all__ = ["VERSION", "AgentSession", "TurnResult"]


class AgentSession:
    """One conversation: its stored history plus the provider and tools to continue it."""

    def __init__(
        self,
        info: Session,
        history: list[WithParts],
        settings: Settings | Mapping[str, Any],
        store: Store,
        shell: Any = None,
        *,
        approver: Approver | None = None,
        inherit: Inheritance | None = None,
        foreign: Any = None,
    ):
        self.info = info
        self.history = History(history)  # changed only by its methods (loop/history.py)
        self.settings = Settings.of(settings)
        self.store = store
        self.shell = shell
        # (provider, ModelInfo, preset) per model id; a subagent shares its parent's
        self.providers = inherit.providers if inherit is not None else ProviderCache()
        # asked when a tool call's permission is "ask"; None: the kernel's stdin. Users and
        # tests may set it.
        self.approver: Approver | None = inherit.approver if inherit is not None else approver
        self._inherit = inherit
        # orders updates of `info` between the background title call and this thread
        self._info_lock = threading.RLock()
        self._snapshot: Snapshot | None = None
        # what other kernels had written to this session when `history` was read (store.foreign);
        # None: not known, the next turn reads the history again
        self._foreign: Any = foreign
        self.turns = TurnRunner(self)
        self.calls = SideCalls(self)
        self.spending = Spending(self)

    # -- construction ---------------------------------------------------------

    @classmethod
    def create(
        cls,
        settings: Settings | Mapping[str, Any] | None = None,
        *,
        store: Store | None = None,
        shell: Any = None,
        directory: str | os.PathLike | None = None,
        title: str | None = None,
        parent_id: str | None = None,
        forked_from: dict | None = None,
        messages: Sequence[WithParts] = (),
        approver: Approver | None = None,
        inherit: Inheritance | None = None,
    ) -> AgentSession:
        """A new session, stored at once. ``messages``: copies of them (new ids) start it
        (a fork; ``forked_from`` says where from); ``inherit``: a subagent's parent's share."""
        settings = Settings.of(settings)  # a dict is checked here, in one line
        store = store or Store(settings.data_dir)
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
        history = lifecycle.copy_messages(messages, info.id) if messages else []
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
        settings: Settings | Mapping[str, Any] | None = None,
        *,
        store: Store | None = None,
        shell: Any = None,
        approver: Approver | None = None,
        inherit: Inheritance | None = None,
    ) -> AgentSession:
        settings = Settings.of(settings)  # a dict is checked here, in one line
        store = store or Store(settings.data_dir)
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

    def touch(self) -> None:
        """A new ``time_updated`` (the caller flushes)."""
        self.update_info(flush=False)

    @contextlib.contextmanager
    def asking_through(self, wrap: Callable[[Approver], Approver]) -> Iterator[None]:
        """While the block runs, a call that needs an answer is asked through
        ``wrap(approver)`` (the live view shows the pending call around the question)."""
        previous = self.approver
        self.approver = wrap(previous or default_approver(self.shell))
        try:
            yield
        finally:
            self.approver = previous

    def use_settings(self, settings: Settings | Mapping[str, Any]) -> None:
        """Run the next turns with ``settings`` (the magics pass the current ``%config``); a
        dict of fields is checked as ``Settings(**d)`` is (a bad one: one line, nothing kept)."""
        self.settings = Settings.of(settings)

    def child_started(self) -> None:
        """A subagent session of this one exists now (``cost`` includes it)."""
        self.spending.child_started()

    @property
    def busy(self) -> bool:
        """Whether a turn (or a compaction) of this session is running now."""
        return self.turns.busy

    @property
    def gate(self) -> P.Gate | None:
        """The permission gate of the current (or last) turn: a subagent started now inherits it."""
        return self.turns.gate

    @property
    def title_error(self) -> str | None:
        """Why the last background title call failed (None: it did not)."""
        return self.calls.title_error

    @property
    def permission_bounds(self) -> tuple[Callable[[], list[P.Rule]], ...]:
        """Rules every call must also pass: a subagent's parent's (empty for a root session)."""
        return self._inherit.bounds if self._inherit is not None else ()

    # -- turns (turns.py) ---------------------------------------------------------

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
        """Send ``text`` as a user message and run the loop until the model has answered.

        ``permission``: rules for this turn only (``permission.Rule`` or dicts), after the
        defaults, the user's config and the session's rules. ``context``: a
        ``context.prompt.Prompt`` (``%%agent``: interpolated text, its template, attachments);
        its text replaces ``text`` and its attachments become file parts. ``replay``: a
        ``replay.TurnReplay``: the recorded turn answers instead of a model (no server is
        called, no title or memory call is made); a re-run tool that differs from the record
        raises ``ReplayDiffers`` once the turn is stored.
        """
        return self.turns.prompt(
            text,
            model=model,
            observer=observer,
            permission=permission,
            context=context,
            replay=replay,
        )

    def compact(
        self,
        instructions: str | None = None,
        *,
        model: str | None = None,
        observer: Observer | None = None,
    ) -> CompactionEvent:
        """Compact now (``%agent compact``): prune, then summarise the head and keep the tail.

        Returns the ``compaction.CompactionEvent`` (also stored: ``compaction_event`` in SQL);
        raises ``ContextLimitError`` (one line) when nothing could be compacted.
        """
        return self.turns.compact(instructions, model=model, observer=observer)

    def last_answer(self) -> str:
        """The text of the newest answer in this session ("" before the first)."""
        return final_text(self.history)

    def last_model(self) -> str:
        """The model of the newest user message, or "" (the default) for a new session."""
        for item in reversed(self.history):
            if isinstance(item.info, UserMessage):
                return str(item.info.model)
        return ""

    def provider(self, spec: str) -> tuple[Provider, ModelInfo, Resolved]:
        """``(provider, ModelInfo, preset)`` for a model id ("" = the default), from the
        session's cache (shared with its subagents)."""
        return self.providers.get(spec, self.settings)

    def prepare(self) -> None:
        """Before a turn or a compaction: wait for the title call, catch up with what another
        kernel wrote, and drop what a pending revert hides."""
        self.wait_title()
        self._catch_up()
        if self.info.revert:
            _, kept = lifecycle.cleanup(self)
            self.update_info(revert=None)
            self.history.reset(kept)

    def _catch_up(self) -> None:
        """Load what another kernel wrote to this session since this one read it, so that
        turns from two kernels never interleave unseen (each model seeing only its half);
        refuse, in one line, while the other kernel's turn is still running."""
        mark = self.store.foreign(self.info.id)
        if mark != self._foreign:
            self.store.flush(sync=False)  # unsaved work (disk full) must not drop out of memory
            history = self.store.messages(self.info.id)
            info = _with_directory(self.store.session(self.info.id))
            with self._info_lock:  # what another kernel stored: read, not a change of ours
                self.info = info
            self.history.reset(lifecycle.visible(history, info.revert))
            self._foreign = mark
        last = self.history[-1] if self.history else None
        if last is not None and _in_progress(last) and self.store.live_writer(last.info.id):
            raise UsageError(
                f"session {self.info.id} has a turn running in another kernel — run "
                "the cell again when it has finished, or start a new session with "
                "%%agent --new"
            )

    # -- lifecycle (docs/lifecycle.md; the work is in session/lifecycle.py) --------------

    def fork(self, at: Any = None) -> AgentSession:
        """A new session with copies of the messages before ``at`` (a message id or turn number)."""
        return lifecycle.fork(self, at)

    def revert(self, message: Any, part_id: str | None = None) -> Any:
        """Hide ``message``'s turn and later ones, restore the files changed since (not kernel variables)."""
        result, state, visible = lifecycle.revert(self, message, part_id)
        self.update_info(revert=state)
        self.history.reset(visible)
        return result

    def unrevert(self) -> Any:
        """Undo the pending revert: messages visible again, reverted files back."""
        result, history = lifecycle.unrevert(self)
        self.update_info(revert=None)
        self.history.reset(history)
        return result

    def export(self, format: str = "md", out: Any = None) -> Any:
        """The session as Markdown, self-contained HTML or a JSON bundle; written to ``out`` if given."""
        from ..exchange import transfer  # the exporters (HTML, bundles) load when one is used

        self.wait_title()
        return transfer.export(self.store, self.info.id, format, out)

    def snapshot(self) -> Snapshot | None:
        """This session's ``snapshot.Snapshot`` (None when ``settings.snapshot.enabled`` is false)."""
        options = self.settings.snapshot
        if not options.enabled:
            return None
        if (
            self._snapshot is None
            or self._snapshot.work_tree != Path(self.info.directory).resolve()
        ):
            self._snapshot = Snapshot.for_session(
                self.settings.data_dir, self.info.id, self.info.directory, options
            )
        return self._snapshot

    # -- model calls beside a turn (side_calls.py) ---------------------------------

    def wait_title(self, timeout: float | None = None) -> None:
        """Wait for the background title call, if one runs."""
        self.calls.wait_title(timeout)

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
        return self.calls.call_model(
            messages,
            purpose=purpose,
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            local_max_tokens=local_max_tokens,
            retries=retries,
            max_wait=max_wait,
            record=record,
            background=background,
        )

    def complete(self, messages: list[dict], *, purpose: str, **options: Any) -> str:
        """The text of :meth:`call_model` (its usage and cost stored)."""
        return self.call_model(messages, purpose=purpose, **options)[0]

    def side_calls_cost(self) -> float:
        """What the recorded calls beside this session's turns cost (USD)."""
        return self.calls.cost

    # -- permissions ------------------------------------------------------------

    def ruleset(self, cell: Sequence[P.Rule] = ()) -> list[P.Rule]:
        """The rules a call is checked against: defaults, user config, session rules, ``cell``.
        A subagent starts from its parent's effective rules instead of the defaults and config
        (its ``Inheritance``, built by ``subagents.subagent_runner``)."""
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
        return sandbox_status().available

    def allow(self, rules: Any) -> None:
        """Append rules to the session's own (``Session.permission``), stored at once.
        A rule already present moves to the end, so that it wins again."""
        added = [P.Rule.of(r).to_dict() for r in rules]

        def appended(info: Session) -> dict:  # under the info lock: the title call writes too
            kept = [r for r in (info.permission or ()) if dict(r) not in added]
            return {"permission": tuple(P.Rule.of(r).to_dict() for r in kept + added) or None}

        self.update_info(appended, sync=False)

    def set_permission(self, rules: Any) -> None:
        """Replace the session's own rules (``None`` or empty: none), stored at once."""
        data = tuple(P.Rule.of(r).to_dict() for r in rules or ()) or None
        self.update_info(permission=data, sync=False)

    # -- budget and cost (spending.py) ------------------------------------------------

    @property
    def cost(self) -> float:
        """Assistant messages, the title call, the model calls this object made beside its
        turns (memory extraction; SQL's ``session_cost`` has every one stored) and subagent
        sessions (recursively), in USD."""
        return self.spending.cost()

    def model_info(self, model: str | None = None) -> ModelInfo:
        """Limits and prices of ``model`` (default: the next turn's), without starting a server."""
        return self.spending.model_info(model)

    def budget_report(
        self,
        model: str | None = None,
        *,
        history: Sequence[WithParts] | None = None,
        info: ModelInfo | None = None,
    ) -> BudgetReport:
        """The token budget now: a frozen ``report.BudgetReport`` (``%agent budget`` shows it).

        ``history``: this session's history as a view shows it (the live view's, with the running
        turn merged in); ``info``: the ``ModelInfo`` when the caller has it. The session keeps
        one ``BudgetTally``, so a report folds only the messages new since the last one."""
        return self.spending.report(model, history=history, info=info)

    def compaction_config(self, model: str | None = None) -> CompactionConfig:
        """The resolved ``compaction.CompactionConfig`` for ``model`` (default: the next turn's):
        its ``trigger(info)``, ``prune_limits(info)`` and ``tail_budget(info)`` are what the loop uses."""
        return self.spending.compaction_config(model)

    def compaction_events(self) -> Any:
        """This session's compaction events, oldest first (a pandas DataFrame)."""
        return self.store.sql(
            f"SELECT * FROM compaction_event WHERE session_id = '{self.info.id}' ORDER BY id"
        )


def _with_directory(info: Session) -> Session:
    """``info`` with its directory as the file system names it: a latin-1 folder name is stored
    escaped (``caf\\xe9``, core/text.py); opened again, the session works in that folder."""
    directory = file_name(info.directory or "")
    if directory == info.directory or os.path.isdir(info.directory) or not os.path.isdir(directory):
        return info
    return replace(info, directory=directory)


def _in_progress(item: WithParts) -> bool:
    """A turn not finished: its prompt not answered yet, or its reply still being written."""
    return isinstance(item.info, UserMessage) or not item.info.time_completed
