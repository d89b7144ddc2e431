"""Errors a notebook user can see: one line that names the fix.

Every error the package raises on purpose is an :class:`AgentError`. IPython
calls ``_render_traceback_`` and shows its lines instead of a traceback, so a
user sees ``NoModelError: no API key and no local model — pip install …`` and
nothing else; tests still get the full exception object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .redact import clean, clean_value


class AgentError(Exception):
    """Base class; ``str(err)`` is the one line shown to the user, redacted and encodable
    (``redact.clean``: a server's error body quoting the request's key shows no key)."""

    def __str__(self) -> str:
        return clean(super().__str__())

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class UsageError(AgentError):
    """Wrong arguments to a magic or an API call."""


class ConfigError(AgentError):
    """A broken setting (model id, override, data directory)."""


class NoModelError(ConfigError):
    """Neither an API key / base URL nor the local model is available."""


class SessionNotFoundError(AgentError):
    """An unknown session id."""


class ReadOnlyError(AgentError):
    """SQL that would write, drop, attach or otherwise change something."""


class ProviderError(AgentError):
    """The model server failed; ``retryable`` says whether a retry may help.

    ``status`` is the HTTP status when there was one; ``headers`` the response
    headers (lower-case keys) so the retry policy can honour ``retry-after``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> None:
        message = clean(message)  # what is stored and shown holds no key
        body = clean(body) if body is not None else None
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.headers = clean_value(dict(headers or {}))
        self.body = body


class AuthError(ProviderError):
    """The server rejected the credentials (401/403)."""


class ContextOverflowError(ProviderError):
    """The request did not fit the model's context window (never retried)."""


class ToolFailure(AgentError):
    """Raised by a tool to report an error the model should see as ``state.error``;
    ``metadata``: JSON-able details kept on the part's error state (an MCP call's server)."""

    def __init__(self, message: str = "", metadata: Mapping[str, Any] | None = None):
        super().__init__(message)
        self._details = dict(metadata) if metadata is not None else None

    @property
    def metadata(self) -> dict[str, Any] | None:
        return self._details
