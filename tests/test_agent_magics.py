"""End to end through a real IPython shell and a scripted server over HTTP:
``%%agent`` turns, tools in the user's namespace, rows in the history."""

from __future__ import annotations

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.chat import MAX_STEPS_TEXT
from jupyter_session_agent.core.errors import (
    AgentError,
    ProviderError,
    ReadOnlyError,
    SessionNotFoundError,
)
from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def part_types(item):
    return [p.type for p in item.parts]


def test_plain_turn_is_stored_as_session_message_part(ip, server, store, magics):
    server.enqueue(
        Reply(
            text="Hello from the scripted model.",
            usage={"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        )
    )
    with capture_output() as out:
        run(ip, "Say hello")
    assert "Hello from the scripted model." in "".join(str(o.data) for o in out.outputs)
    history = store.messages(magics.session.info.id)
    assert [m.info.role for m in history] == ["user", "assistant"]
    assert part_types(history[0]) == ["text"]
    assert part_types(history[1]) == ["step-start", "text", "step-finish"]
    assistant = history[1].info
    assert assistant.finish == "stop" and assistant.parent_id == history[0].info.id
    assert (
        assistant.tokens.input == 120
        and assistant.tokens.output == 30
        and not assistant.tokens.estimated
    )
    assert assistant.cost == pytest.approx((120 * 1.0 + 30 * 2.0) / 1e6)
    finish = history[1].parts[-1]
    assert finish.cost == assistant.cost and finish.tokens == assistant.tokens
    # the SQL view agrees with the Python view
    rows = store.sql("select type from part order by id")
    assert list(rows["type"]) == ["text", "step-start", "text", "step-finish"]
    # what the server received: system + user
    sent = server.requests[-1]["messages"]
    assert sent[0]["role"] == "system" and sent[-1] == {"role": "user", "content": "Say hello"}


def test_python_tool_runs_in_the_user_namespace(ip, server, store, magics):
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "python", "arguments": {"code": "x = 21 * 2\nprint('computed')\nx"}},
            )
        ),
        Reply(text="x is 42."),
    )
    run(ip, "compute x", "-o answer")
    assert ip.user_ns["x"] == 42
    assert ip.user_ns["answer"] == "x is 42."
    history = store.messages(magics.session.info.id)
    assert [part_types(m) for m in history] == [
        ["text"],
        ["step-start", "tool", "step-finish"],
        ["step-start", "text", "step-finish"],
    ]
    tool = history[1].parts[1]
    assert tool.tool == "python" and tool.state.status == "completed"
    assert "computed" in tool.state.output and "42" in tool.state.output
    assert history[1].info.finish == "tool-calls"
    # the second request carries the call and its result, paired by id
    second = server.requests[1]["messages"]
    call = second[-2]["tool_calls"][0]
    assert call["function"]["name"] == "python"
    assert second[-1] == {"role": "tool", "tool_call_id": call["id"], "content": tool.state.output}


def test_parallel_tool_calls_and_tool_errors(ip, server, store, magics, tmp_path):
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "read", "arguments": {"filePath": "notes.txt"}},
                {"name": "bash", "arguments": "{not json"},
                {"name": "no_such_tool", "arguments": {}},
                {"name": "Grep", "arguments": {"pattern": "beta"}},
            )
        ),
        Reply(text="done"),
    )
    run(ip, "look around")
    history = store.messages(magics.session.info.id)
    tools = [p for p in history[1].parts if p.type == "tool"]
    assert [t.tool for t in tools] == ["read", "bash", "no_such_tool", "grep"]
    assert [t.state.status for t in tools] == ["completed", "error", "error", "completed"]
    assert "beta" in tools[0].state.output
    assert "Invalid arguments" in tools[1].state.error
    assert "Unknown tool" in tools[2].state.error
    assert len({t.call_id for t in tools}) == 4
    assert history[-1].info.finish == "stop"


def test_usage_is_estimated_when_the_server_sends_none(ip, server, store, magics):
    server.enqueue(Reply(text="no usage here", usage=None))
    run(ip, "hi")
    assistant = store.messages(magics.session.info.id)[-1].info
    assert (
        assistant.tokens.estimated is True
        and assistant.tokens.input > 0
        and assistant.tokens.output > 0
    )
    flag = store.sql("select tokens_estimated from message where data->>'role' = 'assistant'")
    assert bool(flag.iloc[0, 0]) is True


def test_turns_continue_the_current_session_and_new_starts_another(ip, server, store, magics):
    server.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    run(ip, "first")
    first = magics.session.info.id
    run(ip, "second")
    assert magics.session.info.id == first
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    run(ip, "third", "--new")
    assert magics.session.info.id != first
    assert len(store.sessions()) == 2
    ip.run_line_magic("agent", f"use {first[:12]}")
    assert magics.session.info.id == first


