"""Ids and paths from outside are never trusted; snapshot git runs nothing from the user's tree.

Every test drives the public path (a real IPython shell, ``%%agent`` against the scripted
OpenAI-compatible server, ``%agent import`` / ``delete`` / ``use`` …, real git) and asserts on
what is on disk and in the history afterwards, not only on the message.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.errors import SessionNotFoundError, UsageError
from jupyter_session_agent.core.messages import Session, now_ms
from jupyter_session_agent.session import snapshot
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.session.snapshot import Snapshot, repo_path
from jupyter_session_agent.testing.scripted_server import Reply

_GIT = subprocess.run(["git", "--version"], capture_output=True).returncode == 0
needs_git = pytest.mark.skipif(not _GIT, reason="git is not installed")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git resolves it in every repository

HOSTILE = (  # ids a bundle, a magic's argument or an OpenCode row may carry ({victim}: its path)
    "{victim}",
    "../../victim",
    "ses_../../victim",
    "ses_a/b",
    "ses_ab\x00cd",
    "ses_" + "a" * 65,
    "ses_\uff41\uff42\uff43",  # fullwidth look-alikes
    "ses_\u0430bc",  # a Cyrillic a
    "ses_abc\n",
    "ses_abc ",
    "..",
    "ses_a\\b",
    "~/x",
    "ses_%2e%2e",
)


def line(ip, text):
    with capture_output() as out:
        value = ip.run_line_magic("agent", text)
    return value, out.stdout.strip()


def refused(ip, text, match=None) -> UsageError:
    """Run ``%agent text`` (or a ``%%agent`` cell for ``-s …``) and return its one-line error."""
    with pytest.raises(UsageError, match=match) as info:
        if text.startswith("-s"):
            ip.run_cell_magic("agent", text, "go on")
        else:
            ip.run_line_magic("agent", text)
    err = info.value
    assert len(err._render_traceback_()) == 1 and "\n" not in str(err), str(err)
    return err


def tree_of(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: relative path → bytes (files) or None (folders, links)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return out


@pytest.fixture
def victim(tmp_path):
    """A folder of the user's, outside the data directory, holding a file and a prepared git
    config whose fsmonitor would leave a marker if git ever read it."""
    root = tmp_path / "victim"
    root.mkdir()
    (root / "precious.txt").write_text("the user's work\n")
    marker = tmp_path / "PWNED"
    for config in (root / "config", root / ".git" / "config"):
        config.parent.mkdir(exist_ok=True)
        config.write_text(f"[core]\n\tfsmonitor = touch {marker}\n\thooksPath = {root}\n")
    return root


def _text_turn(ip, server, text="hello"):
    server.enqueue(Reply(text=f"answer to {text}"))
    ip.run_cell_magic("agent", "", text)


def _write_turn(ip, server, path="made.txt", content="v1\n"):
    call = {"name": "write", "arguments": {"filePath": path, "content": content}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(text="written"))
    ip.run_cell_magic("agent", "", f"write {path}")


@pytest.fixture
def bundle(ip, server, magics, tmp_path):
    """A real bundle (``%agent export --format json``) of a session with a tool call and a
    patch, taken out of this history again (deleted), so importing it is a fresh import."""
    _write_turn(ip, server)
    sid = magics.session.info.id
    out = tmp_path / "exported.json"
    line(ip, f"export --format json --out {out}")
    line(ip, f"delete {sid}")
    data = json.loads(out.read_text())
    assert any(p["type"] == "tool" for m in data["messages"] for p in m["parts"])
    assert any(p["type"] == "patch" for m in data["messages"] for p in m["parts"])
    return data


def _history_state(store) -> tuple:
    sessions = store.sessions(include_archived=True)
    return tuple((s.id, len(store.messages(s.id))) for s in sessions)


# --------------------------------------------------------------------------
# the id grammar


def test_generated_ids_follow_the_grammar_and_hostile_ones_do_not(tmp_path):
    for kind in ("session", "message", "part"):
        made = ids.descending(kind) if kind == "session" else ids.ascending(kind)
        assert ids.valid(made, kind) and ids.check(made, kind) == made
        assert ids.check_ref(made[:7], kind) == made[:7]  # a prefix, as a user types it
        other = "message" if kind == "session" else "session"
        assert not ids.valid(made, other)  # the prefix matters
    for value in HOSTILE:
        value = value.format(victim=tmp_path)
        assert not ids.valid(value, "session")
        with pytest.raises(ids.InvalidIdError) as info:
            ids.check_ref(value, "session")
        message = str(info.value)  # one line; look-alike letters, NUL, newline shown as escapes
        raw = [c for c in value if (ord(c) > 127 or ord(c) < 32) and c in message]
        assert "\n" not in message and not raw
    with pytest.raises(ids.UnsafePathError):
        ids.safe_child(tmp_path, "snapshot", "..")
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "ses_link").symlink_to(tmp_path.parent)
    with pytest.raises(ids.UnsafePathError, match="outside"):
        ids.safe_child(tmp_path, "snapshot", "ses_link")


# --------------------------------------------------------------------------
# bundles: the session id and every nested id


def test_a_bundle_whose_session_id_is_not_an_id_is_refused_and_touches_nothing(
    ip, server, store, magics, tmp_path, victim, bundle
):
    before_victim, before_history = tree_of(victim), _history_state(store)
    snapshots = sorted((magics.settings().data_dir / "snapshot").iterdir())
    for hostile in HOSTILE:
        data = copy.deepcopy(bundle)
        data["info"]["id"] = hostile.format(victim=victim)
        data["info"]["directory"] = str(victim)
        path = tmp_path / "hostile.json"
        path.write_text(json.dumps(data))
        err = refused(ip, f"import {path}", "refusing the bundle")
        assert "nothing was imported" in str(err), hostile
        assert _history_state(store) == before_history, hostile
    assert tree_of(victim) == before_victim and not (tmp_path / "PWNED").exists()
    assert sorted((magics.settings().data_dir / "snapshot").iterdir()) == snapshots
    # the attack went on: continue that session, then delete it; both refuse, nothing is touched
    refused(ip, f"-s {victim}", "not a session id")
    refused(ip, f"delete {victim}", "not a session id")
    assert tree_of(victim) == before_victim and not (tmp_path / "PWNED").exists()
    assert server.pending == 0 and len(server.requests) == 2  # only the bundle's own turn ran


def _first(data, type_):
    return next(p for m in data["messages"] for p in m["parts"] if p["type"] == type_)


def _assistant(data):
    return next(m for m in data["messages"] if m["info"]["role"] == "assistant")


NESTED = {  # where in a bundle a hostile value goes → how to put it there
    "message id": lambda d, v: d["messages"][0]["info"].__setitem__("id", v),
    "part id": lambda d, v: d["messages"][0]["parts"][0].__setitem__("id", v),
    "assistant parentID": lambda d, v: _assistant(d)["info"].__setitem__("parentID", v),
    "message sessionID": lambda d, v: d["messages"][0]["info"].__setitem__("sessionID", v),
    "part messageID": lambda d, v: d["messages"][0]["parts"][0].__setitem__("messageID", v),
    "part sessionID": lambda d, v: d["messages"][0]["parts"][0].__setitem__("sessionID", v),
    "session parentID": lambda d, v: d["info"].__setitem__("parentID", v),
    "forkedFrom.sessionID": lambda d, v: d["info"].__setitem__("forkedFrom", {"sessionID": v}),
    "forkedFrom.messageID": lambda d, v: d["info"].__setitem__(
        "forkedFrom", {"sessionID": d["info"]["id"], "messageID": v}
    ),
    "revert.messageID": lambda d, v: d["info"].__setitem__("revert", {"messageID": v}),
    "revert.partID": lambda d, v: d["info"].__setitem__(
        "revert", {"messageID": d["messages"][1]["info"]["id"], "partID": v}
    ),
    "revert.snapshot": lambda d, v: d["info"].__setitem__(
        "revert", {"messageID": d["messages"][1]["info"]["id"], "snapshot": v}
    ),
    "tool callID": lambda d, v: _first(d, "tool").__setitem__("callID", v),
    "patch hash": lambda d, v: _first(d, "patch").__setitem__("hash", v),
    "step snapshot": lambda d, v: _first(d, "step-start").__setitem__("snapshot", v),
    "compaction tail": lambda d, v: d["messages"][0]["parts"].append(
        {"id": ids.ascending("part"), "type": "compaction", "auto": False, "tail_start_id": v}
    ),
    "task sessionId": lambda d, v: d["messages"][1]["parts"].append(
        {
            "id": ids.ascending("part"),
            "type": "tool",
            "callID": "call_9",
            "tool": "task",
            "state": {
                "status": "completed",
                "input": {},
                "output": "",
                "title": "t",
                "metadata": {"sessionId": v},
                "time": {"start": 1, "end": 2},
            },
        }
    ),
    "child session": lambda d, v: d.__setitem__(
        "children", [{"info": {**d["info"], "id": v, "parentID": d["info"]["id"]}, "messages": []}]
    ),
    "child with another parent": lambda d, v: d.__setitem__(
        "children",
        [
            {
                "info": {
                    **d["info"],
                    "id": ids.descending("session"),
                    "parentID": ids.descending("session"),
                },
                "messages": [],
            }
        ],
    ),
}


def test_every_nested_id_of_a_bundle_is_checked(ip, store, tmp_path, victim, bundle):
    before_victim, before_history = tree_of(victim), _history_state(store)
    for where, put in NESTED.items():
        for value in ("{victim}", "../../victim", "x/../../victim\x00", "ses_\u0430", "msg_a b"):
            data = copy.deepcopy(bundle)
            put(data, value.format(victim=victim))
            path = tmp_path / "nested.json"
            path.write_text(json.dumps(data))
            refused(ip, f"import {path}", "refusing the bundle|malformed")
            assert _history_state(store) == before_history, (where, value)  # not one row written
    with pytest.raises(SessionNotFoundError):
        store.session(bundle["info"]["id"])
    assert tree_of(victim) == before_victim


def test_the_untouched_bundle_still_imports_and_round_trips(ip, store, tmp_path, bundle):
    path = tmp_path / "clean.json"
    path.write_text(json.dumps(bundle))
    _, said = line(ip, f"import {path}")
    assert said.startswith(f"imported {bundle['info']['id']}")
    _, said = line(ip, f"import {path}")
    assert "unchanged" in said


def test_a_bundle_cannot_choose_the_folder_its_session_works_in(
    ip, server, store, magics, tmp_path, bundle, victim, monkeypatch
):
    """The bundle's ``directory`` is a path from outside: pointed at the user's folder it would
    make every file there "inside the session folder" (read without asking). The imported
    session works in the importer's folder instead, and continuing it reads nothing of the
    victim's without the external-directory ask."""
    data = copy.deepcopy(bundle)
    data["info"]["directory"] = str(victim)
    here = tmp_path / "importer"
    here.mkdir()
    monkeypatch.chdir(here)
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps(data))
    _, said = line(ip, f"import {path}")
    assert said.endswith(f"it works in {here.resolve()}")
    assert store.session(data["info"]["id"]).directory == str(here.resolve())
    _, said = line(ip, f"import {path}")  # the same bundle again: still a no-op
    assert "unchanged" in said
    magics.permission = {}  # the defaults: reading inside is allowed, outside asks
    line(ip, f"use {data['info']['id']}")
    call = {"name": "read", "arguments": {"filePath": str(victim / "precious.txt")}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(text="done"))
    ip.run_cell_magic("agent", "", "read it")
    tool = [p for m in store.messages(data["info"]["id"]) for p in m.parts if p.type == "tool"][-1]
    assert tool.state.status == "error" and "the user's work" not in json.dumps(tool.to_data())


