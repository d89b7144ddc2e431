"""Importing OpenCode's history: an ``opencode.db`` built from its documented schema
(its session/message/part tables, WAL mode as OpenCode runs it) and the older JSON
``storage/`` layouts, with every part type OpenCode has, ids kept."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.core.messages import PART_TYPES
from jupyter_session_agent.exchange.opencode import import_opencode
from jupyter_session_agent.store import Store

SCHEMA = """
CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT NOT NULL, vcs TEXT, name TEXT,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
CREATE TABLE session (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES project(id) ON DELETE CASCADE,
    workspace_id TEXT, parent_id TEXT, slug TEXT NOT NULL, directory TEXT NOT NULL, title TEXT NOT NULL,
    version TEXT NOT NULL, share_url TEXT, summary_additions INTEGER, summary_deletions INTEGER,
    summary_files INTEGER, summary_diffs TEXT, revert TEXT, permission TEXT,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, time_compacting INTEGER, time_archived INTEGER);
CREATE INDEX session_project_idx ON session(project_id);
CREATE INDEX session_workspace_idx ON session(workspace_id);
CREATE INDEX session_parent_idx ON session(parent_id);
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX message_session_idx ON message(session_id);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX part_message_idx ON part(message_id);
CREATE INDEX part_session_idx ON part(session_id);
CREATE TABLE todo (session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE, content TEXT NOT NULL,
    status TEXT NOT NULL, priority TEXT NOT NULL, position INTEGER NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL, PRIMARY KEY (session_id, position));
