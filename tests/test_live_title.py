"""The first turn's cell takes the session's generated title, in a REAL kernel.

The title is generated in the background after the first turn, so it usually lands after
the cell's final render. The cell must not keep ``New session - <timestamp>``: the kernel
sends one more ``update_display_data`` for the cell's display, with the cell's parent header
(so a front end routes it to that cell, even after the cell has finished), whose bundle
carries the new title. Later turns (title already set) send nothing more.
"""

from __future__ import annotations

import queue
import time

import pytest
from _kernel import real_kernel

from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer
from jupyter_session_agent.ui.display import MIME_TYPE

pytestmark = pytest.mark.slow

TITLE = "Capital of France"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel")
    with ScriptedServer() as server, real_kernel(server.base_url, root / "data", root) as kc:
        messages = _run(
            kc,
            "%load_ext jupyter_session_agent\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            "%config AgentMagics.snapshot = {'enabled': False}\n",
        )
        assert not [m for m in messages if m["msg_type"] == "error"], messages
        yield kc, server, root / "data"


def _run(kc, code: str, linger: float = 0.0) -> list[dict]:
    """Execute ``code``; the iopub messages it caused, until idle and then ``linger`` seconds."""
    msg_id = kc.execute(code)
    out, idle_at = [], None
    deadline = time.monotonic() + 60
    while idle_at is None or time.monotonic() < idle_at + linger:
        assert time.monotonic() < deadline, out
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        out.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            idle_at = time.monotonic()
    return out


def _views(messages: list[dict]) -> list[tuple[str, str, dict]]:
    """(message type, display id, MIME payload) of each transcript display or update."""
    return [
        (m["msg_type"], m["content"]["transient"]["display_id"], m["content"]["data"][MIME_TYPE])
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and MIME_TYPE in m["content"]["data"]
    ]


def test_the_first_cell_is_updated_with_the_generated_title(kernel):
    kc, server, data = kernel
    server.reset()
    # the title call answers a second after the turn has ended: after the cell's final render
    server.enqueue(Reply(text="Paris."), Reply(text=TITLE, first_delay=1.0))
    messages = _run(kc, "%%agent\nWhat is the capital of France?", linger=4.0)
    views = _views(messages)
    idle = next(
        i
        for i, m in enumerate(messages)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
    )
    shown_at_idle = _views(messages[:idle])[-1][2]
    assert shown_at_idle["session"]["title"].startswith("New session - ")  # the race this is about
    assert shown_at_idle["live"] is False
    kind, display, final = views[-1]
    assert kind == "update_display_data" and display == views[0][1]  # the same output, in place
    assert final["session"]["title"] == TITLE and final["live"] is False
    assert final["messages"] == shown_at_idle["messages"]  # only the header changed
    session_id = final["session"]["id"]
    store = Store(data)
    try:
        assert store.session(session_id).title == TITLE  # as the history has it
    finally:
        store.close()

    # a later turn of the same session has its title already: nothing after the final render
    server.enqueue(Reply(text="Lyon is second."))
    messages = _run(kc, "%%agent\nAnd the second city?", linger=1.5)
    idle = next(
        i
        for i, m in enumerate(messages)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
    )
    assert not _views(messages[idle:])
    assert _views(messages)[-1][2]["session"]["title"] == TITLE
    assert len(server.requests) == 3  # no second title call
