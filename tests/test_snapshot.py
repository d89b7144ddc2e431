"""Shadow-git snapshots per session (snapshot.py) and the processor's step hook.

Real git on real folders: a plain folder (no git), a folder that is a git
repository (left untouched), large files, many files, odd names, exclusions.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jupyter_session_agent.session.snapshot import Snapshot, copy_repo, repo_path
from jupyter_session_agent.testing.scripted_server import Reply

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


def files_of(root: Path, skip=("data",)) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes), our data folder excluded."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip or not path.is_file():
            continue
        out[rel.as_posix()] = path.read_bytes()
    return out


@pytest.fixture
def work(tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "bin.dat").write_bytes(bytes(range(256)) * 4)
    (root / "sub").mkdir()
    (root / "sub" / "b.py").write_bytes(b"print('b')\r\n")  # CRLF kept as is (autocrlf=false)
    return root


def snap_for(tmp_path, work, session="ses_test", **kw):
    return Snapshot(repo_path(tmp_path / "data", session), work, private=[tmp_path / "data"], **kw)


def test_track_changed_restore_byte_for_byte(tmp_path, work):
    snap = snap_for(tmp_path, work)
    before_files = files_of(work)
    before = snap.track()
    assert before and len(before) == 40
    assert snap.track() == before  # nothing changed: same tree
    (work / "a.txt").write_bytes(b"changed\n")
    (work / "bin.dat").write_bytes(b"\x00\xff" * 100)
    (work / "new file ü.txt").write_text("new")
    (work / "sub" / "b.py").unlink()
    after = snap.track()
    changed = {Path(p).relative_to(work).as_posix() for p in snap.changed(before, after)}
    assert changed == {"a.txt", "bin.dat", "new file ü.txt", "sub/b.py"}
    result = snap.restore(before, snap.changed(before, after))
    assert files_of(work) == before_files
    assert [Path(p).name for p in result.deleted] == ["new file ü.txt"]
    assert len(result.restored) == 3 and not result.skipped
    assert snap.track() == before


def test_a_folder_that_is_a_git_repo_is_left_alone(tmp_path, work):
    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=work, capture_output=True, text=True, check=True
        ).stdout

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init")
    (work / ".git" / "info" / "exclude").write_text("ignored-by-real-repo.txt\n")
    (work / "ignored-by-real-repo.txt").write_text("x")
    status, head = git("status", "--porcelain"), git("rev-parse", "HEAD")
    snap = snap_for(tmp_path, work)
    before = snap.track()
    (work / "a.txt").write_text("edited")
    after = snap.track()
    assert [Path(p).name for p in snap.changed(before, after)] == ["a.txt"]
    tracked = subprocess.run(
        ["git", "--git-dir", str(snap.git_dir), "ls-tree", "-r", "--name-only", after],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "ignored-by-real-repo.txt" not in tracked and not any(
        t.startswith(".git/") for t in tracked
    )
    snap.restore(before, snap.changed(before, after))
    assert git("status", "--porcelain") == status and git("rev-parse", "HEAD") == head


def test_large_files_are_skipped_and_reported(tmp_path, work):
    snap = snap_for(tmp_path, work, max_file_size=10_000)
    (work / "big.parquet").write_bytes(b"x" * 20_000)
    before = snap.track()
    assert snap.large_files == {"big.parquet": 20_000}
    (work / "big.parquet").write_bytes(b"y" * 30_000)
    (work / "a.txt").write_text("edited")
    after = snap.track()
    assert [Path(p).name for p in snap.changed(before, after)] == ["a.txt"]  # never hashed
    # a tracked file that grows past the limit leaves the snapshot; revert leaves it alone
    (work / "bin.dat").write_bytes(b"z" * 50_000)
    grown = snap.track()
    result = snap.restore(before, snap.changed(before, grown))
    assert [Path(p).name for p in result.skipped] == ["bin.dat"]
    assert (work / "bin.dat").read_bytes() == b"z" * 50_000
    assert (work / "a.txt").read_bytes() == b"alpha\n"
    # shrinking brings it back under tracking
    (work / "big.parquet").write_bytes(b"small")
    snap.track()
    assert "big.parquet" not in snap.large_files


def test_too_many_files_disables_snapshots_with_a_reason(tmp_path, work):
    for i in range(30):
        (work / f"f{i}.txt").write_text(str(i))
    snap = snap_for(tmp_path, work, max_files=10)
    assert snap.track() is None
    assert "max_files" in snap.disabled_reason
    assert snap.track() is None  # stays off, cheaply


def test_exclusions_gitignore_notebooks_and_our_data_dir(tmp_path):
    work = tmp_path
    (work / "data").mkdir()
    (work / "data" / "history.jsonl").write_text("{}")  # our data dir inside the work tree
    (work / ".gitignore").write_text("*.log\n")
    (work / "run.log").write_text("log")
    (work / "analysis.ipynb").write_text("{}")
    (work / "keep.txt").write_text("keep")
    snap = snap_for(tmp_path, work)
    tree = snap.track()
    listed = subprocess.run(
        ["git", "--git-dir", str(snap.git_dir), "ls-tree", "-r", "--name-only", tree],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(listed) == [".gitignore", "keep.txt"]


def test_sessions_do_not_share_snapshots(tmp_path, work):
    """OpenCode #33940: undo in one session must not undo another session's changes."""
    one, two = snap_for(tmp_path, work, "ses_one"), snap_for(tmp_path, work, "ses_two")
    b1 = one.track()
    (work / "a.txt").write_text("session one")
    a1 = one.track()
    b2 = two.track()
    (work / "sub" / "b.py").write_text("session two")
    two.track()
    one.restore(b1, one.changed(b1, a1))
    assert (work / "a.txt").read_bytes() == b"alpha\n"
    assert (work / "sub" / "b.py").read_text() == "session two"
    assert b2 != b1 and one.git_dir != two.git_dir


