"""MCP servers' tools through ``%%agent``: real servers from the registries (``mcp-server-time``
and ``mcp-server-git`` from PyPI over stdio, ``@modelcontextprotocol/server-everything`` from
npm over stdio and streamable HTTP), the scripted model calling them, and assertions on the
stored tool parts, the SQL view, the server processes and the files on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_session_agent.core.errors import ConfigError
from jupyter_session_agent.core.mcp_config import parse_servers
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.tools import mcp_client
from jupyter_session_agent.tools.mcp import (
    MAX_NAME,
    convert,
    opencode_files,
    strip_jsonc,
    tool_name,
)

pytest.importorskip("mcp", reason="the mcp SDK is not installed (pip install -e '.[mcp]')")

EVERYTHING = (
    Path(__file__).parent
    / ".mcp-node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
PY = sys.executable


def _need_module(name: str) -> None:
    pytest.importorskip(
        name, reason=f"{name} is not installed (the test extra: pip install -e '.[test]')"
    )


def _need_everything() -> str:
    node = _which("node")
    if node is None or not EVERYTHING.is_file():
        pytest.skip(
            "@modelcontextprotocol/server-everything is not installed: npm install --prefix "
            "tests/.mcp-node @modelcontextprotocol/server-everything (.ci/run does)"
        )
    return node


def _which(name: str) -> str | None:
    from shutil import which

    return which(name)


TIME = {
    "type": "local",
    "command": [PY, "-m", "mcp_server_time", "--local-timezone", "UTC"],
    "timeout": 20,
}

# A small server on the official SDK's MCPServer, for faults the registry servers cannot show.
FAULTS = textwrap.dedent('''
    import os, sys, time
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("faults")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return "echo: " + text

    @server.tool()
    def crash() -> str:
        """Exit the server process in the middle of the call."""
        sys.stderr.write("fault server: exiting mid-call\\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        time.sleep(seconds)
        return "slept"

    @server.tool()
    def fail(reason: str) -> str:
        """Fail with an error result."""
        raise ToolError("refused: " + reason)

    server.run()
''')


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    mcp_client.shutdown()


@pytest.fixture
def faults(tmp_path):
    path = tmp_path / "faults_server.py"
    path.write_text(FAULTS)
    return {"type": "local", "command": [PY, str(path)], "timeout": 20}


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def tool_parts(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def offered(request):
    return {t["function"]["name"]: t["function"] for t in request.get("tools") or ()}


def children(match: str) -> list[int]:
    """Live child processes of this process whose command line contains ``match``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and match in cmdline:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


# --------------------------------------------------------------------------
# real servers from PyPI, through %%agent


def test_time_server_tools_are_offered_called_and_stored(ip, server, store, magics):
    _need_module("mcp_server_time")
    magics.mcp = {"time": TIME}
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "time_get_current_time", "arguments": {"timezone": "Europe/Paris"}},
            )
        ),
        Reply(text="It is evening in Paris."),
    )
    run(ip, "What time is it in Paris?")
    tools = offered(server.requests[0])
    assert {"time_get_current_time", "time_convert_time"} <= set(tools)
    schema = tools["time_get_current_time"]["parameters"]
    assert (
        schema["type"] == "object"
        and "timezone" in schema["properties"]
        and schema["required"] == ["timezone"]
    )
    assert "python" in tools  # the built-in tools are still there
    (part,) = tool_parts(store, magics.session.info.id)
    assert part.tool == "time_get_current_time" and part.state.status == "completed"
    assert json.loads(part.state.output)["timezone"] == "Europe/Paris"
    assert part.state.metadata["mcp"] == {"server": "time", "tool": "get_current_time"}
    assert part.state.metadata["truncated"] is False
    # the model got the result as the tool message
    assert server.requests[1]["messages"][-1]["content"] == part.state.output
    rows = store.sql("SELECT tool, status, mcp_server FROM tool_call")
    assert rows.to_dict("records") == [
        {"tool": "time_get_current_time", "status": "completed", "mcp_server": "time"}
    ]


