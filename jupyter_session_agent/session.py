"""The session API: what the magics call, and what a user can call from Python.

``AgentSession.create(...)`` / ``AgentSession.open(id, ...)`` give a session;
``session.prompt(text)`` runs one turn and returns a :class:`TurnResult`.
Everything is stored as it happens; this object only caches the history of
its own session so that a turn does not re-read the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ids
from .agent import TurnSetup, run_turn, system_prompt
from .messages import (
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
from .processor import Observer
from .settings import Settings

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

    def __init__(self, info: Session, history: list[WithParts], settings: Settings, store: Any, shell: Any = None):
        self.info = info
        self.history = history
        self.settings = settings
        self.store = store
        self.shell = shell
        self._providers: dict[str, tuple[Any, Any, Any]] = {}

    # -- construction ---------------------------------------------------------

    @classmethod
    def create(cls, settings: Settings | None = None, *, store: Any = None, shell: Any = None,
               directory: str | os.PathLike | None = None, title: str | None = None,
               parent_id: str | None = None) -> "AgentSession":
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
        return cls(info, [], settings, store, shell)

    @classmethod
    def open(cls, session_id: str, settings: Settings | None = None, *, store: Any = None,
             shell: Any = None) -> "AgentSession":
        settings = settings or Settings()
        store = store or _open_store(settings)
        info = store.session(session_id)
        return cls(info, store.messages(info.id), settings, store, shell)

    # -- turns ------------------------------------------------------------------

    def prompt(self, text: str, *, model: str | None = None, observer: Observer | None = None) -> TurnResult:
        """Send ``text`` as a user message and run the loop until the model has answered."""
        provider, info, spec = self._provider(model or self.settings.model or self.last_model())
        user = UserMessage(
            id=ids.ascending("message"), session_id=self.info.id, time_created=now_ms(),
            model=ModelRef(info.provider_id, info.model_id),
        )
        part = TextPart(ids.ascending("part"), self.info.id, user.id, text=text)
        self.store.put(user, part)
        self._touch()
        self.store.flush(sync=True)
        self.history.append(WithParts(user, (part,)))
        setup = self._setup(provider, info, spec)
        added = run_turn(setup, self.history, observer)
        self._touch()
        self.store.flush(sync=True)
        return TurnResult(
            session_id=self.info.id,
            text=_final_text(added),
            messages=tuple(added),
            cost=sum(m.info.cost for m in added),
            steps=len(added),
        )

    def last_model(self) -> str:
        """The model of the newest user message, or "" (the default) for a new session."""
        for item in reversed(self.history):
            if isinstance(item.info, UserMessage):
                return str(item.info.model)
        return ""

    @property
    def cost(self) -> float:
        return sum(m.info.cost for m in self.history if isinstance(m.info, AssistantMessage))

    # -- wiring -----------------------------------------------------------------

    def _provider(self, spec: str):
        from . import presets

        spec = spec or presets.default_model(os.environ)
        cached = self._providers.get(spec)
        # The embedded server is shared and may have been stopped or killed since the
        # last turn: ensure() is a 3 ms check when it runs, a restart when it does not.
        if cached is None or (cached[2].provider_id == "local" and _local_url(self.settings) != cached[0].base_url):
            self._providers[spec] = cached = _build_provider(spec, self.settings)
        return cached

    def _setup(self, provider: Any, info: Any, spec: Any) -> TurnSetup:
        from .provider import ChatRequest
        from .tools import builtin_tools, run_tool

        tools = builtin_tools()
        if self.settings.tools is not None:
            tools = {k: v for k, v in tools.items() if k in self.settings.tools}
        tool_list = list(tools.values())
        schemas = [_schema(t) for t in tool_list]
        directory = Path(self.info.directory)
        max_tokens = info.max_output_tokens if info.output else None

        def request_factory(chat: list[dict], last_step: bool) -> ChatRequest:
            return ChatRequest(model=spec.model_id, messages=chat, tools=schemas,
                               max_tokens=max_tokens, temperature=self.settings.temperature)

        def call_tool(tool: Any, args: dict, call: Any):
            from .tools import ToolContext

            ctx = ToolContext(session_id=self.info.id, message_id=self.history[-1].info.id,
                              call_id=call.call_id, directory=directory,
                              data_dir=self.settings.data_dir, shell=self.shell)
            return run_tool(tool, args, ctx)

        compaction = self.settings.compaction
        return TurnSetup(
            store=self.store, provider=provider, request_factory=request_factory, model=info,
            tools=tools, run_tool=call_tool,
            system_prompt=self.settings.system_prompt or system_prompt(str(directory), list(tools)),
            max_steps=self.settings.max_steps, max_retries=self.settings.max_retries,
            auto_compact=bool(compaction.get("auto", True)), reserved=compaction.get("reserved"),
            cwd=str(directory),
        )

    def _touch(self) -> None:
        self.info = replace(self.info, time_updated=now_ms())
        self.store.put(self.info)


def _schema(tool: Any) -> dict:
    from .tools import openai_schema

    return openai_schema(tool)


def _build_provider(spec: str, settings: Settings):
    """(provider, ModelInfo, resolved preset) for a ``provider/model`` id."""
    from . import catalog, presets
    from .provider import OpenAIProvider

    resolved = presets.resolve(spec, os.environ)
    base_url = resolved.base_url
    if resolved.provider_id == "local":
        from . import local

        server = local.LocalServer(settings.data_dir, n_ctx=settings.local_context)
        base_url = server.ensure()
        info = catalog.apply_overrides(local.model_info(settings.local_context), settings.model_overrides)
    else:
        info = catalog.model_info(resolved.provider_id, resolved.model_id, settings.model_overrides)
    provider = OpenAIProvider(provider_id=resolved.provider_id, base_url=base_url,
                              api_key=resolved.api_key, timeout=settings.request_timeout)
    return provider, info, resolved


def _local_url(settings: Settings) -> str:
    from . import local

    return local.LocalServer(settings.data_dir, n_ctx=settings.local_context).ensure().rstrip("/")


def _open_store(settings: Settings):
    from .store import Store

    return Store(settings.data_dir)


def _final_text(added: list[WithParts]) -> str:
    for item in reversed(added):
        texts = [p.text for p in item.parts if isinstance(p, TextPart) and p.text and not p.synthetic]
        if texts:
            return "\n\n".join(texts)
    return ""
