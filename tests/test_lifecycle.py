"""Session lifecycle end to end (docs/lifecycle.md): fork, revert/unrevert, titles,
subagents, archive/delete, export/import — through the magics and the Python API,
against the scripted server over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import SessionNotFoundError, UsageError
from jupyter_session_agent.core.messages import AssistantMessage, UserMessage
from jupyter_session_agent.exchange import transfer
from jupyter_session_agent.session import lifecycle
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.session.title import TITLE_PROMPT, clean_title
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

PRICE_IN, PRICE_OUT = 1.0, 2.0  # per million tokens, from the ip fixture's overrides


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def line(ip, text):
    with capture_output() as out:
        value = ip.run_line_magic("agent", text)
    return value, out.stdout.strip()


def files_of(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != "data"
    }


def text_turn(server, *texts):
    server.enqueue(*(Reply(text=t) for t in texts))


def three_turns(ip, server):
    text_turn(server, "one", "two", "three")
    for prompt in ("first", "second", "third"):
        run(ip, prompt)


# --------------------------------------------------------------------------
# fork


def test_fork_at_several_points(ip, server, store, magics):
    three_turns(ip, server)
    source = magics.session
    src = store.messages(source.info.id)
    users = [m.info.id for m in src if isinstance(m.info, UserMessage)]

    cases = {
        "2": 2,
        users[2]: 4,
        src[3].info.id: 3,
        None: 6,
    }  # turn number, user id, assistant id, all
    forks = []
    for at, expected in cases.items():
        fork = source.fork(at)
        forks.append(fork)
        copied = store.messages(fork.info.id)
        assert len(copied) == expected == len(fork.history)
        assert [m.info.role for m in copied] == [m.info.role for m in src[:expected]]
        # new ascending ids, in order; nothing shared with the source
        ids = [m.info.id for m in copied]
        assert ids == sorted(ids) and not set(ids) & {m.info.id for m in src}
        part_ids = [p.id for m in copied for p in m.parts]
        assert not set(part_ids) & {p.id for m in src for p in m.parts}
        assert all(
            p.session_id == fork.info.id and p.message_id == m.info.id
            for m in copied
            for p in m.parts
        )
        # an assistant's parent is the copied user message
        for m in copied:
            if isinstance(m.info, AssistantMessage):
                parent = next(x for x in copied if x.info.id == m.info.parent_id)
                assert isinstance(parent.info, UserMessage)
        # same content
        assert [[p.to_data().get("text") for p in m.parts] for m in copied] == [
            [p.to_data().get("text") for p in m.parts] for m in src[:expected]
        ]
        assert fork.info.parent_id is None and fork.info.title == f"{source.info.title} (fork #1)"
        assert fork.info.forked_from["sessionID"] == source.info.id
    assert forks[0].info.forked_from["messageID"] == users[1]
    assert "messageID" not in forks[-1].info.forked_from
    assert len(store.messages(source.info.id)) == 6  # the source is untouched
    # lineage in SQL
    rows = store.sql(
        f"select id, data->'forkedFrom'->>'sessionID' src from session "
        f"where data->'forkedFrom'->>'sessionID' = '{source.info.id}'"
    )
    assert len(rows) == 4 and rows["id"].notna().all()
    # a fork of a fork counts up
    assert forks[-1].fork().info.title.endswith("(fork #2)")


def test_fork_magics_and_continuing_the_fork(ip, server, store, magics):
    text_turn(server, "one", "two")
    run(ip, "first")
    run(ip, "second")
    source_id = magics.session.info.id
    _, out = line(ip, "fork --at 2")
    fork_id = magics.session.info.id
    assert fork_id != source_id and "2 message(s) copied" in out and "(fork #1)" in out
    text_turn(server, "forked answer")
    run(ip, "in the fork")
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1]["content"] == "first" and sent[-1]["content"] == "in the fork"
    # %%agent --fork: fork the current session, then run the prompt in the fork
    text_turn(server, "again")
    run(ip, "forked by the cell", "--fork")
    assert magics.session.info.id not in (source_id, fork_id)
    assert magics.session.info.title.endswith("(fork #2)")
    assert len(store.messages(magics.session.info.id)) == 6
    assert len(store.messages(fork_id)) == 4
    with pytest.raises(UsageError, match="--fork"):
        run(ip, "x", "--fork --new")


def test_fork_reference_errors(ip, server, magics):
    text_turn(server, "one")
    run(ip, "first")
    with pytest.raises(UsageError, match="no turn 5"):
        line(ip, "fork --at 5")
    with pytest.raises(UsageError, match="no message"):
        line(ip, "fork --at msg_nope")
    with pytest.raises(UsageError, match="usage"):
        line(ip, "fork --bogus")


# --------------------------------------------------------------------------
# revert / unrevert


def _tool_turn(server, *calls):
    server.enqueue(
        Reply(tool_calls=tuple({"name": n, "arguments": a} for n, a in calls)), Reply(text="done")
    )


def test_revert_and_unrevert_across_write_edit_bash_python(ip, server, store, magics, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"original a\n")
    (tmp_path / "b.bin").write_bytes(bytes(range(256)))
    (tmp_path / "keep.txt").write_bytes(b"keep me\r\n")
    initial = files_of(tmp_path)

    _tool_turn(
        server,
        ("write", {"filePath": "c.txt", "content": "new c\n"}),
        ("edit", {"filePath": "a.txt", "oldString": "original", "newString": "edited"}),
    )
    run(ip, "turn 1: write and edit")
    after_1 = files_of(tmp_path)
    _tool_turn(
        server,
        (
            "bash",
            {
                "command": "printf 'X' >> b.bin && rm keep.txt && mkdir -p sub && echo hi > sub/d.txt"
            },
        ),
    )
    run(ip, "turn 2: bash")
    after_2 = files_of(tmp_path)
    _tool_turn(server, ("python", {"code": "open('a.txt', 'w').write('python wrote a')\nx = 41"}))
    run(ip, "turn 3: python")
    after_3 = files_of(tmp_path)
    assert ip.user_ns["x"] == 41
    assert len({str(after_1), str(after_2), str(after_3), str(initial)}) == 4
    session = magics.session
    sid = session.info.id

    _, out = line(ip, "revert 3")
    assert files_of(tmp_path) == after_2
    assert "kernel variables are not reverted" in out and "1 file(s) restored (a.txt)" in out
    assert ip.user_ns["x"] == 41  # as documented: the kernel is not reverted
    _, out = line(ip, "revert 2")  # further back while reverted
    assert files_of(tmp_path) == after_1
    _, out = line(ip, "unrevert")  # one unrevert undoes both
    assert files_of(tmp_path) == after_3 and "unreverted" in out

    result = session.revert(1)  # the Python API
    assert files_of(tmp_path) == initial
    assert result.hidden == 9 and sorted(Path(p).name for p in result.deleted) == ["c.txt", "d.txt"]
    assert session.info.revert["messageID"] == store.messages(sid)[0].info.id
    assert session.info.revert["snapshot"] and "python wrote a" in session.info.revert["diff"]
    assert session.history == [] and len(store.messages(sid)) == 9  # hidden, not yet removed
    shown = ip.run_line_magic("agent", "show")  # the current session's view hides them too
    assert "turn 1" not in shown.markdown and "turn 3" not in shown.markdown
    session.unrevert()
    assert files_of(tmp_path) == after_3 and len(session.history) == 9

    # revert, then the next prompt removes the hidden messages for good
    line(ip, "revert 2")
    assert files_of(tmp_path) == after_1
    text_turn(server, "after the revert")
    run(ip, "turn 2 again")
    remaining = store.messages(sid)
    assert [m.info.role for m in remaining] == [
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ]
    assert session.info.revert is None and store.session(sid).revert is None
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"] == [
        "turn 1: write and edit",
        "turn 2 again",
    ]
    kept = {m.info.id for m in remaining}
    parts = store.sql(f"select message_id from part where session_id = '{sid}'")
    assert set(parts["message_id"]) == kept  # parts of removed messages are tombstoned too
    with pytest.raises(UsageError, match="nothing to unrevert"):
        session.unrevert()


def test_revert_by_message_id_reverts_the_whole_turn(ip, server, store, magics, tmp_path):
    (tmp_path / "f.txt").write_text("v0")
    _tool_turn(server, ("write", {"filePath": "f.txt", "content": "v1"}))
    run(ip, "change f")
    history = store.messages(magics.session.info.id)
    # naming the final assistant message reverts from its user message (OpenCode's rule)
    result = magics.session.revert(history[-1].info.id)
    assert result.message_id == history[0].info.id
    assert (tmp_path / "f.txt").read_text() == "v0"


def test_revert_without_snapshots_says_so(ip, server, magics, tmp_path):
    magics.snapshot = {"enabled": False}
    _tool_turn(server, ("write", {"filePath": "g.txt", "content": "x"}))
    run(ip, "write g")
    _, out = line(ip, "revert 1")
    assert "2 message(s)" not in out and "kernel variables are not reverted" in out
    assert (tmp_path / "g.txt").exists()  # no patch parts were recorded, nothing to restore


def test_revert_only_touches_its_own_session(ip, server, store, magics, tmp_path):
    """#33940: two sessions in one folder; reverting one leaves the other's changes."""
    _tool_turn(server, ("write", {"filePath": "mine.txt", "content": "session A"}))
    run(ip, "A writes")
    a = magics.session
    _tool_turn(server, ("write", {"filePath": "theirs.txt", "content": "session B"}))
    run(ip, "B writes", "--new")
    a.revert(1)
    assert not (tmp_path / "mine.txt").exists()
    assert (tmp_path / "theirs.txt").read_text() == "session B"


