"""The history survives one bad file, a full disk, and a session continued from two kernels.

Each test drives the public path (a real IPython shell, ``%%agent`` against the scripted
server over HTTP, ``%agent`` commands, ``sql()``) and checks what is on disk and what another
process reads, as another kernel would.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.core.messages import TextPart, ToolPart, UnknownPart
from jupyter_session_agent.store import HistoryWarning, HistoryWriteError, Store
from jupyter_session_agent.testing.scripted_server import Reply

HERE = Path(__file__).parent


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def history_warnings(records, needle: str = "") -> list[str]:
    return [
        str(r.message)
        for r in records
        if issubclass(r.category, HistoryWarning) and needle in str(r.message)
    ]


def texts_of(history) -> list[str]:
    return [p.text for m in history for p in m.parts if isinstance(p, TextPart)]


def finished_writer(data_dir: Path, tag: str = "other") -> None:
    """Another process writes one session and exits: its journal becomes a Parquet file."""
    argv = [sys.executable, str(HERE / "_store_writer.py"), str(data_dir), "turns", "1", tag]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


READER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    from jupyter_session_agent.store import Store
    store = Store({data!r})
    sessions = store.sessions()
    history = store.messages({sid!r})
    frame = store.sql("SELECT count(*) AS n, max(text_length) AS longest FROM part")
    texts = [len(p.text) for m in history for p in m.parts if p.type == "text"]
    print(json.dumps({{"sessions": len(sessions), "messages": len(history), "texts": texts,
                      "sql_parts": int(frame["n"][0]), "longest": int(frame["longest"][0] or 0)}}))
""")


def read_elsewhere(data_dir: Path, session_id: str) -> tuple[dict, str]:
    """What a fresh process (another kernel) reads: (counts, its stderr)."""
    code = READER.format(root=str(HERE.parent), data=str(data_dir), sid=session_id)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


# --------------------------------------------------------------------------
# one stray file or row


def _plant(path: Path, make) -> str:
    make(path)
    return path.name