def test_a_saved_output_path_from_a_bundle_is_never_kept(ip, store, tmp_path, bundle):
    """``metadata.outputPath`` is read back by compaction: a bundle naming ~/.ssh/id_rsa there
    must not make it part of the archive, so paths outside our tool-output folder are dropped."""
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    data = copy.deepcopy(bundle)
    tool = _first(data, "tool")
    tool["state"]["metadata"].update(outputPath=str(secret), truncated=True)
    path = tmp_path / "paths.json"
    path.write_text(json.dumps(data))
    _, said = line(ip, f"import {path}")
    assert "1 saved-output path(s) outside this data directory dropped" in said
    parts = [p for m in store.messages(data["info"]["id"]) for p in m.parts]
    stored = next(p for p in parts if p.type == "tool")
    assert "outputPath" not in stored.state.metadata and stored.state.metadata["truncated"] is True


# --------------------------------------------------------------------------
# ids typed into magics, and ids already in an older history


def test_magics_refuse_ids_that_are_not_ids(ip, server, store, magics, tmp_path, victim):
    _text_turn(ip, server)
    current = magics.session.info.id
    before_victim, before_history = tree_of(victim), _history_state(store)
    for hostile in HOSTILE:
        hostile = hostile.format(victim=victim)
        quoted = "'" + hostile.replace("'", "'\\''") + "'"  # shlex gives back exactly `hostile`
        for command in (
            "use",
            "delete",
            "show",
            "turns",
            "archive",
            "unarchive",
            "export",
            "budget",
        ):
            refused(ip, f"{command} {quoted}", "not a session id|NUL")
        refused(ip, f"fork -s {quoted}", "not a session id|NUL")
        refused(ip, f"-s {quoted}", "not a session id|NUL")
        refused(ip, f"fork --at {quoted}", "not a message id|NUL")
        refused(ip, f"revert {quoted}", "not a message id|NUL")
        refused(ip, f"revert 1 --part {quoted}", "not a part id|NUL")
        with pytest.raises(UsageError, match="not a session id"):
            AgentSession.open(hostile, magics.settings(), store=store)
    assert magics.session.info.id == current and magics.session.info.revert is None
    assert _history_state(store) == before_history and tree_of(victim) == before_victim
    assert len(server.requests) == 1  # no refused cell reached the model