CREATE TABLE permission (project_id TEXT PRIMARY KEY REFERENCES project(id) ON DELETE CASCADE,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE session_share (session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
    id TEXT NOT NULL, secret TEXT NOT NULL, url TEXT NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL);
"""

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SES, CHILD = "ses_3f0a1b2c3d4eAbCdEfGhIjKlMn", "ses_3f0a1b2c3d4dChIlDsEsSiOn01"
U1, A1, A2, U2 = (
    "msg_c1a0000000010000000000user1",
    "msg_c1a0000000020000000000asst1",
    "msg_c1a0000000030000000000asst2",
    "msg_c1a0000000040000000000user2",
)
CU, CA = "msg_c1a0000000050000000000chldu", "msg_c1a0000000060000000000chlda"
TOKENS = {"input": 1200, "output": 80, "reasoning": 16, "cache": {"read": 300, "write": 0}}
APIERR = {
    "name": "APIError",
    "data": {"message": "Overloaded", "statusCode": 529, "isRetryable": True},
}

MESSAGES = [  # (id, session, time, data without id/sessionID)
    (
        U1,
        SES,
        T0 + 1000,
        {
            "role": "user",
            "time": {"created": T0 + 1000},
            "agent": "build",
            "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"},
            "summary": {"diffs": []},
        },
    ),
    (
        A1,
        SES,
        T0 + 2000,
        {
            "role": "assistant",
            "time": {"created": T0 + 2000, "completed": T0 + 5000},
            "parentID": U1,
            "modelID": "claude-sonnet-4-5",
            "providerID": "anthropic",
            "mode": "build",
            "agent": "build",
            "path": {"cwd": "/home/u/proj", "root": "/home/u/proj"},
            "cost": 0.0123,
            "tokens": TOKENS,
            "finish": "tool-calls",
        },
    ),
    (
        A2,
        SES,
        T0 + 6000,
        {
            "role": "assistant",
            "time": {"created": T0 + 6000, "completed": T0 + 8000},
            "parentID": U1,
            "modelID": "claude-sonnet-4-5",
            "providerID": "anthropic",
            "mode": "build",
            "agent": "build",
            "path": {"cwd": "/home/u/proj", "root": "/home/u/proj"},
            "cost": 0.0045,
            "tokens": {**TOKENS, "input": 1500},
            "finish": "stop",
        },
    ),
    (
        U2,
        SES,
        T0 + 9000,
        {
            "role": "user",
            "time": {"created": T0 + 9000},
            "agent": "build",
            "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"},
        },
    ),
    (
        CU,
        CHILD,
        T0 + 3000,
        {
            "role": "user",
            "time": {"created": T0 + 3000},
            "agent": "general",
            "model": {"providerID": "anthropic", "modelID": "claude-haiku-4-5"},
        },
    ),
    (
        CA,
        CHILD,
        T0 + 3500,
        {
            "role": "assistant",
            "time": {"created": T0 + 3500, "completed": T0 + 4000},
            "parentID": CU,
            "modelID": "claude-haiku-4-5",
            "providerID": "anthropic",
            "mode": "general",
            "agent": "general",
            "path": {"cwd": "/home/u/proj", "root": "/home/u/proj"},
            "cost": 0.002,
            "tokens": TOKENS,
            "finish": "stop",
        },
    ),
]

PARTS = [  # (id, message, session, data without ids) — every part type OpenCode has
    (
        "prt_01",
        U1,
        SES,
        {"type": "text", "text": "Find the bug in main.py", "time": {"start": T0 + 1000}},
    ),
    (
        "prt_02",
        U1,
        SES,
        {
            "type": "file",
            "mime": "text/plain",
            "filename": "main.py",
            "url": "file:///home/u/proj/main.py",
            "source": {
                "type": "file",
                "path": "main.py",
                "text": {"value": "@main.py", "start": 0, "end": 8},
            },
        },
    ),
    (
        "prt_03",
        U1,
        SES,
        {"type": "agent", "name": "general", "source": {"value": "@general", "start": 0, "end": 8}},
    ),
    (
        "prt_04",
        A1,
        SES,
        {"type": "step-start", "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"},
    ),
    (
        "prt_05",
        A1,
        SES,
        {
            "type": "reasoning",
            "text": "Look at main.py first.",
            "time": {"start": T0 + 2100, "end": T0 + 2200},
            "metadata": {"anthropic": {"signature": "sig"}},
        },
    ),
    (
        "prt_06",
        A1,
        SES,
        {
            "type": "tool",
            "callID": "toolu_01",
            "tool": "read",
            "state": {
                "status": "completed",
                "input": {"filePath": "/home/u/proj/main.py"},
                "output": "1| print(1/0)",
                "title": "main.py",
                "metadata": {"preview": "print"},
                "time": {"start": T0 + 2300, "end": T0 + 2400, "compacted": T0 + 9500},
            },
        },
    ),
    (
        "prt_07",
        A1,
        SES,
        {
            "type": "tool",
            "callID": "toolu_02",
            "tool": "bash",
            "state": {
                "status": "error",
                "input": {"command": "python main.py"},
                "error": "ZeroDivisionError",
                "time": {"start": T0 + 2500, "end": T0 + 2600},
            },
        },
    ),
    (
        "prt_08",
        A1,
        SES,
        {
            "type": "tool",
            "callID": "toolu_03",
            "tool": "task",
            "state": {
                "status": "completed",
                "input": {"description": "check", "prompt": "check it"},
                "output": f"task_id: {CHILD}",
                "title": "check",
                "metadata": {"sessionId": CHILD},
                "time": {"start": T0 + 2700, "end": T0 + 4100},
            },
        },
    ),
    (
        "prt_09",
        A1,
        SES,
        {"type": "retry", "attempt": 1, "error": APIERR, "time": {"created": T0 + 2050}},
    ),
    (
        "prt_10",
        A1,
        SES,
        {
            "type": "step-finish",
            "reason": "tool-calls",
            "snapshot": "5c0d4ec2b6a2f0e3c0d14e9c1e0b8a5e8c9d1f21",
            "cost": 0.0123,
            "tokens": TOKENS,
        },
    ),
    (
        "prt_11",
        A1,
        SES,
        {
            "type": "patch",
            "hash": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
            "files": ["/home/u/proj/main.py"],
        },
    ),
    (
        "prt_12",
        A1,
        SES,
        {"type": "snapshot", "snapshot": "5c0d4ec2b6a2f0e3c0d14e9c1e0b8a5e8c9d1f21"},
    ),
    ("prt_13", A2, SES, {"type": "step-start"}),
    (
        "prt_14",
        A2,
        SES,
        {
            "type": "text",
            "text": "Fixed: guard the division.",
            "time": {"start": T0 + 7000, "end": T0 + 7500},
        },
    ),
    (
        "prt_15",
        A2,
        SES,
        {
            "type": "step-finish",
            "reason": "stop",
            "cost": 0.0045,
            "tokens": {**TOKENS, "input": 1500},
        },
    ),
    ("prt_16", U2, SES, {"type": "compaction", "auto": True, "overflow": False}),
    (
        "prt_17",
        U2,
        SES,
        {
            "type": "subtask",
            "prompt": "review the fix",
            "description": "review",
            "agent": "general",
            "model": {"providerID": "anthropic", "modelID": "claude-haiku-4-5"},
            "command": "review",
        },
    ),
    (
        "prt_18",
        U2,
        SES,
        {
            "type": "tool",
            "callID": "toolu_04",
            "tool": "edit",
            "state": {"status": "pending", "input": {}, "raw": ""},
        },
    ),
    (
        "prt_19",
        U2,
        SES,
        {
            "type": "tool",
            "callID": "toolu_05",
            "tool": "grep",
            "state": {"status": "running", "input": {"pattern": "x"}, "time": {"start": T0 + 9100}},
        },
    ),
    ("prt_20", CU, CHILD, {"type": "text", "text": "check it"}),
    ("prt_21", CA, CHILD, {"type": "text", "text": "Looks fine.", "synthetic": False}),
]


def build_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA foreign_keys=ON")
    con.executescript(SCHEMA)
    con.execute(
        "INSERT INTO project VALUES ('proj_abc', '/home/u/proj', 'git', 'proj', ?, ?)", (T0, T0)
    )
    con.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, share_url, "
        "summary_additions, summary_deletions, summary_files, summary_diffs, revert, permission, time_created, "
        "time_updated, time_compacting, time_archived) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            SES,
            "proj_abc",
            None,
            "brave-otter",
            "/home/u/proj",
            "Fix the division bug",
            "1.2.16",
            "https://opncd.ai/s/abc",
            3,
            1,
            1,
            json.dumps(
                [{"file": "main.py", "before": "a", "after": "b", "additions": 3, "deletions": 1}]
            ),
            None,
            json.dumps([{"permission": "bash", "pattern": "*", "action": "allow"}]),
            T0,
            T0 + 9500,
            None,
            None,
        ),
    )
    con.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, time_created, time_updated) "
        "VALUES (?,?,?,?,?,?,?,?,?)",
        (
            CHILD,
            "proj_abc",
            SES,
            "calm-lynx",
            "/home/u/proj",
            "check (@general subagent)",
            "1.2.16",
            T0 + 2800,
            T0 + 4000,
        ),
    )
    for id, sid, t, data in MESSAGES:
        con.execute("INSERT INTO message VALUES (?,?,?,?,?)", (id, sid, t, t, json.dumps(data)))
    for id, mid, sid, data in PARTS:
        created = next(t for m, _, t, _ in MESSAGES if m == mid)
        con.execute(
            "INSERT INTO part VALUES (?,?,?,?,?,?)",
            (id, mid, sid, created, created, json.dumps(data)),
        )
    con.commit()  # left open: the WAL is not checkpointed, as with a running OpenCode
    return path


@pytest.fixture
def opencode_dir(tmp_path):
    root = tmp_path / "opencode"
    root.mkdir()
    build_db(root / "opencode.db")
    return root


def test_database_import_keeps_ids_and_every_part_type(tmp_path, opencode_dir):
    store = Store(tmp_path / "data")
    result = import_opencode(store, opencode_dir)
    assert (result.sessions, result.messages, result.parts) == (2, len(MESSAGES), len(PARTS))
    assert set(result.part_types) == set(PART_TYPES) and len(PART_TYPES) == 12
    assert not result.skipped
    info = store.session(SES)
    assert (
        info.title == "Fix the division bug"
        and info.project_id == "proj_abc"
        and info.slug == "brave-otter"
    )
    assert info.share == {"url": "https://opncd.ai/s/abc"} and info.summary["additions"] == 3
    assert info.summary["diffs"][0]["file"] == "main.py"
    assert info.permission is None  # an import never brings permission rules
    assert result.dropped_fields["session: permission rules"] == 1
    assert store.session(CHILD).parent_id == SES
    history = store.messages(SES)
    assert [m.info.id for m in history] == [U1, A1, A2, U2]
    by_id = {p.id: p for m in history for p in m.parts}
    for id, mid, sid, data in PARTS[:19]:  # every value reads back as stored by OpenCode
        stored = by_id[id].to_data()
        assert stored == {**data, "id": id, "sessionID": sid, "messageID": mid}, id
    assert history[1].info.cost == 0.0123 and history[1].info.tokens.cache_read == 300
    # SQL sees it with the source's times and types
    rows = store.sql("select type, count(*) n from part group by type")
    assert set(rows["type"]) == set(PART_TYPES)
    times = store.sql(f"select time_created from message where id = '{A1}'")
    assert int(times["time_created"][0]) == T0 + 2000
    pruned = store.sql("select compacted_at from part where id = 'prt_06'")
    assert int(pruned["compacted_at"][0]) == T0 + 9500
    rollup = store.sql(
        f"select messages_cost, children_cost, total_cost from session_cost where session_id = '{SES}'"
    )
    assert rollup["messages_cost"][0] == pytest.approx(0.0168)
    assert rollup["children_cost"][0] == pytest.approx(0.002) and rollup["total_cost"][
        0
    ] == pytest.approx(0.0188)
    # importing again changes nothing
    again = import_opencode(store, opencode_dir)
    assert again.parts == len(PARTS)
    assert int(store.sql("select count(*) n from part")["n"][0]) == len(PARTS)
    assert store.messages(SES) == history
    store.close()


def test_import_through_the_magic(ip, magics, opencode_dir):
    with capture_output() as out:
        ip.run_line_magic("agent", f"import-opencode {opencode_dir}")
    assert "imported 2 session(s), 6 message(s), 21 part(s)" in out.stdout
    assert SES in [s.id for s in magics.store().sessions()]
    with pytest.raises(UsageError, match="no OpenCode data"):
        ip.run_line_magic("agent", f"import-opencode {opencode_dir / 'nothing-here'}")
    (opencode_dir / "empty").mkdir()
    with pytest.raises(UsageError, match="neither opencode.db nor storage"):
        ip.run_line_magic("agent", f"import-opencode {opencode_dir / 'empty'}")


def test_unknown_part_types_and_fields_are_reported_not_lost_silently(tmp_path, opencode_dir):
    con = sqlite3.connect(opencode_dir / "opencode.db")
    con.execute(
        "INSERT INTO part VALUES ('prt_99', ?, ?, ?, ?, ?)",
        (U1, SES, T0, T0, json.dumps({"type": "hologram", "text": "from the future"})),
    )
    data = json.loads(con.execute("SELECT data FROM part WHERE id = 'prt_01'").fetchone()[0])
    con.execute(
        "UPDATE part SET data = ? WHERE id = 'prt_01'", (json.dumps({**data, "sparkle": 1}),)
    )
    con.commit()
    con.close()
    result = import_opencode(Store(tmp_path / "data"), opencode_dir)
    assert result.skipped["parts of unknown type 'hologram'"] == 1
    assert result.dropped_fields["part.text: sparkle"] == 1
    assert "hologram" in str(result) and "sparkle" in str(result)


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("layout", ["project", "info"])
def test_json_storage_layouts(tmp_path, layout):
    storage = tmp_path / "opencode" / "storage"
    session = {
        "id": SES,
        "slug": "s",
        "projectID": "global",
        "directory": "/p",
        "title": "Old JSON session",
        "version": "0.15.0",
        "time": {"created": T0, "updated": T0 + 10},
    }
    if (
        layout == "project"
    ):  # session/<projectID>/<id>.json, message/<sid>/<id>.json, part/<mid>/<id>.json
        _write(storage / "session" / "global" / f"{SES}.json", session)
        msg_dir, part_dir = storage / "message" / SES, lambda mid: storage / "part" / mid
    else:  # the oldest: session/info, session/message/<sid>, session/part/<sid>/<mid>
        _write(storage / "session" / "info" / f"{SES}.json", session)
        msg_dir, part_dir = (
            storage / "session" / "message" / SES,
            lambda mid: storage / "session" / "part" / SES / mid,
        )
    for id, sid, _, data in MESSAGES[:4]:
        _write(msg_dir / f"{id}.json", {**data, "id": id, "sessionID": sid})
    for id, mid, sid, data in PARTS[:19]:
        body = {**data, "id": id, "messageID": mid}
        if layout == "project":
            body["sessionID"] = sid
        _write(part_dir(mid) / f"{id}.json", body)
    store = Store(tmp_path / "data")
    result = import_opencode(store, tmp_path / "opencode")
    assert (result.sessions, result.messages, result.parts) == (1, 4, 19)
    assert len(result.part_types) == 12 and not result.skipped
    history = store.messages(SES)
    assert store.session(SES).title == "Old JSON session"
    assert [p.id for m in history for p in m.parts] == [p[0] for p in PARTS[:19]]
    store.close()


def test_selected_sessions_only(tmp_path, opencode_dir):
    store = Store(tmp_path / "data")
    result = import_opencode(store, opencode_dir, sessions=[CHILD])
    assert result.session_ids == [CHILD] and result.messages == 2 and result.parts == 2
    assert [s.id for s in store.sessions()] == [CHILD]
    store.close()
