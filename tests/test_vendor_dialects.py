"""What a vendor needs back, and what a server says about its limits, through ``%%agent``
in a real IPython shell against servers on loopback (the scripted server, or the replay
server serving given bytes): DeepSeek's reasoning on tool-call turns, Gemini's thought
signatures, the server's own words for a context overflow, a server-reported window."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyter_session_agent.core.errors import AgentError
from jupyter_session_agent.testing.replay_server import Recorded, ReplayServer
from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def assistant_with_calls(body: dict) -> dict:
    return next(m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))


@pytest.mark.parametrize("vendor, sent_back", [("deepseek", True), ("groq", False)])
def test_reasoning_goes_back_with_tool_calls_only_where_required(
    ip, server, magics, monkeypatch, vendor, sent_back
):
    monkeypatch.setenv(f"{vendor.upper()}_BASE_URL", server.base_url)
    monkeypatch.setenv(f"{vendor.upper()}_API_KEY", "sk-test")
    magics.model = f"{vendor}/some-reasoner"
    server.enqueue(
        Reply(
            reasoning="I should look at x first.",
            tool_calls=({"name": "python", "arguments": {"code": "x = 1"}},),
        ),
        Reply(text="x is 1."),
    )
    run(ip, "what is x?")
    message = assistant_with_calls(server.requests[-1])
    if sent_back:
        assert message["reasoning_content"] == "I should look at x first."
    else:
        assert "reasoning_content" not in message


def _sse(*chunks: dict) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def test_gemini_thought_signature_goes_back_with_its_call(ip, magics, store, monkeypatch):
    call = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "python", "arguments": '{"code": "y = 2"}'},
        "extra_content": {"google": {"thought_signature": "c2lnbmF0dXJl"}},
    }
    first = _sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
    second = _sse(
        {"choices": [{"index": 0, "delta": {"content": "y is 2."}, "finish_reason": "stop"}]}
    )
    with ReplayServer(
        [Recorded(200, "text/event-stream", first), Recorded(200, "text/event-stream", second)]
    ) as replay:
        monkeypatch.setenv("GEMINI_BASE_URL", replay.url + "/v1beta/openai")
        monkeypatch.setenv("GEMINI_API_KEY", "k")
        magics.model = "gemini/gemini-2.5-flash"
        run(ip, "set y")
        sent = replay.requests[-1]["body"]
    assert ip.user_ns.get("y") == 2
    back = assistant_with_calls(sent)["tool_calls"][0]
    assert back["extra_content"] == {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    tool = next(
        p for m in store.messages(magics.session.info.id) for p in m.parts if p.type == "tool"
    )
    assert tool.metadata == {"thoughtSignature": "c2lnbmF0dXJl"}
    ip.user_ns.pop("y", None)


def test_overflow_line_quotes_the_server(ip, server, magics):
    magics.compaction = {"auto": False}
    said = "the request exceeds the available context size (n_ctx: 4096), try increasing it"
    server.enqueue(
        Reply(
            status=400,
            error_body={
                "error": {"code": 400, "message": said, "type": "exceed_context_size_error"}
            },
        )
    )
    with pytest.raises(AgentError) as info:
        run(ip, "a long question")
    line = str(info.value)
    assert said in line and "\n" not in line


def test_a_window_the_server_reports_is_used(ip, magics, monkeypatch):
    """No catalogue window for the model: vLLM's ``max_model_len`` from ``GET /models``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"data": [{"id": "my-org/tiny", "max_model_len": 16_384}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("VLLM_BASE_URL", f"http://127.0.0.1:{httpd.server_address[1]}/v1")
        from jupyter_session_agent.core import budget
        from jupyter_session_agent.core.settings import Settings
        from jupyter_session_agent.providers.registry import resolve

        _, info, _ = resolve("vllm/my-org/tiny", Settings())
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert (info.context, info.source) == (16_384, "local")
    limits = budget.budget(info)
    assert limits.usable == 16_384 - 4_096 - 4_096  # a quarter of the window for the answer