@needs_git
def test_a_path_id_left_in_an_older_history_is_neither_continued_nor_deleted(
    ip, server, store, magics, tmp_path, victim
):
    """A history written before ids were checked may hold an imported session whose id is a
    path: it can no longer reach that folder (no git init there, no rmtree)."""
    created = now_ms()
    store.put(
        Session(
            id=str(victim),
            directory=str(victim),
            title="old import",
            time_created=created,
            time_updated=created,
        )
    )
    store.flush()
    before = tree_of(victim)
    refused(ip, f"-s {victim}", "not a session id")
    refused(ip, f"use {victim}", "not a session id")
    refused(ip, f"delete {victim}", "not a session id")
    # even through the module functions, the repository path is refused (and contained)
    snap = Snapshot.for_session(magics.settings().data_dir, str(victim), victim)
    assert snap.track() is None and "not a session id" in snap.disabled_reason
    snapshot.remove_repo(magics.settings().data_dir, str(victim))
    snapshot.copy_repo(magics.settings().data_dir, str(victim), ids.descending("session"))
    assert tree_of(victim) == before and not (tmp_path / "PWNED").exists()
    assert str(victim) in [s.id for s in store.sessions()]


@needs_git
def test_a_snapshot_folder_that_is_a_link_out_of_the_data_directory_is_not_followed(
    ip, server, store, magics, tmp_path, victim
):
    _text_turn(ip, server)
    sid = magics.session.info.id
    repo = repo_path(magics.settings().data_dir, sid)
    shutil.rmtree(repo, ignore_errors=True)
    repo.parent.mkdir(parents=True, exist_ok=True)
    repo.symlink_to(victim, target_is_directory=True)
    before = tree_of(victim)
    magics.session._snapshot = None
    _write_turn(ip, server, "second.txt")  # the turn runs; its snapshots are off, with the reason
    assert "outside" in magics.session.snapshot().disabled_reason
    line(ip, f"delete {sid}")
    assert tree_of(victim) == before and not (tmp_path / "PWNED").exists()
    assert (tmp_path / "second.txt").read_text() == "v1\n"


