"""The live view through a REAL kernel: while a ``%%agent`` cell runs, IOPub
carries one ``display_data`` and then ``update_display_data`` messages for the
same display id, each the whole transcript bundle — what a browser receives
while the kernel is busy (text streaming, a tool going running → completed)."""

from __future__ import annotations

import pytest
from _kernel import execute, real_kernel

from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer
from jupyter_session_agent.ui.display import MIME_TYPE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("live-kernel")
    with ScriptedServer() as server, real_kernel(server.base_url, root / "data", root) as kc:
        _, messages = execute(
            kc,
            (
                "%load_ext jupyter_session_agent\n"
                "%config AgentMagics.model = 'openai/scripted'\n"
                "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000, 'output': 4096}}\n"
                "%config AgentMagics.titles = False\n"
                "%config AgentMagics.permission = {'python': 'allow'}\n"
                "%config AgentMagics.live = True\n"
            ),
        )
        assert not [m for m in messages if m["msg_type"] == "error"], messages
        yield kc, server


def test_busy_cell_streams_display_updates(kernel):
    kc, server = kernel
    server.enqueue(
        Reply(
            text="Let me compute that in the kernel.",
            chunk_chars=3,
            delay=0.02,
            tool_calls=(
                {
                    "name": "python",
                    "arguments": {"code": "import time; time.sleep(0.3); print(6 * 7)"},
                },
            ),
        ),
        Reply(text="The answer is 42, as printed by the kernel.", chunk_chars=3, delay=0.02),
    )
    _, messages = execute(kc, "%%agent --new\ncompute 6*7 in python")
    assert not [m for m in messages if m["msg_type"] == "error"], messages
    shown = [
        m
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and MIME_TYPE in m["content"]["data"]
    ]
    assert shown[0]["msg_type"] == "display_data"
    display_id = shown[0]["content"]["transient"]["display_id"]
    updates = shown[1:]
    assert len(updates) >= 5 and all(m["msg_type"] == "update_display_data" for m in updates)
    assert {m["content"]["transient"]["display_id"] for m in updates} == {display_id}
    bundles = [m["content"]["data"] for m in shown]
    assert all("text/markdown" in b and "text/plain" in b for b in bundles)
    data = [b[MIME_TYPE] for b in bundles]
    assert all(d["live"] for d in data[:-1]) and not data[-1]["live"]
    tool_states = [
        [p["state"]["status"] for m in d["messages"] for p in m["parts"] if p["type"] == "tool"]
        for d in data
    ]
    assert ["running"] in tool_states and ["completed"] in tool_states
    assert tool_states.index(["running"]) < tool_states.index(["completed"])
    texts = {
        p["text"]
        for d in data
        for m in d["messages"]
        for p in m["parts"]
        if p["type"] == "text" and p["text"].startswith("The answer")
    }
    assert len(texts) > 1  # partial texts were sent while the model streamed
    final = data[-1]
    assert [m["info"]["role"] for m in final["messages"]] == ["user", "assistant", "assistant"]
    assert final["budget"]["used"] > 0 and final["budget"]["usable"] > 0
    # the python tool ran in this kernel and its print reached the tool output, not the cell
    tool = next(p for m in final["messages"] for p in m["parts"] if p["type"] == "tool")
    assert tool["state"]["output"].strip().startswith("42")