def test_git_server_on_a_real_repository(ip, server, store, magics, tmp_path):
    _need_module("mcp_server_git")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "notes.txt"], check=True, env=env)
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-q", "-m", "first notes"], check=True, env=env
    )
    (repo / "notes.txt").write_text("hello\nworld\n")
    magics.mcp = {
        "git": {
            "type": "local",
            "command": [PY, "-m", "mcp_server_git", "--repository", str(repo)],
            "timeout": 30,
        }
    }
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "git_git_log", "arguments": {"repo_path": str(repo), "max_count": 5}},
                {"name": "git_git_diff_unstaged", "arguments": {"repo_path": str(repo)}},
            )
        ),
        Reply(text="One commit; notes.txt gained a line."),
    )
    run(ip, "What happened in the repository?")
    log, diff = tool_parts(store, magics.session.info.id)
    assert log.state.status == "completed" and "first notes" in log.state.output
    assert diff.state.status == "completed" and "+world" in diff.state.output
    assert {log.state.metadata["mcp"]["tool"], diff.state.metadata["mcp"]["tool"]} == {
        "git_log",
        "git_diff_unstaged",
    }
    assert list(store.sql("SELECT DISTINCT mcp_server FROM tool_call")["mcp_server"]) == ["git"]


# --------------------------------------------------------------------------
# server-everything from npm: stdio and streamable HTTP


def test_everything_over_stdio_text_and_image_attachment(ip, server, store, magics):
    node = _need_everything()
    magics.mcp = {
        "everything": {"type": "local", "command": [node, str(EVERYTHING), "stdio"], "timeout": 20}
    }
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "everything_echo", "arguments": {"message": "hi there"}},
                {"name": "everything_get-sum", "arguments": {"a": 2, "b": 40}},
                {"name": "everything_get-tiny-image", "arguments": {}},
            )
        ),
        Reply(text="done"),
    )
    run(ip, "exercise the server")
    echo, total, image = tool_parts(store, magics.session.info.id)
    assert echo.state.status == "completed" and "hi there" in echo.state.output
    assert total.state.status == "completed" and "42" in total.state.output
    assert image.state.status == "completed"
    (attachment,) = image.state.attachments
    assert attachment["type"] == "file" and attachment["mime"] == "image/png"
    assert attachment["url"].startswith("data:image/png;base64,")
    assert (
        attachment["messageID"] == image.message_id and attachment["sessionID"] == image.session_id
    )
    assert "[attachment: image/png," in image.state.output  # the model is told what it got


