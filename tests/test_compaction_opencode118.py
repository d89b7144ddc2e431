"""What ours took from the real OpenCode 1.18 (measured in CompactBench): a manual compaction keeps
every recent turn the tail budget holds; a second compaction merges into the first summary.
An automatic compaction still keeps only the current turn (it frees more where it matters)."""

from __future__ import annotations

import json

from IPython.utils.capture import capture_output

from jupyter_session_agent.core.chat import COMPACTION_QUESTION
from jupyter_session_agent.loop.compaction import SUMMARY_SYSTEM
from jupyter_session_agent.testing.scripted_server import Reply


def _turns(ip, server, n: int, start: int = 1) -> None:
    for i in range(start, start + n):
        command = f"for k in $(seq 1 150); do echo FACT{i}=v{i} log line $k; done"
        server.enqueue(
            Reply(tool_calls=({"name": "bash", "arguments": {"command": command}},)),
            Reply(text=f"turn {i} done: FACT{i} is v{i}"),
        )
        with capture_output():
            ip.run_cell_magic("agent", "", f"Turn {i}: check FACT{i}.")


def _compact(ip, server, summary: str):
    server.enqueue(Reply(text=summary))
    with capture_output():
        ip.run_line_magic("agent", "compact")
    return [r for r in server.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM][-1]


def test_a_manual_compaction_keeps_the_recent_turns_that_fit_its_tail(ip, server, magics, store):
    _turns(ip, server, 4)
    request = _compact(ip, server, "## Goal\nCheck the facts.")
    sid = magics.session.info.id
    event = store.sql(
        f"SELECT * FROM compaction_event WHERE session_id = '{sid}' AND kind = 'summary'"
    ).iloc[0]
    assert event.cause == "manual" and event.outcome == "ok"
    history = store.messages(sid)
    tail_start = next(p.tail_start_id for m in history for p in m.parts if p.type == "compaction")
    users = [
        m.info.id
        for m in history
        if m.info.role == "user" and any(p.type == "text" for p in m.parts)
    ]
    assert tail_start == users[1]  # turns 2-4 kept verbatim, turn 1 summarised
    assert event.head_messages > 0 and event.tail_messages > 3 * event.head_messages // 2
    transcript = request["messages"][1]["content"]
    assert "Turn 1: check FACT1." in transcript and "Turn 3: check FACT3." not in transcript
    # the next request: the summary, then turns 2-4 as they were, then the new request; no continue
    server.enqueue(Reply(text="ok"))
    with capture_output():
        ip.run_cell_magic("agent", "", "Turn 5: anything left?")
    sent = server.requests[-1]["messages"]
    texts = [m.get("content") or "" for m in sent]
    assert texts[1] == COMPACTION_QUESTION and texts[2].startswith("## Goal\nCheck the facts.")
    assert [t for t in texts if t.startswith("Turn ")] == [
        *(f"Turn {i}: check FACT{i}." for i in (2, 3, 4)),
        "Turn 5: anything left?",
    ]
    assert not any("compacted" in t for t in texts if isinstance(t, str))


def test_an_automatic_compaction_keeps_only_the_current_turn(ip, server, magics, store):
    magics.model_overrides = {"openai/scripted": {"context": 20_000, "output": 2_000}}
    _turns(ip, server, 3)
    server.enqueue(
        Reply(
            tool_calls=({"name": "bash", "arguments": {"command": "echo big"}},),
            usage={"prompt_tokens": 17_000, "completion_tokens": 10, "total_tokens": 17_010},
        ),
        Reply(text="## Goal\nCheck the facts."),
        Reply(text="turn 4 done"),
    )
    with capture_output():
        ip.run_cell_magic("agent", "", "Turn 4: check the big log.")
    history = store.messages(magics.session.info.id)
    tail_start = next(
        (p.tail_start_id for m in history for p in m.parts if p.type == "compaction"), None
    )
    users = [
        m.info.id
        for m in history
        if m.info.role == "user" and any(p.type == "text" and not p.synthetic for p in m.parts)
    ]
    assert tail_start is not None and tail_start == users[-1]  # the current turn only
    event = store.sql("SELECT cause, outcome FROM compaction_event WHERE kind = 'summary'").iloc[0]
    assert (event.cause, event.outcome) == ("auto", "ok")


def test_a_second_compaction_merges_into_the_first_summary(ip, server, magics, store):
    _turns(ip, server, 2)
    _compact(ip, server, "## Goal\nCheck the facts.\n\n## Instructions\n- FIRST-SUMMARY-LINE")
    _turns(ip, server, 2, start=3)
    request = _compact(ip, server, "## Goal\nCheck the facts, merged.")
    prompt = request["messages"][1]["content"]
    assert (
        "<previous-summary>\n## Goal\nCheck the facts.\n\n## Instructions\n- FIRST-SUMMARY-LINE"
        in prompt
    )
    assert "what you do not carry into the new summary is lost" in prompt and "it wins" in prompt
    sid = magics.session.info.id
    rows = store.sql(
        f"SELECT cause, outcome FROM compaction_event WHERE session_id = '{sid}' "
        "AND kind = 'summary' ORDER BY id"
    )
    assert list(rows.cause) == ["manual", "manual"] and set(rows.outcome) == {"ok"}
    server.enqueue(Reply(text="ok"))
    with capture_output():
        ip.run_cell_magic("agent", "", "Turn 5: and now?")
    sent = json.dumps(server.requests[-1]["messages"])
    assert (
        "Check the facts, merged." in sent and "FIRST-SUMMARY-LINE" not in sent
    )  # one summary shown