def _cut_parquet(history: Path) -> str:  # an interrupted copy or sync
    good = next((history / "parquet").glob("*.parquet")).read_bytes()
    half = good[: len(good) // 2]
    return _plant(history / "parquet" / "copying.parquet", lambda p: p.write_bytes(half))


def _garbage_parquet(history: Path) -> str:  # both magic numbers, nothing readable between them
    body = b"PAR1" + bytes(range(256)) * 8 + b"\x10\0\0\0PAR1"
    return _plant(history / "parquet" / "garbage.parquet", lambda p: p.write_bytes(body))


STRAYS = {
    "folder named *.jsonl": lambda h: _plant(h / "live" / "notes.jsonl", Path.mkdir),
    "fifo named *.jsonl": lambda h: _plant(h / "live" / "pipe.jsonl", os.mkfifo),
    "link named *.jsonl": lambda h: _plant(
        h / "live" / "link.jsonl", lambda p: p.symlink_to("/etc/hostname")
    ),
    "folder named *.parquet": lambda h: _plant(h / "parquet" / "dir.parquet", Path.mkdir),
    "0-byte parquet": lambda h: _plant(h / "parquet" / "empty.parquet", Path.touch),
    "truncated parquet": _cut_parquet,
    "garbage between magic numbers": _garbage_parquet,
}


@pytest.mark.parametrize("stray", list(STRAYS))
def test_one_stray_file_is_skipped_with_one_warning(stray, ip, server, magics, store, data_dir):
    server.enqueue(Reply(text="first answer"))
    run(ip, "first question")
    session_id = magics.session.info.id
    finished_writer(data_dir)  # a finished kernel's Parquet file next to this one's journal
    store.sql("SELECT 1")  # this kernel's catalog is loaded before the stray appears
    history = data_dir / "history"
    name = STRAYS[stray](history)

    server.enqueue(Reply(text="second answer"))
    with warnings.catch_warnings(record=True) as records, capture_output():
        warnings.simplefilter("always")
        listed = ip.run_line_magic("agent", "sessions").text
        ip.run_line_magic("agent", "sessions")
        frame = store.sql("SELECT count(*) AS n FROM part")
        run(ip, "second question", f"-s {session_id}")  # still writable
        again = store.sql("SELECT count(*) AS n FROM part")
    assert session_id in listed and "other 0" in listed
    assert int(frame["n"][0]) == 4 + 3  # this kernel's first turn + the finished writer's turn
    assert int(again["n"][0]) == int(frame["n"][0]) + 4  # the second turn, written and read back
    assert len(history_warnings(records, name)) == 1, history_warnings(records)
    assert "move it out of" in history_warnings(records, name)[0]
    assert texts_of(store.messages(session_id)) == [
        "first question",
        "first answer",
        "second question",
        "second answer",
    ]

    counts, stderr = read_elsewhere(data_dir, session_id)  # a kernel started after the stray came
    assert counts["sessions"] == 2 and counts["messages"] == 4 and counts["sql_parts"] == 11
    assert stderr.count("HistoryWarning") == 1 and name in stderr
    folder = "live" if name.endswith(".jsonl") else "parquet"
    assert os.path.lexists(history / folder / name)  # left where it is


def test_broken_journal_lines_do_not_hide_the_rest(ip, server, magics, store, data_dir):
    server.enqueue(Reply(text="answer"))
    run(ip, "question")
    session = magics.session.info
    # a dead writer's journal: invalid JSON, invalid UTF-8, a line cut short, then a good row
    other = "ses_0000000000001aaaaaaaaaaaaa"
    good = {
        "kind": "session",
        "id": other,
        "session_id": other,
        "message_id": None,
        "rev": 5,
        "writer": "gone-1-00000000",
        "deleted": False,
        "time_created": 1,
        "time_updated": 1,
        "data": {
            "directory": "/w",
            "title": "from a dead writer",
            "time": {"created": 1, "updated": 1},
        },
    }
    (data_dir / "history" / "live" / "gone-1-00000000.jsonl").write_bytes(
        b'{"kind": "part", oops\n'
        + b'{"kind":"session","id":"ses_\xff\xfe","rev":1,"data":{}}\n'
        + b'{"kind":"message","id":"msg_1","session_id":"'
        + session.id.encode()
        + b'","rev":3,"da\n'
        + json.dumps(good).encode()
        + b"\n"
    )
    titles = sorted(s.title for s in store.sessions())
    assert titles == sorted([session.title, "from a dead writer"])
    assert len(store.messages(session.id)) == 2
    counts, _ = read_elsewhere(data_dir, session.id)
    assert counts["sessions"] == 2 and counts["messages"] == 2


def test_unreadable_rows_are_skipped_with_one_warning(ip, server, magics, store, data_dir):
    server.enqueue(Reply(text="answer"))
    run(ip, "question")
    info = magics.session.info
    user_id = store.messages(info.id)[0].info.id
    message, part, broken = (
        "msg_zzzzzzzzzzzzzzzzzzzzzzzzzz",
        "prt_zzzzzzzzzzzzzzzzzzzzzzzzzz",
        "ses_0000000000002bbbbbbbbbbbbb",
    )
    base = {
        "rev": 10**19 // 2,
        "writer": "gone-2-00000000",
        "deleted": False,
        "time_created": 1,
        "time_updated": 1,
    }
    rows = [  # a message this version cannot read, a part that is not an object, a broken session
        {
            **base,
            "kind": "message",
            "id": message,
            "session_id": info.id,
            "message_id": None,
            "data": {"role": "critic"},
        },
        {
            **base,
            "kind": "part",
            "id": part,
            "session_id": info.id,
            "message_id": user_id,
            "data": 5,
        },
        {
            **base,
            "kind": "session",
            "id": broken,
            "session_id": broken,
            "message_id": None,
            "data": {"title": 7},
        },
    ]
    journal = data_dir / "history" / "live" / "gone-2-00000000.jsonl"
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        for _ in range(3):
            history = store.messages(info.id)
            sessions = store.sessions()
    assert [m.info.role for m in history] == ["user", "assistant"]
    assert [p.type for p in history[0].parts] == ["text"]
    assert [s.id for s in sessions] == [info.id]
    for id in (message, part, broken):
        assert len(history_warnings(records, id)) == 1, history_warnings(records)
    with pytest.raises(UsageError, match="cannot be read"):
        store.session(broken)
    server.enqueue(Reply(text="still going"))
    run(ip, "continue", f"-s {info.id}")
    assert texts_of(store.messages(info.id))[-1] == "still going"


def test_a_part_from_a_newer_version_is_kept_shown_and_not_sent(
    ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="answer"))
    run(ip, "question")
    info = magics.session.info
    reply_id = store.messages(info.id)[1].info.id
    newer = {"type": "hologram", "frames": [1, 2, 3], "meta": {"fps": 24}}
    paused = {
        "type": "tool",
        "tool": "bash",
        "callID": "call_9",
        "state": {"status": "paused", "input": {}},
    }
    base = {
        "kind": "part",
        "session_id": info.id,
        "message_id": reply_id,
        "rev": 1,
        "writer": "newer-3-00000000",
        "deleted": False,
        "time_created": 1,
        "time_updated": 1,
    }
    ids = ("prt_zzzzzzzzzzzzzzzzzzzzzzzzz1", "prt_zzzzzzzzzzzzzzzzzzzzzzzzz2")
    (data_dir / "history" / "live" / "newer-3-00000000.jsonl").write_text(
        "".join(
            json.dumps({**base, "id": id, "data": data}) + "\n"
            for id, data in zip(ids, (newer, paused))
        )
    )

    server.enqueue(Reply(text="second answer"))
    with warnings.catch_warnings(record=True) as records, capture_output() as out:
        warnings.simplefilter("always")
        run(ip, "second question", f"-s {info.id}")  # the session continues
        shown = ip.run_line_magic("agent", f"show {info.id}")._repr_mimebundle_()
    unknown = [p for m in store.messages(info.id) for p in m.parts if isinstance(p, UnknownPart)]
    assert sorted(p.stored_type for p in unknown) == ["hologram", "tool"]
    assert {p.id: p.data for p in unknown} == dict(zip(ids, (newer, paused)))
    assert len(history_warnings(records, "hologram")) == 1
    assert "`hologram` part: unknown to this version" in shown["text/markdown"]
    assert "[unknown hologram part]" in shown["text/plain"]
    assert "second answer" in "".join(str(o.data.get("text/plain", "")) for o in out.outputs)
    sent = server.requests[-1]["messages"]  # a valid request: no trace of the unknown parts
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "hologram" not in json.dumps(sent) and "call_9" not in json.dumps(sent)

    store.put(*unknown)  # written again (a fork, an interrupted-tool fix): the JSON is unchanged
    store.flush()
    frame = store.sql(
        "SELECT data::VARCHAR AS data, type FROM part WHERE id LIKE 'prt_zzz%' ORDER BY id"
    )
    assert [json.loads(d) for d in frame["data"]] == [newer, paused]
    assert list(frame["type"]) == ["hologram", "tool"]
    fork = magics.session.fork()
    copied = [
        p.data
        for m in fork.store.messages(fork.info.id)
        for p in m.parts
        if isinstance(p, UnknownPart)
    ]
    assert sorted(copied, key=json.dumps) == sorted([newer, paused], key=json.dumps)

    bundle = data_dir.parent / "newer.json"  # exported and imported again: still kept as it is
    ip.run_line_magic("agent", f"export {info.id} --format json --out {bundle}")
    ip.run_line_magic("agent", f"delete {info.id}")
    with capture_output() as out:
        ip.run_line_magic("agent", f"import {bundle}")
    assert out.stdout.startswith(f"imported {info.id}")
    back = {
        p.id: p.data for m in store.messages(info.id) for p in m.parts if isinstance(p, UnknownPart)
    }
    assert back == dict(zip(ids, (newer, paused)))


