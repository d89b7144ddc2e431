"""Bounded waits and bounded resources, through the public path: a real IPython shell,
``%%agent`` against the scripted server, the model's tool calls scripted.

- a server's ``retry-after`` beyond ``max_retry_wait`` fails the turn at once with one line;
  a shorter one is waited out with a countdown in the live view;
- a server that accepts and never answers, sends its head and stalls, stalls between chunks
  or trickles forever ends the turn in bounded time (``first_byte_timeout``,
  ``idle_timeout``, ``request_timeout``) with one line;
- ``read`` and ``bash`` keep memory bounded whatever the size (peak RSS measured in a
  separate process);
- special files are refused, catastrophic patterns run in linear time, and listings and
  searches of huge or deep trees are bounded.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import ProviderError
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.live import LiveView


def run(ip, prompt):
    return ip.run_cell_magic("agent", "", prompt)


def last_assistant(store, magics):
    return store.messages(magics.session.info.id)[-1]


def tools_of(store, magics):
    return [p for m in store.messages(magics.session.info.id) for p in m.parts if p.type == "tool"]


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and len(err._render_traceback_()) == 1, text
    return text


# --------------------------------------------------------------------------
# retry-after: capped by max_retry_wait, counted down while waited


@pytest.mark.parametrize(
    "make_headers",
    [
        lambda: {"retry-after": "3600"},
        lambda: {"retry-after-ms": "3600000"},
        # made when the test runs, not when it is collected (minutes earlier in a full run)
        lambda: {"retry-after": email.utils.formatdate(time.time() + 3600, usegmt=True)},
    ],
    ids=["seconds", "ms", "http-date"],
)
def test_a_retry_after_beyond_max_retry_wait_fails_at_once(ip, server, store, magics, make_headers):
    headers = make_headers()
    server.enqueue(Reply(status=429, headers=headers), Reply(text="never reached"))
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        run(ip, "hello")
    assert time.monotonic() - started < 5  # not an hour
    text = one_line(info.value)
    assert "asks to wait 1 h" in text or "asks to wait 59 min" in text, text
    assert "max_retry_wait allows (60 s)" in text
    assert re.search(r"%config AgentMagics\.max_retry_wait = (359\d|3600)$", text), text
    assert len(server.requests) == 1  # no retry was made
    assistant = last_assistant(store, magics)
    assert assistant.info.error["name"] == "APIError"
    assert "max_retry_wait" in assistant.info.error["data"]["message"]
    assert not [p for p in assistant.parts if p.type == "retry"]
    # a wait the setting allows is a retry, and the session goes on
    server.reset()
    magics.max_retry_wait = 7200
    server.enqueue(Reply(status=429, headers={"retry-after-ms": "50"}), Reply(text="fine"))
    run(ip, "again")
    assert last_assistant(store, magics).parts[-2].text == "fine"


def test_a_wait_within_bounds_counts_down_in_the_live_view(ip, server, store, magics):
    server.enqueue(
        Reply(status=429, headers={"retry-after-ms": "2500"}), Reply(text="after the wait")
    )
    session = magics.current(new=True)
    view = LiveView(live=True, session=session)
    started = time.monotonic()
    with capture_output() as out:
        session.prompt("hello", observer=view)
        view.finish()
    assert time.monotonic() - started >= 2.4
    markdown = [o.data["text/markdown"] for o in out.outputs]
    plain = [o.data["text/plain"] for o in out.outputs]
    counts = [
        s
        for s in ("retry 1 in 3 s…", "retry 1 in 2 s…", "retry 1 in 1 s…")
        if any(s in m for m in markdown)
    ]
    assert counts == ["retry 1 in 3 s…", "retry 1 in 2 s…", "retry 1 in 1 s…"], markdown
    assert any("[retry 1 in 3 s…]" in p for p in plain)  # the plain-text fallback counts too
    assert "retry 1 after 2.5 s" in markdown[-1] and "[retry 1 after 2.5 s]" in plain[-1]
    # on disk: the retry part says when the retry was due
    retry_part = next(p for p in store.messages(session.info.id)[-1].parts if p.type == "retry")
    assert retry_part.time_next - retry_part.time_created == 2500
    row = store.sql(f"select data from part where id = '{retry_part.id}'").iloc[0, 0]
    assert json.loads(row)["time"]["next"] == retry_part.time_next


def test_max_retry_wait_caps_the_backoff_too(ip, server, store, magics):
    magics.max_retry_wait = 0.2  # the backoff would be 2 s
    server.enqueue(Reply(status=500), Reply(text="recovered"))
    started = time.monotonic()
    run(ip, "hello")
    assert time.monotonic() - started < 1.5
    retry_part = next(p for p in last_assistant(store, magics).parts if p.type == "retry")
    assert retry_part.time_next - retry_part.time_created == 200


def test_wait_settings_are_checked_when_set(magics):
    for name in ("max_retry_wait", "first_byte_timeout", "idle_timeout", "request_timeout"):
        with pytest.raises(Exception) as info:
            setattr(magics, name, -1)
        assert name in one_line(info.value)
    from jupyter_session_agent.core.settings import Settings

    defaults = Settings()
    assert (
        defaults.max_retry_wait,
        defaults.first_byte_timeout,
        defaults.idle_timeout,
        defaults.request_timeout,
    ) == (60.0, 60.0, 60.0, 600.0)


# --------------------------------------------------------------------------
# a server that never answers, stalls or trickles


# (first_byte_timeout, idle_timeout, request_timeout): each case lets only its own bound fire
FAST_FIRST, FAST_IDLE, FAST_TOTAL = (0.5, 5, 10), (5, 0.5, 10), (5, 5, 1.5)


@pytest.mark.parametrize(
    ("fault", "timeouts", "setting", "requests"),
    [
        ({"hang": "accept"}, FAST_FIRST, "first_byte_timeout", 2),  # accepts, reads, never answers
        (
            {"hang": "headers"},
            FAST_IDLE,
            "idle_timeout",
            2,
        ),  # sends the response head, then nothing
        ({"hang": "chunk"}, FAST_IDLE, "idle_timeout", 2),  # one chunk, then nothing
        # trickles a byte at a time, never silent for long
        ({"text": "x" * 400, "chunk_chars": 1, "delay": 0.02}, FAST_TOTAL, "request_timeout", 1),
    ],
    ids=["accept", "headers", "between-chunks", "trickle"],
)
def test_a_silent_server_ends_the_turn_in_bounded_time(
    ip, server, store, magics, fault, timeouts, setting, requests
):
    magics.first_byte_timeout, magics.idle_timeout, magics.request_timeout = timeouts
    magics.max_retries = 1
    magics.max_retry_wait = 0.1
    server.enqueue(Reply(**fault), Reply(**fault), Reply(text="never reached"))
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        run(ip, "hello")
    took = time.monotonic() - started
    # the bound that fits the fault fired, on each attempt: not one of the longer ones (>= 5 s);
    # the slack is the turn's own work (a first turn creates the history and the snapshot)
    fired = min(timeouts)
    assert took < requests * fired + 0.1 + 3.0, took
    text = one_line(info.value)
    assert f"%config AgentMagics.{setting}" in text, text
    assert len(server.requests) == requests  # the total is not retried: it would cost as much again
    assistant = last_assistant(store, magics)
    assert assistant.info.error["name"] == "APIError"
    assert setting in assistant.info.error["data"]["message"]
    assert [p.type for p in assistant.parts].count("retry") == requests - 1
    # the session stays usable
    server.reset()
    server.enqueue(Reply(text="back again"))
    run(ip, "and now?")
    assert last_assistant(store, magics).parts[-2].text == "back again"


def test_timeouts_never_exceed_the_total(ip, server, store, magics):
    magics.request_timeout = 0.6
    magics.first_byte_timeout = 30  # clipped to request_timeout
    magics.max_retries = 0
    server.enqueue(Reply(hang="accept"))
    started = time.monotonic()
    with pytest.raises(ProviderError):
        run(ip, "hello")
    assert time.monotonic() - started < 3


# --------------------------------------------------------------------------
# memory: read and bash stream, measured in a separate process


_RSS_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

    work, data, call = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    os.chdir(work)
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    with ScriptedServer() as server:
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-not-a-real-key")
        shell.run_line_magic("load_ext", "jupyter_session_agent")
        magics = shell.magics_manager.registry["AgentMagics"]
        magics.model, magics.data_dir, magics.titles = "openai/scripted", data, False
        magics.model_overrides = {"openai/scripted": {"context": 100000, "output": 4096}}
        magics.permission = {"*": "allow"}
        warm = {"name": call["name"], "arguments": call["warm"]}
        server.enqueue(Reply(tool_calls=(warm,)), Reply(text="warm"))
        shell.run_cell_magic("agent", "", "warm up")  # imports, caches, first allocations
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        big = {"name": call["name"], "arguments": call["big"]}
        server.enqueue(Reply(tool_calls=(big,)), Reply(text="done"))
        shell.run_cell_magic("agent", "", "the big one")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        session = magics.session
        parts = [p for m in magics.store().messages(session.info.id) for p in m.parts]
        tool = [p for p in parts if p.type == "tool"][-1]
        print(json.dumps({"growth": after - before, "status": tool.state.status,
                          "output": tool.state.output[:100_000], "metadata": tool.state.metadata}))
        shell.run_line_magic("unload_ext", "jupyter_session_agent")
""")


