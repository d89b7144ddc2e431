"""Importing a history the real OpenCode CLI wrote.

``tests/fixtures/opencode-1.18/`` was made once by ``python -m benchmarks.opencode_fixture``:
``opencode run`` (opencode-ai 1.18) against the scripted server, four sessions and a subagent
— tools, two todo lists, reasoning and cached tokens, a prune, two automatic summaries, a
manual one, an overflow — and, for two sessions, the messages OpenCode sent for one more turn.
The last test drives the CLI itself when it is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from benchmarks.compactbench.opencode_cli import Sandbox, find_opencode, session_of
from benchmarks.opencode_fixture import digest
from jupyter_session_agent.core.chat import COMPACTION_QUESTION
from jupyter_session_agent.exchange.opencode import import_opencode
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

FIXTURE = Path(__file__).parent / "fixtures" / "opencode-1.18"
META = json.loads((FIXTURE / "next-requests.json").read_text())
SESSIONS = META["sessions"]  # name → OpenCode's session id


@pytest.fixture
def opencode_dir(tmp_path) -> Path:
    """OpenCode's data folder holding the fixture's database."""
    root = tmp_path / "opencode"
    root.mkdir()
    (root / "opencode.db").write_bytes(lzma.decompress((FIXTURE / "opencode.db.xz").read_bytes()))
    return root


def sqlite_rows(root: Path, query: str, *args) -> list[tuple]:
    con = sqlite3.connect(root / "opencode.db")
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def test_every_row_arrives_and_the_session_columns_are_kept(tmp_path, opencode_dir):
    store = Store(tmp_path / "data")
    result = import_opencode(store, opencode_dir)
    counts = [
        sqlite_rows(opencode_dir, f"SELECT count(*) FROM {t}")[0][0]
        for t in ("session", "message", "part")
    ]
    assert [result.sessions, result.messages, result.parts] == counts and not result.skipped
    assert {"reasoning", "tool", "compaction", "step-finish"} <= set(result.part_types)
    columns = (
        "id",
        "cost",
        "tokens_input",
        "tokens_output",
        "tokens_reasoning",
        "tokens_cache_read",
        "tokens_cache_write",
        "agent",
        "model",
        "path",
        "parent_id",
        "title",
    )
    for row in sqlite_rows(opencode_dir, f"SELECT {', '.join(columns)} FROM session"):
        source = dict(zip(columns, row))
        info = store.session(source["id"])
        assert info.cost == pytest.approx(source["cost"]) and info.agent == source["agent"]
        assert info.tokens == {
            "input": source["tokens_input"],
            "output": source["tokens_output"],
            "reasoning": source["tokens_reasoning"],
            "cache": {"read": source["tokens_cache_read"], "write": source["tokens_cache_write"]},
        }
        assert info.model == json.loads(source["model"]) and info.path == source["path"]
        assert info.parent_id == source["parent_id"] and info.title == source["title"]
    child = [s for s in store.sessions() if s.parent_id == SESSIONS["tools"]]
    assert len(child) == 1 and "subagent" in child[0].title
    steps = store.sql(
        f"SELECT sum(cache_read_tokens) c, sum(reasoning_tokens) r FROM step "
        f"WHERE session_id = '{SESSIONS['tools']}'"
    )
    assert steps["c"][0] > 0 and steps["r"][0] > 0
    # OpenCode's totals equal what the messages add up to: session_summary shows no recorded_* value
    summary = store.sql(
        "SELECT recorded_cost, recorded_input_tokens, recorded_cache_read_tokens "
        "FROM session_summary"
    )
    assert summary.isna().all().all()
    store.close()


def test_compaction_events_come_from_the_requests_summaries_and_pruned_outputs(
    ip, store, opencode_dir
):
    with capture_output() as out:
        ip.run_line_magic("agent", f"import-opencode {opencode_dir}")
    assert "compaction events: 1 prune, 4 summary" in out.stdout
    events = ip.run_line_magic("agent", "report compactions")
    by_session = {name: events[events.session_id == sid] for name, sid in SESSIONS.items()}
    assert list(by_session["auto"].cause) == ["auto", "auto"]
    assert list(by_session["manual"].cause) == ["manual"]
    assert list(by_session["overflow"].cause) == ["overflow"]
    assert list(by_session["tools"].kind) == ["prune"]
    assert set(events.source) == {"opencode"} and set(events.outcome) == {"ok"}
    summaries = events[events.kind == "summary"]
    assert (summaries.llm_calls == 1).all() and (
        summaries.tokens_before > summaries.tokens_after
    ).all()
    # the summary call's usage is its message's: input + cache, output, cost
    for _, row in summaries.iterrows():
        (data,) = sqlite_rows(
            opencode_dir, "SELECT data FROM message WHERE id = ?", row.summary_id
        )[0]
        message = json.loads(data)
        assert message["summary"] is True and message["mode"] == "compaction"
        assert row.summary_output_tokens == message["tokens"]["output"]
        assert row.cost == pytest.approx(message["cost"])
    tails = sqlite_rows(
        opencode_dir,
        "SELECT json_extract(data, '$.tail_start_id') FROM part WHERE "
        "json_extract(data, '$.type') = 'compaction' AND session_id = ?",
        SESSIONS["auto"],
    )
    assert list(by_session["auto"].tail_start_id) == [t for (t,) in tails]
    assert (by_session["auto"].tail_messages > 0).all() and (
        by_session["auto"].head_messages > 0
    ).all()
    # the prune: every output OpenCode cleared (it keeps them; only state.time.compacted is set)
    cleared = sqlite_rows(
        opencode_dir,
        "SELECT json_extract(data, '$.state.output') FROM part WHERE "
        "json_extract(data, '$.state.time.compacted') IS NOT NULL",
    )
    prune = by_session["tools"].iloc[0]
    assert prune.parts_pruned == len(cleared) > 0
    assert prune.tokens_pruned == sum(int(len(o) / 4 + 0.5) for (o,) in cleared)
    summary = store.sql("SELECT session_id, compactions, prunes FROM session_summary")
    counts = {r.session_id: (r.compactions, r.prunes) for r in summary.itertuples()}
    assert counts[SESSIONS["auto"]] == (2, 0) and counts[SESSIONS["tools"]] == (0, 1)
    assert counts[SESSIONS["manual"]] == (1, 0) and counts[SESSIONS["overflow"]] == (1, 0)


def test_todos_are_imported_and_queryable(tmp_path, opencode_dir):
    store = Store(tmp_path / "data")
    result = import_opencode(store, opencode_dir)
    source = sqlite_rows(
        opencode_dir,
        "SELECT session_id, position, content, status, priority "
        "FROM todo ORDER BY session_id, position",
    )
    rows = store.sql(
        "SELECT session_id, position, content, status, priority, source FROM todo "
        "ORDER BY session_id, position"
    )
    assert result.todos == len(source) == 3
    assert [tuple(r[:5]) for r in rows.itertuples(index=False)] == source
    assert set(rows.source) == {"opencode"} and set(rows.status) == {"completed"}
    store.close()


def test_session_totals_are_shown_where_they_differ_from_the_messages(tmp_path, opencode_dir):
    con = sqlite3.connect(opencode_dir / "opencode.db")
    con.execute(
        "UPDATE session SET cost = cost + 1.5, tokens_input = tokens_input + 100 WHERE id = ?",
        (SESSIONS["manual"],),
    )
    con.commit()
    con.close()
    store = Store(tmp_path / "data")
    import_opencode(store, opencode_dir)
    rows = store.sql(
        "SELECT session_id, cost, summary_cost, recorded_cost, input_tokens, "
        "recorded_input_tokens, recorded_output_tokens FROM session_summary"
    )
    manual = rows[rows.session_id == SESSIONS["manual"]].iloc[0]
    assert manual.recorded_cost == pytest.approx(manual.cost + manual.summary_cost + 1.5)
    assert manual.recorded_input_tokens == manual.input_tokens + 100
    assert rows.recorded_output_tokens.isna().all()
    assert rows[rows.session_id != SESSIONS["manual"]].recorded_cost.isna().all()
    store.close()


def test_the_report_lists_every_table_and_column_not_brought(tmp_path, opencode_dir):
    result = import_opencode(Store(tmp_path / "data"), opencode_dir)
    report = result.report()
    tables = {
        t
        for (t,) in sqlite_rows(opencode_dir, "SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    for table in tables - {"session", "message", "part", "todo"}:
        assert f"table {table} (" in report, table
    assert "message.time_updated, part.time_updated — " in report
    assert "credentials are never copied" in report and "schema bookkeeping" in report
    not_brought = {what for what, _ in result.not_imported}
    assert not any(
        w.startswith(("table session ", "table message ", "table part ", "table todo "))
        for w in not_brought
    )


def test_importing_again_changes_nothing(tmp_path, opencode_dir):
    store = Store(tmp_path / "data")
    first = import_opencode(store, opencode_dir)

    def state():
        rows = {
            v: store.sql(f"SELECT id, data FROM {v} ORDER BY id").to_json()
            for v in ("session", "message", "part", "compaction_event")
        }
        rows["todo"] = store.sql("SELECT * FROM todo ORDER BY session_id, position").to_json()
        return rows

    before = state()
    again = import_opencode(store, opencode_dir)
    assert again.events == first.events and sum(again.events.values()) == 5 and again.todos == 3
    assert state() == before
    store.close()


def _without_superseded_pairs(messages: list[dict]) -> list[dict]:
    """OpenCode 1.18 still sends an earlier compaction's request and summary when they fall
    inside a later compaction's tail; ours leaves them out (the later summary merged them)."""
    out, seen, skip = [], False, False
    for m in messages:
        if skip:  # the superseded summary, right after its request
            skip = False
            continue
        if m["role"] == "user" and m["head"] == COMPACTION_QUESTION:
            if seen:
                skip = True
                continue
            seen = True
        out.append(m)
    return out


