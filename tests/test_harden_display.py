"""A python call whose code raised is stored as completed (its prints matter) but shown as
failed everywhere: the live view, ``%agent show`` (MIME bundle, Markdown, text), the exports
(Markdown, HTML, JSON round trip) and the ``tool_call`` analytics view — in this process and
in a later one reading the same history. (The JupyterLab renderer: tests/test_jupyterlab.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.display import MIME_TYPE, TranscriptView
from jupyter_session_agent.ui.live import LiveView

CALLS = (
    {"name": "python", "arguments": {"code": "print('before the error')\ndef broken(:\n    pass"}},
    {"name": "python", "arguments": {"code": "print('half done')\n1 / 0"}},
    {"name": "python", "arguments": {"code": "print('fine')\n6 * 7"}},
)


CLASSES = ["SyntaxError", "ZeroDivisionError", None]  # what each call raised


def tool_parts(data):
    return [p for m in data["messages"] for p in m["parts"] if p["type"] == "tool"]


@pytest.fixture
def failed_turn(ip, server, store, magics):
    """One turn whose three python calls raised SyntaxError, ZeroDivisionError, and worked."""
    server.enqueue(Reply(tool_calls=CALLS), Reply(text="Two calls failed."))
    session = magics.current(new=True)
    view = LiveView(live=True, session=session, detail="full")
    with capture_output() as out:
        session.prompt("run these", observer=view)
        view.finish()
    store.flush(sync=True)
    return session, [o.data for o in out.outputs]


def test_the_history_keeps_the_call_completed_with_its_prints_and_the_class(failed_turn, store):
    session, _ = failed_turn
    tools = [p for m in store.messages(session.info.id) for p in m.parts if p.type == "tool"]
    assert [t.state.status for t in tools] == ["completed"] * 3  # by design: the output matters
    assert [t.state.metadata.get("error") for t in tools] == CLASSES
    assert "before the error" not in tools[0].state.output  # a SyntaxError runs nothing
    assert "half done" in tools[1].state.output and "ZeroDivisionError" in tools[1].state.output


def test_the_live_view_shows_failed_calls_as_failed(failed_turn):
    _, bundles = failed_turn
    assert len(bundles) > 1
    for bundle in bundles:  # no update ever shows a raised call as a green "completed"
        for part in tool_parts(bundle[MIME_TYPE]):
            if part["state"]["status"] == "completed" and part["state"]["metadata"].get("error"):
                assert f"`{part['state']['metadata']['error']}`" in bundle["text/markdown"]
    final = bundles[-1]
    parts = tool_parts(final[MIME_TYPE])
    assert [p["state"]["metadata"].get("error") for p in parts] == CLASSES
    md = final["text/markdown"]
    assert "**python** `SyntaxError`" in md and "**python** `ZeroDivisionError`" in md
    assert md.count("**python** `completed`") == 1  # only the call that worked
    text = final["text/plain"]
    assert "[python failed SyntaxError]" in text and "[python failed ZeroDivisionError]" in text
    assert "[python completed]" in text


def test_show_gives_the_same_failed_badges(failed_turn, ip, magics):
    session, _ = failed_turn
    magics.session = None  # from the stored history, not the live session's memory
    bundle = ip.run_line_magic("agent", f"show {session.info.id}")._repr_mimebundle_()
    json.dumps(bundle)
    md = bundle["text/markdown"]
    assert "**python** `SyntaxError`" in md and md.count("**python** `completed`") == 1
    parts = tool_parts(bundle[MIME_TYPE])
    assert [p["state"]["metadata"].get("error") for p in parts] == CLASSES


def test_exports_show_failed_calls_as_failed(failed_turn, ip, tmp_path):
    session, _ = failed_turn
    sid = session.info.id
    ip.run_line_magic("agent", f"export {sid} --format md --out {tmp_path / 's.md'}")
    ip.run_line_magic("agent", f"export {sid} --format html --out {tmp_path / 's.html'}")
    md = (tmp_path / "s.md").read_text()
    # the live view's badges (one renderer): the exception class, or the status in words
    assert "**python** `SyntaxError`" in md and "**python** `ZeroDivisionError`" in md
    assert md.count("**python** `completed`") == 1
    page = (tmp_path / "s.html").read_text()
    assert page.count('<details class="tool failed">') == 2
    assert page.count('<details class="tool completed">') == 1
    assert '<span class="status">SyntaxError</span>' in page
    assert ".failed>summary .status" in page  # styled as an error


def test_tool_call_counts_the_failures_here_and_in_a_later_process(
    failed_turn, store, data_dir, tmp_path
):
    session, _ = failed_turn
    query = (
        "SELECT status, failed, coalesce(error_class, '-') FROM tool_call "
        f"WHERE session_id = '{session.info.id}' ORDER BY id"
    )
    rows = store.sql(query).values.tolist()
    assert rows == [
        ["completed", True, "SyntaxError"],
        ["completed", True, "ZeroDivisionError"],
        ["completed", False, "-"],
    ]
    summary = (
        store.sql(
            f"SELECT tool_calls, tool_errors FROM session_summary WHERE session_id = "
            f"'{session.info.id}'"
        )
        .iloc[0]
        .tolist()
    )
    assert summary == [3, 2]
    from jupyter_session_agent import analytics

    rates = analytics.tool_failure_rates(store).set_index("tool")
    assert rates.loc["python", "raised"] == 2
    assert rates.loc["python", "failure_rate"] == pytest.approx(2 / 3)
    assert analytics.plot_tools(store)._repr_png_().startswith(b"\x89PNG")
    # a later process reading the same files sees the same thing
    code = (
        "import json, jupyter_session_agent as j; "
        f"print(json.dumps(j.sql({query!r}).values.tolist()))"
    )
    env = {**os.environ, "JUPYTER_SESSION_AGENT_DIR": str(data_dir)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == rows


def test_a_json_bundle_keeps_the_failure_through_import(failed_turn, ip, magics, tmp_path):
    session, _ = failed_turn
    path = tmp_path / "bundle.json"
    ip.run_line_magic("agent", f"export {session.info.id} --format json --out {path}")
    magics.data_dir = str(tmp_path / "elsewhere")
    ip.run_line_magic("agent", f"import {path}")
    rows = magics.store().sql(
        "SELECT failed, coalesce(error_class, '-') FROM tool_call ORDER BY id"
    )
    assert rows.values.tolist() == [
        [True, "SyntaxError"],
        [True, "ZeroDivisionError"],
        [False, "-"],
    ]


def test_the_compact_view_names_the_exception_of_each_failed_call(failed_turn, store):
    session, _ = failed_turn
    history = store.messages(session.info.id)
    bundle = TranscriptView(history, detail="compact")._repr_mimebundle_()
    md = bundle["text/markdown"]
    assert "· SyntaxError" in md and "· ZeroDivisionError" in md and md.count("· completed") == 1
    problems = [t["problem"] for t in bundle[MIME_TYPE]["tools"].values()]
    assert problems[0].startswith("SyntaxError") and problems[1].startswith("ZeroDivisionError")
    assert problems[2] is None
