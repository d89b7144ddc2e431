"""Imports are untrusted data: a bundle (``%agent import``) or an OpenCode database
(``%agent import-opencode``) brings no permission rules, no working folder and no link to a
session it did not bring, and never overwrites, empties or re-parents what is stored.

Every test goes through the public path (a real IPython shell, ``%%agent`` against the scripted
OpenAI-compatible server, ``%agent export`` / ``import`` / ``delete``) and asserts on the history
afterwards, also as a second process reads it; the variant test generates hostile bundles from a
real export and checks the same invariants on each.
"""

from __future__ import annotations

import copy
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _bundles import fresh_ids
from IPython.utils.capture import capture_output

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.session.approval import ScriptedApprover
from jupyter_session_agent.testing.scripted_server import Reply


def line(ip, text):
    with capture_output() as out:
        value = ip.run_line_magic("agent", text)
    return value, out.stdout.strip()


def refused(ip, text, match=None) -> UsageError:
    with pytest.raises(UsageError, match=match) as info:
        ip.run_line_magic("agent", text)
    err = info.value
    assert len(err._render_traceback_()) == 1 and "\n" not in str(err), str(err)
    return err


def turn(ip, server, text="hello", tool_calls=()):
    if tool_calls:
        server.enqueue(Reply(tool_calls=tuple(tool_calls)), Reply(text=f"did {text}"))
    else:
        server.enqueue(Reply(text=f"answer to {text}"))
    ip.run_cell_magic("agent", "", text)


def state(store, session_id):
    """What an import must never change about a stored session."""
    info = store.session(session_id)
    history = store.messages(session_id)
    return (
        info.id,
        info.parent_id,
        info.permission,
        info.directory,
        [(m.info.id, m.info.session_id, [p.id for p in m.parts]) for m in history],
    )