def test_max_steps_stops_a_looping_model(ip, server, store, magics):
    magics.max_steps = 2
    loop = {"name": "bash", "arguments": {"command": "echo again"}}
    server.enqueue(Reply(tool_calls=(loop,)), Reply(tool_calls=(loop,)), Reply(text="never used"))
    run(ip, "loop forever")
    assert len(server.requests) == 2
    assert server.requests[-1]["messages"][-1] == {"role": "assistant", "content": MAX_STEPS_TEXT}
    history = store.messages(magics.session.info.id)
    assert len(history) == 3


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 429, "headers": {"retry-after-ms": "50"}},
        {"status": 500, "headers": {"retry-after-ms": "50"}},
        {"status": 503, "headers": {"retry-after": "0"}},
        {"drop_after": 3},
        {"malformed_after": 2},
        {"stall": 8.0},
    ],
    ids=["429", "500", "503", "dropped", "malformed", "timeout"],
)
def test_faults_are_retried_and_recorded(ip, server, store, magics, fault):
    magics.request_timeout = 1.0
    server.enqueue(Reply(text="partial text that is thrown away", **fault), Reply(text="recovered"))
    run(ip, "hello")
    history = store.messages(magics.session.info.id)
    assistant = history[-1]
    assert part_types(assistant) == ["step-start", "retry", "text", "step-finish"]
    assert assistant.parts[2].text == "recovered"
    assert assistant.parts[1].attempt == 1 and assistant.parts[1].error["name"] == "APIError"
    assert assistant.parts[-1].metadata["attempts"] == 2


@pytest.mark.parametrize("status", [400, 500])
def test_exhausted_or_fatal_errors_are_one_line_and_the_session_stays_usable(
    ip, server, store, magics, status
):
    magics.max_retries = 0
    server.enqueue(
        Reply(status=status, error_body={"error": {"message": "boom", "type": "server_error"}}),
        Reply(text="fine again"),
    )
    with pytest.raises(ProviderError) as info:
        run(ip, "fail please")
    assert "\n" not in str(info.value) and len(info.value._render_traceback_()) == 1
    run(ip, "try again")
    history = store.messages(magics.session.info.id)
    assert history[1].info.error["name"] == "APIError"
    assert history[-1].info.finish == "stop"
    # the failed assistant message is not sent to the model again
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["system", "user", "user"]


def test_context_overflow_is_a_clear_error(ip, server, magics):
    server.enqueue(
        Reply(
            status=400,
            error_body={
                "error": {
                    "message": "This model's maximum context length is 4096 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
        )
    )
    with pytest.raises(AgentError) as info:
        run(ip, "too long")
    assert "context" in str(info.value) and "\n" not in str(info.value)


def test_interrupt_ends_the_turn_cleanly(ip, server, store, magics):
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "python", "arguments": {"code": "raise KeyboardInterrupt"}},
                {"name": "bash", "arguments": {"command": "echo never"}},
            )
        ),
        Reply(text="after the interrupt"),
    )
    with pytest.raises(AgentError, match="interrupted"):
        run(ip, "start something long")
    history = store.messages(magics.session.info.id)
    assistant = history[-1]
    assert assistant.info.error["name"] == "MessageAbortedError"
    tools = [p for p in assistant.parts if p.type == "tool"]
    assert [t.state.status for t in tools] == ["error", "error"]
    assert all(t.state.interrupted for t in tools)
    run(ip, "carry on")
    assert store.messages(magics.session.info.id)[-1].info.finish == "stop"


def test_subcommands_and_sql(ip, server, store, magics):
    server.enqueue(Reply(text="hi"))
    run(ip, "hello")
    listing = ip.run_line_magic("agent", "sessions")
    assert magics.session.info.id in listing.text
    shown = ip.run_line_magic("agent", "show")
    assert "hello" in shown.text and "hi" in shown.text
    frame = ip.run_line_magic("agent", "sql select count(*) as n from message")
    assert int(frame["n"][0]) == 2
    ip.run_cell_magic("agent_sql", "df <<", "select id, type from part")
    assert len(ip.user_ns["df"]) == 4
    with pytest.raises(ReadOnlyError):
        ip.run_line_magic("agent", "sql drop table part")
    with pytest.raises(SessionNotFoundError):
        ip.run_line_magic("agent", "use ses_nope")
    with pytest.raises(AgentError, match="unknown or not yet available"):
        ip.run_line_magic("agent", "no-such-command")
    with capture_output() as out:
        ip.run_line_magic("agent", "help")
    assert "%%agent" in out.stdout


def test_errors_render_as_one_line_in_the_shell(ip):
    with capture_output() as out:
        ip.run_cell("%agent use ses_doesnotexist")
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "SessionNotFoundError" in lines[0]


def test_unknown_model_override_key_is_a_config_error(ip, server, magics):
    before = magics.model_overrides
    with pytest.raises(AgentError, match="context"):  # refused when assigned; the old value stays
        magics.model_overrides = {"openai/scripted": {"context_window": 5}}
    assert magics.model_overrides == before


def test_each_subcommand_is_found_in_the_module_that_registers_it():
    """``%agent NAME`` imports only NAME's module: the static map must say where each is."""
    from jupyter_session_agent.ui import commands

    registered = commands.load_all()
    where = {name: s.handler.__module__.rsplit(".", 1)[1] for name, s in registered.items()}
    assert where == commands.OWNER