@pytest.mark.slow
def test_a_40_mb_prompt_is_read_back_everywhere(ip, server, magics, store, data_dir):
    big = "word " * (8 << 20)  # 40 MB: DuckDB's default line limit is 16 MB
    magics.model_overrides = {"openai/scripted": {"context": 100_000_000, "output": 4_096}}
    server.enqueue(Reply(text="that was long"))
    run(ip, big)
    session_id = magics.session.info.id
    frame = store.sql("SELECT max(text_length) AS n FROM part")
    assert int(frame["n"][0]) == len(big.strip())
    ip.run_line_magic("agent", "sessions")
    counts, stderr = read_elsewhere(data_dir, session_id)  # a fresh kernel: the live journal
    assert counts["messages"] == 2 and counts["longest"] == len(big.strip()), stderr
    assert max(counts["texts"]) == len(big.strip())
    ip.run_line_magic("unload_ext", "jupyter_session_agent")  # close: compacted to Parquet
    try:
        assert not list((data_dir / "history" / "live").glob("*.jsonl"))
        assert list((data_dir / "history" / "parquet").glob("*.parquet"))
        counts, stderr = read_elsewhere(data_dir, session_id)
        assert counts["messages"] == 2 and counts["longest"] == len(big.strip()), stderr
    finally:
        ip.run_line_magic("load_ext", "jupyter_session_agent")


# --------------------------------------------------------------------------
# a full disk (ENOSPC)


