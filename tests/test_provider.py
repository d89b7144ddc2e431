"""OpenAIProvider over real HTTP: the scripted server, plus a raw SSE server for
wire shapes the scripted server does not produce (other servers' dialects,
in-stream error events, clean closes without a finish reason)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from jupyter_session_agent.core import budget, retry
from jupyter_session_agent.core.errors import AuthError, ContextOverflowError, ProviderError
from jupyter_session_agent.core.stream import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolInputStart,
)
from jupyter_session_agent.providers.openai_provider import (
    ChatRequest,
    OpenAIProvider,
    finish_reason,
)
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "list the files"},
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}},
    },
    {
        "type": "function",
        "function": {"name": "read", "description": "read", "parameters": {"type": "object"}},
    },
]
REQUEST = ChatRequest(model="test-model", messages=MESSAGES, tools=TOOLS)


@pytest.fixture(scope="module")
def server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def provider(server):
    server.reset()
    return OpenAIProvider(
        provider_id="local", base_url=server.base_url, api_key="sk-test", timeout=5.0
    )


def run(provider: OpenAIProvider, request: ChatRequest = REQUEST) -> list:
    return list(provider.stream(request))


def failure(provider: OpenAIProvider, request: ChatRequest = REQUEST) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        run(provider, request)
    err = info.value
    assert "\n" not in str(err), "messages are one line"
    assert (
        err.__cause__ is not None
        or err.message.startswith("stream interrupted")
        or "error event from" in err.message
    ), "SDK error kept as cause"
    return err


def text_of(events, kind=TextDelta) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


# --------------------------------------------------------------------------
# streaming


def test_streamed_text(server, provider):
    server.enqueue(Reply(text="Hello there, notebook!", chunk_chars=4))
    events = run(provider)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and text_of(events) == "Hello there, notebook!"
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.reason == "stop"
    assert finish.first_token_ms is not None and finish.latency_ms >= finish.first_token_ms >= 0
    body = server.requests[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "test-model" and body["messages"] == MESSAGES and body["tools"] == TOOLS


def test_request_options_pass_through(server, provider):
    server.enqueue(Reply(text="ok"))
    run(
        provider,
        ChatRequest(
            model="m", messages=MESSAGES, max_tokens=77, temperature=0.2, extra_body={"top_k": 5}
        ),
    )
    body = server.requests[-1]
    assert body["max_tokens"] == 77 and body["temperature"] == 0.2 and body["top_k"] == 5
    assert "tools" not in body  # no empty tools array (some servers reject it)


def test_reasoning_then_text(server, provider):
    server.enqueue(Reply(reasoning="Let me think about it.", text="Done."))
    events = run(provider)
    assert text_of(events, ReasoningDelta) == "Let me think about it."
    assert text_of(events) == "Done."
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(isinstance(e, ReasoningDelta) for e in events[:first_text])


def test_one_tool_call(server, provider):
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "ls -la"}, "id": "call_abc"},))
    )
    events = run(provider)
    assert events[0] == ToolInputStart("call_abc", "bash")
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call == ToolCall("call_abc", "bash", {"command": "ls -la"}, raw='{"command": "ls -la"}')
    assert events[-1].reason == "tool-calls"
    assert events.index(call) < len(events) - 1


def test_two_parallel_tool_calls(server, provider):
    server.enqueue(
        Reply(
            text="Checking.",
            tool_calls=(
                {"name": "bash", "arguments": {"command": "ls"}},
                {"name": "read", "arguments": {"path": "a.py", "limit": 10}},
            ),
        )
    )
    events = run(provider)
    starts = [e for e in events if isinstance(e, ToolInputStart)]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [s.name for s in starts] == ["bash", "read"]
    assert [c.input for c in calls] == [{"command": "ls"}, {"path": "a.py", "limit": 10}]
    assert [c.call_id for c in calls] == [s.call_id for s in starts]
    assert len({c.call_id for c in calls}) == 2
    for start, call in zip(starts, calls):
        assert events.index(start) < events.index(call)
    assert events[-1].reason == "tool-calls"


@pytest.mark.parametrize(
    ("arguments", "invalid"),
    [
        ('{"command": "ls"', "not valid JSON"),
        ("[1, 2]", "got an array"),
        ('"ls"', "got a string"),
        ("null", "got null"),
        ("42", "got a number"),
    ],
)
def test_invalid_arguments(server, provider, arguments, invalid):
    server.enqueue(Reply(tool_calls=({"name": "bash", "arguments": arguments},)))
    (call,) = [e for e in run(provider) if isinstance(e, ToolCall)]
    assert call.input == {} and call.raw == arguments
    assert invalid in call.invalid


def test_empty_arguments_are_an_empty_object(server, provider):
    server.enqueue(Reply(tool_calls=({"name": "list", "arguments": ""},)))
    (call,) = [e for e in run(provider) if isinstance(e, ToolCall)]
    assert call.input == {} and call.invalid is None


def test_usage_normalised_with_cache_and_reasoning(server, provider):
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "total_tokens": 1300,
        "prompt_tokens_details": {"cached_tokens": 200},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    server.enqueue(Reply(text="ok", usage=usage))
    finish = run(provider)[-1]
    t = finish.tokens
    # output excludes the reasoning the completion count includes (charged once)
    assert (t.input, t.output, t.reasoning, t.cache_read, t.cache_write, t.total) == (
        800,
        180,
        120,
        200,
        0,
        1300,
    )
    assert t.estimated is None
    assert finish.raw_usage == usage


def test_usage_cache_writes(server, provider):
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 10,
        "total_tokens": 1010,
        "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 300},
    }
    server.enqueue(Reply(text="ok", usage=usage))
    t = run(provider)[-1].tokens
    assert (t.input, t.cache_read, t.cache_write) == (600, 100, 300)


def test_input_excludes_cache(server):
    p = OpenAIProvider(
        provider_id="x", base_url=server.base_url, api_key="k", input_excludes_cache=True
    )
    server.enqueue(
        Reply(
            text="ok",
            usage={
                "prompt_tokens": 50,
                "completion_tokens": 1,
                "total_tokens": 1051,
                "prompt_tokens_details": {"cached_tokens": 1000},
            },
        )
    )
    t = run(p)[-1].tokens
    assert (t.input, t.cache_read) == (50, 1000)


def test_no_usage_is_estimated(server, provider):
    server.enqueue(
        Reply(
            text="a" * 400,
            reasoning="r" * 40,
            tool_calls=({"name": "bash", "arguments": "{}"},),
            usage=None,
        )
    )
    finish = run(provider)[-1]
    t = finish.tokens
    assert t.estimated is True and finish.raw_usage is None
    assert t.input == budget.estimate(json.dumps(MESSAGES + TOOLS))
    # everything generated is estimated; the reasoning's share is kept apart from output
    assert t.output + t.reasoning == budget.estimate("a" * 400 + "r" * 40 + "{}") == 111
    assert t.reasoning == 10
    assert t.total == t.input + t.output + t.reasoning


@pytest.mark.parametrize(
    ("raw", "tools", "expected"),
    [
        ("stop", False, "stop"),
        ("tool_calls", True, "tool-calls"),
        ("function_call", True, "tool-calls"),
        ("length", False, "length"),
        ("content_filter", False, "content-filter"),
        (None, False, "unknown"),
        ("eos", False, "unknown"),
        (None, True, "tool-calls"),
        ("stop", True, "tool-calls"),  # Ollama-style "stop" with tool calls
        ("length", True, "length"),
    ],
)
def test_finish_reason_mapping(raw, tools, expected):
    assert finish_reason(raw, tools) == expected


def test_length_finish(server, provider):
    server.enqueue(Reply(text="trunc", finish_reason="length"))
    assert run(provider)[-1].reason == "length"


def test_complete(server, provider):
    server.enqueue(Reply(text="A short title", reasoning="hmm"))
    assert provider.complete(ChatRequest(model="m", messages=MESSAGES)) == "A short title"
    assert not server.requests[-1].get("stream")


def test_complete_maps_errors(server, provider):
    server.enqueue(Reply(status=503))
    with pytest.raises(ProviderError) as info:
        provider.complete(ChatRequest(model="m", messages=MESSAGES))
    assert info.value.retryable and info.value.status == 503


# --------------------------------------------------------------------------
# errors


def test_429_with_retry_after(server, provider):
    server.enqueue(Reply(status=429, headers={"Retry-After": "3"}))
    err = failure(provider)
    assert type(err) is ProviderError and err.retryable and err.status == 429
    assert err.headers["retry-after"] == "3"
    assert isinstance(err.__cause__, openai.RateLimitError)
    assert retry.retry_delay(1, err) == 3.0
    assert retry.retry_message(err) == err.message
    assert "Scripted error 429" in err.message  # the server's explanation is kept


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_retryable_statuses(server, provider, status):
    server.enqueue(Reply(status=status))
    err = failure(provider)
    assert err.retryable and err.status == status and not isinstance(err, ContextOverflowError)


def test_html_error_page(server, provider):
    server.enqueue(
        Reply(status=502, error_body="<!DOCTYPE html><html><title>502 Bad Gateway</title>…</html>")
    )
    err = failure(provider)
    assert err.retryable and "HTML error page: 502 Bad Gateway" in err.message


def test_overloaded_message(server, provider):
    server.enqueue(
        Reply(
            status=529,
            error_body={
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
            },
        )
    )
    err = failure(provider)
    assert err.retryable and retry.retry_message(err) == "Provider is overloaded"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_not_retryable(server, provider, status):
    server.enqueue(
        Reply(status=status, error_body={"error": {"message": "bad thing", "code": "invalid"}})
    )
    err = failure(provider)
    assert not err.retryable and err.status == status and "bad thing" in err.message
    assert retry.retry_message(err) is None


def test_openai_404_is_retryable(server):
    p = OpenAIProvider(provider_id="openai", base_url=server.base_url, api_key="k")
    server.enqueue(Reply(status=404))
    assert failure(p).retryable


def test_context_overflow_400(server, provider):
    server.enqueue(
        Reply(
            status=400,
            error_body={
                "error": {
                    "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.",
                    "type": "invalid_request_error",
                    "code": None,
                }
            },
        )
    )
    err = failure(provider)
    assert isinstance(err, ContextOverflowError) and not err.retryable and err.status == 400
    assert "maximum context length is 4096 tokens" in err.message
    assert retry.retry_message(err) is None


@pytest.mark.parametrize(
    ("status", "body", "overflow"),
    [
        (400, "", True),  # Cerebras/Mistral: "400 (no body)"
        (413, "", True),
        (413, "Request Entity Too Large", True),
        (429, "", False),  # a bare 429 is a rate limit
        (400, {"error": {"message": "nope", "code": "context_length_exceeded"}}, True),
        (
            400,
            "the request exceeds the available context size, try increasing it",
            True,
        ),  # llama.cpp text body
    ],
)
def test_overflow_shapes(server, provider, status, body, overflow):
    server.enqueue(Reply(status=status, error_body=body))
    err = failure(provider)
    assert isinstance(err, ContextOverflowError) is overflow
    if not overflow:
        assert err.retryable


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors(server, provider, status):
    server.enqueue(
        Reply(status=status, error_body={"error": {"message": "Incorrect API key provided"}})
    )
    err = failure(provider)
    assert isinstance(err, AuthError) and not err.retryable and err.status == status
    assert "Incorrect API key provided" in err.message
    assert "check OPENAI_API_KEY / the provider's key" in err.message
    assert err._render_traceback_() == [f"AuthError: {err}"]


def test_dropped_stream(server, provider):
    server.enqueue(Reply(text="partial answer that never ends", drop_after=3))
    seen = []
    with pytest.raises(ProviderError) as info:
        for event in provider.stream(REQUEST):
            seen.append(event)
    err = info.value
    assert err.retryable and err.message.startswith("stream interrupted:")
    # the body is read by the provider itself: the transport's own exception is the cause
    assert type(err.__cause__).__name__ == "RemoteProtocolError"
    assert text_of(seen)  # the deltas before the drop were delivered
    assert not any(isinstance(e, Finish) for e in seen)


def test_malformed_chunk(server, provider):
    server.enqueue(Reply(text="hello world", malformed_after=2))
    err = failure(provider)
    assert err.retryable and "stream interrupted: malformed chunk" in err.message
    assert isinstance(err.__cause__, json.JSONDecodeError)


def test_stall_with_short_timeout(server):
    p = OpenAIProvider(
        provider_id="local", base_url=server.base_url, api_key="k", timeout=5, idle_timeout=0.5
    )
    server.enqueue(Reply(text="slow", stall=5))
    err = failure(p)
    assert err.retryable and err.message.startswith(
        f"stream interrupted: no data from {server.base_url} for 0.5s"
    )
    assert err.message.endswith("raise %config AgentMagics.idle_timeout")
    assert type(err.__cause__).__name__ == "ReadTimeout"


def test_slow_headers_time_out(server):
    p = OpenAIProvider(
        provider_id="local",
        base_url=server.base_url,
        api_key="k",
        timeout=5,
        first_byte_timeout=0.5,
    )
    server.enqueue(Reply(text="slow", first_delay=5))
    err = failure(p)
    assert err.retryable and err.message.startswith("request timed out after 0.5s")
    assert err.message.endswith("raise %config AgentMagics.first_byte_timeout")


def test_unreachable_server():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIProvider(
        provider_id="local", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout=2
    )
    err = failure(p)
    assert err.retryable and err.message.startswith(f"cannot reach http://127.0.0.1:{port}/v1")
    assert isinstance(err.__cause__, openai.APIConnectionError)


# --------------------------------------------------------------------------
# other servers' wire dialects (raw SSE)


class RawSSE:
    """Answers every POST with the given SSE ``data:`` payloads, then closes
    the connection (no Content-Length: the body ends at EOF)."""

    def __init__(self) -> None:
        self.payloads: list = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for payload in owner.payloads:
                    data = payload if isinstance(payload, str) else json.dumps(payload)
                    self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def raw():
    srv = RawSSE()
    yield srv
    srv.close()


def chunk(delta: dict | None = None, finish=None, usage=None, choices=True) -> dict:
    out = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def raw_provider(raw: RawSSE, **kw) -> OpenAIProvider:
    return OpenAIProvider(
        provider_id=kw.pop("provider_id", "local"), base_url=raw.base_url, api_key="k", **kw
    )


def test_reasoning_field_openrouter_style(raw):
    raw.payloads = [
        chunk({"role": "assistant", "reasoning": "thinking…"}),
        chunk({"content": "hi"}),
        chunk(finish="stop"),
        "[DONE]",
    ]
    events = run(raw_provider(raw))
    assert text_of(events, ReasoningDelta) == "thinking…" and text_of(events) == "hi"


def test_both_reasoning_fields_are_not_doubled(raw):
    raw.payloads = [
        chunk({"reasoning_content": "abc", "reasoning": "abc"}),
        chunk(finish="stop"),
        "[DONE]",
    ]
    assert text_of(run(raw_provider(raw)), ReasoningDelta) == "abc"


def test_missing_and_duplicate_tool_call_ids(raw):
    raw.payloads = [
        chunk(
            {"tool_calls": [{"index": 0, "function": {"name": "bash", "arguments": '{"a":'}}]}
        ),  # no id
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "dup", "function": {"name": "read", "arguments": "{}"}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {"index": 2, "id": "dup", "function": {"name": "list", "arguments": "{}"}}
                ]
            }
        ),
        chunk(finish="tool_calls"),
        "[DONE]",
    ]
    events = run(raw_provider(raw))
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.name for c in calls] == ["bash", "read", "list"]
    assert calls[0].input == {"a": 1}
    ids = [c.call_id for c in calls]
    assert (
        len(set(ids)) == 3
        and ids[1] == "dup"
        and ids[0].startswith("call_")
        and ids[2].startswith("call_")
    )


def test_reused_index_with_new_id_is_a_new_call(raw):
    # Gemini's OpenAI endpoint: parallel calls, each complete, all at index 0.
    raw.payloads = [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                    }
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "b",
                        "function": {"name": "read", "arguments": '{"path":"x"}'},
                    }
                ]
            }
        ),
        chunk(finish="tool_calls"),
        "[DONE]",
    ]
    calls = [e for e in run(raw_provider(raw)) if isinstance(e, ToolCall)]
    assert [(c.call_id, c.name, c.input) for c in calls] == [
        ("a", "bash", {"command": "ls"}),
        ("b", "read", {"path": "x"}),
    ]


def test_deepseek_cache_usage(raw):
    usage = {
        "prompt_tokens": 500,
        "completion_tokens": 20,
        "total_tokens": 520,
        "prompt_cache_hit_tokens": 300,
        "prompt_cache_miss_tokens": 200,
    }
    raw.payloads = [
        chunk({"content": "x"}),
        chunk(finish="stop"),
        chunk(usage=usage, choices=False),
        "[DONE]",
    ]
    t = run(raw_provider(raw))[-1].tokens
    assert (t.input, t.cache_read, t.output, t.total) == (200, 300, 20, 520)


def test_clean_close_without_finish_reason_is_interrupted(raw):
    raw.payloads = [chunk({"content": "half an ans"})]  # no finish, no [DONE], then EOF
    err = failure(raw_provider(raw))
    assert err.retryable and err.message.startswith("stream interrupted:")


def test_in_stream_context_overflow_event(raw):
    raw.payloads = [
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
                "message": "Your input exceeds the context window of this model.",
            },
        }
    ]
    err = failure(raw_provider(raw))
    assert isinstance(err, ContextOverflowError) and not err.retryable
    assert "exceeds the context window" in err.message


def test_in_stream_rate_limit_event(raw):
    raw.payloads = [
        chunk({"content": "a"}),
        {
            "error": {
                "type": "rate_limit_error",
                "message": "Concurrency limit exceeded, retry later",
            }
        },
    ]
    err = failure(raw_provider(raw))
    assert type(err) is ProviderError and err.retryable
    assert retry.retry_message(err).endswith("Concurrency limit exceeded, retry later")


def test_in_stream_quota_event_is_not_retryable(raw):
    raw.payloads = [
        {"error": {"code": "insufficient_quota", "message": "You exceeded your current quota"}}
    ]
    err = failure(raw_provider(raw))
    assert not err.retryable and "exceeded your current quota" in err.message


# --------------------------------------------------------------------------
# construction


def test_client_is_created_once_without_sdk_retries(server, provider):
    client = provider.client
    assert client.max_retries == 0 and client.timeout == 5.0
    server.enqueue(Reply(text="a"), Reply(text="b"))
    run(provider)
    run(provider)
    assert provider.client is client


def test_local_server_needs_no_key(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    p = OpenAIProvider(provider_id="local", base_url=server.base_url, api_key=None)
    server.enqueue(Reply(text="ok"))
    assert text_of(run(p)) == "ok"


def test_official_api_without_key_is_an_auth_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(AuthError, match="OPENAI_API_KEY"):
        OpenAIProvider(provider_id="openai", base_url=None, api_key=None)


def test_official_api_uses_max_completion_tokens():
    p = OpenAIProvider(provider_id="openai", base_url="https://api.openai.com/v1", api_key="k")
    kwargs = p.request_kwargs(ChatRequest(model="gpt-5", messages=MESSAGES, max_tokens=10))
    assert kwargs["max_completion_tokens"] == 10 and "max_tokens" not in kwargs


def test_importing_provider_does_not_import_openai():
    code = "import sys, jupyter_session_agent.providers.openai_provider; assert 'openai' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------
# vendors' dialects (issue 25): think tags, typed content, [DONE], errors after the end


def _split_variants(text: str):
    """Every way of cutting ``text`` in two chunks, plus one chunk per character."""
    for cut in range(len(text) + 1):
        yield [text[:cut], text[cut:]]
    yield list(text)


@pytest.mark.parametrize("pieces", list(_split_variants("<think>a < b</think>\n\nAnswer <think>")))
def test_think_block_opening_the_content_is_reasoning_however_it_is_split(raw, pieces):
    raw.payloads = [chunk({"content": p}) for p in pieces if p] + [chunk(finish="stop"), "[DONE]"]
    events = run(raw_provider(raw))
    assert text_of(events, ReasoningDelta) == "a < b"
    assert text_of(events) == "Answer <think>"  # a tag later in the answer is text


def folded(events) -> tuple[str, str]:
    """(text, reasoning) as a consumer keeps them: a reclaiming reasoning delta turns the
    text so far into reasoning."""
    text, reasoning = "", ""
    for e in events:
        if isinstance(e, ReasoningDelta):
            if e.reclaim:
                text, reasoning = "", reasoning + text
            reasoning += e.text
        elif isinstance(e, TextDelta):
            text += e.text
    return text, reasoning


@pytest.mark.parametrize(
    "pieces", list(_split_variants("Hi, so a < b.\n</think>\n\nAnswer </think> x"))
)
def test_bare_closing_think_tag_ends_reasoning_however_it_is_split(raw, pieces):
    # Qwen3-Thinking's template opens the think block in the prompt: only </think> is sent
    raw.payloads = [chunk({"content": p}) for p in pieces if p] + [chunk(finish="stop"), "[DONE]"]
    text, reasoning = folded(run(raw_provider(raw)))
    assert reasoning.strip() == "Hi, so a < b."
    assert text == "Answer </think> x"  # a tag after the first is text


def test_bare_closing_think_tag_is_text_after_a_reasoning_field_or_block(raw):
    raw.payloads = [
        chunk({"reasoning_content": "hm", "content": "a</think>b"}),
        chunk(finish="stop"),
        "[DONE]",
    ]
    assert folded(run(raw_provider(raw))) == ("a</think>b", "hm")
    raw.payloads = [
        chunk({"content": "<think>x</think>y</think>z"}),
        chunk(finish="stop"),
        "[DONE]",
    ]
    assert folded(run(raw_provider(raw))) == ("y</think>z", "x")
    raw.payloads = [chunk({"content": "no tags < here"}), chunk(finish="stop"), "[DONE]"]
    assert folded(run(raw_provider(raw))) == ("no tags < here", "")


def test_unclosed_think_block_is_reasoning(raw):
    raw.payloads = [chunk({"content": "<think>still thinking"}), chunk(finish="length"), "[DONE]"]
    events = run(raw_provider(raw))
    assert text_of(events, ReasoningDelta) == "still thinking" and text_of(events) == ""


def test_typed_content_arrays_mistral_style(raw):
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Let me see."}]}
    raw.payloads = [
        chunk({"content": [thinking]}),
        chunk({"content": [{"type": "text", "text": "Four."}]}),
        chunk({"content": " Done"}),
        chunk(finish="stop"),
        "[DONE]",
    ]
    events = run(raw_provider(raw))
    assert text_of(events, ReasoningDelta) == "Let me see." and text_of(events) == "Four. Done"


def test_reasoning_details_only_when_no_reasoning_string(raw):
    details = [{"type": "reasoning.text", "text": "step one"}, {"type": "reasoning.encrypted"}]
    raw.payloads = [
        chunk({"reasoning_details": details}),
        chunk(
            {"reasoning": " two", "reasoning_details": [{"type": "reasoning.text", "text": " two"}]}
        ),
        chunk(finish="stop"),
        "[DONE]",
    ]
    assert text_of(run(raw_provider(raw)), ReasoningDelta) == "step one two"


def test_done_without_finish_reason_is_a_normal_end(raw):
    usage = {"prompt_tokens": 22, "completion_tokens": 5, "total_tokens": 27}
    raw.payloads = [chunk({"content": "4"}), chunk(choices=False, usage=usage), "[DONE]"]
    events = run(raw_provider(raw))
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.reason == "stop"
    assert (finish.tokens.input, finish.tokens.output) == (22, 5) and text_of(events) == "4"


def test_error_event_after_the_finish_reason_keeps_the_answer_and_its_usage(raw):
    usage = {"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53, "cost": 0.25}
    raw.payloads = [
        chunk({"content": "partial"}, finish="length"),
        {**chunk(), "error": {"code": 400, "message": "Token limit reached"}, "usage": usage},
        "[DONE]",
    ]
    finish = run(raw_provider(raw))[-1]
    assert finish.reason == "length" and finish.tokens.input == 43 and finish.cost == 0.25


def test_error_event_before_the_end_is_the_error(raw):
    raw.payloads = [
        chunk({"reasoning": "hm"}),
        {"error": {"message": "Tool call validation failed", "code": "tool_use_failed"}},
    ]
    err = failure(raw_provider(raw))
    assert "Tool call validation failed" in err.message and not err.retryable


def test_server_cost_openrouter_xai_deepinfra_perplexity(raw):
    byok = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "cost": 0.001,
        "is_byok": True,
        "cost_details": {"upstream_inference_cost": 0.02},
    }
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=byok), "[DONE]"]
    assert run(raw_provider(raw))[-1].cost == pytest.approx(0.021)
    ticks = {"prompt_tokens": 10, "completion_tokens": 2, "cost_in_usd_ticks": 1_234_500}
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=ticks), "[DONE]"]
    assert run(raw_provider(raw))[-1].cost == pytest.approx(1.2345e-4)
    # DeepInfra's usage carries the billed price as estimated_cost (48 in, 189 out of
    # Llama-3.1-70B at $0.35 / $0.40 per million: 9.24e-05)
    deepinfra = {"prompt_tokens": 48, "total_tokens": 237, "completion_tokens": 189}
    raw.payloads = [
        chunk({"content": "x"}, finish="stop", usage={**deepinfra, "estimated_cost": 9.24e-05}),
        "[DONE]",
    ]
    assert run(raw_provider(raw))[-1].cost == pytest.approx(9.24e-05)
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=deepinfra), "[DONE]"]
    assert run(raw_provider(raw))[-1].cost is None
    # Perplexity's usage.cost is a breakdown: sonar, low search context, $5 per 1,000 requests
    perplexity = {
        "prompt_tokens": 12,
        "completion_tokens": 98,
        "total_tokens": 110,
        "search_context_size": "low",
        "cost": {
            "input_tokens_cost": 0.000012,
            "output_tokens_cost": 0.000098,
            "request_cost": 0.005,
            "total_cost": 0.00511,
        },
    }
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=perplexity), "[DONE]"]
    assert run(raw_provider(raw))[-1].cost == pytest.approx(0.00511)


def test_reasoning_inside_completion_is_not_counted_twice(raw):
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 300,
        "total_tokens": 400,
        "completion_tokens_details": {"reasoning_tokens": 256},
    }
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=usage), "[DONE]"]
    t = run(raw_provider(raw))[-1].tokens
    assert (t.output, t.reasoning, t.total) == (44, 256, 400)
    outside = {**usage, "total_tokens": 656}  # prompt + completion + reasoning: outside
    raw.payloads = [chunk({"content": "x"}, finish="stop", usage=outside), "[DONE]"]
    t = run(raw_provider(raw))[-1].tokens
    assert (t.output, t.reasoning) == (300, 256)


def test_json_answer_to_a_streamed_request(server):
    """A server that ignores ``stream: true`` and answers one JSON completion."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(
                {
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"content": "whole"}}
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        p = OpenAIProvider(
            provider_id="x", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="k"
        )
        events = run(p)
        assert text_of(events) == "whole" and events[-1].tokens.input == 3
    finally:
        httpd.shutdown()
        httpd.server_close()


