"""Provider presets: pure functions of a model spec and an environment mapping."""

from __future__ import annotations

import dataclasses

import pytest

from jupyter_session_agent.core.errors import ConfigError
from jupyter_session_agent.providers.presets import (
    Resolved,
    default_model,
    describe,
    detect,
    resolve,
)


def test_openai_needs_a_key():
    r = resolve("openai/gpt-4o-mini", {"OPENAI_API_KEY": "sk-1"})
    assert r == Resolved("openai", "gpt-4o-mini", "https://api.openai.com/v1", "sk-1", r.notes)
    with pytest.raises(ConfigError) as err:
        resolve("openai/gpt-4o-mini", {})
    assert "OPENAI_API_KEY" in str(err.value) and "\n" not in str(err.value)


def test_openai_base_url_from_env_and_placeholder_key():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9999/v1"}
    r = resolve("openai/my-model", env)
    assert (r.provider_id, r.model_id, r.base_url, r.api_key) == (
        "openai",
        "my-model",
        "http://127.0.0.1:9999/v1",
        "EMPTY",
    )
    assert resolve("openai/m", {**env, "OPENAI_API_KEY": "k"}).api_key == "k"


def test_bare_model_uses_openai_defaults():
    r = resolve("gpt-4o", {"OPENAI_API_KEY": "sk-1"})
    assert (r.provider_id, r.model_id, r.base_url) == (
        "openai",
        "gpt-4o",
        "https://api.openai.com/v1",
    )
    r = resolve("  llama3  ", {"OPENAI_BASE_URL": "http://localhost:11434/v1"})
    assert (r.model_id, r.base_url, r.api_key) == ("llama3", "http://localhost:11434/v1", "EMPTY")
    assert r.provider_id == "ollama" and "Ollama" in r.notes  # recognised by its port


def test_unknown_prefix_is_a_model_name_only_with_a_base_url():
    env = {"OPENAI_BASE_URL": "http://gpu:8000/v1"}
    r = resolve("meta-llama/Llama-3.1-8B", env)
    assert (r.provider_id, r.model_id, r.base_url) == (
        "vllm",  # vLLM's default port
        "meta-llama/Llama-3.1-8B",
        "http://gpu:8000/v1",
    )
    generic = resolve("meta-llama/Llama-3.1-8B", {"OPENAI_BASE_URL": "http://gpu:9999/v1"})
    assert generic.provider_id == "openai"  # an unknown server stays generic
    with pytest.raises(ConfigError) as err:
        resolve("meta-llama/Llama-3.1-8B", {})
    msg = str(err.value)
    assert "unknown provider 'meta-llama'" in msg and "OPENAI_BASE_URL" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "spec, provider, model, url, key",
    [
        ("ollama/llama3.2", "ollama", "llama3.2", "http://localhost:11434/v1", "ollama"),
        (
            "vllm/Qwen/Qwen2.5-7B-Instruct",
            "vllm",
            "Qwen/Qwen2.5-7B-Instruct",
            "http://localhost:8000/v1",
            "EMPTY",
        ),
        ("lmstudio/qwen2.5-7b", "lmstudio", "qwen2.5-7b", "http://localhost:1234/v1", "lm-studio"),
        ("local/smollm2", "local", "smollm2", None, "local"),
    ],
)
def test_keyless_presets(spec, provider, model, url, key):
    r = resolve(spec, {})
    assert (r.provider_id, r.model_id, r.base_url, r.api_key) == (provider, model, url, key)
    assert r.spec == f"{provider}/{model}"


def test_presets_ignore_openai_base_url_but_honour_their_own():
    env = {"OPENAI_BASE_URL": "http://elsewhere/v1", "OPENAI_API_KEY": "sk"}
    assert resolve("ollama/x", env).base_url == "http://localhost:11434/v1"
    assert (
        resolve("ollama/x", {"OLLAMA_BASE_URL": "http://box:11434/v1"}).base_url
        == "http://box:11434/v1"
    )
    assert (
        resolve("vllm/x", {"VLLM_BASE_URL": "http://gpu:9000/v1", "VLLM_API_KEY": "t"}).api_key
        == "t"
    )
    assert (
        resolve("lmstudio/x", {"LMSTUDIO_BASE_URL": "http://pc:1234/v1"}).base_url
        == "http://pc:1234/v1"
    )


def test_openrouter():
    r = resolve("openrouter/anthropic/claude-3.5-sonnet", {"OPENROUTER_API_KEY": "or-1"})
    assert (r.provider_id, r.model_id, r.base_url, r.api_key) == (
        "openrouter", "anthropic/claude-3.5-sonnet", "https://openrouter.ai/api/v1", "or-1")  # fmt: skip
    with pytest.raises(ConfigError, match="OPENROUTER_API_KEY"):
        resolve("openrouter/anthropic/claude-3.5-sonnet", {"OPENAI_API_KEY": "sk"})