def test_a_task_id_from_the_model_is_checked(ip, server, store, magics, tmp_path, victim):
    magics.subagents = True
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "task",
                    "arguments": {
                        "description": "resume",
                        "prompt": "go on",
                        "task_id": str(victim),
                    },
                },
            )
        ),
        Reply(text="ok"),
    )
    ip.run_cell_magic("agent", "", "resume that task")
    parts = [p for m in store.messages(magics.session.info.id) for p in m.parts]
    tool = next(p for p in parts if p.type == "tool")
    assert tool.state.status == "error" and "not a task id" in tool.state.error
    assert [s.id for s in store.sessions()] == [magics.session.info.id]  # no child was made
    assert len(server.requests) == 2


# --------------------------------------------------------------------------
# snapshots: git runs nothing the user's tree or environment prepared


@needs_git
def test_snapshot_git_runs_nothing_from_the_working_folder_or_the_environment(
    ip, server, store, magics, tmp_path, monkeypatch
):
    marks = tmp_path.parent / f"{tmp_path.name}-marks"  # outside the session folder
    marks.mkdir()

    def touch(name):
        return f"touch {marks / name}"

    # the working folder: a prepared .git/config, a nested repository, filter attributes
    (tmp_path / ".git").mkdir()
    dotgit = (
        f"[core]\n\tfsmonitor = {touch('dotgit-fsmonitor')}\n\thooksPath = {tmp_path}/hooks\n"
        f'[filter "x"]\n\tclean = {touch("dotgit-clean")}\n'
        f"\tsmudge = {touch('dotgit-smudge')}\n"
    )
    (tmp_path / ".git" / "config").write_text(dotgit)
    (tmp_path / ".gitattributes").write_text("* filter=x diff=x\n*.txt text eol=crlf\n")
    nested = tmp_path / "sub"
    nested.mkdir()
    subprocess.run(
        ["git", "init", "-q", str(nested)], check=True, env={**os.environ, "HOME": str(tmp_path)}
    )
    with open(nested / ".git" / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {touch('nested-fsmonitor')}\n")
    (nested / "n.txt").write_text("nested\n")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "post-index-change", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\n{touch(hook)}\n")
        (hooks / hook).chmod(0o755)
    # the user's own configuration and environment: filter drivers, fsmonitor, hooks, external diff
    home = tmp_path.parent / f"{tmp_path.name}-home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f"[core]\n\tfsmonitor = {touch('global-fsmonitor')}\n\thooksPath = {hooks}\n"
        f'[filter "x"]\n\tclean = {touch("global-clean")}\n\tsmudge = {touch("global-smudge")}\n'
        f'[diff "x"]\n\ttextconv = {touch("global-textconv")} && cat\n'
        f"[diff]\n\texternal = {marks}/ext.sh\n"
    )
    (marks / "ext.sh").write_text(f"#!/bin/sh\n{touch('external-diff')}\n")
    (marks / "ext.sh").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "filter.x.clean")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", touch("env-clean"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{touch('env-fsmonitor')}'")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(marks / "ext.sh"))
    # a `git` in the working folder, reachable through an empty PATH entry
    (tmp_path / "git").write_text(f"#!/bin/sh\n{touch('fake-git')}\n")
    (tmp_path / "git").chmod(0o755)
    monkeypatch.setenv("PATH", ":" + os.environ["PATH"])
    snapshot.git_executable.cache_clear()
    try:
        (tmp_path / "a.txt").write_bytes(b"line 1\nline 2\n")
        _write_turn(ip, server, "a.txt", "rewritten by the agent\n")
        _write_turn(ip, server, "b.txt", "new\n")
        _, said = line(ip, "revert 1")
    finally:
        snapshot.git_executable.cache_clear()
    assert "a.txt" in said and "kernel variables are not reverted" in said
    assert sorted(p.name for p in marks.iterdir()) == ["ext.sh"]  # no marker: nothing ran
    # what git stored is the file itself (no filter, no eol conversion): restored byte for byte
    assert (tmp_path / "a.txt").read_bytes() == b"line 1\nline 2\n"
    assert not (tmp_path / "b.txt").exists()
    assert (tmp_path / ".git" / "config").read_text() == dotgit  # the folder's .git: left alone
    assert "rewritten by the agent" in magics.session.info.revert["diff"]  # diff runs, its own way


