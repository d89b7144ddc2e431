"""Provider presets: a model spec like ``ollama/llama3.2`` → base URL, key, model name.

Every preset talks the OpenAI chat-completions protocol, so one client class
(``provider.OpenAIProvider``) serves them all; a preset only says *where* and
*with which key*. Pure: no I/O, no imports beyond the standard library.

========================  =============================  ===========================
spec                      base URL                       API key
========================  =============================  ===========================
``openai/<model>``        ``OPENAI_BASE_URL`` or          ``OPENAI_API_KEY`` (needed
                          ``https://api.openai.com/v1``   for api.openai.com)
``ollama/<model>``        ``OLLAMA_BASE_URL`` or          ``"ollama"`` (ignored)
                          ``http://localhost:11434/v1``
``vllm/<model>``          ``VLLM_BASE_URL`` or            ``VLLM_API_KEY`` or
                          ``http://localhost:8000/v1``    ``"EMPTY"``
``lmstudio/<model>``      ``LMSTUDIO_BASE_URL`` or        ``"lm-studio"`` (ignored)
                          ``http://localhost:1234/v1``
``openrouter/<v>/<m>``    ``https://openrouter.ai/api/v1``  ``OPENROUTER_API_KEY``
``local/<name>``          ``None`` — ``local.LocalServer``  ``"local"`` (ignored)
                          fills it in at run time
``<model>`` (bare)        as ``openai/<model>``
``<x>/<y>`` (unknown x)   only with ``OPENAI_BASE_URL``: the whole spec is the
                          server's model name (``meta-llama/Llama-3.1-8B``)
========================  =============================  ===========================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..core.errors import ConfigError

OPENAI_URL = "https://api.openai.com/v1"
OLLAMA_URL = "http://localhost:11434/v1"
VLLM_URL = "http://localhost:8000/v1"
LMSTUDIO_URL = "http://localhost:1234/v1"
OPENROUTER_URL = "https://openrouter.ai/api/v1"

DEFAULT_REMOTE_MODEL = "openai/gpt-4o-mini"
DEFAULT_LOCAL_MODEL = "local/qwen2.5-coder-0.5b"  # local.DEFAULT_LOCAL

#: provider id → (default base URL, env var overriding the URL)
_URLS: dict[str, tuple[str | None, str | None]] = {
    "openai": (OPENAI_URL, "OPENAI_BASE_URL"),
    "ollama": (OLLAMA_URL, "OLLAMA_BASE_URL"),
    "vllm": (VLLM_URL, "VLLM_BASE_URL"),
    "lmstudio": (LMSTUDIO_URL, "LMSTUDIO_BASE_URL"),
    "openrouter": (OPENROUTER_URL, "OPENROUTER_BASE_URL"),
    "local": (None, None),
}

PROVIDERS: tuple[str, ...] = tuple(_URLS)

#: default local ports of the self-hosted servers, for ``detect``
_PORTS = {11434: "ollama", 8000: "vllm", 1234: "lmstudio"}
_HOSTS = {"api.openai.com": "openai", "openrouter.ai": "openrouter"}


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where and how to reach one model.

    ``model_id`` is the name the server knows (no provider prefix);
    ``base_url`` is ``None`` only for ``local`` (the embedded server's URL is
    known once it runs); ``notes`` is one human line about the choice.
    """

    provider_id: str
    model_id: str
    base_url: str | None
    api_key: str | None
    notes: str = ""

    @property
    def spec(self) -> str:
        """The canonical ``provider/model`` string."""
        return f"{self.provider_id}/{self.model_id}"


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _url(env: Mapping[str, str], provider: str) -> str | None:
    default, var = _URLS[provider]
    return (_get(env, var) if var else None) or default


def _need(env: Mapping[str, str], var: str, spec: str) -> str:
    key = _get(env, var)
    if key is None:
        raise ConfigError(
            f"{var} is not set — export it to use {spec!r}, or pick another model (e.g. {DEFAULT_LOCAL_MODEL!r})"
        )
    return key


