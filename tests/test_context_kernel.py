"""Notebook context in a REAL kernel (ipykernel, numbered cells as a front end runs them):
``%agent fix`` sends the recorded traceback, ``-c`` reaches the front end as the
``set_next_input`` payload, and the notebook tool's "last N" cells are the ones before the
running cell (IPython counts a cell before it runs)."""

from __future__ import annotations

import pytest
from _kernel import execute, real_kernel

from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("context-kernel")
    with ScriptedServer() as server, real_kernel(server.base_url, root / "data", root) as kc:
        reply, messages = execute(
            kc,
            (
                "%load_ext jupyter_session_agent\n"
                "%config AgentMagics.model = 'openai/scripted'\n"
                "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000}}\n"
                "%config AgentMagics.titles = False\n"
            ),
        )
        assert reply["status"] == "ok", reply
        yield kc, server


def test_fix_sends_the_kernels_traceback_and_code_reaches_the_next_cell(kernel):
    kc, server = kernel
    server.reset()
    execute(kc, "rows = []")
    reply, _ = execute(kc, "def first(xs):\n    return xs[0]\nfirst(rows)")
    assert reply["status"] == "error" and reply["ename"] == "IndexError"
    failed = reply["execution_count"]
    server.enqueue(Reply(text="`rows` is empty.\n```python\nfirst(rows or [None])\n```"))
    reply, _ = execute(kc, "%agent fix -c")
    assert reply["status"] == "ok", reply
    sent = [m for m in server.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]
    assert f"The code of cell In [{failed}]:" in sent and "return xs[0]" in sent
    assert "IndexError: list index out of range" in sent
    assert f'File "Cell In[{failed}]", line 3' in sent
    assert f'File "Cell In[{failed}]", line 2, in first' in sent
    payloads = [p for p in reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert payloads and payloads[0]["text"] == "first(rows or [None])"
    assert not payloads[0]["replace"]  # a new cell below, the fix left to review


def test_notebook_tool_reads_the_cells_before_the_running_one(kernel):
    kc, server = kernel
    server.reset()
    reply, _ = execute(kc, "total = 40")
    shown = execute(kc, "total + 2")[0]["execution_count"]
    call = {"name": "notebook", "arguments": {"action": "cells", "last": 2}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(text="seen"))
    reply, _ = execute(kc, "%%agent\nwhat did I just run?")
    assert reply["status"] == "ok", reply
    result = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result.startswith(
        f"In [{shown - 1}]:\ntotal = 40\n\nIn [{shown}]:\ntotal + 2\nOut[{shown}]:\n42"
    )
    assert "what did I just run" not in result  # the running cell is not one of the last cells