def test_fork_copies_objects_so_old_trees_resolve(tmp_path, work):
    snap = snap_for(tmp_path, work, "ses_src")
    before = snap.track()
    (work / "a.txt").write_text("edited")
    after = snap.track()
    copy_repo(tmp_path / "data", "ses_src", "ses_dst")
    fork = snap_for(tmp_path, work, "ses_dst")
    fork.restore(before, fork.changed(before, after))
    assert (work / "a.txt").read_bytes() == b"alpha\n"


# -- the processor hook, end to end ------------------------------------------------


def test_steps_record_snapshots_and_patches(ip, server, store, magics, tmp_path):
    (tmp_path / "notes.txt").write_text("one\n")
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "write", "arguments": {"filePath": "out.txt", "content": "written\n"}},
                {
                    "name": "edit",
                    "arguments": {"filePath": "notes.txt", "oldString": "one", "newString": "two"},
                },
            )
        ),
        Reply(text="done"),
    )
    ip.run_cell_magic("agent", "", "change files")
    history = store.messages(magics.session.info.id)
    first, second = history[1], history[2]
    start, finish = first.parts[0], first.parts[-1]
    patch = first.parts[-2]  # just before step-finish, so step-finish stays the step's last part
    assert (
        start.type == "step-start"
        and start.snapshot
        and finish.snapshot
        and finish.snapshot != start.snapshot
    )
    assert patch.type == "patch" and patch.hash == start.snapshot
    assert sorted(Path(f).name for f in patch.files) == ["notes.txt", "out.txt"]
    # a step that changes nothing has equal snapshots and no patch
    assert second.parts[0].snapshot == second.parts[-1].snapshot
    assert "patch" not in [p.type for p in second.parts]
    rows = store.sql("select count(*) n from part where type = 'patch'")
    assert int(rows["n"][0]) == 1
    assert repo_path(magics.settings().data_dir, magics.session.info.id).is_dir()


def test_snapshots_can_be_turned_off(ip, server, store, magics, tmp_path):
    magics.snapshot = {"enabled": False}
    server.enqueue(
        Reply(tool_calls=({"name": "write", "arguments": {"filePath": "x.txt", "content": "x"}},)),
        Reply(text="ok"),
    )
    ip.run_cell_magic("agent", "", "write")
    parts = [p for m in store.messages(magics.session.info.id) for p in m.parts]
    assert all(getattr(p, "snapshot", None) is None for p in parts) and "patch" not in [
        p.type for p in parts
    ]
    assert not repo_path(magics.settings().data_dir, magics.session.info.id).exists()


def test_unknown_snapshot_setting_is_a_config_error(ip, magics):
    from jupyter_session_agent.core.errors import ConfigError

    with pytest.raises(ConfigError, match="max_file_size"):  # refused when assigned
        magics.snapshot = {"max_size": 1}
    assert magics.snapshot == {}


def test_an_interrupted_step_still_records_its_patch(ip, server, store, magics, tmp_path):
    from jupyter_session_agent.core.errors import AgentError

    code = "open('made.txt', 'w').write('before the interrupt')\nraise KeyboardInterrupt"
    server.enqueue(Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)))
    with pytest.raises(AgentError, match="interrupted"):
        ip.run_cell_magic("agent", "", "go")
    parts = store.messages(magics.session.info.id)[-1].parts
    patch = [p for p in parts if p.type == "patch"]
    assert patch and [Path(f).name for f in patch[0].files] == ["made.txt"]
    assert os.path.exists(tmp_path / "made.txt")


def test_the_data_directory_is_never_snapshotted(tmp_path):
    """A session whose directory is the data directory (or inside it) gets no snapshots:
    reverting must never restore the history's own files."""
    data = tmp_path / "data"
    (data / "history").mkdir(parents=True)
    for work in (data, data / "history"):
        snap = Snapshot(repo_path(data, "ses_x"), work, private=[data])
        assert snap.track() is None and "data directory" in snap.disabled_reason