def _measure(tmp_path: Path, work: Path, call: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(work), str(tmp_path / "data"), json.dumps(call)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


SIZE = 200 * 1024 * 1024


def test_read_of_a_huge_file_keeps_memory_bounded(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    big = work / "big.txt"
    with open(big, "wb") as fh:  # text lines, then a 200 MB hole (one long line of NULs), then text
        for i in range(400):
            fh.write(b"line %d of the start of a big file\n" % i)
        fh.seek(SIZE)
        fh.write(b"\nthe last line\n")
    (work / "small.txt").write_text("warm\n")
    near_end = _measure(
        tmp_path,
        work,
        {
            "name": "read",
            "warm": {"filePath": "small.txt"},
            "big": {"filePath": "big.txt", "offset": 399, "limit": 5},
        },
    )
    start = _measure(
        tmp_path,
        work,
        {
            "name": "read",
            "warm": {"filePath": "small.txt"},
            "big": {"filePath": "big.txt", "limit": 5},
        },
    )
    for got in (start, near_end):
        assert got["status"] == "completed"
        assert got["growth"] < 0.05 * SIZE, got["growth"]  # the whole file took 2x its size before
    assert "00001| line 0 of the start" in start["output"] and "00005| line 4" in start["output"]
    assert "00006|" not in start["output"] and start["metadata"]["truncated"] is True
    # the 200 MB line is cut at 2,000 characters; the last line and the end are found
    long_line = next(line for line in near_end["output"].split("\n") if line.startswith("00401| "))
    assert len(long_line) == len("00401| ") + 2000 + len("...")
    assert "00402| the last line" in near_end["output"] and "total 402 lines" in near_end["output"]


def test_bash_output_spills_to_the_saved_file_not_to_memory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    size = 100 * 1024 * 1024
    command = f"yes 'row of output' | head -c {size}; echo; echo END"
    got = _measure(
        tmp_path,
        work,
        {"name": "bash", "warm": {"command": "echo warm"}, "big": {"command": command}},
    )
    assert got["status"] == "completed"
    assert got["growth"] < 0.05 * size, got["growth"]  # the output took 6x its size before
    meta = got["metadata"]
    assert meta["truncated"] is True and meta["exit"] == 0
    saved = Path(meta["outputPath"])
    assert saved.parent == tmp_path / "data" / "tool-output"
    assert saved.stat().st_size >= size  # the full output, on disk
    with open(saved, "rb") as fh:
        assert fh.read(16) == b"row of output\nro"
        fh.seek(-4, os.SEEK_END)
        assert fh.read() == b"\nEND"
    # what the model sees: the head, the marker, the tail with the end, the saved file's path
    assert got["output"].startswith("row of output\nrow of output")
    assert "lines (" in got["output"] and "truncated..." in got["output"]
    assert got["metadata"]["output"].startswith("row of output")


# --------------------------------------------------------------------------
# special files, catastrophic patterns, huge and deep trees


@pytest.fixture
def fifo(tmp_path):
    """A FIFO in the session's folder, and a guard that unblocks a reader stuck on it after
    a while, so that a regression fails the test instead of hanging it."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    stop = threading.Event()

    def unblock():
        while not stop.wait(10):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # EOF for a blocked reader
            except OSError:
                pass

    guard = threading.Thread(target=unblock, daemon=True)
    guard.start()
    yield path
    stop.set()
    guard.join(timeout=15)


def test_special_files_are_refused_and_skipped(ip, server, store, magics, tmp_path, fifo):
    (tmp_path / "notes.txt").write_text("needle in a text file\n")
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    try:
        server.enqueue(
            Reply(
                tool_calls=(
                    {"name": "read", "arguments": {"filePath": "pipe"}},
                    {
                        "name": "grep",
                        "arguments": {"pattern": "needle"},
                    },  # the folder holds the FIFO
                    {"name": "grep", "arguments": {"pattern": "needle", "path": "pipe"}},
                    {"name": "write", "arguments": {"filePath": "pipe", "content": "x"}},
                    {
                        "name": "edit",
                        "arguments": {"filePath": "pipe", "oldString": "a", "newString": "b"},
                    },
                    {"name": "read", "arguments": {"filePath": "sock"}},
                    {"name": "read", "arguments": {"filePath": "/dev/zero"}},
                    {"name": "glob", "arguments": {"pattern": "*"}},
                )
            ),
            Reply(text="done"),
        )
        started = time.monotonic()
        run(ip, "look at the special files")
        assert time.monotonic() - started < 8
    finally:
        sock.close()
    tools = tools_of(store, magics)
    states = [(t.tool, t.state.status) for t in tools]
    assert states == [
        ("read", "error"),
        ("grep", "completed"),
        ("grep", "error"),
        ("write", "error"),
        ("edit", "error"),
        ("read", "error"),
        ("read", "error"),
        ("glob", "completed"),
    ]
    assert "is a named pipe (FIFO), not a regular file" in tools[0].state.error
    assert "needle in a text file" in tools[1].state.output
    assert "is a socket" in tools[5].state.error and "is a character device" in tools[6].state.error
    assert str(fifo) in tools[7].state.output  # listing a name never opens it
    assert fifo.exists() and not (tmp_path / "pipe").is_file()


def test_catastrophic_patterns_run_in_linear_time(ip, server, store, magics, tmp_path):
    deep = tmp_path / "src" / ("a" * 40)
    deep.mkdir(parents=True)
    (deep / "a.txt").write_text("a" * 26 + "b\n" + "aaaa\n" + "x" * 26 + "y\n")
    patterns = [r"(a+)+$", r"(a|aa)*c", r"(x+x+)+z", r"^(\w+\s?)*$"]
    server.enqueue(
        Reply(
            tool_calls=tuple(
                [{"name": "grep", "arguments": {"pattern": p, "path": "src"}} for p in patterns]
                + [
                    {"name": "glob", "arguments": {"pattern": "**a" * 10 + "**b", "path": "src"}},
                    {
                        "name": "glob",
                        "arguments": {"pattern": "**a" * 10 + "**/a.txt", "path": "src"},
                    },
                    {"name": "grep", "arguments": {"pattern": r"(?<=a)b", "path": "src"}},
                    {"name": "grep", "arguments": {"pattern": r"(a)\1", "path": "src"}},
                ]
            )
        ),
        Reply(text="done"),
    )
    started = time.monotonic()
    run(ip, "search")
    assert time.monotonic() - started < 5  # Python's re: minutes for these (2^26 steps per line)
    tools = tools_of(store, magics)
    assert [t.state.status for t in tools] == ["completed"] * 6 + ["error"] * 2
    assert "Line 2: aaaa" in tools[0].state.output and "Line 1:" not in tools[0].state.output
    assert tools[1].state.output == "No files found" and tools[2].state.output == "No files found"
    assert "Line 2: aaaa" in tools[3].state.output
    assert tools[4].state.output == "No files found"
    assert tools[5].state.output == str(deep / "a.txt")
    for failed in tools[6:]:
        assert "not supported here" in failed.state.error and "grep -P" in failed.state.error


def test_huge_and_deep_trees_are_bounded(ip, server, store, magics, tmp_path, monkeypatch):
    from jupyter_session_agent.tools import paths

    crowd = tmp_path / "crowd"
    crowd.mkdir()
    for i in range(3000):
        (crowd / f"f{i:04d}.txt").write_text("hit\n" if i % 100 == 0 else "")
    nested = tmp_path / "nested"
    leaf = nested.joinpath(*["d"] * 150)  # deeper than os.walk's recursion copes with comfortably
    leaf.mkdir(parents=True)
    (leaf / "leaf.txt").write_text("hit\n")
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "list", "arguments": {"path": "crowd"}},
                {"name": "glob", "arguments": {"pattern": "leaf.txt", "path": "nested"}},
                {"name": "grep", "arguments": {"pattern": "hit", "path": "nested"}},
                {"name": "list", "arguments": {"path": "nested"}},
            )
        ),
        Reply(text="done"),
    )
    started = time.monotonic()
    run(ip, "look around")
    assert time.monotonic() - started < 10
    # a walk may look at so many entries only: a folder bigger than that gives a partial answer
    monkeypatch.setattr(paths.WalkLimits, "ENTRIES", 1000)
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "glob", "arguments": {"pattern": "*.txt", "path": "crowd"}},
                {"name": "grep", "arguments": {"pattern": "hit", "path": "crowd"}},
            )
        ),
        Reply(text="done"),
    )
    run(ip, "search the crowd")
    tools = tools_of(store, magics)
    assert [t.state.status for t in tools] == ["completed"] * 6
    listing = tools[0].state.output.split("\n")
    # sorted, not in directory order
    assert listing[1:4] == ["  f0000.txt", "  f0001.txt", "  f0002.txt"]
    assert "(Showing the first 100 entries" in tools[0].state.output
    for deep in tools[1:3]:  # os.walk would recurse 150 levels; this walk stops at 64, and says so
        assert "Directories deeper than 64 levels were not searched" in deep.state.output
    assert tools[3].state.metadata["count"] == 65 and tools[3].state.metadata["truncated"] is True
    assert "Directories deeper than 64 levels" in tools[3].state.output
    for partial in tools[4:6]:
        assert "Stopped early: it looked at 1,000 entries" in partial.state.output
        assert partial.state.metadata["truncated"] is True
    # and so much time only (a slow disk, a network mount)
    monkeypatch.setattr(paths.WalkLimits, "ENTRIES", 100_000)
    monkeypatch.setattr(paths.WalkLimits, "SECONDS", 0.0)
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "glob", "arguments": {"pattern": "*.txt", "path": "crowd"}},
                {"name": "grep", "arguments": {"pattern": "hit", "path": "crowd"}},
                {"name": "list", "arguments": {"path": "crowd"}},
            )
        ),
        Reply(text="done"),
    )
    run(ip, "once more")
    for partial in tools_of(store, magics)[6:]:
        assert "Stopped early: it ran for 0 s" in partial.state.output, partial.state.output[-300:]
        assert partial.state.metadata["truncated"] is True
