"""The session API: what the magics call, and what a user can call from Python.

``AgentSession.create(...)`` / ``AgentSession.open(id, ...)`` give a session;
``session.prompt(text)`` runs one turn and returns a :class:`TurnResult`.
Everything is stored as it happens; this object only caches the history of
its own session so that a turn does not re-read the store.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import ToolFailure
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
from ..loop.turn import TurnSetup, run_turn, system_prompt
from ..providers.registry import ProviderCache

VERSION = "0.1.0"


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
    ):
        self.info = info
        self.history = history
        self.settings = settings
        self.store = store
        self.shell = shell
        self.providers = ProviderCache()  # (provider, ModelInfo, preset) per model id
        # approval.Approver asked when a tool call's permission is "ask"; None: the kernel's stdin
        self.approver: Any = None
        # lifecycle (session/lifecycle.py, session/title.py): the background title call, the lock that orders
        # updates of `info` between it and this thread, the turn-in-progress flag, snapshots
        self._info_lock = threading.RLock()
        self._title_thread: threading.Thread | None = None
        self.title_error: str | None = None
        self._busy = False
        self._snapshot: Any = None
        self._has_children: bool | None = None
        # what other kernels had written to this session when `history` was read (store.foreign);
        # None: not known, the next turn reads the history again
        self._foreign: Any = None

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
    ) -> AgentSession:
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
        )
        store.put(info)
        store.flush(sync=True)
        session = cls(info, [], settings, store, shell)
        session._foreign = store.foreign(info.id)
        return session

    @classmethod
    def open(
        cls,
        session_id: str,
        settings: Settings | None = None,
        *,
        store: Any = None,
        shell: Any = None,
    ) -> AgentSession:
        settings = settings or Settings()
        store = store or _open_store(settings)
        info = store.session(ids.check_ref(session_id, "session"))  # from outside: grammar first
        info = _with_directory(info)
        foreign = store.foreign(info.id)  # before reading: a later write by another kernel moves it
        session = cls(info, store.messages(info.id), settings, store, shell)
        session._foreign = foreign
        return session

    # -- turns ------------------------------------------------------------------

    def prompt(
        self,
        text: str,
        *,
        model: str | None = None,
        observer: Observer | None = None,
        permission: Any = (),
        context: Any = None,
    ) -> TurnResult:
        """Send ``text`` as a user message and run the loop until the model has answered.

        ``permission``: rules for this turn only (``permission.Rule`` or dicts), after the
        defaults, the user's config and the session's rules. ``context``: a
        ``context.prompt.Prompt`` (``%%agent``: interpolated text, its template, attachments);
        its text replaces ``text`` and its attachments become file parts.
        """
        from ..context.prompt import parts as attachment_parts
        from ..core.redact import clean, clean_value

        self._before_prompt()
        provider, info, spec = self.provider(model or self.settings.model or self.last_model())
        user = UserMessage(
            id=ids.ascending("message"),
            session_id=self.info.id,
            time_created=now_ms(),
            model=ModelRef(info.provider_id, info.model_id),
        )
        text = context.text if context is not None else text
        meta = clean_value(context.metadata()) if context is not None else None
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
            *_memory_parts(self, user.id, part.text),
        )  # memory.inject: a new session's first message
        self.store.put(user, *parts)
        self._touch()
        self.history.append(WithParts(user, parts))  # before the flush: if the disk is full, the
        self.store.flush(sync=True)  # prompt stays in memory as it stays in the store's buffer
        setup = self._setup(provider, info, spec, permission)
        self._busy = True
        try:
            added = run_turn(setup, self.history, observer)
        finally:
            self._busy = False
            self._after_turn(str(user.model))
        self._touch()
        self.store.flush(sync=True)
        _memory_after_turn(self)
        return TurnResult(
            session_id=self.info.id,
            text=_final_text(added),
            messages=tuple(added),
            cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage))
            + _turn_children_cost(added),
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

        return lifecycle.revert(self, message, part_id)

    def unrevert(self):
        from . import lifecycle

        return lifecycle.unrevert(self)

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
        if self.info.revert:
            lifecycle.cleanup(self)

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
            with self._info_lock:
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
            self._title_thread = title.start(self, model)

    # -- permissions ------------------------------------------------------------

    def ruleset(self, cell: Any = ()) -> list:
        """The rules a call is checked against: defaults, user config, session rules, ``cell``.
        A subagent starts from its parent's effective rules instead of the defaults and config
        (``inherited_rules``, set by ``lifecycle.subagent_runner``)."""
        from ..core import permission as P

        inherited = getattr(self, "inherited_rules", None)
        head = (
            inherited()
            if inherited is not None
            else P.merge(
                P.defaults(data_dir=os.path.abspath(self.settings.data_dir)),
                P.from_config(self.settings.permission),
            )
        )
        return P.merge(head, P.from_data(self.info.permission), cell)

    def allow(self, rules: Any) -> None:
        """Append rules to the session's own (``Session.permission``), stored at once.
        A rule already present moves to the end, so that it wins again."""
        from ..core import permission as P

        added = [P.Rule.of(r).to_dict() for r in rules]
        with self._info_lock:  # the background title call updates `info` too
            kept = [r for r in (self.info.permission or ()) if dict(r) not in added]
            self.set_permission(kept + added)

    def set_permission(self, rules: Any) -> None:
        """Replace the session's own rules (``None`` or empty: none), stored at once."""
        from ..core import permission as P

        data = tuple(P.Rule.of(r).to_dict() for r in rules or ()) or None
        with self._info_lock:
            self.info = replace(self.info, permission=data, time_updated=now_ms())
            self.store.put(self.info)
            self.store.flush(sync=False)

    @property
    def cost(self) -> float:
        """Assistant messages, the title call and subagent sessions (recursively), in USD."""
        own = sum(m.info.cost for m in self.history if isinstance(m.info, AssistantMessage))
        own += float((self.info.title_usage or {}).get("cost") or 0.0)
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

    def budget_report(self, model: str | None = None):
        """The token budget now: a frozen ``report.BudgetReport`` (``%agent budget`` shows it)."""
        from ..loop.budget_report import budget_report

        return budget_report(self.history, self.model_info(model), self.settings.compaction)

    # -- wiring -----------------------------------------------------------------

    def provider(self, spec: str):
        """``(provider, ModelInfo, preset)`` for a model id ("" = the default), from the
        session's cache (shared with its subagents)."""
        return self.providers.get(spec, self.settings)

    def _setup(self, provider: Any, info: Any, spec: Any, permission: Any = ()) -> TurnSetup:
        from ..core import permission as P
        from ..core.redact import redact, redact_value
        from ..providers.openai_provider import ChatRequest
        from ..tools import builtin_tools, run_tool
        from .approval import default_approver

        tools = builtin_tools()
        if self.settings.subagents:
            from ..tools.task import task_tool
            from .lifecycle import subagent_runner

            tools["task"] = task_tool(subagent_runner(self))
        if _memory_option(self.settings, "tool"):  # cross-session memory (docs/memory.md)
            from ..memory.tool import RecallTool

            tools["recall"] = RecallTool(self.store, self.settings, self.info.directory)
        if self.settings.mcp or self.settings.mcp_opencode:  # MCP servers' tools (docs/mcp.md)
            from ..tools.mcp_client import mcp_tools

            tools.update(mcp_tools(self.settings, self.info.directory, taken=set(tools)))
        if self.settings.tools is not None:
            tools = {k: v for k, v in tools.items() if k in self.settings.tools}
        cell_rules = tuple(P.Rule.of(r) for r in permission or ())
        # A subagent stays within its parent's rules (lifecycle.subagent_runner sets the bounds).
        bounds = tuple(getattr(self, "permission_bounds", ()))
        # A tool whose last rule is a "*" deny is not offered to the model at all.
        hidden = P.disabled(tools, self.ruleset(cell_rules), *(bound() for bound in bounds))
        tools = {k: v for k, v in tools.items() if k not in hidden}
        from ..core import codeaction
        from ..tools import kernel

        summary_provider = provider
        code = codeaction.enabled(self.settings.code_actions, spec.provider_id, spec.model_id)
        if code:  # the model writes ```python blocks (core/codeaction.py): python is its only tool
            tools = {k: v for k, v in tools.items() if k == codeaction.TOOL}
            provider = codeaction.CodeActionProvider(
                provider, server_side=spec.provider_id == "local"
            )
        gate = P.Gate(
            session_id=self.info.id,
            directory=self.info.directory,
            ruleset=lambda: self.ruleset(cell_rules),
            approver=self.approver or default_approver(self.shell),
            on_always=self.allow,
            bounds=bounds,
        )
        self.gate = gate  # this turn's permission gate: a subagent started now inherits its rules
        tool_list = list(tools.values())
        schemas = [_schema(t) for t in tool_list]
        directory = Path(self.info.directory)
        max_tokens = info.max_output_tokens if info.output else None

        def request_factory(chat: list[dict], last_step: bool) -> ChatRequest:
            return ChatRequest(
                model=spec.model_id,
                messages=chat,
                tools=schemas,
                max_tokens=max_tokens,
                temperature=self.settings.temperature,
            )

        def call_tool(tool: Any, args: dict, call: Any):
            from ..tools import ToolContext

            ctx = ToolContext(
                session_id=self.info.id,
                message_id=self.history[-1].info.id,
                call_id=call.call_id,
                directory=directory,
                data_dir=self.settings.data_dir,
                shell=self.shell,
                may_read=gate.reader(),
            )
            try:
                return run_tool(tool, args, ctx)
            except (
                ToolFailure
            ) as err:  # error texts reach the model and the history: no keys in them
                failure = ToolFailure(redact(str(err), refresh=True))
                if isinstance(getattr(err, "metadata", None), dict):  # e.g. an MCP call's server
                    failure.metadata = redact_value(err.metadata, refresh=True)
                raise failure from None
            except Exception as err:
                raise ToolFailure(redact(f"{type(err).__name__}: {err}", refresh=True)) from None

        compaction = self.settings.compaction
        prompt_text = self.settings.system_prompt or (
            codeaction.system_prompt(
                kernel.variables_line(
                    getattr(self.shell, "user_ns", None) or {},
                    getattr(self.shell, "user_ns_hidden", ()),
                )
            )
            if code
            else system_prompt(str(directory), list(tools))
        )
        return TurnSetup(
            store=self.store,
            provider=provider,
            request_factory=request_factory,
            model=info,
            tools=tools,
            run_tool=call_tool,
            system_prompt=prompt_text,
            max_steps=self.settings.max_steps,
            max_retries=self.settings.max_retries,
            max_retry_wait=self.settings.max_retry_wait,
            auto_compact=bool(compaction.get("auto", True)),
            reserved=compaction.get("reserved"),
            cwd=str(directory),
            permit=gate,
            snapshot=self.snapshot(),
            compactor=self._compactor((summary_provider, info, spec), prompt_text, schemas),
        )

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
        from ..core.errors import UsageError
        from ..loop.turn import ContextLimitError

        self._before_prompt()
        if not any(isinstance(m.info, AssistantMessage) for m in self.history):
            raise UsageError("nothing to compact yet — run a %%agent turn first")
        main = self.provider(model or self.settings.model or self.last_model())
        names = _tool_names(self.settings)
        prompt_text = self.settings.system_prompt or system_prompt(self.info.directory, names)
        compactor = self._compactor(main, prompt_text, None, names)
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

    def _compactor(self, main: Any, prompt_text: str, schemas: Any, tool_names: Any = None):
        """A ``compaction.Compactor`` for one turn; ``main`` is the turn's (provider, ModelInfo, spec)."""
        from ..core import budget as B
        from ..core.compaction_config import CompactionConfig
        from ..loop.compaction import Compactor
        from ..providers.openai_provider import ChatRequest

        info = main[1]
        config = CompactionConfig.from_settings(self.settings.compaction, info)
        summary_provider, summary_info, summary_spec = (
            self.provider(config.model) if config.model else main
        )
        default_max = summary_info.max_output_tokens if summary_info.output else None

        def summary_request(chat: list[dict], max_tokens: int | None) -> ChatRequest:
            return ChatRequest(
                model=summary_spec.model_id,
                messages=chat,
                max_tokens=max_tokens or default_max,
                temperature=self.settings.temperature,
            )

        if schemas is None:
            from ..tools import builtin_tools

            schemas = [
                _schema(t) for name, t in builtin_tools().items() if name in (tool_names or ())
            ]
        state = self.__dict__.setdefault("_compaction_state", {})
        compactor = Compactor(
            config=config,
            store=self.store,
            model=info,
            data_dir=Path(self.settings.data_dir),
            system_prompt=prompt_text,
            tools_tokens=B.estimate(json.dumps(schemas)) if schemas else 0,
            summary_provider=summary_provider,
            summary_model=summary_info,
            summary_request=summary_request,
            max_retries=self.settings.max_retries,
            cwd=self.info.directory,
            state=state,
        )
        return compactor

    def _touch(self) -> None:
        with self._info_lock:
            self.info = replace(self.info, time_updated=now_ms())
            self.store.put(self.info)