@needs_git
def test_revert_restores_only_trees_taken_here_and_paths_inside(
    ip, server, store, magics, tmp_path, bundle
):
    """An imported session's patch parts name trees made elsewhere (here: git's empty tree, which
    every repository resolves) and paths anywhere: revert leaves those files alone."""
    precious = tmp_path / "precious.txt"
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    dotdot = str(tmp_path / "sub" / ".." / ".." / outside.name)  # lexically inside, really outside
    precious.write_text("mine\n")
    outside.write_text("outside\n")
    data = copy.deepcopy(bundle)
    data["info"]["directory"] = str(tmp_path)
    patch = _first(data, "patch")
    patch.update(hash=EMPTY_TREE, files=[str(precious), dotdot])
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(data))
    line(ip, f"import {path}")
    line(ip, f"use {data['info']['id']}")
    _, said = line(ip, "revert 1")
    assert "not taken here" in said
    assert precious.read_text() == "mine\n" and outside.read_text() == "outside\n"
    # the same paths through the snapshot API, with a tree this repository did take
    snap = magics.session.snapshot()
    tree = snap.track()
    result = snap.restore(tree, [dotdot, str(tmp_path / ".git" / "x")])
    assert len(result.skipped) == 2 and outside.read_text() == "outside\n"
    with pytest.raises(snapshot.SnapshotError, match="not a snapshot taken here"):
        snap.restore(EMPTY_TREE, [str(precious)])
    assert precious.read_text() == "mine\n"