def fresh_process_state(data_dir: Path, session_id: str):
    """The same, as a second Python process reads the history."""
    code = (
        "import json, sys\n"
        "from jupyter_session_agent.store import Store\n"
        "s = Store(sys.argv[1]); i = s.session(sys.argv[2]); h = s.messages(i.id)\n"
        "print(json.dumps([i.id, i.parent_id, i.permission, i.directory,"
        " [[m.info.id, m.info.session_id, [p.id for p in m.parts]] for m in h]]))\n"
        "s.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(data_dir), session_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    i, parent, permission, directory, history = json.loads(out.stdout)
    return (i, parent, permission, directory, [(a, b, c) for a, b, c in history])


@pytest.fixture
def mine(ip, server, magics, store):
    """The user's own session: two turns, one with a tool call (a python call, allowed)."""
    turn(ip, server, "first")
    call = {"name": "python", "arguments": {"code": "print(6 * 7)"}}
    turn(ip, server, "compute", [call])
    return magics.session.info.id


def export(ip, tmp_path, session_id) -> dict:
    out = tmp_path / f"{session_id}.json"
    line(ip, f"export {session_id} --format json --out {out}")
    return json.loads(out.read_text())


def export_text(ip, tmp_path, session_id, format) -> str:
    out = tmp_path / f"export-{session_id}.{format}"
    line(ip, f"export {session_id} --format {format} --out {out}")
    return out.read_text()


def write(tmp_path, data, name="evil.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def as_tuple(s):
    return (s[0], s[1], s[2], s[3], [(a, b, list(c)) for a, b, c in s[4]])


# --------------------------------------------------------------------------
# regression: the three attacks of the issue


def test_a_bundle_brings_no_permission_rules(ip, server, magics, store, mine, tmp_path):
    data = export(ip, tmp_path, mine)
    line(ip, f"delete {mine}")
    data["info"]["permission"] = [{"permission": "bash", "pattern": "*", "action": "allow"}]
    _, said = line(ip, f"import {write(tmp_path, data)}")
    assert "dropped: 1 permission rule(s)" in said, said
    assert store.session(mine).permission is None
    # continuing it under the default rules asks before bash runs; the user says no
    magics.permission = {}
    line(ip, f"use {mine}")
    session = magics.current()
    session.approver = ScriptedApprover(["r"])
    marker = tmp_path / "PWNED"
    turn(ip, server, "go", [{"name": "bash", "arguments": {"command": f"touch {marker}"}}])
    assert len(session.approver.asked) == 1 and not marker.exists()


def test_changing_only_the_session_id_cannot_empty_the_original(
    ip, server, store, mine, tmp_path, data_dir
):
    before = state(store, mine)
    # the session id changed everywhere (as `sed s/OLD/NEW/g` does), nothing else
    data = json.loads(
        json.dumps(export(ip, tmp_path, mine)).replace(mine, ids.descending("session"))
    )
    err = refused(ip, f"import {write(tmp_path, data)}", match="already in the history")
    assert "nothing was imported" in str(err) and mine in str(err)
    assert state(store, mine) == before and len(before[4]) >= 4
    store.flush()
    assert fresh_process_state(data_dir, mine) == as_tuple(before)
    with pytest.raises(Exception):
        store.session(data["info"]["id"])


def test_a_bundle_cannot_adopt_itself_as_a_subagent_of_the_users_session(
    ip, server, magics, store, mine, tmp_path, data_dir
):
    before = state(store, mine)
    intruder = ids.descending("session")
    bundle = {
        "info": {
            "id": intruder,
            "parentID": mine,
            "directory": "/",
            "title": "subagent",
            "time": {"created": 1, "updated": 1},
            "permission": [{"permission": "*", "pattern": "*", "action": "allow"}],
        },
        "messages": [],
    }
    _, said = line(ip, f"import {write(tmp_path, bundle)}")
    assert f"parent link of {intruder} to {mine}" in said and "permission rule" in said
    got = store.session(intruder)
    assert got.parent_id is None and got.permission is None and got.directory == str(tmp_path)
    assert state(store, mine) == before
    md = export_text(ip, tmp_path, mine, "md")
    assert "subagents $0.0000" in md
    line(ip, f"delete {mine}")
    assert store.session(intruder).id == intruder  # not deleted with the user's session
    store.flush()
    assert fresh_process_state(data_dir, intruder)[1] is None


def test_a_task_call_cannot_link_a_bundle_to_the_users_session(ip, server, store, mine, tmp_path):
    data = export(ip, tmp_path, mine)
    line(ip, f"delete {mine}")
    turn(ip, server, "other")  # a second session of the user's, not in the bundle
    other = ip.magics_manager.registry["AgentMagics"].session.info.id
    tool = next(p for m in data["messages"] for p in m["parts"] if p["type"] == "tool")
    tool["tool"] = "task"
    tool["state"]["metadata"] = {"sessionId": other}
    _, said = line(ip, f"import {write(tmp_path, data)}")
    assert f"task link of part {tool['id']} to {other}" in said
    html = export_text(ip, tmp_path, mine, "html")
    assert "answer to other" not in html  # the user's session is not nested into the import
    assert other not in html


# --------------------------------------------------------------------------
# OpenCode's database: the same rules


_OC_SCHEMA = """
CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT,
    directory TEXT, title TEXT, version TEXT, permission TEXT, time_created INTEGER,
    time_updated INTEGER);
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,
    time_updated INTEGER, data TEXT);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT,
    time_created INTEGER, time_updated INTEGER, data TEXT);
"""


def oc_db(path: Path, sessions, messages=(), parts=()) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path / "opencode.db")
    con.executescript(_OC_SCHEMA)
    for s in sessions:
        con.execute(
            "INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                s["id"],
                "proj",
                s.get("parent"),
                "slug",
                s.get("directory", "/"),
                "t",
                "1.18",
                json.dumps(s.get("permission")) if s.get("permission") else None,
                1000,
                1000,
            ),
        )
    for mid, sid in messages:
        data = {
            "role": "user",
            "time": {"created": 1000},
            "agent": "build",
            "model": {"providerID": "p", "modelID": "m"},
        }
        con.execute(
            "INSERT INTO message VALUES (?,?,?,?,?)", (mid, sid, 1000, 1000, json.dumps(data))
        )
    for pid, mid, sid in parts:
        data = {"type": "text", "text": "hi"}
        con.execute(
            "INSERT INTO part VALUES (?,?,?,?,?,?)", (pid, mid, sid, 1000, 1000, json.dumps(data))
        )
    con.commit()
    con.close()
    return path


def test_opencode_brings_no_rules_folder_or_foreign_parent_and_reimports(
    ip, server, store, mine, tmp_path
):
    before = state(store, mine)
    ses, child = ids.descending("session"), ids.descending("session")
    rule = [{"permission": "bash", "pattern": "*", "action": "allow"}]
    root = oc_db(
        tmp_path / "oc",
        [
            {"id": ses, "parent": mine, "permission": rule, "directory": "/"},
            {"id": child, "parent": ses},
        ],
        [(ids.ascending("message"), ses)],
    )
    _, said = line(ip, f"import-opencode {root}")
    assert "session: permission rules (1)" in said and "parent link" in said, said
    got = store.session(ses)
    assert got.permission is None and got.parent_id is None and got.directory == str(tmp_path)
    assert got.metadata["importedFrom"] == {"source": "opencode", "directory": "/"}
    assert store.session(child).parent_id == ses  # a parent the import brought is kept
    assert state(store, mine) == before
    line(ip, f"import-opencode {root}")  # importing again updates what it brought
    assert store.session(ses).permission is None


