"""A session's model calls beside its turns: one call (titles, memory extraction) through the
session's provider cache, what those calls cost, and the background title call.

:class:`SideCalls` owns that state (the title thread, its error, the calls' cost); the
session composes it and its methods are the only writers of it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from ..core.budget import ModelInfo
from ..core.messages import Session
from ..core.settings import Settings
from ..loop.history import History
from ..providers.base import AUX_MAX_WAIT, AUX_RETRIES, ModelCall, Provider, chat_call
from ..providers.presets import Resolved
from ..providers.registry import ProviderCache, default_spec, resolve
from . import title

if TYPE_CHECKING:  # the store's modules load when a session opens one
    from ..store.store import Store


class CallsHost(Protocol):
    """What the side calls read of their session (``AgentSession``)."""

    settings: Settings
    store: Store
    info: Session
    history: History
    providers: ProviderCache

    def provider(self, spec: str) -> tuple[Provider, ModelInfo, Resolved]: ...

    def last_model(self) -> str: ...


class SideCalls:
    """The model calls of one session beside its turns, and the background title call."""

    def __init__(self, session: CallsHost):
        self._session = session
        self._title_thread: threading.Thread | None = None
        self.title_error: str | None = None  # why the last title call failed (for debugging)
        self.cost = 0.0  # what the recorded calls made here cost (USD)

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
        """See ``AgentSession.call_model``."""
        session = self._session
        settings = session.settings
        spec = model if model is not None else (settings.model or session.last_model())
        if background:  # another thread: the cache is only read
            found = session.providers.peek(spec) or resolve(
                spec or default_spec(settings), settings
            )
        else:
            found = session.provider(spec)
        provider, info, resolved = found
        if resolved.provider_id == "local" and local_max_tokens is not None:
            max_tokens = local_max_tokens
        text, done = chat_call(
            provider,
            info,
            resolved.model_id,
            messages,
            session_id=session.info.id,
            purpose=purpose,
            temperature=temperature,
            max_tokens=max_tokens,
            retries=AUX_RETRIES if retries is None else retries,
            max_wait=AUX_MAX_WAIT if max_wait is None else max_wait,
            store=session.store if record else None,
        )
        if record:
            self.cost += done.cost
        return text, done

    def start_title(self, model: str) -> None:
        """Start the title call after a turn (``title.py`` decides whether one is due)."""
        if self._title_thread is None:
            self._title_thread = title.start(self._session, model, self._title_failed)

    def wait_title(self, timeout: float | None = None) -> None:
        """Wait for the background title call, if one runs."""
        thread = self._title_thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._title_thread = None

    def _title_failed(self, error: str) -> None:
        self.title_error = error
