"""ScriptedServer driven by the real openai SDK over real HTTP/SSE."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

USER = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def _shared():
    """One server and client for the module (an SDK client costs ~40 ms to build)."""
    with ScriptedServer() as srv:
        yield srv, openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)


@pytest.fixture
def server(_shared):
    srv = _shared[0]
    srv.reset()
    yield srv
    srv.reset()


@pytest.fixture
def client(_shared):
    return _shared[1]


def stream(client, **kw):
    kw.setdefault("model", "test-model")
    kw.setdefault("messages", USER)
    return list(client.chat.completions.create(stream=True, **kw))


def text_of(chunks):
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def tool_calls_of(chunks):
    """Reassemble streamed tool calls the way an OpenAI client does."""
    calls: dict[int, dict] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = tc.id or call["id"]
            call["name"] += (tc.function.name or "") if tc.function else ""
            call["arguments"] += (tc.function.arguments or "") if tc.function else ""
    return [calls[i] for i in sorted(calls)]


def test_base_url_and_models(server, client):
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    assert [m.id for m in client.models.list()] == ["scripted"]


def test_streamed_text(server, client):
    server.enqueue(Reply(text="Hello, scripted world!", chunk_chars=5))
    chunks = stream(client)
    assert text_of(chunks) == "Hello, scripted world!"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[0].id.startswith("chatcmpl-")
    assert all(c.model == "test-model" and c.id == chunks[0].id for c in chunks)
    assert len([c for c in chunks if c.choices[0].delta.content]) == 5
    assert server.requests[0]["messages"] == USER and server.requests[0]["stream"] is True


def test_default_reply_echoes_last_user_text(server, client):
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": [{"type": "text", "text": "y" * 300}]},
    ]
    assert text_of(stream(client, messages=messages)) == "(scripted) " + "y" * 200


def test_reasoning_deltas_before_text(server, client):
    server.enqueue({"reasoning": "let me think", "text": "answer"})
    chunks = stream(client)
    extras = [(c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks]
    reasoning = [r for r in extras if r]
    assert "".join(reasoning) == "let me think"
    first_text = next(i for i, c in enumerate(chunks) if c.choices[0].delta.content)
    assert max(i for i, r in enumerate(extras) if r) < first_text
    assert text_of(chunks) == "answer"


def test_single_tool_call(server, client):
    args = {"code": "print('hi')", "timeout": 5}
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": args, "id": "call_abc"},), chunk_chars=4)
    )
    chunks = stream(client)
    first = next(c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls)
    assert (first.index, first.id, first.type, first.function.name, first.function.arguments) == (
        0,
        "call_abc",
        "function",
        "python",
        "",
    )
    [call] = tool_calls_of(chunks)
    assert call["id"] == "call_abc" and call["name"] == "python"
    assert json.loads(call["arguments"]) == args
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parallel_tool_calls_and_raw_arguments(server, client):
    server.enqueue(
        Reply(
            text="Running two tools.",
            tool_calls=(
                {"name": "read", "arguments": {"path": "a.txt"}},
                {"name": "bash", "arguments": '{"command": "ls'},  # invalid JSON, sent verbatim
            ),
        )
    )
    chunks = stream(client)
    calls = tool_calls_of(chunks)
    assert [c["name"] for c in calls] == ["read", "bash"]
    assert json.loads(calls[0]["arguments"]) == {"path": "a.txt"}
    assert calls[1]["arguments"] == '{"command": "ls'
    assert calls[0]["id"] != calls[1]["id"] and all(c["id"] for c in calls)
    assert text_of(chunks) == "Running two tools."


def test_usage_auto_only_with_include_usage(server, client):
    server.enqueue(Reply(text="abcdefgh"), Reply(text="abcdefgh"))
    with_usage = stream(client, stream_options={"include_usage": True})
    last = with_usage[-1]
    assert last.choices == [] and last.usage.completion_tokens == 2
    assert last.usage.prompt_tokens == -(-len(json.dumps(USER)) // 4)
    assert last.usage.total_tokens == last.usage.prompt_tokens + 2
    assert all(c.usage is None for c in stream(client))


def test_usage_verbatim_and_none(server, client):
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    server.enqueue(Reply(text="x", usage=usage), Reply(text="x", usage=None))
    got = stream(client, stream_options={"include_usage": True})[-1].usage
    assert (
        got.prompt_tokens_details.cached_tokens == 64
        and got.completion_tokens_details.reasoning_tokens == 7
    )
    chunks = stream(client, stream_options={"include_usage": True})
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


def test_rate_limit_error_with_retry_after(server, client):
    server.enqueue(Reply(status=429, headers={"retry-after": "7"}))
    with pytest.raises(openai.RateLimitError) as info:
        stream(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.code == "rate_limit_exceeded"  # default OpenAI-shaped error body


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors(server, client, status):
    body = {"error": {"message": "boom", "type": "server_error", "code": None}}
    server.enqueue(Reply(status=status, error_body=body))
    with pytest.raises(openai.APIStatusError) as info:
        stream(client)
    assert info.value.status_code == status and "boom" in info.value.message
    assert isinstance(info.value, openai.InternalServerError)


def test_string_error_body(server, client):
    server.enqueue(Reply(status=502, error_body="<html>Bad gateway</html>"))
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=USER)
    assert info.value.status_code == 502 and "Bad gateway" in info.value.response.text


def test_drop_after_raises_connection_error(server, client):
    # The SDK maps the incomplete chunked body (httpx RemoteProtocolError) to APIConnectionError.
    server.enqueue(Reply(text="abcdefghijklmnop", chunk_chars=2, drop_after=3))
    got = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(model="m", messages=USER, stream=True):
            got.append(chunk)
    assert len(got) == 3 and text_of(got) == "abcd"


def test_malformed_after_raises_json_decode_error(server, client):
    # The SDK does not wrap this: json.loads of the SSE data raises JSONDecodeError.
    server.enqueue(Reply(text="abcdefgh", chunk_chars=2, malformed_after=2))
    got = []
    with pytest.raises(json.JSONDecodeError):
        for chunk in client.chat.completions.create(model="m", messages=USER, stream=True):
            got.append(chunk)
    assert len(got) == 2


@pytest.mark.parametrize(
    "fault, error",
    [
        ({"drop_after": 0}, openai.APIConnectionError),  # headers only, then the connection closes
        ({"drop_after": 99}, openai.APIConnectionError),  # every chunk sent, closed before [DONE]
        ({"malformed_after": 0}, json.JSONDecodeError),
    ],
)
def test_fault_edges(server, client, fault, error):
    server.enqueue({"text": "ab", **fault})
    with pytest.raises(error):
        stream(client)


def test_non_streaming_faults(server, client):
    server.enqueue({"drop_after": 0}, {"malformed_after": 0}, {"stall": 5})
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(json.JSONDecodeError):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.3).chat.completions.create(model="m", messages=USER)


def test_async_client(server):
    async def run() -> str:
        aclient = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        server.enqueue(Reply(text="async text", chunk_chars=3))
        parts = [
            c.choices[0].delta.content or ""
            async for c in await aclient.chat.completions.create(
                model="m", messages=USER, stream=True
            )
        ]
        await aclient.close()
        return "".join(parts)

    assert asyncio.run(run()) == "async text"


def test_stall_triggers_client_timeout(server, client):
    server.enqueue(Reply(text="abcdefgh", stall=5))
    started = time.monotonic()
    got = []
    fast = client.with_options(timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        for chunk in fast.chat.completions.create(model="m", messages=USER, stream=True):
            got.append(chunk)
    assert len(got) == 1 and time.monotonic() - started < 3


def test_delays(server, client):
    server.enqueue(Reply(text="abcd", chunk_chars=1, delay=0.05, first_delay=0.1))
    started = time.monotonic()
    assert text_of(stream(client)) == "abcd"
    assert time.monotonic() - started >= 0.3


def test_non_streaming(server, client):
    call = {"name": "list", "arguments": {"path": "."}}
    server.enqueue(Reply(text="plain", reasoning="hmm", tool_calls=(call,)))
    res = client.chat.completions.create(model="gpt-x", messages=USER, tools=[])
    assert res.object == "chat.completion" and res.model == "gpt-x"
    msg = res.choices[0].message
    assert msg.content == "plain" and msg.model_extra["reasoning_content"] == "hmm"
    assert msg.tool_calls[0].function.name == "list"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"path": "."}
    assert res.choices[0].finish_reason == "tool_calls"
    assert res.usage.total_tokens == res.usage.prompt_tokens + res.usage.completion_tokens > 0


def test_queue_order_reset_and_404(server, client):
    server.enqueue("one", {"text": "two"})
    assert text_of(stream(client)) == "one" and text_of(stream(client)) == "two"
    assert len(server.requests) == 2
    server.enqueue("stale")
    server.reset()
    assert server.requests == [] and server.pending == 0
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(server.base_url + "/nope")
    assert info.value.code == 404 and "error" in json.loads(info.value.read())


def test_reply_from_dict_rejects_unknown_keys():
    reply = Reply.from_dict({"text": "a", "tool_calls": [{"name": "x", "arguments": {}}]})
    assert isinstance(reply.tool_calls, tuple) and reply.tool_calls[0]["name"] == "x"
    with pytest.raises(ValueError):
        Reply.from_dict({"txt": "a"})


def test_concurrent_requests_each_pop_one_reply(server, client):
    server.enqueue(*[Reply(text=f"r{i}") for i in range(8)])
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(text_of(stream(client)))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"r{i}" for i in range(8))


def test_stop_closes_stalled_connections():
    srv = ScriptedServer().start()
    client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0, timeout=10)
    srv.enqueue(Reply(text="abc", stall=30))
    it = iter(client.chat.completions.create(model="m", messages=USER, stream=True))
    next(it)
    started = time.monotonic()
    srv.stop()
    assert time.monotonic() - started < 2
    with pytest.raises(openai.APIConnectionError):
        list(it)


def _post(url: str, body) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def test_cli_control_api_from_another_process(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "from file"}]))
    cmd = [
        sys.executable,
        "-m",
        "jupyter_session_agent.testing.scripted_server",
        "--script",
        str(script),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        root = base_url[: -len("/v1")]
        client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
        assert text_of(stream(client)) == "from file"
        assert _post(root + "/_script", [{"text": "scripted remotely"}, {"status": 429}]) == {
            "queued": 2
        }
        assert text_of(stream(client)) == "scripted remotely"
        with pytest.raises(openai.RateLimitError):
            stream(client)
        with urllib.request.urlopen(root + "/_requests", timeout=5) as resp:
            requests = json.loads(resp.read())
        assert len(requests) == 3 and requests[0]["messages"] == USER
        assert _post(root + "/_reset", {}) == {"ok": True}
        with urllib.request.urlopen(root + "/_requests", timeout=5) as resp:
            assert json.loads(resp.read()) == []
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0