# --------------------------------------------------------------------------
# titles


def test_title_from_the_first_prompt_with_its_cost_recorded(ip, server, store, magics):
    magics.titles = True
    usage = {"prompt_tokens": 200, "completion_tokens": 10, "total_tokens": 210}
    server.enqueue(
        Reply(text="Paris."),
        Reply(
            text="<think>the user asks about\nFrance</think>\n\n  Capital of France  \nignored",
            usage=usage,
        ),
    )
    run(ip, "What is the capital of France?")
    session = magics.session
    session.wait_title(10)
    assert session.info.title == "Capital of France"
    title_request = server.requests[1]
    assert title_request["messages"][0] == {"role": "system", "content": TITLE_PROMPT}
    assert "What is the capital of France?" in title_request["messages"][1]["content"]
    assert "tools" not in title_request and title_request["temperature"] == 0.5
    expected = (200 * PRICE_IN + 10 * PRICE_OUT) / 1e6
    assert session.info.title_usage["cost"] == pytest.approx(expected)
    assert session.info.title_usage["tokens"]["input"] == 200
    assert store.session(session.info.id).title == "Capital of France"
    own = sum(m.info.cost for m in session.history if isinstance(m.info, AssistantMessage))
    assert session.cost == pytest.approx(own + expected)
    rollup = store.sql(
        f"select title_cost, total_cost from session_cost where session_id = '{session.info.id}'"
    )
    assert rollup["title_cost"][0] == pytest.approx(expected)
    assert rollup["total_cost"][0] == pytest.approx(own + expected)
    # generated once: later turns do not ask again
    text_turn(server, "second answer")
    run(ip, "and Germany?")
    session.wait_title(10)
    assert len(server.requests) == 3 and session.info.title == "Capital of France"