# --------------------------------------------------------------------------
# import: a folder, odd files


def test_import_of_a_folder_or_an_odd_file_is_one_line(ip, store, tmp_path):
    before = _history_state(store)
    (tmp_path / "folder").mkdir()
    refused(ip, f"import {tmp_path / 'folder'}", "is a folder .*import-opencode")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    refused(ip, f"import {tmp_path / 'binary.json'}", "not JSON")
    for name, value in (
        ("list.json", [1, 2]),
        ("noinfo.json", {"messages": []}),
        ("version.json", {"info": {}, "messages": [], "version": "x"}),
        ("children.json", {"info": {}, "messages": [], "children": "x"}),
    ):
        (tmp_path / name).write_text(json.dumps(value))
        refused(ip, f"import {tmp_path / name}")
    assert _history_state(store) == before


# --------------------------------------------------------------------------
# OpenCode: malformed databases, broken storage files, ids outside the grammar

OC_SESSION = "ses_3f0a1b2c3d4eAbCdEfGhIjKlMn"
OC_MESSAGE = "msg_c1a0000000010000000000user1"


def _oc_db(path: Path, sessions=(), messages=(), parts=(), schema=None) -> Path:
    con = sqlite3.connect(path)
    con.executescript(
        schema
        or """
        CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT,
            directory TEXT, title TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
        CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,
            data TEXT);
        CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT,
            time_created INTEGER, data TEXT);
    """
    )
    for row in sessions:
        con.execute(
            "INSERT INTO session (id, directory, title, time_created, time_updated) "
            "VALUES (?,?,?,?,?)",
            row,
        )
    for row in messages:
        con.execute("INSERT INTO message VALUES (?,?,?,?)", row)
    for row in parts:
        con.execute("INSERT INTO part VALUES (?,?,?,?,?)", row)
    con.commit()
    con.close()
    return path


USER = json.dumps(
    {"role": "user", "time": {"created": 1}, "model": {"providerID": "a", "modelID": "b"}}
)