@pytest.mark.parametrize("name", ["tools", "auto"])
def test_an_imported_session_continues_with_the_request_opencode_sent(
    ip, server, magics, opencode_dir, name
):
    """Continued here, an imported session's next request carries the same messages OpenCode
    sent for the same prompt: cleared outputs, the summary and tail, the continue message."""
    ip.run_line_magic("agent", f"import-opencode {opencode_dir}")
    session = SESSIONS[name]
    expected = META["next"][session]
    server.enqueue(Reply(text="Done."))
    with capture_output():
        ip.run_cell_magic("agent", f"-s {session}", expected["prompt"])
    sent = [digest(m) for m in server.requests[0]["messages"][1:]]
    theirs = (
        expected["messages"] if name == "tools" else _without_superseded_pairs(expected["messages"])
    )
    assert len(sent) == len(theirs)
    for ours, opencode in zip(sent, theirs):
        assert ours == opencode
    if name == "tools":  # OpenCode's own placeholder for the outputs its prune cleared
        assert sum(m["head"] == "[Old tool result content cleared]" for m in sent) == 6
    else:
        assert len(theirs) == len(expected["messages"]) - 2


def test_opencode_title_requests_get_a_title_and_leave_the_queue(server):
    import urllib.request

    title = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY"},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": "fix the flaky upload test please"},
        ],
    }
    server.enqueue(Reply(text="the queued reply"))
    req = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(title).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["choices"][0]["message"]["content"] == "fix the flaky upload test please"
    assert server.pending == 1


