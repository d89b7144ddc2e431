"""Variants of the hardening examples, tried as an attacker or a careless user would.

Each case drives a real IPython shell against the scripted server, with rules set as a user
sets them; the shell has no stdin, so an "ask" is a denial that stops the turn.
"""

from __future__ import annotations

import pytest

from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def tools_of(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def call(server, tool, **arguments):
    server.enqueue(Reply(tool_calls=({"name": tool, "arguments": arguments},)), Reply(text="done"))


def outcome(part):
    if part.state.status == "completed":
        return "completed"
    return ((part.state.metadata or {}).get("permission") or {}).get("outcome", "error")


@pytest.fixture
def proj(ip, tmp_path, monkeypatch):
    """The session directory ``tmp_path/proj`` (with ``sub/``); ``tmp_path`` is outside it."""
    path = tmp_path / "proj"
    (path / "sub").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return path


# `/dev/fd/N` is a harmless target, but `/dev/fd/..` is /proc/self: its `cwd` and `root`
# links lead anywhere.
DEV_FD_ESCAPES = [
    "echo x > /dev/fd/../cwd/../F",
    "echo x > /dev/fd/0/../../cwd/../F",
    "cat /dev/fd/../cwd/../secret",
]


@pytest.mark.parametrize("command", DEV_FD_ESCAPES)
def test_dev_fd_is_harmless_only_as_a_descriptor(
    ip, server, store, magics, proj, tmp_path, command
):
    (tmp_path / "secret").write_text("s3cr3t")
    magics.permission = {"bash": "allow"}
    call(server, "bash", command=command)
    run(ip, "write it")
    assert not (tmp_path / "F").exists()
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "unavailable", part.state
    assert part.state.metadata["permission"]["permission"] == "external_directory"
    assert "s3cr3t" not in str(part.state)


def test_a_descriptor_and_common_harmless_lines_do_not_ask(ip, server, store, magics, proj):
    (proj / "a.py").write_text("print(1)\n")
    magics.permission = {"bash": "allow"}
    call(server, "bash", command="echo x > /dev/fd/1 && ls -la && python a.py > out.txt")
    run(ip, "run it")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "completed", part.state
    assert (proj / "out.txt").read_text() == "1\n"


# A row of a known part type whose fields have the wrong shape (another tool, a newer or a
# broken writer) is kept as an unknown part: the session still continues, shows and exports.
WRONG_SHAPES = {
    "text is a number": {"type": "text", "text": 5},
    "text is a list": {"type": "text", "text": ["a", "b"]},
    "type is a list": {"type": ["text"], "text": "x"},
    "tool name is a number": {
        "type": "tool",
        "tool": 5,
        "callID": "call_1",
        "state": {
            "status": "completed",
            "input": {},
            "output": "o",
            "title": "t",
            "metadata": {},
            "time": {"start": 1, "end": 2},
        },
    },
    "reasoning is an object": {"type": "reasoning", "text": {"a": 1}, "time": {"start": 1}},
}


@pytest.mark.parametrize("shape", list(WRONG_SHAPES))
def test_a_part_with_fields_of_the_wrong_shape_never_breaks_the_session(
    shape, ip, server, magics, store, data_dir, tmp_path
):
    import json
    import warnings

    from IPython.utils.capture import capture_output

    from jupyter_session_agent.core.messages import UnknownPart

    server.enqueue(Reply(text="answer"))
    run(ip, "question")
    info = magics.session.info
    reply_id = store.messages(info.id)[1].info.id
    row = {
        "kind": "part",
        "session_id": info.id,
        "message_id": reply_id,
        "rev": 1,
        "writer": "odd-3-00000000",
        "deleted": False,
        "time_created": 1,
        "time_updated": 1,
        "id": "prt_zzzzzzzzzzzzzzzzzzzzzzzzz1",
        "data": WRONG_SHAPES[shape],
    }
    (data_dir / "history" / "live" / "odd-3-00000000.jsonl").write_text(json.dumps(row) + "\n")
    server.enqueue(Reply(text="second answer"))
    with warnings.catch_warnings(record=True), capture_output():
        warnings.simplefilter("always")
        run(ip, "second question", f"-s {info.id}")
        shown = ip.run_line_magic("agent", f"show {info.id}")._repr_mimebundle_()
        path = magics.session.export("md", tmp_path / "out.md")
    history = store.messages(info.id)
    texts = [p.text for m in history for p in m.parts if p.type == "text"]
    assert texts == ["question", "answer", "second question", "second answer"]
    (odd,) = [p for m in history for p in m.parts if isinstance(p, UnknownPart)]
    assert odd.data == WRONG_SHAPES[shape]  # kept as stored
    assert "unknown" in shown["text/plain"] and path.exists()
    sent = json.dumps(server.requests[-1]["messages"])
    assert "prt_zzzz" not in sent and "call_1" not in sent


# `Float` traits turned True into 1.0 before the setting's check ran, so `request_timeout =
# True` was kept as a one-second timeout; every other number setting refuses True.
@pytest.mark.parametrize(
    "name", ["request_timeout", "first_byte_timeout", "idle_timeout", "max_retry_wait"]
)
def test_a_boolean_is_not_a_number_of_seconds(ip, magics, name):
    from IPython.utils.capture import capture_output

    from jupyter_session_agent.ui.magics import SettingError

    before = getattr(magics, name)
    for bad in (True, False):
        with capture_output() as out:
            ip.run_line_magic("config", f"AgentMagics.{name} = {bad}")
        messages = (out.stdout + out.stderr).strip().splitlines()
        assert len(messages) == 1 and messages[0].startswith(name), messages
        assert "must be" in messages[0]
        assert getattr(magics, name) == before and type(getattr(magics, name)) is float
        with pytest.raises(SettingError):
            setattr(magics, name, bad)
        assert getattr(magics, name) == before
    setattr(magics, name, 7)  # a whole number is still a number of seconds
    assert getattr(magics, name) == 7.0


# `read .env` asks, but `grep` searched every file it walked and printed the matching lines of
# `.env`, `.env.local`, a nested `sub/.env` and a link to one: grep leaves out every file that
# `read` could not open without asking, and says how many.
@pytest.mark.parametrize("rules", [{}, {"read": {"*/private/*": "deny"}}])
def test_grep_does_not_show_files_that_read_would_ask_for(ip, server, store, magics, proj, rules):
    (proj / ".env").write_text("K=dotenv-top\n")
    (proj / ".env.local").write_text("K=dotenv-local\n")
    (proj / "sub" / ".env").write_text("K=dotenv-sub\n")
    (proj / "sub" / "cfg").symlink_to("../.env")
    (proj / "private").mkdir()
    (proj / "private" / "notes.txt").write_text("K=dotenv-private\n")
    (proj / "mine.txt").write_text("K=dotenv-example-mine\n")
    (proj / ".env.example").write_text("K=dotenv-example\n")
    magics.permission = rules
    call(server, "grep", pattern="dotenv")
    run(ip, "search")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "completed", part.state
    output = part.state.output
    assert "dotenv-example-mine" in output and "K=dotenv-example\n" in output + "\n"
    for secret in ("dotenv-top", "dotenv-local", "dotenv-sub"):
        assert secret not in str(part.state)
    assert ("dotenv-private" in output) == (not rules)
    hidden = 5 if rules else 4  # .env, .env.local, sub/.env, the link (and private/notes.txt)
    assert f"{hidden} file(s) not searched" in output
    journals = "".join(p.read_text() for p in magics.settings().data_dir.rglob("*.jsonl"))
    assert "dotenv-top" not in journals and "dotenv-sub" not in journals