class FullDisk:
    """A really full filesystem: a small tmpfs mounted at the data directory, filled by a file."""

    def __init__(self, path: Path, size: str = "8m") -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            reason = done.stderr.strip() or "not root"
            pytest.skip(f"no full disk to test with: cannot mount a tmpfs ({reason})")
        self.filler = path / "filler"

    def fill(self) -> None:
        with contextlib.suppress(OSError), open(self.filler, "ab", buffering=0) as f:
            while f.write(b"\0" * 65536):
                pass
        with contextlib.suppress(OSError), open(self.filler, "ab", buffering=0) as f:
            while f.write(b"\0" * 512):  # the last few blocks
                pass
        with pytest.raises(OSError) as err, open(self.path / "probe", "wb", buffering=0) as f:
            f.write(b"x" * 8192)
        (self.path / "probe").unlink(missing_ok=True)
        assert err.value.errno == errno.ENOSPC

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def disk(data_dir):
    full = FullDisk(data_dir)
    yield full
    full.unmount()


def test_disk_full_refuses_the_turn_in_one_line_keeps_reads_and_recovers(
    disk, ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="first answer"))
    run(ip, "first question")
    session_id = magics.session.info.id
    sent = len(server.requests)
    disk.fill()
    # prompts longer than the slack of the journal's last block
    second, third = (" ".join([words] * 1000) for words in ("second question", "third question"))

    with capture_output() as out, pytest.raises(HistoryWriteError) as err:
        run(ip, second)
    assert err.value._render_traceback_() == [f"HistoryWriteError: {err.value}"]
    assert "No space left on device" in str(err.value) and "free disk space" in str(err.value)
    assert len(server.requests) == sent  # the model was not called for what cannot be saved
    shown = "".join(str(o.data.get("text/markdown", "")) for o in out.outputs)
    assert "second question" in shown and "not saved yet" in shown

    listed = ip.run_line_magic("agent", "sessions").text  # read-only commands keep working,
    frame = store.sql("SELECT count(*) AS n, max(text_length) AS longest FROM part")  # on the saved
    assert session_id in listed
    assert int(frame["n"][0]) == 4 and int(frame["longest"][0]) < 100  # a cut line is not a row
    with pytest.raises(HistoryWriteError):  # and the next turn says the same, in one line
        run(ip, third)

    disk.free()
    server.enqueue(Reply(text="fourth answer"))
    run(ip, "fourth question")
    counts, stderr = read_elsewhere(data_dir, session_id)
    expected = ["first question", "first answer", second, third, "fourth question", "fourth answer"]
    assert texts_of(Store(data_dir).messages(session_id)) == expected  # each once, whole
    assert counts["messages"] == 6 and "Traceback" not in stderr
    assert texts_of(magics.session.history) == expected
    sent = [m.get("content") for m in server.requests[-1]["messages"]]
    assert sent[-3:] == [second, third, "fourth question"]  # kept in memory, then saved and sent