def test_a_malformed_opencode_db_is_refused_with_one_line(ip, store, tmp_path):
    before = _history_state(store)
    cases = {
        "garbage": lambda p: p.write_bytes(b"not a database " * 200),
        "id-only": lambda p: _oc_db(
            p, schema="CREATE TABLE session (id TEXT); INSERT INTO session VALUES ('ses_a');"
        ),
        "other-columns": lambda p: _oc_db(
            p, schema="CREATE TABLE session (foo TEXT); INSERT INTO session VALUES (1);"
        ),
        "no-session-table": lambda p: _oc_db(p, schema="CREATE TABLE t (x);"),
        "truncated": lambda p: p.write_bytes(
            _oc_db(
                tmp_path / "full.db",
                sessions=[(f"ses_{i}", "/p", "t" * 200, 1, 2) for i in range(500)],
            ).read_bytes()[:20_000]
        ),
    }
    for name, build in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        build(folder / "opencode.db")
        refused(ip, f"import-opencode {folder}", "opencode.db|nothing was imported")
    assert _history_state(store) == before
    assert "(untitled)" not in [s.title for s in store.sessions()]


def test_opencode_rows_and_files_that_cannot_be_imported_are_listed_with_reasons(
    ip, store, tmp_path, victim
):
    root = tmp_path / "opencode"
    root.mkdir()
    good_part = json.dumps({"type": "text", "text": "hello"})
    _oc_db(
        root / "opencode.db",
        sessions=[
            (OC_SESSION, "/p", "kept", 1, 2),
            (str(victim), str(victim), "a path as id", 1, 2),
            ("ses_ok/../../x", "/p", "slash", 1, 2),
            ("ses_untitled", "/p", None, 1, 2),
        ],
        messages=[
            (OC_MESSAGE, OC_SESSION, 1, USER),
            ("msg_notjson", OC_SESSION, 1, "{nope"),
            ("msg_../x", OC_SESSION, 1, USER),
        ],
        parts=[
            ("prt_01", OC_MESSAGE, OC_SESSION, 1, good_part),
            ("prt_/etc/passwd", OC_MESSAGE, OC_SESSION, 1, good_part),
            (
                "prt_02",
                OC_MESSAGE,
                OC_SESSION,
                1,
                json.dumps(
                    {
                        "type": "tool",
                        "callID": "../../x",
                        "tool": "bash",
                        "state": {"status": "pending", "input": {}, "raw": ""},
                    }
                ),
            ),
            ("prt_03", OC_MESSAGE, OC_SESSION, 1, "[1, 2]"),
        ],
    )
    storage = root / "storage" / "session" / "global"
    storage.mkdir(parents=True)
    (storage / "ses_broken.json").write_text("{broken")
    (storage / "ses_list.json").write_text("[1]")
    (storage / "ses_latin1.json").write_bytes(b'{"title": "caf\xe9"}')
    (storage / "weird.json").write_text(json.dumps({"id": "zzz_1"}))
    (storage / "folder.json").mkdir()
    os.mkfifo(storage / "ses_fifo.json")  # would hang a reader: never opened

    _, said = line(ip, f"import-opencode {root}")
    head, *listed = said.splitlines()
    assert head.startswith("imported 1 session(s), 1 message(s), 1 part(s)")
    assert [s.id for s in store.sessions()] == [OC_SESSION]  # OpenCode's valid id, kept as it is
    assert [p.id for m in store.messages(OC_SESSION) for p in m.parts] == ["prt_01"]
    text = "\n".join(listed)
    for where in (
        "storage/session/global/ses_broken.json",
        "storage/session/global/ses_list.json",
        "storage/session/global/ses_latin1.json",
        "storage/session/global/weird.json",
        "storage/session/global/folder.json",
        "storage/session/global/ses_fifo.json",
        "opencode.db session 'ses_ok/../../x'",
        "opencode.db session 'ses_untitled'",
        "opencode.db message 'msg_notjson'",
        "opencode.db message 'msg_../x'",
        "opencode.db part 'prt_/etc/passwd'",
        "opencode.db part 'prt_02'",
        "opencode.db part 'prt_03'",
    ):
        assert f"skipped {where} — " in text, where
    assert "not JSON" in text and "id grammar" in text and "without a title" in text
    assert len(listed) == 14  # every file and row that was not imported, each once
    assert tree_of(victim) and not (tmp_path / "PWNED").exists()
    refused(ip, f"import-opencode {root} --session ../../x", "not a session id")