def test_provider_prefix_is_case_insensitive():
    assert resolve("Ollama/llama3", {}).provider_id == "ollama"


@pytest.mark.parametrize("spec", ["", "   ", "ollama/", "local/ "])
def test_empty_names_are_config_errors(spec):
    with pytest.raises(ConfigError):
        resolve(spec, {})


def test_blank_env_values_count_as_unset():
    with pytest.raises(ConfigError):
        resolve("openai/gpt-4o", {"OPENAI_API_KEY": "  "})
    assert default_model({"OPENAI_API_KEY": ""}) == "local/qwen2.5-coder-1.5b"


def test_default_model():
    assert default_model({}) == "local/qwen2.5-coder-1.5b"
    assert default_model({"OPENAI_API_KEY": "sk"}) == "openai/gpt-4o-mini"
    assert default_model({"OPENAI_BASE_URL": "http://localhost:11434/v1"}) == "openai/gpt-4o-mini"
    assert default_model({"OLLAMA_BASE_URL": "http://x"}) == "local/qwen2.5-coder-1.5b"


@pytest.mark.parametrize(
    "url, preset",
    [
        ("http://localhost:11434/v1", "ollama"),
        ("127.0.0.1:11434", "ollama"),
        ("http://gpu-box:8000/v1", "vllm"),
        ("http://localhost:1234/v1", "lmstudio"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.openai.com/v1", "openai"),
        ("https://api.deepseek.com", "deepseek"),
        ("https://my-res.openai.azure.com/openai/v1", "azure"),
        ("https://my-res.cognitiveservices.azure.com/openai", "azure"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("https://api.x.ai/v1", "xai"),
        ("https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("https://api.perplexity.ai", "perplexity"),
        ("https://api.together.xyz/v1", "together"),
        ("https://router.huggingface.co/v1", "huggingface"),
        ("https://api.z.ai/api/paas/v4", "zai"),
        ("https://acct.snowflakecomputing.com/api/v2/cortex/v1", "snowflake"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "gemini"),
        ("https://api.anthropic.com/v1", "anthropic"),
        ("https://api.deepinfra.com/v1/openai", "deepinfra"),
        ("http://127.0.0.1:8080/v1", "llamacpp"),
        ("https://evil-openai.azure.com.example.org/v1", None),  # a suffix, not a host
        ("http://127.0.0.1:41234/v1", None),
        ("http://[::1", None),
        ("", None),
        (None, None),
    ],
)
def test_detect(url, preset):
    assert detect(url) == preset


def test_resolved_is_frozen_and_describable():
    r = resolve("ollama/llama3", {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.model_id = "x"  # type: ignore[misc]
    assert describe(r) == "ollama/llama3 @ http://localhost:11434/v1"
    assert describe(resolve("local/smollm2", {})) == "local/smollm2 @ embedded server"


@pytest.mark.parametrize(
    "spec, env, expected",
    [
        (
            "deepseek/deepseek-chat",
            {"DEEPSEEK_API_KEY": "ds"},
            ("deepseek", "deepseek-chat", "https://api.deepseek.com/v1", "ds"),
        ),
        (
            "xai/grok-4",
            {"XAI_API_KEY": "x", "XAI_BASE_URL": "http://proxy/v1"},
            ("xai", "grok-4", "http://proxy/v1", "x"),
        ),
        (
            "hf/deepseek-ai/DeepSeek-R1",
            {"HF_TOKEN": "h"},
            ("huggingface", "deepseek-ai/DeepSeek-R1", "https://router.huggingface.co/v1", "h"),
        ),
        (
            "perplexity/sonar",
            {"PPLX_API_KEY": "p"},
            ("perplexity", "sonar", "https://api.perplexity.ai", "p"),
        ),
    ],
)
def test_vendor_presets_use_their_own_url_and_key(spec, env, expected):
    r = resolve(spec, env)
    assert (r.provider_id, r.model_id, r.base_url, r.api_key) == expected


def test_vendor_preset_errors_name_the_variable():
    with pytest.raises(ConfigError, match="DEEPSEEK_API_KEY"):
        resolve("deepseek/deepseek-chat", {"OPENAI_API_KEY": "sk"})
    with pytest.raises(ConfigError, match="AZURE_OPENAI_BASE_URL"):
        resolve("azure/gpt-5-nano", {"AZURE_OPENAI_API_KEY": "k"})


def test_openai_base_url_of_a_known_vendor_is_that_vendor():
    env = {"OPENAI_BASE_URL": "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY": "ds"}
    r = resolve("deepseek-chat", env)
    assert (r.provider_id, r.model_id, r.api_key) == ("deepseek", "deepseek-chat", "ds")
    assert resolve("openai/deepseek-chat", {**env, "OPENAI_API_KEY": "sk"}).api_key == "sk"