def test_title_model_setting_and_post_processing(ip, server, store, magics):
    magics.titles = True
    magics.title_model = "openai/titler"
    magics.model_overrides = {
        **magics.model_overrides,
        "openai/titler": {
            "context": 8000,
            "output": 100,
            "price_input": 10.0,
            "price_output": 10.0,
        },
    }
    server.enqueue(
        Reply(text="hi"),
        Reply(
            text="T" * 150,
            usage={"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
        ),
    )
    run(ip, "hello")
    magics.session.wait_title(10)
    assert server.requests[1]["model"] == "titler"
    # 150 characters read as no title: the prompt names the session (clean_title cuts at 100)
    assert magics.session.info.title == "hello"
    assert clean_title("T" * 150) == "T" * 97 + "..."
    assert magics.session.info.title_usage["model"] == "openai/titler"
    assert magics.session.info.title_usage["cost"] == pytest.approx(150 * 10.0 / 1e6)
    assert clean_title("\n\n  <think>x</think> \n") == ""


def test_a_failed_title_call_keeps_the_default_title(ip, server, magics):
    magics.titles = True
    magics.max_retries = 0
    server.enqueue(Reply(text="answer"), Reply(status=400), Reply(text="next"))
    run(ip, "hello")
    magics.session.wait_title(10)
    assert magics.session.info.has_default_title and magics.session.info.title_usage is None
    assert "ProviderError" in magics.session.title_error
    run(ip, "still fine")


# --------------------------------------------------------------------------
# subagents


def _task_script(server, child_usage):
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "task",
                    "arguments": {
                        "description": "count files",
                        "prompt": "Count the files and report.",
                    },
                },
            ),
            usage={"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020},
        ),
        Reply(text="There are 3 files.", usage=child_usage),
        Reply(
            text="The subagent found 3 files.",
            usage={"prompt_tokens": 1100, "completion_tokens": 10, "total_tokens": 1110},
        ),
    )


