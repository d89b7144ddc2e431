"""store.py: journals, views, read-only SQL, many processes, crashes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.errors import ReadOnlyError, SessionNotFoundError, UsageError
from jupyter_session_agent.core.messages import (
    AgentPart,
    AssistantMessage,
    CompactionPart,
    FilePart,
    ModelRef,
    PatchPart,
    ReasoningPart,
    RetryPart,
    Session,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    UserMessage,
    WithParts,
    error_data,
    now_ms,
    replace,
)
from jupyter_session_agent.store import Store

ROOT = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).with_name("_store_writer.py")


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "data")
    yield s
    s.close()


def make_session(**changes) -> Session:
    now = now_ms()
    return replace(
        Session(
            id=ids.descending("session"),
            directory="/work",
            title="t",
            time_created=now,
            time_updated=now,
        ),
        **changes,
    )


def full_session() -> tuple[Session, list]:
    """A session with both roles and every part type (every tool state), optional fields set."""
    now = now_ms()
    session = make_session(
        slug="brave-otter",
        version="0.1.0",
        parent_id=ids.descending("session"),
        permission=({"permission": "bash", "action": "ask", "pattern": "*"},),
        summary={"additions": 1, "deletions": 2, "files": 3},
    )
    user = UserMessage(
        id=ids.ascending("message"),
        session_id=session.id,
        time_created=now,
        model=ModelRef("openai", "gpt-4o"),
        system="be brief",
        variant="high",
        summary={"title": "x", "diffs": []},
    )
    reply = AssistantMessage(
        id=ids.ascending("message"),
        session_id=session.id,
        parent_id=user.id,
        time_created=now,
        provider_id="openai",
        model_id="gpt-4o",
        path={"cwd": "/w", "root": "/w"},
        cost=0.25,
        tokens=Tokens(
            input=10, output=20, reasoning=3, cache_read=4, cache_write=5, total=42, estimated=True
        ),
        time_completed=now + 5,
        finish="stop",
        error=error_data("APIError", "boom", isRetryable=True),
        summary=True,
        variant="high",
        structured={"a": [1, 2]},
    )
    u = dict(session_id=session.id, message_id=user.id)
    a = dict(session_id=session.id, message_id=reply.id)
    pid = lambda: ids.ascending("part")  # noqa: E731
    parts = [
        TextPart(
            id=pid(),
            text="hello ünïcode 😀\nline\x00",
            synthetic=True,
            time_start=now,
            time_end=now,
            metadata={"k": "v"},
            **u,
        ),
        FilePart(
            id=pid(),
            mime="text/plain",
            url="file:///a.txt",
            filename="a.txt",
            source={"type": "file", "path": "a.txt"},
            **u,
        ),
        AgentPart(
            id=pid(), name="explore", source={"value": "@explore", "start": 0, "end": 8}, **u
        ),
        SubtaskPart(
            id=pid(),
            prompt="p",
            description="d",
            agent="explore",
            model=ModelRef("openai", "m"),
            command="c",
            **u,
        ),
        CompactionPart(id=pid(), auto=True, overflow=True, tail_start_id="msg_x", **u),
        StepStartPart(id=pid(), snapshot="abc", **a),
        ReasoningPart(
            id=pid(), text="thinking", time_start=now, time_end=now + 1, metadata={"x": 1}, **a
        ),
        ToolPart(
            id=pid(),
            call_id="c1",
            tool="bash",
            state=ToolPending(input={"c": 1}, raw='{"c":1}'),
            **a,
        ),
        ToolPart(
            id=pid(),
            call_id="c2",
            tool="bash",
            metadata={"m": 1},
            **a,
            state=ToolCompleted(
                input={"command": "ls"},
                output="a\nb",
                title="ls",
                metadata={"exit": 0},
                time_start=now,
                time_end=now + 2,
                time_compacted=now + 9,
                attachments=({"type": "file", "url": "x"},),
            ),
        ),
        ToolPart(
            id=pid(),
            call_id="c3",
            tool="read",
            **a,
            state=ToolError(
                input={"path": "x"},
                error="nope",
                time_start=now,
                time_end=now,
                metadata={"interrupted": False},
            ),
        ),
        SnapshotPart(id=pid(), snapshot="def", **a),
        PatchPart(id=pid(), hash="h", files=("a.txt", "b.txt"), **a),
        RetryPart(id=pid(), attempt=2, error=error_data("APIError", "429"), time_created=now, **a),
        StepFinishPart(
            id=pid(), reason="stop", cost=0.25, tokens=Tokens(input=1, output=2), snapshot="s", **a
        ),
    ]
    return session, [user, reply, *parts]


def expected(values: list) -> list[WithParts]:
    messages = [v for v in values if hasattr(v, "role")]
    return [
        WithParts(m, tuple(v for v in values if getattr(v, "message_id", None) == m.id))
        for m in messages
    ]


def count(store: Store, query: str) -> int:
    return int(store.sql(query).iloc[0, 0])


# --------------------------------------------------------------------------
# values


def test_round_trip_of_every_type(tmp_path):
    session, values = full_session()
    types = {type(v).__name__ for v in values}
    assert len(types) == 14 and {"ToolPending", "ToolCompleted", "ToolError"} <= {
        type(v.state).__name__ for v in values if isinstance(v, ToolPart)
    }
    writer = Store(tmp_path)
    writer.put(session, *values)
    writer.flush()
    reader = Store(tmp_path)  # another writer id, nothing cached
    assert reader.session(session.id) == session
    assert reader.messages(session.id) == expected(values)
    assert writer.messages(session.id) == expected(values)
    writer.close()  # compacted to Parquet: the same values, but its pending tool is now an orphan
    pending = values[9]
    assert isinstance(pending.state, ToolPending)
    after = Store(tmp_path).messages(session.id)
    interrupted = after[1].parts[2]
    assert interrupted.state.interrupted and interrupted.state.input == pending.state.input
    assert after == expected(
        [replace(v, state=interrupted.state) if v is pending else v for v in values]
    )
    assert Store(tmp_path).session(session.id) == session


def test_views_expose_opencode_columns_and_json(store):
    session, values = full_session()
    store.put(session, *values)
    store.flush()
    row = store.sql("SELECT * FROM session").iloc[0]
    assert (row.id, row.slug, row.directory, row.title, row.version, row.project_id) == (
        session.id,
        "brave-otter",
        "/work",
        "t",
        "0.1.0",
        "global",
    )
    assert row.time_created == session.time_created and row.parent_id == session.parent_id
    msg = store.sql("SELECT * FROM message WHERE role = 'assistant'").iloc[0]
    assert (msg.provider_id, msg.model_id, msg.cost, msg.finish, msg.error_name) == (
        "openai",
        "gpt-4o",
        0.25,
        "stop",
        "APIError",
    )
    assert (
        msg.input_tokens,
        msg.output_tokens,
        msg.reasoning_tokens,
        msg.cache_read_tokens,
        msg.cache_write_tokens,
        msg.total_tokens,
    ) == (10, 20, 3, 4, 5, 42)
    assert bool(msg.summary) and bool(msg.tokens_estimated)
    assert store.sql("SELECT model_id FROM message WHERE role = 'user'").model_id[0] == "gpt-4o"
    assert json.loads(msg.data)["parentID"] == values[0].id and "id" not in json.loads(msg.data)
    tools = store.sql(
        "SELECT call_id, tool, status, data->'state'->>'status' s, compacted_at FROM part "
        "WHERE data->>'type' = 'tool' ORDER BY call_id"
    )
    assert list(tools.status) == list(tools.s) == ["pending", "completed", "error"]
    assert tools.compacted_at[1] == values[10].state.time_compacted
    assert count(store, "SELECT count(DISTINCT type) FROM part") == 12
    part_data = json.loads(store.sql("SELECT data FROM part WHERE type = 'text'").data[0])
    assert not {"id", "sessionID", "messageID"} & part_data.keys()


# --------------------------------------------------------------------------
# revisions, tombstones, sessions


def test_newest_revision_wins_across_writers(tmp_path):
    a, b = Store(tmp_path), Store(tmp_path)
    session, values = full_session()
    text = values[2]
    a.put(session, *values)
    a.flush()
    b.put(replace(text, text="second"))
    b.flush()
    a.put(replace(text, text="draft"), replace(text, text="third"))  # last put before flush wins
    a.flush()
    for store in (a, b, Store(tmp_path)):
        assert store.messages(session.id)[0].parts[0].text == "third"
        assert store.sql(f"SELECT data->>'text' t FROM part WHERE id = '{text.id}'").t[0] == "third"
    rows = a.sql(
        f"SELECT writer, time_created, time_updated FROM events WHERE id = '{text.id}' ORDER BY rev"
    )
    assert len(rows) == 3 and rows.writer[0] == rows.writer[2] != rows.writer[1]
    assert rows.time_created[0] == rows.time_created[2]  # stable for an id within a process
    assert list(rows.time_updated) == sorted(rows.time_updated)


def test_reads_see_own_unflushed_puts(tmp_path):
    store = Store(tmp_path)
    session, values = full_session()
    store.put(session, *values)  # no flush: a read writes the buffer first (without fsync)
    assert store.messages(session.id) == expected(values)
    assert Store(tmp_path).session(session.id) == session
    other = Store(tmp_path)
    other.put(replace(session, title="other's draft"))
    assert store.session(session.id).title == "t"  # another store's buffer stays its own


def test_tombstones_hide_rows(store):
    session, values = full_session()
    user, reply, text = values[0], values[1], values[2]
    store.put(session, *values)
    store.flush()
    store.delete("part", text.id)
    store.flush()
    history = store.messages(session.id)
    assert text not in history[0].parts and len(history[0].parts) == 4
    assert count(store, f"SELECT count(*) FROM part WHERE id = '{text.id}'") == 0
    other = Store(store.data_dir)  # another writer that never saw the message: looks its keys up
    other.delete("message", reply.id)
    other.flush()
    assert [m.info for m in store.messages(session.id)] == [user]
    store.delete("session", session.id)
    store.flush()
    assert store.sessions() == [] and count(store, "SELECT count(*) FROM session") == 0
    with pytest.raises(SessionNotFoundError):
        store.session(session.id)
    with pytest.raises(UsageError):
        store.delete("todo", "x")


def test_empty_history(tmp_path):
    store = Store(tmp_path / "nothing")
    for view in ("session", "message", "part", "events"):
        assert count(store, f"SELECT count(*) FROM {view}") == 0
    columns = set(store.sql("SELECT * FROM part").columns)
    assert {
        "id",
        "message_id",
        "session_id",
        "time_created",
        "time_updated",
        "data",
        "type",
        "tool",
        "call_id",
        "status",
        "compacted_at",
    } <= columns
    assert {"role", "cost", "input_tokens", "tokens_estimated"} <= set(
        store.sql("SELECT * FROM message").columns
    )
    assert store.sessions() == [] and store.messages("ses_x") == []
    with pytest.raises(SessionNotFoundError, match="agent sessions"):
        store.session("ses_nope")
    assert not (tmp_path / "nothing").exists()  # reading creates nothing


def test_sessions_order_prefix_and_archive(store):
    old = make_session(title="old")
    new = make_session(title="new")
    archived = make_session(title="archived", time_archived=now_ms())
    store.put(old, new, archived)
    store.flush()
    assert store.sessions() == [new, old]
    assert store.sessions(include_archived=True) == [archived, new, old]
    assert store.session(new.id[:-3]) == new
    with pytest.raises(UsageError, match="several"):
        store.session("ses_")
    with pytest.raises(SessionNotFoundError):
        store.session("")


def test_unencodable_text_keeps_its_row(store):
    session = make_session(title="bad \udc80 surrogate")
    store.put(session)
    store.flush()
    assert (
        store.session(session.id).title == "bad \\x80 surrogate"
    )  # the byte, as text.safe_text shows it


# --------------------------------------------------------------------------
# read-only SQL


@pytest.mark.parametrize(
    "query",
    [
        "INSERT INTO t VALUES (1)",
        "DROP VIEW part",
        "ATTACH 'x.duckdb' AS x",
        "COPY part TO 'out.csv'",
        "CREATE TABLE t AS SELECT 1",
        "SET threads = 1",
        "DELETE FROM part",
        "UPDATE part SET id = 'x'",
        "PRAGMA version",
        "CALL pragma_version()",
        "INSTALL sqlite",
        "LOAD json",
        "EXPORT DATABASE 'x'",
        "CHECKPOINT",
        "DETACH memory",
        "SELECT 1; DROP VIEW session",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        "SELECT * FROM enable_logging()",
        "USE memory",
        "BEGIN",
    ],
)
def test_sql_refuses_writes(store, query):
    session, values = full_session()
    store.put(session, *values)
    store.flush()
    before = store.sql("SELECT * FROM events ORDER BY id").to_dict("records")
    files = sorted(p.name for p in store.data_dir.rglob("*"))
    with pytest.raises(ReadOnlyError) as err:
        store.sql(query)
    assert "\n" not in str(err.value) and "read-only" in str(err.value)
    assert store.sql("SELECT * FROM events ORDER BY id").to_dict("records") == before
    assert sorted(p.name for p in store.data_dir.rglob("*")) == files
    assert store.messages(session.id) == expected(values)


def test_sql_reads(store):
    session, values = full_session()
    store.put(session, *values)
    store.flush()
    assert count(store, "FROM part SELECT count(*)") == 14
    assert len(store.sql("EXPLAIN SELECT * FROM part")) >= 1
    assert len(store.sql("DESCRIBE part")) > 5
    tables = set(store.sql("SHOW TABLES").name)  # the documented views, nothing internal (_store.*)
    assert {"session", "message", "part", "events"} <= tables and not any(
        t.startswith("_") for t in tables
    )
    assert len(store.sql("SUMMARIZE SELECT cost FROM message")) == 1
    assert count(store, "SELECT 1; SELECT 2") == 2
    with pytest.raises(UsageError, match="syntax"):
        store.sql("SELEC 1")
    with pytest.raises(UsageError):
        store.sql("SELECT * FROM no_such_table")
    with pytest.raises(UsageError):  # outside the history folder
        store.sql("SELECT * FROM read_text('/etc/hostname')")


# --------------------------------------------------------------------------
# files: journals, compaction, crashes


def journals(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "history" / "live").glob("*.jsonl"))


def test_writing_never_opens_duckdb_and_reading_creates_no_file(tmp_path):
    code = (
        "import sys; from jupyter_session_agent.store import Store; "
        "from jupyter_session_agent.core.messages import Session; "
        f"s = Store({str(tmp_path)!r}); s.put(Session(id='ses_1', directory='/', title='t', "
        "time_created=1, time_updated=1)); s.flush(); assert 'duckdb' not in sys.modules; "
        "import os; os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    [journal] = journals(tmp_path)
    row = json.loads(journal.read_text())
    assert row["kind"] == "session" and row["id"] == "ses_1" and row["message_id"] is None
    assert "id" not in row["data"] and row["data"]["title"] == "t" and not row["deleted"]
    assert Store(tmp_path).session("ses_1").title == "t"


def test_torn_last_line_does_not_break_reads(tmp_path):
    session, values = full_session()
    store = Store(tmp_path)
    store.put(session, *values)
    store.flush()
    journal = journals(tmp_path)[0]
    text = journal.read_text().replace(journal.stem, "host-1-torn")
    store.close()
    for parquet in (tmp_path / "history" / "parquet").iterdir():
        parquet.unlink()
    torn = (
        tmp_path / "history" / "live" / "host-1-torn.jsonl"
    )  # as if its writer was killed mid-write
    torn.write_text(text + '{"kind":"part","id":"prt_torn","session_id":"' + session.id + '","da')
    with open(torn) as held:  # while "alive", readers parse the journal itself
        fcntl.flock(held, fcntl.LOCK_EX)
        assert Store(tmp_path).messages(session.id) == expected(values)
        assert count(Store(tmp_path), "SELECT count(*) FROM events") == 17
        assert journals(tmp_path) == [torn]
    reader = Store(tmp_path)  # now dead: compacted to Parquet, torn line dropped
    assert count(reader, "SELECT count(*) FROM events") == 17 and journals(tmp_path) == []
    assert reader.session(session.id) == session
    assert (
        reader.messages(session.id)[1].parts[2].state.interrupted
    )  # its pending tool is orphaned now


def test_close_compacts_and_store_stays_usable(tmp_path):
    store = Store(tmp_path)
    session, values = full_session()
    store.put(session, *values)
    store.flush()
    store.close()
    assert (
        journals(tmp_path) == []
        and len(list((tmp_path / "history" / "parquet").glob("*.parquet"))) == 1
    )
    store.put(replace(values[2], text="after close"))  # a new journal, a new writer
    store.flush()
    assert store.messages(session.id)[0].parts[0].text == "after close"
    assert count(store, "SELECT count(DISTINCT writer) FROM events") == 2
    store.close()
    assert Store(tmp_path).messages(session.id)[0].parts[0].text == "after close"


def spawn(data_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_write_concurrently(tmp_path):
    writers = [spawn(tmp_path, "turns", "50", tag) for tag in ("a", "b")]
    reader = Store(tmp_path)
    counts = []
    while any(w.poll() is None for w in writers):
        counts.append(count(reader, "SELECT count(*) FROM message"))
        time.sleep(0.01)
    assert [w.wait() for w in writers] == [0, 0]
    counts.append(count(reader, "SELECT count(*) FROM message"))
    assert counts == sorted(counts) and counts[-1] == 200
    sessions = reader.sessions()
    assert len(sessions) == 100 and sorted(s.title for s in sessions) == sorted(
        f"{tag} {i}" for tag in "ab" for i in range(50)
    )
    for view in ("session", "message", "part"):
        assert count(reader, f"SELECT count(*) - count(DISTINCT id) FROM {view}") == 0
    assert count(reader, "SELECT count(*) FROM part") == 300
    assert all(len(reader.messages(s.id)) == 2 for s in sessions[:5])
    assert journals(tmp_path) == []  # both compacted themselves at exit


def test_killed_writer(tmp_path):
    writer = spawn(tmp_path, "crash", "k")
    acked = [writer.stdout.readline() for _ in range(5)]
    os.kill(writer.pid, signal.SIGKILL)  # mid-stream: it keeps writing turns until now
    writer.wait()
    acked += writer.stdout.read().splitlines(keepends=True)
    writer.stdout.close()
    flushed = [
        line.split() for line in acked if line.endswith("\n")
    ]  # each printed after its flush
    store = Store(tmp_path)
    sessions = {s.id for s in store.sessions()}
    assert {sid for _, _, sid in flushed} <= sessions and len(sessions) >= len(flushed)
    per_session = (
        store.sql("SELECT session_id, count(*) n FROM part GROUP BY 1").set_index("session_id").n
    )
    assert all(per_session[sid] == 3 for _, _, sid in flushed)  # whole turns, nothing half-flushed
    first = flushed[0][2]
    # its journal was compacted by the first read, which settles the orphaned tool in SQL as well
    assert store.sql(
        "SELECT status, count(*) n FROM part WHERE type = 'tool' GROUP BY 1 ORDER BY 1"
    ).to_dict("list") == {"status": ["completed", "error"], "n": [len(sessions) - 1, 1]}
    [_, reply] = store.messages(first)
    tool = reply.parts[1]
    assert isinstance(tool.state, ToolError) and tool.state.interrupted
    assert tool.state.error == "Tool execution was interrupted" and tool.state.input == {
        "command": "sleep 100"
    }
    assert store.sql(f"SELECT status FROM part WHERE id = '{tool.id}'").status[0] == "error"
    assert Store(tmp_path).messages(first)[1].parts[1] == tool  # the fix was persisted
    for view in ("session", "message", "part"):
        assert count(store, f"SELECT count(*) - count(DISTINCT id) FROM {view}") == 0


def test_live_writers_tool_is_not_interrupted_and_dead_journals_compact(tmp_path):
    live = Store(tmp_path)
    session = make_session()
    user = UserMessage(
        id=ids.ascending("message"),
        session_id=session.id,
        time_created=now_ms(),
        model=ModelRef("openai", "m"),
    )
    tool = ToolPart(
        id=ids.ascending("part"),
        session_id=session.id,
        message_id=user.id,
        call_id="c",
        tool="bash",
        state=ToolRunning(input={}, time_start=now_ms()),
    )
    live.put(session, user, tool)
    live.flush()
    assert (
        Store(tmp_path).messages(session.id)[0].parts[0] == tool
    )  # its writer still holds the lock
    assert journals(tmp_path) == [live.journal_path]  # and nobody compacted it
    code = (
        "import os, sys; sys.path.insert(0, '.'); from jupyter_session_agent.store import Store; "
        "from jupyter_session_agent.core.messages import Session; "
        f"s = Store({str(tmp_path)!r}); s.put(Session(id='ses_dead', directory='/', title='t', "
        "time_created=1, time_updated=1)); s.flush(); print(s.journal_path.stem); os._exit(0)"
    )
    dead = subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert len(journals(tmp_path)) == 2  # exited without close(): its journal stays, unlocked
    reader = Store(tmp_path)
    assert reader.session("ses_dead").title == "t"
    assert journals(tmp_path) == [live.journal_path]
    assert (tmp_path / "history" / "parquet" / f"{dead}.parquet").exists()
    live.close()
    assert (
        reader.messages(session.id)[0].parts[0].state.interrupted
    )  # closed: its running tool is orphaned