def test_everything_over_streamable_http_with_secret_headers(
    ip, server, store, magics, tmp_path, data_dir
):
    node = _need_everything()
    port = _free_port()
    preload = tmp_path / "loopback.mjs"  # express listens on every interface: keep it on loopback
    preload.write_text(
        textwrap.dedent("""
        import http from "node:http";
        const listen = http.Server.prototype.listen;
        http.Server.prototype.listen = function (port, ...rest) {
          if ((typeof port === "number" || typeof port === "string") && typeof rest[0] !== "string")
            return listen.call(this, port, "127.0.0.1", ...rest);
          return listen.call(this, port, ...rest);
        };
    """)
    )
    proc = subprocess.Popen(
        [node, "--import", str(preload), str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port)
        secret = "hdr-secret-0a1b2c3d4e5f"
        magics.mcp = {
            "web": {
                "type": "remote",
                "url": f"http://127.0.0.1:{port}/mcp",
                "headers": {"Authorization": f"Bearer {secret}"},
                "timeout": 20,
            }
        }
        server.enqueue(
            Reply(
                tool_calls=(
                    {"name": "web_echo", "arguments": {"message": f"the token is {secret}"}},
                )
            ),
            Reply(text="done"),
        )
        run(ip, "echo over http")
        (part,) = tool_parts(store, magics.session.info.id)
        assert part.state.status == "completed" and "Echo: the token is" in part.state.output
        assert secret not in part.state.output and "[REDACTED:" in part.state.output
        assert secret not in json.dumps(part.state.input)
        assert part.state.metadata["mcp"]["server"] == "web"
        store.flush()
        assert files_containing(data_dir, secret) == []  # journals, tool outputs, the server log
        listing = ip.run_line_magic("agent", "mcp")
        assert (
            "connected" in listing.text
            and "`web_echo`" in listing.text
            and secret not in listing.text
        )
    finally:
        mcp_client.shutdown()
        proc.terminate()
        proc.wait(10)


def test_environment_secrets_never_reach_the_history(ip, server, store, magics, data_dir):
    node = _need_everything()
    secret = "env-secret-9f8e7d6c5b4a"
    magics.mcp = {
        "everything": {
            "type": "local",
            "command": [node, str(EVERYTHING), "stdio"],
            "environment": {"DEMO_SERVICE_TOKEN": secret, "PLAIN_SETTING": "visible-value"},
            "timeout": 20,
        }
    }
    server.enqueue(
        Reply(tool_calls=({"name": "everything_get-env", "arguments": {}},)), Reply(text="ok")
    )
    run(ip, "show the server's environment")
    (part,) = tool_parts(store, magics.session.info.id)
    assert part.state.status == "completed"
    assert "DEMO_SERVICE_TOKEN" in part.state.output and secret not in part.state.output
    assert "[REDACTED:mcp.everything.DEMO_SERVICE_TOKEN]" in part.state.output
    assert "visible-value" in part.state.output  # only secret-looking names are redacted
    assert secret not in json.dumps(server.requests[-1])  # nor does the model see it
    store.flush()
    assert files_containing(data_dir, secret) == []
    assert secret not in ip.run_line_magic("agent", "mcp").text


# --------------------------------------------------------------------------
# permissions, subagents, sharing, lifecycle


def test_default_asks_and_a_rule_on_the_tool_name_allows(ip, server, store, magics):
    _need_module("mcp_server_time")
    magics.permission = {}  # the defaults: an MCP tool asks (and this shell cannot ask)
    magics.mcp = {"time": TIME}
    call = {"name": "time_get_current_time", "arguments": {"timezone": "UTC"}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(tool_calls=(call,)), Reply(text="ok"))
    run(ip, "time?")
    (asked,) = tool_parts(store, magics.session.info.id)
    assert asked.state.status == "error"
    assert "%agent permit time_get_current_time allow" in asked.state.error
    assert asked.state.metadata["permission"]["permission"] == "time_get_current_time"
    ip.run_line_magic("agent", "permit time_* allow")
    run(ip, "time again?")
    allowed = tool_parts(store, magics.session.info.id)[-1]
    assert allowed.state.status == "completed" and '"timezone": "UTC"' in allowed.state.output


def test_a_star_deny_hides_the_servers_tools(ip, server, magics):
    _need_module("mcp_server_time")
    magics.permission = {"*": "allow", "time_convert*": "deny"}
    magics.mcp = {"time": TIME}
    server.enqueue(Reply(text="ok"))
    run(ip, "hello")
    names = set(offered(server.requests[0]))
    assert "time_get_current_time" in names and "time_convert_time" not in names


def test_subagents_inherit_the_servers_and_share_the_process(ip, server, store, magics):
    _need_module("mcp_server_time")
    magics.subagents = True
    magics.mcp = {"time": TIME}
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "task", "arguments": {"description": "clock", "prompt": "time in UTC?"}},
            )
        ),
        Reply(tool_calls=({"name": "time_get_current_time", "arguments": {"timezone": "UTC"}},)),
        Reply(text="It is noon UTC."),
        Reply(text="The subagent says noon."),
    )
    run(ip, "ask a subagent for the time")
    assert "time_get_current_time" in offered(server.requests[1])  # the child was offered it
    child_id = tool_parts(store, magics.session.info.id)[0].state.metadata["sessionId"]
    (part,) = tool_parts(store, child_id)
    assert part.state.status == "completed" and part.state.metadata["mcp"]["server"] == "time"
    assert mcp_client.current().servers["time"].starts == 1
    assert len(children("mcp_server_time")) == 1