def test_task_tool_runs_a_child_session_whose_cost_rolls_up(ip, server, store, magics):
    magics.subagents = True
    child_usage = {"prompt_tokens": 5000, "completion_tokens": 500, "total_tokens": 5500}
    _task_script(server, child_usage)
    run(ip, "how many files?", "-o answer")
    parent = magics.session
    assert ip.user_ns["answer"] == "The subagent found 3 files."
    assert "task" in [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert "task" not in [
        t["function"]["name"] for t in server.requests[1].get("tools", ())
    ]  # one level
    assert server.requests[1]["messages"][-1] == {
        "role": "user",
        "content": "Count the files and report.",
    }
    tool = next(p for p in store.messages(parent.info.id)[1].parts if p.type == "tool")
    child_id = tool.state.metadata["sessionId"]
    assert (
        tool.state.output
        == f"task_id: {child_id}\n\n<task_result>\nThere are 3 files.\n</task_result>"
    )
    child = store.session(child_id)
    assert child.parent_id == parent.info.id and child.title == "count files (@general subagent)"
    child_cost = (5000 * PRICE_IN + 500 * PRICE_OUT) / 1e6
    assert tool.state.metadata["cost"] == pytest.approx(child_cost)
    own = sum(m.info.cost for m in parent.history if isinstance(m.info, AssistantMessage))
    assert parent.cost == pytest.approx(own + child_cost)
    rows = store.sql(
        f"select session_id, own_cost, children_cost, total_cost, descendants from session_cost "
        f"where session_id in ('{parent.info.id}', '{child_id}') order by descendants desc"
    )
    assert list(rows["session_id"]) == [parent.info.id, child_id]
    assert rows["children_cost"][0] == pytest.approx(child_cost)
    assert rows["total_cost"][0] == pytest.approx(own + child_cost)
    assert rows["total_cost"][1] == pytest.approx(child_cost)
    # a new process sees the same total
    again = AgentSession.open(
        parent.info.id, magics.settings(), store=Store(magics.settings().data_dir)
    )
    assert again.cost == pytest.approx(own + child_cost)


def test_task_tool_is_offered_only_when_enabled(ip, server, magics):
    text_turn(server, "plain")
    run(ip, "hi")
    assert "task" not in [t["function"]["name"] for t in server.requests[0]["tools"]]


def test_subagent_python_api_and_resume(ip, server, store, magics):
    settings = magics.settings()
    from dataclasses import replace

    parent = AgentSession.create(
        replace(settings, subagents=True, subagent_model="openai/scripted"), store=store
    )
    _task_script(server, {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    result = parent.prompt("delegate")
    child_cost = (10 * PRICE_IN + 1 * PRICE_OUT) / 1e6
    assert result.cost == pytest.approx(sum(m.info.cost for m in result.messages) + child_cost)
    child_id = lifecycle.children(store, parent.info.id)[0].id
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "task",
                    "arguments": {"description": "again", "prompt": "more", "task_id": child_id},
                },
            )
        ),
        Reply(text="continued"),
        Reply(text="ok"),
    )
    parent.prompt("continue the task")
    assert len(store.messages(child_id)) == 4  # the same child session, resumed
    assert len(lifecycle.children(store, parent.info.id)) == 1