UNSUPPORTED_MAX_TOKENS = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}


def test_a_parameter_refused_by_name_is_renamed_once_and_remembered(server, provider):
    server.enqueue(Reply(status=400, error_body=UNSUPPORTED_MAX_TOKENS), Reply(text="ok"))
    request = ChatRequest(model="my-deployment", messages=MESSAGES, max_tokens=100)
    assert text_of(run(provider, request)) == "ok"
    first, second = server.requests[-2:]
    assert first["max_tokens"] == 100 and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == 100 and "max_tokens" not in second
    server.enqueue(Reply(text="again"))
    run(provider, request)
    assert server.requests[-1]["max_completion_tokens"] == 100  # remembered: one request


def test_a_refused_parameter_is_dropped_and_a_second_400_is_the_error(server, provider):
    refusal = {"error": {"message": "Unsupported value: 'temperature' does not support 0.2"}}
    server.enqueue(Reply(status=400, error_body=refusal), Reply(text="ok"))
    request = ChatRequest(model="m", messages=MESSAGES, temperature=0.2)
    assert text_of(run(provider, request)) == "ok" and "temperature" not in server.requests[-1]
    server.enqueue(Reply(status=400, error_body={"error": {"message": "bad messages"}}))
    assert failure(provider, request).status == 400


@pytest.mark.parametrize(
    "model, token_param, sent",
    [
        ("gpt-5-nano", None, "max_completion_tokens"),  # a reasoning model on any server
        ("o3-mini", None, "max_completion_tokens"),
        ("openai/gpt-5", None, "max_completion_tokens"),
        ("llama3", None, "max_tokens"),
        ("gpt-4o", "max_completion_tokens", "max_completion_tokens"),  # Azure's preset
    ],
)
def test_output_limit_parameter_name(server, model, token_param, sent):
    p = OpenAIProvider(
        provider_id="azure", base_url=server.base_url, api_key="k", token_param=token_param
    )
    server.enqueue(Reply(text="ok"))
    run(p, ChatRequest(model=model, messages=MESSAGES, max_tokens=50, reasoning_effort="low"))
    body = server.requests[-1]
    assert body[sent] == 50 and body["reasoning_effort"] == "low"


def test_complete_retries_a_refused_parameter_once(server, provider):
    server.enqueue(Reply(status=400, error_body=UNSUPPORTED_MAX_TOKENS), Reply(text="title"))
    request = ChatRequest(model="m", messages=MESSAGES, max_tokens=20)
    assert provider.complete(request) == "title"
    assert server.requests[-1]["max_completion_tokens"] == 20
