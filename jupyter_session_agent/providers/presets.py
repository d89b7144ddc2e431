"""Provider presets: a model spec like ``deepseek/deepseek-chat`` → base URL, key, model name.

Every preset talks the OpenAI chat-completions protocol, so one client class
(``openai_provider.OpenAIProvider``) serves them all; a preset says *where*, *with which
key*, and what the vendor's dialect needs (:class:`Vendor`). Pure: no I/O, no imports
beyond the standard library.

``<vendor>/<model>`` uses the vendor's base URL (its ``*_BASE_URL`` variable overrides it)
and its usual key variable (``DEEPSEEK_API_KEY``, …; see :data:`VENDORS`). ``openai/<model>``
and a bare ``<model>`` use ``OPENAI_BASE_URL`` when set, and then the server is recognised
by its URL (:func:`detect`: host names, or the default ports of self-hosted servers): an
``OPENAI_BASE_URL`` pointing at DeepSeek is the provider ``deepseek``, with DeepSeek's
prices. An unknown server stays the generic ``openai``. ``<x>/<y>`` with an unknown ``x``
is, with ``OPENAI_BASE_URL`` set, the server's own model name (``meta-llama/Llama-3.1-8B``).
``local/<name>`` is the embedded llama.cpp server (its URL is known once it runs).
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
DEFAULT_LOCAL_MODEL = "local/qwen2.5-coder-1.5b"  # local.DEFAULT_LOCAL


@dataclass(frozen=True, slots=True)
class Vendor:
    """One vendor's OpenAI-compatible endpoint and dialect.

    ``hosts``: host names (or their parent domains) that identify it; ``ports``: default
    ports of a self-hosted server; ``keys``: environment variables holding its key, the
    first set wins (``default_key`` when none is and none is required); ``token_param``:
    the output-limit parameter it wants (None: by model, see the provider); ``local``: a
    self-hosted server (no price list). (Reasoning a vendor needs back with tool calls:
    ``core.chat.REASONING_BACK_PROVIDERS``.)
    """

    id: str
    name: str
    url: str | None
    keys: tuple[str, ...] = ()
    url_var: str | None = None
    hosts: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    token_param: str | None = None
    key_required: bool = True
    default_key: str | None = None
    local: bool = False


def _v(*args: object, **kw: object) -> Vendor:
    return Vendor(*args, **kw)  # type: ignore[arg-type]


VENDORS: tuple[Vendor, ...] = (
    _v("openai", "OpenAI", OPENAI_URL, ("OPENAI_API_KEY",), "OPENAI_BASE_URL",
       ("api.openai.com",), token_param="max_completion_tokens"),
    _v("azure", "Azure OpenAI", None, ("AZURE_OPENAI_API_KEY", "AZURE_API_KEY"),
       "AZURE_OPENAI_BASE_URL",
       ("openai.azure.com", "cognitiveservices.azure.com", "services.ai.azure.com"),
       token_param="max_completion_tokens"),
    _v("deepseek", "DeepSeek", "https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",),
       "DEEPSEEK_BASE_URL", ("api.deepseek.com",)),
    _v("groq", "Groq", "https://api.groq.com/openai/v1", ("GROQ_API_KEY",), "GROQ_BASE_URL",
       ("api.groq.com",)),
    _v("openrouter", "OpenRouter", OPENROUTER_URL, ("OPENROUTER_API_KEY",),
       "OPENROUTER_BASE_URL", ("openrouter.ai",)),
    _v("mistral", "Mistral", "https://api.mistral.ai/v1", ("MISTRAL_API_KEY",),
       "MISTRAL_BASE_URL", ("api.mistral.ai",)),
    _v("xai", "xAI", "https://api.x.ai/v1", ("XAI_API_KEY",), "XAI_BASE_URL", ("api.x.ai",)),
    _v("dashscope", "Alibaba Cloud DashScope",
       "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", ("DASHSCOPE_API_KEY",),
       "DASHSCOPE_BASE_URL", ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com",
                              "dashscope-us.aliyuncs.com")),
    _v("perplexity", "Perplexity", "https://api.perplexity.ai",
       ("PERPLEXITY_API_KEY", "PPLX_API_KEY"), "PERPLEXITY_BASE_URL", ("api.perplexity.ai",)),
    _v("together", "Together AI", "https://api.together.xyz/v1", ("TOGETHER_API_KEY",),
       "TOGETHER_BASE_URL", ("api.together.xyz", "api.together.ai")),
    _v("huggingface", "Hugging Face Inference Providers", "https://router.huggingface.co/v1",
       ("HF_TOKEN", "HUGGINGFACE_API_KEY"), "HF_BASE_URL", ("router.huggingface.co",)),
    _v("zai", "Z.ai", "https://api.z.ai/api/paas/v4", ("ZAI_API_KEY", "ZHIPUAI_API_KEY"),
       "ZAI_BASE_URL", ("api.z.ai", "open.bigmodel.cn")),
    _v("cerebras", "Cerebras", "https://api.cerebras.ai/v1", ("CEREBRAS_API_KEY",),
       "CEREBRAS_BASE_URL", ("api.cerebras.ai",)),
    _v("fireworks", "Fireworks AI", "https://api.fireworks.ai/inference/v1",
       ("FIREWORKS_API_KEY",), "FIREWORKS_BASE_URL", ("api.fireworks.ai",)),
    _v("deepinfra", "DeepInfra", "https://api.deepinfra.com/v1/openai",
       ("DEEPINFRA_API_KEY", "DEEPINFRA_TOKEN"), "DEEPINFRA_BASE_URL", ("api.deepinfra.com",)),
    _v("moonshot", "Moonshot AI", "https://api.moonshot.ai/v1", ("MOONSHOT_API_KEY",),
       "MOONSHOT_BASE_URL", ("api.moonshot.ai", "api.moonshot.cn")),
    _v("snowflake", "Snowflake Cortex", None, ("SNOWFLAKE_PAT", "SNOWFLAKE_API_KEY"),
       "SNOWFLAKE_BASE_URL", ("snowflakecomputing.com",)),
    _v("gemini", "Google Gemini", "https://generativelanguage.googleapis.com/v1beta/openai",
       ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "GEMINI_BASE_URL",
       ("generativelanguage.googleapis.com",)),
    _v("anthropic", "Anthropic", "https://api.anthropic.com/v1", ("ANTHROPIC_API_KEY",),
       "ANTHROPIC_BASE_URL", ("api.anthropic.com",)),
    _v("crusoe", "Crusoe", "https://api.inference.crusoecloud.com/v1", ("CRUSOE_API_KEY",),
       "CRUSOE_BASE_URL", ("crusoecloud.com",)),
    _v("heroku", "Heroku Managed Inference", "https://us.inference.heroku.com/v1",
       ("INFERENCE_KEY",), "INFERENCE_URL", ("inference.heroku.com",)),
    _v("ollama", "Ollama", OLLAMA_URL, ("OLLAMA_API_KEY",), "OLLAMA_BASE_URL", ("ollama.com",),
       (11434,), key_required=False, default_key="ollama", local=True),
    _v("vllm", "vLLM", VLLM_URL, ("VLLM_API_KEY",), "VLLM_BASE_URL", (), (8000,),
       key_required=False, default_key="EMPTY", local=True),
    _v("lmstudio", "LM Studio", LMSTUDIO_URL, (), "LMSTUDIO_BASE_URL", (), (1234,),
       key_required=False, default_key="lm-studio", local=True),
    _v("llamacpp", "llama.cpp server", "http://localhost:8080/v1", ("LLAMACPP_API_KEY",),
       "LLAMACPP_BASE_URL", (), (8080,), key_required=False, default_key="sk-no-key-required",
       local=True),
)  # fmt: skip

_BY_ID = {v.id: v for v in VENDORS}
# other spellings of a vendor in a model spec
_ALIASES = {
    "x-ai": "xai", "grok": "xai", "togetherai": "together", "together-ai": "together",
    "hf": "huggingface", "z-ai": "zai", "zhipuai": "zai", "google": "gemini",
    "lm-studio": "lmstudio", "llama.cpp": "llamacpp", "llama-cpp": "llamacpp",
    "azure-openai": "azure", "alibaba": "dashscope", "qwen": "dashscope", "moonshotai": "moonshot",
}  # fmt: skip

PROVIDERS: tuple[str, ...] = (*_BY_ID, "local")


def vendor(provider_id: str | None) -> Vendor | None:
    """The vendor of a provider id (or one of its aliases), if it is one we know."""
    key = (provider_id or "").lower()
    return _BY_ID.get(_ALIASES.get(key, key))


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
    if not sep:
        return _openai(spec, env, spec)
    found = vendor(provider) if provider.lower() != "local" else None
    if found is None and provider.lower() != "local":
        if _get(env, "OPENAI_BASE_URL"):
            # A server-side model name with a slash (vLLM / HF style): send it whole.
            return _openai(spec, env, spec)
        raise ConfigError(
            f"unknown provider {provider!r} in {spec!r} — use one of {', '.join(PROVIDERS)}, "
            "or set OPENAI_BASE_URL to send it as a model name to an OpenAI-compatible server"
        )
    model = model.strip()
    if not model:
        raise ConfigError(
            f"no model name after {provider!r} in {spec!r} — e.g. '{provider.lower()}/<model>'"
        )
    if found is None:  # local
        return Resolved(
            "local",
            model,
            None,
            "local",
            "embedded llama.cpp server (started on first use, shared by all kernels)",
        )
    if found.id == "openai":
        return _openai(model, env, spec)
    url = (_get(env, found.url_var) if found.url_var else None) or found.url
    if url is None:
        raise ConfigError(
            f"{found.url_var} is not set — export your {found.name} endpoint's base URL "
            f"to use {spec!r}"
        )
    key = next((k for k in (_get(env, var) for var in found.keys) if k), None)
    if key is None:
        if found.key_required:
            key = _need(env, found.keys[0], spec)
        else:
            key = found.default_key
    return Resolved(found.id, model, url, key, f"{found.name} at {url}")


def _openai(model: str, env: Mapping[str, str], spec: str) -> Resolved:
    base = _get(env, "OPENAI_BASE_URL")
    key = _get(env, "OPENAI_API_KEY")
    if base is None:
        if key is None:
            raise ConfigError(
                f"OPENAI_API_KEY is not set — export it (or OPENAI_BASE_URL for a compatible server) "
                f"to use {spec!r}, or use {DEFAULT_LOCAL_MODEL!r}"
            )
        return Resolved("openai", model, OPENAI_URL, key, "OpenAI API")
    found = vendor(detect(base))
    if found is not None and key is None:
        key = next((k for k in (_get(env, var) for var in found.keys) if k), None)
    where = f"{found.name} server" if found and found.id != "openai" else "server"
    # A known vendor is named by its own id (its prices, its dialect); an unknown server
    # stays the generic "openai". Compatible servers rarely check the key, but the SDK
    # refuses an empty one.
    return Resolved(
        found.id if found else "openai",
        model,
        base,
        key or "EMPTY",
        f"OpenAI-compatible {where} at {base} (OPENAI_BASE_URL)",
    )


def default_model(env: Mapping[str, str]) -> str:
    """``openai/gpt-4o-mini`` when an OpenAI key or base URL is configured, else the embedded
    default (``local/qwen2.5-coder-1.5b``; a running Ollama or LM Studio comes first: see
    ``registry.default_spec``)."""
    if _get(env, "OPENAI_API_KEY") or _get(env, "OPENAI_BASE_URL"):
        return DEFAULT_REMOTE_MODEL
    return DEFAULT_LOCAL_MODEL


def detect(base_url: str | None) -> str | None:
    """Which vendor serves ``base_url``: by host name (``api.deepseek.com`` → ``"deepseek"``,
    any ``*.openai.azure.com`` → ``"azure"``), else by a self-hosted server's default port
    (11434 → ``"ollama"``, 8000 → ``"vllm"``, 1234 → ``"lmstudio"``, 8080 → ``"llamacpp"``);
    else ``None``."""
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
    for found in VENDORS:
        for suffix in found.hosts:
            if host == suffix or host.endswith("." + suffix):
                return found.id
    for found in VENDORS:
        if port is not None and port in found.ports:
            return found.id
    return None


def describe(resolved: Resolved) -> str:
    """One display line: ``ollama/llama3.2 @ http://localhost:11434/v1``."""
    where = resolved.base_url or "embedded server"
    return f"{resolved.spec} @ {where}"