def test_sessions_share_one_server_and_unload_stops_it(ip, server, store, magics):
    _need_module("mcp_server_time")
    magics.mcp = {"time": TIME}
    call = {"name": "time_get_current_time", "arguments": {"timezone": "UTC"}}
    server.enqueue(
        Reply(tool_calls=(call,)), Reply(text="one"), Reply(tool_calls=(call,)), Reply(text="two")
    )
    run(ip, "first session")
    first = magics.session.info.id
    run(ip, "second session", "--new")
    assert magics.session.info.id != first
    assert tool_parts(store, first)[0].state.status == "completed"
    assert tool_parts(store, magics.session.info.id)[0].state.status == "completed"
    handle = mcp_client.current().servers["time"]
    assert handle.starts == 1 and handle.calls == 2
    pids = children("mcp_server_time")
    assert len(pids) == 1
    listing = ip.run_line_magic("agent", "mcp").text
    assert (
        "| `time` | local |" in listing
        and "connected" in listing
        and "`time_convert_time`" in listing
    )
    ip.run_line_magic("unload_ext", "jupyter_session_agent")
    try:
        assert wait_gone(pids), "the server outlived the extension"
    finally:
        ip.run_line_magic("load_ext", "jupyter_session_agent")


def test_restart_command_and_status_listing(ip, magics, capsys):
    _need_module("mcp_server_time")
    magics.mcp = {"time": TIME}
    listing = ip.run_line_magic("agent", "mcp").text
    assert "not started" in listing and not children("mcp_server_time")  # listing starts nothing
    ip.run_line_magic("agent", "mcp restart time")
    assert (
        "mcp server 'time' restarted: 2 tool(s) — time_get_current_time, time_convert_time"
        in capsys.readouterr().out
    )
    ip.run_line_magic("agent", "mcp restart time")
    assert (
        mcp_client.current().servers["time"].starts == 2 and len(children("mcp_server_time")) == 1
    )
    ip.run_line_magic("agent", "mcp stop time")
    assert "stopped" in ip.run_line_magic("agent", "mcp").text
    from jupyter_session_agent.core.errors import UsageError

    with pytest.raises(UsageError, match="no MCP server 'nope' is configured"):
        ip.run_line_magic("agent", "mcp restart nope")