def _with_directory(info: Session) -> Session:
    """``info`` with its directory as the file system names it: a latin-1 folder name is stored
    escaped (``caf\\xe9``, core/text.py); opened again, the session works in that folder."""
    from ..core.text import file_name

    directory = file_name(info.directory or "")
    if directory == info.directory or os.path.isdir(info.directory) or not os.path.isdir(directory):
        return info
    return replace(info, directory=directory)


def _schema(tool: Any) -> dict:
    from ..tools import openai_schema

    return openai_schema(tool)


def _open_store(settings: Settings):
    from ..store import Store

    return Store(settings.data_dir)


def _turn_children_cost(added: list[WithParts]) -> float:
    from .lifecycle import turn_children_cost

    return turn_children_cost(added)


def _tool_names(settings: Settings) -> list[str]:
    from ..tools import BUILTIN_NAMES

    return [n for n in BUILTIN_NAMES if settings.tools is None or n in settings.tools]


def _memory_option(settings: Settings, name: str) -> bool:
    """Whether cross-session memory's ``tool``/``inject`` is on (each follows ``enabled`` unless set)."""
    memory = getattr(settings, "memory", None) or {}
    value = memory.get(name)
    return bool(memory.get("enabled") if value is None else value)


def _memory_parts(session: AgentSession, message_id: str, prompt: str) -> tuple:
    """The memory injected into a new session's first user message (a synthetic text part), if any."""
    if session.history or not _memory_option(session.settings, "inject"):
        return ()
    from ..memory import injection_part

    part = injection_part(
        session.store,
        session.settings,
        prompt,
        directory=session.info.directory,
        session_id=session.info.id,
        message_id=message_id,
    )
    return (part,) if part is not None else ()


def _memory_after_turn(session: AgentSession) -> None:
    """Remember the session (``auto_remember``); embed the turn's passages (memory on)."""
    if (getattr(session.settings, "memory", None) or {}).get("auto_remember") or any(
        _memory_option(session.settings, name) for name in ("tool", "inject")
    ):
        from ..memory import after_turn

        after_turn(session)


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
