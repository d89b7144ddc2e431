"""Which provider, limits and prices a ``provider/model`` id means.

:func:`resolve` builds the provider (a :class:`~.base.Provider`; starting the embedded
server when the id is ``local/...``); :class:`ProviderCache` keeps one per id for a session
and its subagents; :func:`model_info_for` finds the limits without starting anything.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core import budget as _budget
from ..core.settings import Settings

if TYPE_CHECKING:
    from .base import Provider
    from .presets import Resolved

    Entry = tuple[Provider, _budget.ModelInfo, Resolved]


def resolve(spec: str, settings: Settings) -> Entry:
    """(provider, ModelInfo, resolved preset) for a ``provider/model`` id."""
    from . import presets, prices
    from .openai_provider import OpenAIProvider

    resolved = presets.resolve(spec, os.environ)
    base_url = resolved.base_url
    if resolved.provider_id == "local":
        from . import local

        server = local.LocalServer(
            n_ctx=settings.local_context, idle_timeout=settings.local_idle_timeout
        )
        base_url = server.ensure()
        info = prices.apply_overrides(
            local.model_info(settings.local_context), settings.model_overrides
        )
    else:
        info = prices.model_info(resolved.provider_id, resolved.model_id, settings.model_overrides)
    vendor = presets.vendor(resolved.provider_id)
    provider = OpenAIProvider(
        provider_id=resolved.provider_id,
        base_url=base_url,
        api_key=resolved.api_key,
        timeout=settings.request_timeout,
        first_byte_timeout=settings.first_byte_timeout,
        idle_timeout=settings.idle_timeout,
        token_param=vendor.token_param if vendor else None,
    )
    if not info.context and resolved.provider_id != "local":
        # no window in the catalogue: take the one the server reports (vLLM's
        # max_model_len, llama.cpp's n_ctx, LM Studio's context length), if it does
        context = provider.server_context(resolved.model_id)
        if context:
            info = prices.apply_overrides(
                dataclasses.replace(info, context=context, source=_server_source(info)),
                settings.model_overrides,
            )
    return provider, info, resolved


def _server_source(info: _budget.ModelInfo) -> str:
    """A window from the server keeps the price's source: a catalogue price stays one."""
    return info.source if info.source in ("catalogue", "local") else "server"


def local_url(settings: Settings) -> str:
    from . import local

    return (
        local.LocalServer(n_ctx=settings.local_context, idle_timeout=settings.local_idle_timeout)
        .ensure()
        .rstrip("/")
    )


def model_info_for(
    spec: str,
    *,
    model_overrides: Mapping[str, Mapping] | None = None,
    local_context: int = 8192,
    env: Mapping[str, str] | None = None,
) -> _budget.ModelInfo:
    """Limits and prices for a ``provider/model`` id, as a turn would use them.

    Never starts the embedded server (its limits follow from ``local_context``).
    An empty ``spec`` means the default model for ``env``.
    """
    from . import presets, prices

    env = os.environ if env is None else env
    resolved = presets.resolve(spec or presets.default_model(env), env)
    if resolved.provider_id == "local":
        from . import local

        return prices.apply_overrides(local.model_info(local_context), model_overrides)
    return prices.model_info(resolved.provider_id, resolved.model_id, model_overrides)


def settings_model_info(spec: str, settings: Any) -> _budget.ModelInfo:
    """:func:`model_info_for` with a ``Settings``; an unresolvable model gives unknown limits.

    The budget is a view: a model that is no longer configured (an unknown
    provider, a missing key) still shows its tokens and cost, with the window
    reported as unknown instead of an error.
    """
    from ..core.errors import AgentError

    try:
        return model_info_for(
            spec, model_overrides=settings.model_overrides, local_context=settings.local_context
        )
    except AgentError:
        provider, _, model = (spec or "unknown/unknown").partition("/")
        return _budget.ModelInfo(provider, model or provider, source="unknown")


class ProviderCache:
    """One ``(provider, ModelInfo, preset)`` per model id, shared by a session and its
    subagents. ``get`` builds an entry on first use, and again when the embedded server it
    points to was restarted elsewhere; ``peek`` only reads (the title thread uses it)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def get(self, spec: str, settings: Any) -> Entry:
        from . import presets

        spec = spec or presets.default_model(os.environ)
        cached = self._entries.get(spec)
        # The embedded server is shared and may have been stopped or killed since the
        # last turn: ensure() is a 3 ms check when it runs, a restart when it does not.
        if cached is None or (
            cached[2].provider_id == "local"
            and local_url(settings) != getattr(cached[0], "base_url", None)
        ):
            self._entries[spec] = cached = resolve(spec, settings)
        return cached

    def peek(self, spec: str) -> Entry | None:
        return self._entries.get(spec)

    def values(self) -> list[Entry]:
        return list(self._entries.values())