OPENCODE = find_opencode()


@pytest.mark.slow
@pytest.mark.skipif(
    OPENCODE is None, reason="the opencode CLI is not installed (.ci/run installs it)"
)
def test_smoke_the_real_cli_writes_what_we_import(tmp_path):
    """One ``opencode run`` turn (a bash call, then text) against the scripted server; its
    database imports with the run's rows, the session's cost and tokens."""
    with ScriptedServer(
        replies=[
            Reply(
                tool_calls=(
                    {
                        "name": "bash",
                        "arguments": {"command": "echo smoke-ok", "description": "echo"},
                    },
                )
            ),
            Reply(text="The command printed smoke-ok."),
        ]
    ) as srv:
        sandbox = Sandbox(
            tmp_path / "oc", OPENCODE, srv.base_url, 100_000, 4_000, tools=("bash", "read")
        )
        done = sandbox.run("Run echo smoke-ok and tell me what it printed.", timeout=240)
        assert done.returncode == 0, done.stderr[-400:]
        session = session_of(done)
        main = [r for r in srv.requests if r.get("tools")]
        assert main and main[0]["messages"][-1]["content"].startswith("Run echo smoke-ok")
    store = Store(tmp_path / "data")
    result = import_opencode(store, sandbox.data_dir)
    assert result.session_ids == [session] and not result.skipped
    history = store.messages(session)
    tool = next(p for m in history for p in m.parts if p.type == "tool")
    assert tool.tool == "bash" and "smoke-ok" in tool.state.output
    assert store.session(session).tokens["input"] > 0
    store.close()
    shutil.rmtree(tmp_path / "oc", ignore_errors=True)
