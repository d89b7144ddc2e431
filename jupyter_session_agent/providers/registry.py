"""Which provider, limits and prices a ``provider/model`` id means.

:func:`resolve` builds the provider (a :class:`~.base.Provider`; starting the embedded
server when the id is ``local/...``); :class:`ProviderCache` keeps one per id for a session
and its subagents; :func:`model_info_for` finds the limits without starting anything.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..core import budget as _budget
from ..core.errors import AgentError
from ..core.settings import Settings
from . import local, presets, prices
from .openai_provider import OpenAIProvider

if TYPE_CHECKING:
    from .base import Provider
    from .presets import Resolved

    Entry = tuple[Provider, _budget.ModelInfo, Resolved]


def resolve(spec: str, settings: Settings) -> Entry:
    """(provider, ModelInfo, resolved preset) for a ``provider/model`` id."""
    resolved = presets.resolve(spec, os.environ)
    base_url = resolved.base_url
    if resolved.provider_id == "local":
        server, choice = local_server(resolved.model_id, settings)
        base_url = server.ensure()
        info = prices.apply_overrides(server.model_info(), settings.model_overrides)
        # The model that runs (a fallback when the asked one was refused) is the one recorded.
        resolved = replace(resolved, model_id=choice.name, notes=choice.line)
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
                replace(info, context=context, source=_server_source(info)),
                settings.model_overrides,
            )
    return provider, info, resolved


def _server_source(info: _budget.ModelInfo) -> str:
    """A window from the server keeps the price's source: a catalogue price stays one."""
    return info.source if info.source in ("catalogue", "local") else "server"


def local_server(name: str, settings: Settings) -> tuple[Any, Any]:
    """(``local.LocalServer``, ``local.Choice``) for ``local/<name>`` under ``settings``
    (``local_model``, ``local_context``, ``local_idle_timeout``); starts nothing."""
    choice = local.choose(name, settings.local_model or None)
    server = local.LocalServer(
        choice.path,
        n_ctx=min(settings.local_context, choice.n_ctx),
        idle_timeout=settings.local_idle_timeout,
        chat_format=choice.chat_format,
        alias=choice.name,
    )
    return server, choice


def local_url(name: str, settings: Settings) -> str:
    return local_server(name, settings)[0].ensure().rstrip("/")


def default_spec(settings: Settings, env: Mapping[str, str] | None = None) -> str:
    """The model a turn without ``model`` runs: OpenAI when a key or base URL is set; else a
    running Ollama or LM Studio on loopback (``local_detect``: its first model); else the
    embedded catalogue default (``presets.default_model``)."""
    env = os.environ if env is None else env
    spec = presets.default_model(env)
    if spec.startswith("local/") and settings.local_detect:
        found = detect_local_server(env)
        if found is not None:
            return found[0]
    return spec


_detected: dict[tuple[str, ...], tuple[float, tuple[str, str] | None]] = {}
DETECT_TTL = 30.0  # seconds a detection result is reused
DETECT_TIMEOUT = 0.5  # seconds one loopback probe may take


def forget_local_servers() -> None:
    """Forget what :func:`detect_local_server` found, so that the next call probes again (a
    server just started or stopped is seen at once, not after ``DETECT_TTL``)."""
    _detected.clear()


def detect_local_server(
    env: Mapping[str, str] | None = None, timeout: float = DETECT_TIMEOUT
) -> tuple[str, str] | None:
    """(``provider/model``, one line) for the first of Ollama and LM Studio that answers
    ``GET /v1/models`` with a model on loopback (their usual ports, or ``OLLAMA_BASE_URL`` /
    ``LMSTUDIO_BASE_URL`` when those point to loopback), else None. Probes are cached for
    ``DETECT_TTL`` seconds; a refused port costs about a millisecond."""
    env = os.environ if env is None else env
    urls = tuple(
        presets.resolve(f"{provider}/probe", env).base_url or ""
        for provider in ("ollama", "lmstudio")
    )
    cached = _detected.get(urls)
    if cached is not None and time.monotonic() - cached[0] < DETECT_TTL:
        return cached[1]
    found = None
    for provider, url in zip(("ollama", "lmstudio"), urls):
        host = (urlsplit(url).hostname or "").lower()
        if host not in ("localhost", "127.0.0.1", "::1"):
            continue
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=timeout) as resp:
                data = json.loads(resp.read().decode("utf-8", "replace") or "{}")
        except (OSError, ValueError):
            continue
        models = [
            str(m.get("id"))
            for m in (data.get("data") or [] if isinstance(data, dict) else [])
            if isinstance(m, dict) and m.get("id") and "embed" not in str(m.get("id")).lower()
        ]
        if models:
            name = {"ollama": "Ollama", "lmstudio": "LM Studio"}[provider]
            more = f" (it also has {', '.join(models[1:4])})" if len(models) > 1 else ""
            found = (
                f"{provider}/{models[0]}",
                f"no API key: using {name}'s {models[0]} at {url}{more} — a running local "
                "server beats the embedded model; %config AgentMagics.local_detect = False "
                "turns this off",
            )
            break
    _detected[urls] = (time.monotonic(), found)
    return found


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
    env = os.environ if env is None else env
    resolved = presets.resolve(spec or presets.default_model(env), env)
    if resolved.provider_id == "local":
        name = resolved.model_id
        model = local.CATALOGUE.get(name)
        n_ctx = min(local_context, model.n_ctx) if model else local_context
        return prices.apply_overrides(local.model_info(n_ctx, name), model_overrides)
    return prices.model_info(resolved.provider_id, resolved.model_id, model_overrides)


def settings_model_info(spec: str, settings: Any) -> _budget.ModelInfo:
    """:func:`model_info_for` with a ``Settings``; an unresolvable model gives unknown limits.

    The budget is a view: a model that is no longer configured (an unknown
    provider, a missing key) still shows its tokens and cost, with the window
    reported as unknown instead of an error.
    """
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
        self.fresh: list[str] = []  # notes of entries built since the session last read them

    def get(self, spec: str, settings: Any) -> Entry:

        spec = spec or default_spec(settings)
        cached = self._entries.get(spec)
        # The embedded server is shared and may have been stopped or killed since the
        # last turn: ensure() is a 3 ms check when it runs, a restart when it does not.
        if cached is None or (
            cached[2].provider_id == "local"
            and local_url(cached[2].model_id, settings) != getattr(cached[0], "base_url", None)
        ):
            self._entries[spec] = cached = resolve(spec, settings)
            found = detect_local_server() if spec.startswith(("ollama/", "lmstudio/")) else None
            if found is not None and found[0] == spec:  # chosen for want of a key: say so
                cached = (cached[0], cached[1], replace(cached[2], notes=found[1]))
                self._entries[spec] = cached
                self.fresh.append(found[1])
            elif cached[2].provider_id == "local":
                self.fresh.append(cached[2].notes)
        return cached

    def peek(self, spec: str) -> Entry | None:
        return self._entries.get(spec)

    def values(self) -> list[Entry]:
        return list(self._entries.values())