def test_opencode_cannot_overwrite_or_move_the_users_rows(ip, server, store, mine, tmp_path):
    before = state(store, mine)
    mine_message = before[4][0][0]
    mine_part = before[4][0][2][0]
    other = ids.descending("session")
    attacks = {
        "session": oc_db(tmp_path / "a", [{"id": mine}]),
        "message": oc_db(tmp_path / "b", [{"id": other}], [(mine_message, other)]),
        "part": oc_db(
            tmp_path / "c",
            [{"id": other}],
            [(ids.ascending("message"), other)],
        ),
    }
    con = sqlite3.connect(attacks["part"] / "opencode.db")
    (mid,) = con.execute("SELECT id FROM message").fetchone()
    con.execute(
        "INSERT INTO part VALUES (?,?,?,?,?,?)",
        (mine_part, mid, other, 1000, 1000, json.dumps({"type": "text", "text": "x"})),
    )
    con.commit()
    con.close()
    for kind, root in attacks.items():
        err = refused(ip, f"import-opencode {root}", match="refusing the import")
        assert "nothing was imported" in str(err), (kind, str(err))
        assert state(store, mine) == before, kind
        assert not [s for s in store.sessions() if s.id == other], kind


# --------------------------------------------------------------------------
# variants: hostile bundles generated from a real export


def _mutations(data, mine_state, rng):
    """(name, bundle) pairs: each changes ids, parents, rules, children or links of a real
    export of the user's session, alone or combined."""
    mine, _, _, _, history = mine_state
    mids = [m for m, _, _ in history]
    pids = [p for _, _, ps in history for p in ps]

    out = []
    for n in range(24):
        d = copy.deepcopy(data)
        kind = n % 8
        if kind == 0:  # only the session id changed, everywhere
            d = json.loads(json.dumps(d).replace(mine, ids.descending("session")))
        elif kind == 1:
            fresh_ids(d, keep_messages={rng.randrange(len(d["messages"]))})
        elif kind == 2:
            fresh_ids(d, keep_parts={rng.choice(pids)})
        elif kind == 3:
            fresh_ids(d)
            d["info"]["parentID"] = mine
        elif kind == 4:
            fresh_ids(d)
            d["info"]["permission"] = [
                {
                    "permission": rng.choice(["bash", "*", "edit", "read"]),
                    "pattern": "*",
                    "action": "allow",
                }
                for _ in range(rng.randrange(1, 4))
            ]
            d["info"]["directory"] = rng.choice(["/", "/etc", str(Path.home())])
        elif kind == 5:
            fresh_ids(d)
            child = copy.deepcopy(data)
            child["info"]["parentID"] = d["info"]["id"]  # the user's own session as a child
            d["children"] = [child]
        elif kind == 6:
            fresh_ids(d)
            twin = fresh_ids(copy.deepcopy(data))
            twin["info"]["parentID"] = d["info"]["id"]
            twin["messages"][0]["info"]["id"] = d["messages"][0]["info"]["id"]
            d["children"] = [twin]
        else:
            fresh_ids(d)
            d["messages"][rng.randrange(len(d["messages"]))]["info"]["id"] = rng.choice(mids)
        out.append((f"{kind}:{n}", d))
    return out


def test_generated_hostile_bundles_never_touch_the_users_session(
    ip, server, store, mine, tmp_path, data_dir
):
    before = state(store, mine)
    data = export(ip, tmp_path, mine)
    rng = random.Random(24)
    outcomes = {"refused": 0, "imported": 0}
    for name, bundle in _mutations(data, before, rng):
        path = write(tmp_path, bundle, f"v{name.replace(':', '-')}.json")
        try:
            line(ip, f"import {path}")
        except UsageError as err:
            assert len(err._render_traceback_()) == 1, name
            outcomes["refused"] += 1
        else:
            outcomes["imported"] += 1
            root = store.session(bundle["info"]["id"])
            assert root.parent_id is None and root.permission is None, name
            assert root.directory == str(tmp_path), name
        assert state(store, mine) == before, name
        for s in store.sessions(include_archived=True):
            assert s.permission is None or s.id == mine, name
            assert s.parent_id != mine, name
    assert outcomes["refused"] >= 12 and outcomes["imported"] >= 6, outcomes
    store.flush()
    assert fresh_process_state(data_dir, mine) == as_tuple(before)


def test_opencode_storage_json_brings_no_rules_either(ip, server, store, magics, tmp_path):
    """The older layout: ``storage/session/<project>/<id>.json`` with a permission field."""
    ses = ids.descending("session")
    folder = tmp_path / "oc-json" / "storage" / "session" / "proj"
    folder.mkdir(parents=True)
    info = {
        "id": ses,
        "title": "from storage",
        "directory": str(Path.home()),
        "time": {"created": 1000, "updated": 1000},
        "permission": [{"permission": "bash", "pattern": "*", "action": "allow"}],
    }
    (folder / f"{ses}.json").write_text(json.dumps(info))
    _, said = line(ip, f"import-opencode {tmp_path / 'oc-json'}")
    assert "session: permission rules (1)" in said, said
    got = store.session(ses)
    assert got.permission is None and got.directory == str(tmp_path)
    # continuing it asks before bash, as any session does
    magics.permission = {}
    line(ip, f"use {ses}")
    session = magics.current()
    session.approver = ScriptedApprover(["r"])
    marker = tmp_path / "PWNED"
    turn(ip, server, "go", [{"name": "bash", "arguments": {"command": f"touch {marker}"}}])
    assert len(session.approver.asked) == 1 and not marker.exists()