# --------------------------------------------------------------------------
# archive and delete


def test_archive_and_delete_keep_the_history_consistent(ip, server, store, magics):
    magics.subagents = True
    _task_script(server, {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    run(ip, "with a child")
    parent_id = magics.session.info.id
    child_id = lifecycle.children(store, parent_id)[0].id
    text_turn(server, "other")
    run(ip, "another session", "--new")
    other_id = magics.session.info.id

    _, out = line(ip, f"archive {parent_id}")
    assert "archived" in out and parent_id not in [s.id for s in store.sessions()]
    assert parent_id in [s.id for s in store.sessions(include_archived=True)]
    listing, _ = line(ip, "sessions")
    assert parent_id not in repr(listing) and other_id in repr(listing)
    line(ip, f"unarchive {parent_id}")
    assert parent_id in [s.id for s in store.sessions()]

    _, out = line(ip, f"delete {parent_id[:14]}")
    assert "1 subagent session" in out
    for sid in (parent_id, child_id):
        with pytest.raises(SessionNotFoundError):
            store.session(sid)
    counts = store.sql(
        f"select (select count(*) from message where session_id in ('{parent_id}', '{child_id}')) m, "
        f"(select count(*) from part where session_id in ('{parent_id}', '{child_id}')) p"
    )
    assert int(counts["m"][0]) == 0 and int(counts["p"][0]) == 0
    assert len(store.messages(other_id)) == 2
    # deleting the current session leaves no current session
    _, out = line(ip, f"delete {other_id}")
    assert magics.session is None and "no current session" in out


# --------------------------------------------------------------------------
# export and import


def test_export_import_round_trip_is_identical(ip, server, store, magics, tmp_path):
    magics.subagents = True
    (tmp_path / "f.txt").write_text("v0")
    _task_script(server, {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    run(ip, "delegate")
    _tool_turn(server, ("write", {"filePath": "f.txt", "content": "v1"}))
    run(ip, "write f")
    session = magics.session
    sid = session.info.id
    child_id = lifecycle.children(store, sid)[0].id
    info, history = store.session(sid), store.messages(sid)
    child_info, child_history = store.session(child_id), store.messages(child_id)

    out = tmp_path / "exports" / "s.json"
    _, said = line(ip, f"export --format json --out {out}")
    assert str(out) in said
    bundle = json.loads(out.read_text())
    assert bundle["format"] == transfer.BUNDLE_FORMAT and bundle["info"]["id"] == sid
    assert bundle["children"][0]["info"]["id"] == child_id

    # into a fresh history: identical values, same ids
    other = Store(tmp_path / "elsewhere")
    result = transfer.import_bundle(other, out)
    assert result.status == "imported" and result.sessions == [sid, child_id]
    assert other.session(sid) == info and other.messages(sid) == history
    assert other.session(child_id) == child_info and other.messages(child_id) == child_history
    assert transfer.import_bundle(other, out).status == "unchanged"  # twice: a no-op
    other.close()

    # delete here, import back through the magic
    line(ip, f"delete {sid}")
    _, said = line(ip, f"import {out}")
    assert "imported" in said
    assert store.session(sid) == info and store.messages(sid) == history
    assert store.messages(child_id) == child_history
    _, said = line(ip, f"import {out}")
    assert "unchanged" in said
    # a bundle that differs from what is stored is refused, clearly
    bundle["info"]["title"] = "changed"
    (tmp_path / "changed.json").write_text(json.dumps(bundle))
    with pytest.raises(UsageError, match="differs"):
        line(ip, f"import {tmp_path / 'changed.json'}")
    with pytest.raises(UsageError, match="not JSON|no file"):
        line(ip, f"import {tmp_path / 'missing.json'}")


def test_export_markdown_and_self_contained_html(ip, server, store, magics, tmp_path):
    magics.subagents = True
    server.enqueue(Reply(text="thinking aloud", reasoning="let me think"))
    run(ip, "Explain `x` **now**")
    _task_script(server, {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    run(ip, "delegate")
    sid = magics.session.info.id
    md = magics.session.export("md")
    assert (
        md.startswith(f"# {magics.session.info.title}")
        and "Explain `x` **now**" in md
        and "cost:" in md
    )
    _, said = line(ip, "export --format html")
    path = Path(said.split(" to ")[1].split(" (")[0])
    assert path.parent == tmp_path and path.suffix == ".html"
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<details" in page
    assert (
        "<script" not in page
        and "http://" not in page
        and "https://" not in page
        and "<link" not in page
    )
    assert "Explain <code>x</code> <b>now</b>" in page and "let me think" in page
    assert "There are 3 files." in page  # the subagent's transcript, nested in its task call
    for text in (md, page, json.dumps(transfer.bundle(store, sid))):
        assert "sk-test-not-a-real-key" not in text
    with pytest.raises(UsageError, match="usage"):
        line(ip, "export --format pdf")


# --------------------------------------------------------------------------
# help


def test_help_lists_the_lifecycle_subcommands(ip):
    _, out = line(ip, "help")
    for name in (
        "fork",
        "revert MSG",
        "unrevert",
        "turns",
        "archive ID",
        "delete ID",
        "export",
        "import PATH",
        "import-opencode",
        "--fork",
    ):
        assert name in out


def test_turns_lists_ids_and_marks_reverted_turns(ip, server, magics):
    text_turn(server, "one", "two")
    run(ip, "first prompt")
    run(ip, "second prompt")
    table, _ = line(ip, "turns")
    text = table.text if hasattr(table, "text") else str(table)
    assert "first prompt" in text and "second prompt" in text and "(reverted)" not in text
    magics.session.revert(2)
    table, _ = line(ip, "turns")
    assert "(reverted)" in (table.text if hasattr(table, "text") else str(table))


def test_revert_at_a_part_keeps_the_earlier_parts_of_its_message(
    ip, server, store, magics, tmp_path
):
    (tmp_path / "p.txt").write_text("before")
    server.enqueue(
        Reply(
            text="I will write the file now.",
            tool_calls=({"name": "write", "arguments": {"filePath": "p.txt", "content": "after"}},),
        ),
        Reply(text="written"),
    )
    run(ip, "write p")
    session = magics.session
    history = store.messages(session.info.id)
    step = history[1]
    tool = next(p for p in step.parts if p.type == "tool")
    result = session.revert(step.info.id, part_id=tool.id)
    assert (result.message_id, result.part_id) == (step.info.id, tool.id)
    assert (tmp_path / "p.txt").read_text() == "before" and result.hidden == 1
    assert [p.type for p in session.history[1].parts] == ["step-start", "text"]
    text_turn(server, "next")
    run(ip, "go on")
    kept = store.messages(session.info.id)
    assert [p.type for p in kept[1].parts] == ["step-start", "text"] and len(kept) == 4


def test_the_prompt_after_a_revert_removes_the_subagents_of_removed_turns(
    ip, server, store, magics
):
    magics.subagents = True
    for _ in range(2):
        _task_script(server, {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
        run(ip, "delegate")
    session = magics.session
    first, second = sorted(lifecycle.children(store, session.info.id), key=lambda s: s.time_created)
    session.revert(2)
    assert len(lifecycle.children(store, session.info.id)) == 2  # only hidden so far
    text_turn(server, "fresh")
    run(ip, "instead")
    assert [c.id for c in lifecycle.children(store, session.info.id)] == [first.id]
    with pytest.raises(SessionNotFoundError):
        store.session(second.id)
    rollup = store.sql(
        f"select descendants from session_cost where session_id = '{session.info.id}'"
    )
    assert int(rollup["descendants"][0]) == 1