def test_disk_filling_during_a_turn_never_shows_unsaved_work_as_done(
    disk, ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="ready"))
    run(ip, "warm up")
    session_id = magics.session.info.id
    code = f"open({str(disk.filler)!r}, 'wb').write(b'0' * (64 << 20))"  # the agent fills the disk
    call = {"name": "python", "arguments": {"code": code}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(text="filled"))
    with capture_output() as out, pytest.raises(HistoryWriteError):
        run(ip, "fill the disk")
    final = [o.data for o in out.outputs if "text/markdown" in o.data][-1]
    assert "**not saved yet**" in final["text/markdown"]
    payload = final["application/vnd.jupyter.session-agent+json"]
    step = [m for m in payload["messages"] if m["info"]["role"] == "assistant"][-1]
    assert step["info"]["error"]["name"] == "not saved yet"
    assert "(not saved)" in final["text/plain"]
    assert store.unsaved()
    on_disk = Store(data_dir).messages(session_id)  # what another kernel sees: the call running
    states = [p.state.status for m in on_disk for p in m.parts if isinstance(p, ToolPart)]
    assert states == ["running"]

    disk.free()
    ip.run_line_magic("agent", "sessions")  # any read writes what was waiting
    assert not store.unsaved()
    history = Store(data_dir).messages(session_id)
    tools = [p for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert len(history) == 4 and tools[0].state.status == "completed"
    server.enqueue(Reply(text="next"))
    run(ip, "next")  # and the session goes on
    assert len(Store(data_dir).messages(session_id)) == 6


EXIT_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from _store_writer import turn
    from jupyter_session_agent.store import Store
    store = Store({data!r})
    store.put(*turn("saved", 0))
    store.flush()
    with open({filler!r}, "ab", buffering=0) as f:
        try:
            while f.write(b"0" * 4096):
                pass
        except OSError:
            pass
    store.put(*turn("lost" * 5000, 1))  # more than the journal's last block can take
    print("exiting", flush=True)
""")


def test_disk_full_at_exit_is_one_warning_not_a_traceback(disk, data_dir):
    code = EXIT_WRITER.format(
        root=str(HERE.parent), tests=str(HERE), data=str(data_dir), filler=str(disk.filler)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "exiting", done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.count("HistoryWarning") == 1 and "unsaved rows are lost" in done.stderr
    disk.free()
    assert [s.title for s in Store(data_dir).sessions()] == ["saved 0"]


# --------------------------------------------------------------------------
# the same session continued from two kernels


def other_kernel(data_dir: Path, session_id: str, prompt: str, server) -> subprocess.Popen:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
    }
    argv = [sys.executable, str(HERE / "_session_writer.py"), str(data_dir), session_id, prompt]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_turns_from_another_kernel_are_loaded_before_the_next_turn(
    ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="alpha answer"))
    run(ip, "alpha")
    session_id = magics.session.info.id
    server.enqueue(Reply(text="beta answer"))
    child = other_kernel(data_dir, session_id, "beta from the other kernel", server)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and "done beta answer" in out, err

    server.enqueue(Reply(text="gamma answer"))
    run(ip, "gamma")
    sent = [(m["role"], m.get("content")) for m in server.requests[-1]["messages"][1:]]
    assert sent == [
        ("user", "alpha"),
        ("assistant", "alpha answer"),
        ("user", "beta from the other kernel"),
        ("assistant", "beta answer"),
        ("user", "gamma"),
    ]
    on_disk = [m.info.id for m in Store(data_dir).messages(session_id)]
    assert [m.info.id for m in magics.session.history] == on_disk and len(on_disk) == 6
    assert on_disk == sorted(on_disk)


def test_a_turn_still_running_in_another_kernel_is_refused_in_one_line(
    ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="alpha answer"))
    run(ip, "alpha")
    session_id = magics.session.info.id
    server.enqueue(Reply(text="slow answer", first_delay=5.0))
    sent = len(server.requests) + 1
    child = other_kernel(data_dir, session_id, "slow question", server)
    try:
        wait_for(lambda: len(Store(data_dir).messages(session_id)) == 3)  # its prompt is saved
        wait_for(lambda: len(server.requests) == sent)  # and its model call is under way
        with pytest.raises(UsageError) as err:
            run(ip, "mine")
        assert "turn running in another kernel" in str(err.value)
        assert err.value._render_traceback_() == [f"UsageError: {err.value}"]
        assert len(server.requests) == sent
        assert len(Store(data_dir).messages(session_id)) == 3  # nothing of ours was written
        out, errors = child.communicate(timeout=60)
        assert child.returncode == 0, errors
    finally:
        if child.poll() is None:
            child.kill()
    server.enqueue(Reply(text="mine answered"))
    run(ip, "mine")
    expected = ["alpha", "alpha answer", "slow question", "slow answer", "mine", "mine answered"]
    assert texts_of(magics.session.history) == expected


def test_a_killed_kernels_unfinished_turn_does_not_block_the_session(
    ip, server, magics, store, data_dir
):
    server.enqueue(Reply(text="alpha answer"))
    run(ip, "alpha")
    session_id = magics.session.info.id
    server.enqueue(Reply(text="never heard", first_delay=30.0))
    sent = len(server.requests) + 1
    child = other_kernel(data_dir, session_id, "killed question", server)
    try:
        wait_for(lambda: len(Store(data_dir).messages(session_id)) == 3)
        wait_for(lambda: len(server.requests) == sent)  # killed while its model call is under way
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    server.enqueue(Reply(text="carried on"))
    run(ip, "carry on")
    sent = [m.get("content") for m in server.requests[-1]["messages"][1:]]
    assert sent == ["alpha", "alpha answer", "killed question", "carry on"]
    assert len(Store(data_dir).messages(session_id)) == 5


def test_no_reload_when_no_other_kernel_wrote(ip, server, magics, store, data_dir, monkeypatch):
    server.enqueue(Reply(text="one"))
    run(ip, "one")
    finished_writer(data_dir)  # another session, written and finished meanwhile
    reads = []
    real = type(store).messages
    monkeypatch.setattr(
        type(store), "messages", lambda self, sid: reads.append(sid) or real(self, sid)
    )
    for word in ("two", "three"):
        server.enqueue(Reply(text=word))
        run(ip, word)
    assert reads == []  # the history is read again only when another writer wrote to the session
    assert texts_of(magics.session.history) == ["one", "one", "two", "two", "three", "three"]