def test_reasoning_effort_setting_is_sent(ip, server, magics):
    magics.reasoning_effort = "low"
    server.enqueue(Reply(text="ok"))
    run(ip, "hi")
    assert server.requests[-1]["reasoning_effort"] == "low"
    magics.reasoning_effort = None
    server.enqueue(Reply(text="ok"))
    run(ip, "hi again")
    assert "reasoning_effort" not in server.requests[-1]


def test_bare_closing_think_tag_through_agent(ip, magics, store, monkeypatch):
    """vLLM serving Qwen3-Thinking-2507 without a reasoning parser: the reasoning streams as
    content and only ``</think>`` ends it; stored as a reasoning part, the answer as text."""
    pieces = [
        "Okay",
        ", the user",
        " says hello.\n",
        "</th",
        "ink>\n\n",
        "Hello!",
        " How can I help?",
    ]
    body = _sse(
        *({"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 20}},
    )
    with ReplayServer([Recorded(200, "text/event-stream", body)]) as replay:
        monkeypatch.setenv("VLLM_BASE_URL", replay.url + "/v1")
        magics.model = "vllm/Qwen/Qwen3-4B-Thinking-2507"
        run(ip, "Hello!")
    parts = [p for m in store.messages(magics.session.info.id)[1:] for p in m.parts]
    kinds = [(p.type, p.text) for p in parts if p.type in ("text", "reasoning")]
    assert kinds == [
        ("reasoning", "Okay, the user says hello."),
        ("text", "Hello! How can I help?"),
    ]


def test_perplexity_reported_cost_with_its_request_fee(ip, magics, store, monkeypatch):
    """Perplexity's usage.cost is a breakdown whose total includes a per-request search fee
    that no token price covers: the step costs that total, from the server."""
    usage = {
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
    body = json.dumps(
        {
            "id": "x",
            "model": "sonar",
            "object": "chat.completion",
            "usage": usage,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Hi."},
                }
            ],
        }
    ).encode()
    with ReplayServer([Recorded(200, "application/json", body)]) as replay:
        monkeypatch.setenv("PERPLEXITY_BASE_URL", replay.url)
        monkeypatch.setenv("PERPLEXITY_API_KEY", "pplx-test")
        magics.model = "perplexity/sonar"
        run(ip, "Hello!")
    row = store.sql(f"select * from step where session_id = '{magics.session.info.id}'").iloc[0]
    assert row["cost"] == pytest.approx(0.00511) and row["cost_source"] == "server"


def test_a_gzip_recording_is_served_as_recorded(ip, magics, store, monkeypatch, tmp_path):
    """A cassette keeping a compressed body as bytes (vcrpy's ``!!binary``): the replay
    server sends it with its recorded content-encoding, and the turn reads the answer."""
    import gzip

    from jupyter_session_agent.testing.replay_server import load_cassette

    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "Zipped."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    packed = gzip.compress(json.dumps(body).encode())
    cassette = tmp_path / "c.yaml"
    yaml = pytest.importorskip("yaml")
    cassette.write_text(
        yaml.safe_dump(
            {
                "interactions": [
                    {
                        "request": {"uri": "https://api.together.xyz/v1/chat/completions"},
                        "response": {
                            "body": {"string": packed},
                            "headers": {
                                "Content-Encoding": ["gzip"],
                                "Content-Type": ["application/json; charset=utf-8"],
                            },
                            "status": {"code": 200, "message": "OK"},
                        },
                    }
                ]
            }
        )
    )
    recorded = load_cassette(cassette)
    assert recorded.body == packed and recorded.content_encoding == "gzip"
    with ReplayServer([recorded]) as replay:
        monkeypatch.setenv("TOGETHER_BASE_URL", replay.url + "/v1")
        monkeypatch.setenv("TOGETHER_API_KEY", "k")
        magics.model = "together/meta-llama/Llama-3.3-70B-Instruct-Turbo"
        run(ip, "Hello!")
    parts = [p for m in store.messages(magics.session.info.id)[1:] for p in m.parts]
    assert [p.text for p in parts if p.type == "text"] == ["Zipped."]