def test_servers_stop_when_the_process_exits(tmp_path):
    _need_module("mcp_server_time")
    script = tmp_path / "kernel.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os
        from jupyter_session_agent.core.settings import Settings
        from jupyter_session_agent.tools.mcp_client import mcp_tools
        settings = Settings(mcp={{"time": {TIME!r}}}, data_dir={str(tmp_path / "data")!r})
        tools = mcp_tools(settings, {str(tmp_path)!r}, taken=set())
        def parent(pid):
            try:
                return int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
            except OSError:
                return None
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and parent(p) == os.getpid()]
        print(json.dumps({{"tools": sorted(tools), "pids": pids}}), flush=True)
    """)
    )  # ends without stopping anything: atexit must
    started = time.monotonic()
    out = subprocess.run(
        [PY, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["tools"] == ["time_convert_time", "time_get_current_time"] and report["pids"]
    assert wait_gone(report["pids"], 5.0), "an MCP server outlived its process"
    assert time.monotonic() - started < 30


def test_import_stays_cheap():
    code = (
        "import sys, jupyter_session_agent, jupyter_session_agent.tools.mcp, "
        "jupyter_session_agent.tools.mcp_client, jupyter_session_agent.ui.commands.mcp; "
        "from jupyter_session_agent.core.settings import Settings; "
        "Settings(mcp={'t': {'type': 'local', 'command': ['x']}}); print('mcp' in sys.modules)"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# --------------------------------------------------------------------------
# faults: each bounded, each one line or a tool error, the session goes on


def test_a_command_that_does_not_exist_is_one_line_and_the_turn_goes_on(
    ip, server, store, magics, capsys
):
    magics.mcp = {
        "ghost": {"type": "local", "command": ["no-such-mcp-server-xyz", "--stdio"], "timeout": 5}
    }
    server.enqueue(Reply(text="answered without it"), Reply(text="and again"))
    started = time.monotonic()
    run(ip, "hello")
    assert time.monotonic() - started < 5
    err = [line for line in capsys.readouterr().err.splitlines() if "ghost" in line]
    assert len(err) == 1
    assert "mcp server 'ghost' failed to start: command not found: no-such-mcp-server-xyz" in err[0]
    assert f"log: {magics.settings().data_dir / 'mcp' / 'ghost.log'}" in err[0]
    history = store.messages(magics.session.info.id)
    assert (
        history[-1].info.role == "assistant" and history[-1].parts[1].text == "answered without it"
    )
    assert not any(n.startswith("ghost_") for n in offered(server.requests[0]))
    run(ip, "hello again")  # not retried every turn, not said again
    assert "ghost" not in capsys.readouterr().err
    listing = ip.run_line_magic("agent", "mcp").text
    assert "failed" in listing and "command not found: no-such-mcp-server-xyz" in listing


def test_a_server_that_never_answers_is_bounded_by_its_timeout(ip, server, store, magics, capsys):
    # starting waits the timeout, but at least MIN_START_TIMEOUT (10 s: imports are no slow answer)
    magics.mcp = {
        "mute": {
            "type": "local",
            "command": [PY, "-c", "import time; time.sleep(120)"],
            "timeout": 1,
        }
    }
    server.enqueue(Reply(text="fine"))
    started = time.monotonic()
    run(ip, "hello")
    assert (
        mcp_client.MIN_START_TIMEOUT
        <= time.monotonic() - started
        < mcp_client.MIN_START_TIMEOUT + 3
    )
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "mute" in ln]
    assert "mcp server 'mute' failed to start: no answer within 10 s" in line
    assert store.messages(magics.session.info.id)[-1].parts[1].text == "fine"
    mcp_client.shutdown()
    assert wait_gone(children("time.sleep(120)"), 10.0)


def test_a_server_that_exits_mid_call_is_a_tool_error_and_restarts_once(
    ip, server, store, magics, faults
):
    magics.mcp = {"f": faults}
    server.enqueue(
        Reply(tool_calls=({"name": "f_crash", "arguments": {}},)),
        Reply(tool_calls=({"name": "f_echo", "arguments": {"text": "back"}},)),
        Reply(text="recovered"),
    )
    started = time.monotonic()
    run(ip, "crash it")
    assert time.monotonic() - started < 15
    crashed, echoed = tool_parts(store, magics.session.info.id)
    assert crashed.state.status == "error"
    assert crashed.state.error.startswith(
        "mcp server 'f' exited during the call to crash (fault server: exiting mid-call) — log: "
    )
    assert crashed.state.metadata["mcp"] == {"server": "f", "tool": "crash"}
    assert echoed.state.status == "completed" and echoed.state.output == "echo: back"
    assert store.messages(magics.session.info.id)[-1].parts[1].text == "recovered"
    assert mcp_client.current().servers["f"].starts == 2
    rows = store.sql("SELECT tool, status, mcp_server FROM tool_call ORDER BY id").to_dict(
        "records"
    )
    assert [(r["tool"], r["status"], r["mcp_server"]) for r in rows] == [
        ("f_crash", "error", "f"),
        ("f_echo", "completed", "f"),
    ]


def test_dying_again_before_any_call_succeeds_leaves_it_failed(ip, server, store, magics, faults):
    magics.mcp = {"f": faults}
    crash = {"name": "f_crash", "arguments": {}}
    server.enqueue(
        Reply(tool_calls=(crash,)),
        Reply(tool_calls=(crash,)),
        Reply(tool_calls=({"name": "f_echo", "arguments": {"text": "x"}},)),
        Reply(text="gave up"),
    )
    run(ip, "crash twice")
    first, second, third = tool_parts(store, magics.session.info.id)
    assert (
        "exited during the call" in first.state.error
        and "exited during the call" in second.state.error
    )
    assert third.state.status == "error"
    assert "mcp server 'f' exited again after a restart" in third.state.error
    assert "%agent mcp restart f" in third.state.error
    assert mcp_client.current().servers["f"].starts == 2
    ip.run_line_magic("agent", "mcp restart f")  # the user's restart gives it a fresh allowance
    assert mcp_client.current().servers["f"].status == "connected"


def test_a_server_killed_between_turns_is_restarted_at_its_next_use(
    ip, server, store, magics, faults
):
    magics.mcp = {"f": faults}
    echo = {"name": "f_echo", "arguments": {"text": "hi"}}
    server.enqueue(
        Reply(tool_calls=(echo,)), Reply(text="one"), Reply(tool_calls=(echo,)), Reply(text="two")
    )
    run(ip, "first")
    (pid,) = children("faults_server.py")
    os.kill(pid, 9)
    assert wait_gone([pid])
    time.sleep(0.3)  # the connection's end reaches the client
    assert mcp_client.current().servers["f"].state == "exited"
    run(ip, "second")
    parts = tool_parts(store, magics.session.info.id)
    assert [p.state.status for p in parts] == ["completed", "completed"]
    assert mcp_client.current().servers["f"].starts == 2 and len(children("faults_server.py")) == 1


def test_changed_settings_restart_the_server(ip, server, store, magics, faults):
    magics.mcp = {"f": faults}
    server.enqueue(Reply(text="one"), Reply(text="two"))
    run(ip, "first")
    (old,) = children("faults_server.py")
    magics.mcp = {"f": {**faults, "environment": {"FAULTS_MODE": "b"}}}
    run(ip, "second")
    assert wait_gone([old]) and len(children("faults_server.py")) == 1
    assert mcp_client.current().servers["f"].config.environment == {"FAULTS_MODE": "b"}


def test_a_call_over_the_timeout_is_cancelled_and_the_server_stays(
    ip, server, store, magics, faults
):
    magics.mcp = {"f": {**faults, "timeout": 1}}
    server.enqueue(
        Reply(tool_calls=({"name": "f_sleep", "arguments": {"seconds": 30}},)),
        Reply(tool_calls=({"name": "f_echo", "arguments": {"text": "still here"}},)),
        Reply(text="moved on"),
    )
    started = time.monotonic()
    run(ip, "sleep")
    assert time.monotonic() - started < 1 + mcp_client.GRACE + 5
    slow, echoed = tool_parts(store, magics.session.info.id)
    assert slow.state.status == "error"
    assert (
        "mcp server 'f': sleep did not answer within 1 s (its timeout) and was cancelled"
        in slow.state.error
    )
    assert slow.state.time_end - slow.state.time_start < (1 + mcp_client.GRACE) * 1000
    assert echoed.state.output == "echo: still here"
    assert mcp_client.current().servers["f"].starts == 1


def test_a_real_servers_long_operation_over_the_timeout(ip, server, store, magics):
    node = _need_everything()
    magics.mcp = {
        "everything": {"type": "local", "command": [node, str(EVERYTHING), "stdio"], "timeout": 1}
    }
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "everything_trigger-long-running-operation",
                    "arguments": {"duration": 20, "steps": 2},
                },
            )
        ),
        Reply(text="too slow"),
    )
    run(ip, "long")
    (part,) = tool_parts(store, magics.session.info.id)
    assert part.state.status == "error" and "did not answer within 1 s" in part.state.error
    assert part.state.time_end - part.state.time_start < (1 + mcp_client.GRACE) * 1000


def test_tools_that_return_errors_are_error_states(ip, server, store, magics, faults):
    _need_module("mcp_server_time")
    magics.mcp = {"time": TIME, "f": faults}
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "time_convert_time",
                    "arguments": {
                        "source_timezone": "Nowhere/City",
                        "time": "10:00",
                        "target_timezone": "UTC",
                    },
                },
                {"name": "f_fail", "arguments": {"reason": "not today"}},
                {"name": "f_echo", "arguments": {}},
            )
        ),
        Reply(text="handled"),
    )
    run(ip, "convert")
    converted, failed, invalid = tool_parts(store, magics.session.info.id)
    assert converted.state.status == "error" and "Nowhere/City" in converted.state.error
    assert converted.state.metadata["mcp"] == {"server": "time", "tool": "convert_time"}
    assert failed.state.status == "error" and "refused: not today" in failed.state.error
    assert (
        invalid.state.status == "error"
        and "f_echo: missing required argument 'text'" in invalid.state.error
    )
    assert store.messages(magics.session.info.id)[-1].parts[1].text == "handled"


def test_a_huge_output_is_truncated_and_saved(ip, server, store, magics, faults, data_dir):
    magics.mcp = {"f": faults}
    text = "x" * 70_000
    server.enqueue(
        Reply(tool_calls=({"name": "f_echo", "arguments": {"text": text}},)), Reply(text="ok")
    )
    run(ip, "big")
    (part,) = tool_parts(store, magics.session.info.id)
    assert part.state.metadata["truncated"] is True
    saved = Path(part.state.metadata["outputPath"])
    assert saved.parent == data_dir / "tool-output" and saved.read_text() == "echo: " + text
    assert len(part.state.output) < 60_000 and "Full output saved to" in part.state.output


# --------------------------------------------------------------------------
# configuration: OpenCode's shape, opencode.json


def test_opencode_json_mcp_section_when_asked(ip, server, magics, tmp_path, monkeypatch):
    _need_module("mcp_server_time")
    monkeypatch.setenv("MCP_TEST_PYTHON", PY)
    (tmp_path / "opencode.jsonc").write_text(
        textwrap.dedent("""
        {
          // the project's MCP servers, as OpenCode reads them
          "$schema": "https://opencode.ai/config.json",
          "mcp": {
            "clock": {"type": "local",
                      "command": ["{env:MCP_TEST_PYTHON}", "-m", "mcp_server_time"],
                      "timeout": 15000,},
            "off": {"type": "local", "command": ["no-such-server"], "enabled": false},
          },
        }
    """)
    )
    server.enqueue(Reply(text="no mcp"), Reply(text="with mcp"), Reply(text="switched off"))
    magics.mcp = {}
    run(ip, "not asked yet")
    assert not any(n.startswith("clock_") for n in offered(server.requests[0]))
    magics.mcp_opencode = True
    run(ip, "now")
    assert "clock_get_current_time" in offered(server.requests[1])
    handle = mcp_client.current().servers["clock"]
    assert handle.config.timeout == 15.0 and handle.config.source == str(
        tmp_path / "opencode.jsonc"
    )
    assert mcp_client.current().servers["off"].status == "disabled"
    magics.mcp = {"clock": {"enabled": False}}  # %config switches a project server off
    run(ip, "off")
    assert not any(n.startswith("clock_") for n in offered(server.requests[2]))


def test_bad_settings_are_refused_in_one_line(magics):
    bad = [
        ({"t": {"command": ["x"]}}, 'type must be "local"'),
        ({"t": {"type": "local"}}, "command must be a non-empty list of strings"),
        ({"t": {"type": "local", "command": "python -m x"}}, "command must be a non-empty list"),
        ({"t": {"type": "local", "command": ["x"], "env": {}}}, "unknown setting(s) ['env']"),
        (
            {"t": {"type": "local", "command": ["x"], "timeout": 5000}},
            "opencode.json's is in milliseconds",
        ),
        ({"t": {"type": "remote", "url": "ftp://x"}}, "url must be an http:// or https:// URL"),
        (
            {"t": {"type": "remote", "url": "https://x", "oauth": {}}},
            "OAuth sign-in is not supported",
        ),
        (
            {"t": {"type": "remote", "url": "https://x", "headers": {"A": 1}}},
            "headers must be a dict of strings",
        ),
        (
            {"t": {"type": "local", "command": ["x"], "enabled": "yes"}},
            "enabled must be true or false",
        ),
    ]
    for value, message in bad:
        with pytest.raises(ConfigError) as info:
            magics.mcp = value
        assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
        assert magics.mcp == {}  # refused: the old value stays


def test_parse_servers_opencode_forms_and_units():
    parsed = parse_servers(
        {
            "a": {
                "type": "local",
                "command": ["{env:X_CMD}", "-v"],
                "timeout": 2500,
                "environment": {"T": "{env:X_TOKEN}"},
            },
            "b": {"enabled": False},
            "c": {"type": "remote", "url": "https://h/{env:X_PATH}", "oauth": False},
        },
        source="opencode.json",
        milliseconds=True,
        env={"X_CMD": "srv", "X_TOKEN": "tok", "X_PATH": "mcp"},
    )
    assert parsed["a"].command == ("srv", "-v") and parsed["a"].timeout == 2.5
    assert parsed["a"].environment == {"T": "tok"} and parsed["b"] is False
    assert parsed["c"].url == "https://h/mcp" and parsed["c"].timeout == 30.0
    assert (
        strip_jsonc('{"a": "// not a comment", /* c */ "b": [1, 2,],}')
        == '{"a": "// not a comment",  "b": [1, 2]}'
    )
    tricky = '{"a": "x, }", "b": "q\\"//", // c\n}'  # strings are never edited
    assert json.loads(strip_jsonc(tricky)) == {"a": "x, }", "b": 'q"//'}


def test_opencode_files_stop_at_the_worktree_root(tmp_path):
    (tmp_path / "opencode.json").write_text("{}")
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "opencode.json").write_text("{}")
    (root / "sub").mkdir()
    (root / "sub" / "opencode.jsonc").write_text("{}")
    assert opencode_files(root / "sub") == [root / "opencode.json", root / "sub" / "opencode.jsonc"]


def test_tool_names_are_sanitised_as_opencode_names_them():
    assert tool_name("time", "get_current_time") == "time_get_current_time"
    assert tool_name("my.server", "get time/now") == "my_server_get_time_now"
    assert tool_name("everything", "get-sum") == "everything_get-sum"
    long_a, long_b = tool_name("s" * 40, "a" * 40), tool_name("s" * 40, "a" * 39 + "b")
    assert len(long_a) == MAX_NAME and len(long_b) == MAX_NAME and long_a != long_b


def test_convert_content_kinds(tmp_path):
    big = "A" * 1_200_000
    text, files = convert(
        {
            "content": [
                {"type": "text", "text": "one"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "two"}},
                {
                    "type": "resource",
                    "resource": {
                        "uri": "file:///b.bin",
                        "blob": "AAEC",
                        "mimeType": "application/x-b",
                    },
                },
                {"type": "resource_link", "uri": "file:///c", "name": "c"},
                {"type": "image", "data": big, "mimeType": "image/png"},
            ]
        },
        tmp_path,
    )
    assert text.split("\n\n")[:4] == [
        "one",
        "two",
        "[resource] c: file:///c",
        "[attachment file:///b.bin: application/x-b, 3 bytes]",
    ]
    assert files[0] == {
        "mime": "application/x-b",
        "url": "data:application/x-b;base64,AAEC",
        "filename": "file:///b.bin",
    }
    assert (
        files[1]["url"].startswith("file://")
        and Path(files[1]["url"][7:]).stat().st_size == 900_000
    )
    structured, none = convert({"content": [], "structuredContent": {"k": 1}}, tmp_path)
    assert json.loads(structured) == {"k": 1} and none == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"server-everything did not listen on {port}")