def resolve(model_spec: str, env: Mapping[str, str]) -> Resolved:
    """The preset for ``model_spec`` given the environment ``env`` (e.g. ``os.environ``)."""
    spec = (model_spec or "").strip()
    if not spec:
        raise ConfigError(
            "empty model name — use e.g. 'openai/gpt-4o-mini', 'ollama/llama3.2' or 'local/smollm2'"
        )
    provider, sep, model = spec.partition("/")
    provider_key = provider.lower()
    if not sep:
        return _openai(spec, env, spec, bare=True)
    if provider_key not in _URLS:
        if _get(env, "OPENAI_BASE_URL"):
            # A server-side model name with a slash (vLLM / HF style): send it whole.
            return _openai(spec, env, spec, bare=True)
        raise ConfigError(
            f"unknown provider {provider!r} in {spec!r} — use one of {', '.join(PROVIDERS)}, "
            "or set OPENAI_BASE_URL to send it as a model name to an OpenAI-compatible server"
        )
    model = model.strip()
    if not model:
        raise ConfigError(
            f"no model name after {provider!r} in {spec!r} — e.g. '{provider_key}/<model>'"
        )

    if provider_key == "openai":
        return _openai(model, env, spec, bare=False)
    if provider_key == "ollama":
        url = _url(env, "ollama")
        return Resolved(
            "ollama", model, url, "ollama", f"Ollama at {url} (run `ollama pull {model}` first)"
        )
    if provider_key == "vllm":
        url = _url(env, "vllm")
        key = _get(env, "VLLM_API_KEY") or "EMPTY"
        return Resolved("vllm", model, url, key, f"vLLM at {url} (`vllm serve {model}`)")
    if provider_key == "lmstudio":
        url = _url(env, "lmstudio")
        return Resolved(
            "lmstudio",
            model,
            url,
            "lm-studio",
            f"LM Studio at {url} (load {model} and start the server)",
        )
    if provider_key == "openrouter":
        key = _need(env, "OPENROUTER_API_KEY", spec)
        url = _url(env, "openrouter")
        return Resolved("openrouter", model, url, key, f"OpenRouter at {url}")
    # local
    return Resolved(
        "local",
        model,
        None,
        "local",
        "embedded llama.cpp server (started on first use, shared by all kernels)",
    )


def _openai(model: str, env: Mapping[str, str], spec: str, *, bare: bool) -> Resolved:
    base = _get(env, "OPENAI_BASE_URL")
    key = _get(env, "OPENAI_API_KEY")
    if base is None:
        if key is None:
            raise ConfigError(
                f"OPENAI_API_KEY is not set — export it (or OPENAI_BASE_URL for a compatible server) "
                f"to use {spec!r}, or use {DEFAULT_LOCAL_MODEL!r}"
            )
        return Resolved("openai", model, OPENAI_URL, key, "OpenAI API")
    found = detect(base)
    where = f"{found} server" if found and found != "openai" else "server"
    # OpenAI-compatible servers rarely check the key, but the SDK refuses an empty one.
    return Resolved(
        "openai",
        model,
        base,
        key or "EMPTY",
        f"OpenAI-compatible {where} at {base} (OPENAI_BASE_URL)",
    )


def default_model(env: Mapping[str, str]) -> str:
    """``openai/gpt-4o-mini`` when an OpenAI key or base URL is configured, else the embedded
    default (``local/qwen2.5-coder-0.5b``; a running Ollama or LM Studio comes first: see
    ``registry.default_spec``)."""
    if _get(env, "OPENAI_API_KEY") or _get(env, "OPENAI_BASE_URL"):
        return DEFAULT_REMOTE_MODEL
    return DEFAULT_LOCAL_MODEL


def detect(base_url: str | None) -> str | None:
    """Guess which preset serves ``base_url`` (for display): ``"ollama"`` for port 11434, …; else ``None``."""
    if not base_url:
        return None
    text = base_url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return None
    for suffix, name in _HOSTS.items():
        if host == suffix or host.endswith("." + suffix):
            return name
    if port in _PORTS:
        return _PORTS[port]
    return None


def describe(resolved: Resolved) -> str:
    """One display line: ``ollama/llama3.2 @ http://localhost:11434/v1``."""
    where = resolved.base_url or "embedded server"
    return f"{resolved.spec} @ {where}"
