"""Secrets stay out of the notebook: what a tool shows, error texts, what the model writes.

Through the public path — a real IPython shell (and, for what reaches a browser, a real
kernel over ZMQ) and the scripted server — with keys in the environment, asserting that
the raw key is nowhere: the cell's display outputs and streams, the real file descriptors,
the journal files, saved tool outputs, the in-memory history, ``%agent show`` and exports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
from _kernel import execute, real_kernel
from IPython.utils.capture import capture_output

from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

# Values of their own: a value once in the environment stays known to the process, and other
# test files assert the labels of theirs.
KEY = "sk-proj-" + "Hq4wR7tY1uI5oP8aS2dF6gJ9kL3zX0cV"  # a known key format
TOKEN = "tok-" + "Mm3Nn4Bb5Vv6Cc7Xx8Zz9"  # no known format: known from the environment only

# The model's python call: every way code can put text in a notebook cell.
SHOW_EVERYTHING = textwrap.dedent("""
    import logging, os, subprocess, sys
    from IPython.display import HTML, JSON, Latex, Markdown, display, update_display
    key, token = os.environ["OPENAI_API_KEY"], os.environ["MY_SERVICE_TOKEN"]
    display(key)
    display(HTML(f"<b>{key}</b>"), Markdown(f"**{token}**"), Latex(f"$\\\\text{{{key}}}$"))
    display(JSON({"deep": [{"k": key}], token: 1}))
    display({"text/plain": key, "application/json": {"a": [token]}}, raw=True,
            metadata={"note": key})
    handle = display("placeholder", display_id=True)
    handle.update(HTML(key))
    update_display(Markdown(token), display_id=handle.display_id)
    kernel_stdout.write("stale stdout " + key + "\\n")
    leaky = logging.getLogger("leaky-test-logger")
    leaky.addHandler(logging.StreamHandler(kernel_stderr))
    leaky.warning("logged " + token)
    leaky.handlers.clear()
    print("dunder " + key, file=sys.__stdout__, flush=True)
    os.write(1, ("fd1 " + token + "\\n").encode())
    subprocess.run(["sh", "-c", "echo child $OPENAI_API_KEY; echo child-err $MY_SERVICE_TOKEN >&2"])
    class Shows:
        def _repr_html_(self):
            raise ValueError("formatter failed on " + key)
    display(Shows())
    print("printed " + key)
""")


def _leaks(texts: dict[str, str], secrets=(KEY, TOKEN)) -> list[tuple[str, str]]:
    return [
        (where, secret[:10])
        for where, text in texts.items()
        for secret in secrets
        if secret in text
    ]


def _labels(text: str) -> str:
    """``text`` with every redaction label the same (a key is labelled by its environment variable
    once one held it in this process, else by its format)."""
    return re.sub(r"\[REDACTED:[\w.-]+\]", "[REDACTED]", text)


def _disk(data_dir) -> dict[str, str]:
    """Every file under the data directory: journals, parquet, saved tool outputs."""
    return {
        str(p): p.read_bytes().decode("utf-8", "replace")
        for p in data_dir.rglob("*")
        if p.is_file()
    }


def _shown(out) -> dict[str, str]:
    texts = {
        f"display {i}": json.dumps([o.data, o.metadata], ensure_ascii=False, default=str)
        for i, o in enumerate(out.outputs)
    }
    return {**texts, "stdout": out.stdout, "stderr": out.stderr}


def test_everything_the_python_tool_shows_is_redacted(
    ip, server, store, magics, data_dir, monkeypatch, capfd, caplog
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": SHOW_EVERYTHING}},)),
        Reply(text="Shown."),
    )
    with capture_output() as out:
        # what code the user ran earlier may hold: the cell's own streams
        ip.user_ns.update(kernel_stdout=sys.stdout, kernel_stderr=sys.stderr)
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "show me the keys")
        shown = ip.run_line_magic("agent", "show")
    fds = capfd.readouterr()
    session = magics.session
    tool = next(p for m in store.messages(session.info.id) for p in m.parts if p.type == "tool")
    assert tool.state.status == "completed", tool.state.output
    assert "error" not in tool.state.metadata, tool.state.output

    # the displays happened, cleaned: every MIME type, nested JSON, metadata, the update
    datas = [o.data for o in out.outputs]
    assert datas[0] == {"text/plain": "'[REDACTED:OPENAI_API_KEY]'"}
    mimes = {k for d in datas for k in d}
    assert {"text/html", "text/markdown", "text/latex", "application/json"} <= mimes
    assert any(d.get("text/html") == "<b>[REDACTED:OPENAI_API_KEY]</b>" for d in datas)
    assert any(
        d.get("application/json")
        == {"deep": [{"k": "[REDACTED:OPENAI_API_KEY]"}], "[REDACTED:MY_SERVICE_TOKEN]": 1}
        for d in datas
    )
    assert any(o.metadata == {"note": "[REDACTED:OPENAI_API_KEY]"} for o in out.outputs)
    updates = [o for o in out.outputs if o.update]
    assert [u.data.get("text/html") or u.data.get("text/markdown") for u in updates] == [
        "[REDACTED:OPENAI_API_KEY]",
        "[REDACTED:MY_SERVICE_TOKEN]",
    ]
    # a stream held from before the call and a logging handler on it: cleaned, still shown
    assert "stale stdout [REDACTED:OPENAI_API_KEY]" in out.stdout
    assert "logged [REDACTED:MY_SERVICE_TOKEN]" in out.stderr
    # below sys.stdout (sys.__stdout__, os.write, a subprocess): into the tool output, cleaned
    for line in (
        "dunder [REDACTED:OPENAI_API_KEY]",
        "fd1 [REDACTED:MY_SERVICE_TOKEN]",
        "child [REDACTED:OPENAI_API_KEY]",
        "child-err [REDACTED:MY_SERVICE_TOKEN]",
        "printed [REDACTED:OPENAI_API_KEY]",
        "ValueError: formatter failed on [REDACTED:OPENAI_API_KEY]",
    ):
        assert line in re.sub(r"\x1b\[[0-9;]*m", "", tool.state.output), (line, tool.state.output)

    exports = {f"export {fmt}": str(session.export(fmt)) for fmt in ("md", "json", "html")}
    assert "logged [REDACTED:MY_SERVICE_TOKEN]" in caplog.text  # log records themselves are cleaned
    haystacks = {
        **_shown(out),
        "fd 1": fds.out,
        "fd 2": fds.err,
        "show": repr(shown),
        "log": caplog.text,
        "requests": json.dumps(server.requests, ensure_ascii=False),
        **_disk(data_dir),
        **exports,
    }
    assert _leaks(haystacks) == []


def test_a_process_the_code_leaves_running_is_redacted_and_not_kept(
    ip, server, store, magics, monkeypatch, capfd
):
    """Output of a background process the code started goes on to the cell's streams after the
    call, cleaned, and nothing of ours outlives the process."""
    import threading

    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    code = (
        "import subprocess\n"
        "subprocess.run(['sh', '-c', 'echo now $MY_SERVICE_TOKEN'])\n"
        "child = subprocess.Popen(['sh', '-c', 'sleep 1; echo later $MY_SERVICE_TOKEN'])"
    )
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)), Reply(text="Started.")
    )
    with capture_output():
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "start a background job")
    ip.user_ns.pop("child").wait(10)
    deadline = time.monotonic() + 10

    def ours():
        return [t.name for t in threading.enumerate() if t.name.startswith("python-tool-fd")]

    while ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ours()
    fds = capfd.readouterr()
    tool = next(p for m in magics.session.history for p in m.parts if p.type == "tool")
    assert "now [REDACTED:MY_SERVICE_TOKEN]" in tool.state.output
    assert "later [REDACTED:MY_SERVICE_TOKEN]" in fds.out and "later" not in tool.state.output
    assert TOKEN not in fds.out + fds.err


def test_a_key_removed_from_the_environment_is_still_redacted(tmp_path):
    """A fresh process: the secret is in the environment at %load_ext, the user's code removes it
    before any agent code runs (no later scan can see it), the agent's code then shows it."""
    data = tmp_path / "data"
    script = textwrap.dedent("""
        import json, os, sys
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.utils.capture import capture_output
        from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "jupyter_session_agent")
        ip.run_cell("import os; secret = os.environ.pop('LEGACY_SERVICE_TOKEN')")
        assert "LEGACY_SERVICE_TOKEN" not in os.environ
        code = "print(secret)\\ndisplay(secret)\\nos.environ.get('LEGACY_SERVICE_TOKEN')"
        with ScriptedServer() as server:
            server.enqueue(Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)),
                           Reply(text="the value is " + ip.user_ns["secret"]))
            os.environ["OPENAI_BASE_URL"] = server.base_url
            magics = ip.magics_manager.registry["AgentMagics"]
            magics.model, magics.titles, magics.live = "openai/scripted", False, True
            magics.permission = {"*": "allow"}
            with capture_output() as out:
                ip.run_cell_magic("agent", "", "show the secret")
                ip.run_line_magic("agent", "show")
            history = magics.session.history
            print(json.dumps({"outputs": [o.data for o in out.outputs], "stdout": out.stdout,
                              "history": [m.to_data() for m in history],
                              "export": magics.session.export("md")}))
        ip.run_line_magic("unload_ext", "jupyter_session_agent")
    """)
    env = {
        **os.environ,
        "LEGACY_SERVICE_TOKEN": TOKEN,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "JUPYTER_SESSION_AGENT_DIR": str(data),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    tool = next(p for m in result["history"] for p in m["parts"] if p["type"] == "tool")
    assert tool["state"]["output"].startswith("[REDACTED:LEGACY_SERVICE_TOKEN]")
    assert "[REDACTED:LEGACY_SERVICE_TOKEN]" in json.dumps(result["outputs"])
    assert _leaks({"process": done.stdout + done.stderr, **_disk(data)}, (TOKEN,)) == []


@pytest.mark.parametrize(
    "statuses", [(401,), (400,), (500, 401)], ids=["401", "400", "500-then-401"]
)
def test_a_server_error_quoting_the_authorization_header_is_redacted(
    ip, server, store, magics, data_dir, monkeypatch, statuses
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.enqueue(
        *(
            Reply(status=s, echo_authorization=True, headers={"retry-after-ms": "10"})
            for s in statuses
        )
    )
    with capture_output() as out:
        magics.current(new=True)
        result = ip.run_cell("%%agent\nhello")
        shown = ip.run_line_magic("agent", "show")
    err = result.error_in_exec
    assert err is not None
    assert f"Bearer {KEY}" in err.__cause__.response.text  # the server quoted the header
    # the one line the user sees, and everything the exception carries
    line = [ln for ln in out.stdout.splitlines() if "Error:" in ln]
    assert len(line) == 1 and "Authorization: Bearer [REDACTED:" in line[0], out.stdout
    session = magics.session
    stored = [
        m.info.error for m in store.messages(session.info.id) if getattr(m.info, "error", None)
    ]
    assert stored and "Bearer [REDACTED:" in stored[-1]["data"]["message"]
    retries = [p for m in session.history for p in m.parts if p.type == "retry"]
    assert len(retries) == len(statuses) - 1
    haystacks = {
        **_shown(out),
        "str": str(err),
        "render": "\n".join(err._render_traceback_()),
        "message": err.message,
        "body": err.body or "",
        "headers": json.dumps(err.headers),
        "args": repr(err.args),
        "show": repr(shown),
        "memory": json.dumps([m.to_data() for m in session.history]),
        "export": session.export("md"),
        **_disk(data_dir),
    }
    assert _leaks(haystacks, (KEY,)) == []


def test_a_key_the_model_writes_is_redacted_in_memory_and_in_every_view(
    ip, server, store, magics, data_dir, monkeypatch
):
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    server.enqueue(
        Reply(
            reasoning=f"The token is {TOKEN}.",
            text=f"I will store {KEY} for you.",
            chunk_chars=3,
            tool_calls=({"name": "python", "arguments": {"code": f"stored = {KEY!r}"}},),
        ),
        Reply(text=f"Done: {KEY} and {TOKEN}."),
    )
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "-o answer", "remember a key")
        shown = ip.run_line_magic("agent", "show")
    session = magics.session
    assert ip.user_ns.pop("stored") == KEY  # the code ran as the model wrote it
    assert _labels(ip.user_ns["answer"]) == "Done: [REDACTED] and [REDACTED]."
    tool = next(p for m in session.history for p in m.parts if p.type == "tool")
    assert _labels(tool.state.input["code"]) == "stored = '[REDACTED]'"
    haystacks = {
        **_shown(out),
        "show": repr(shown),
        "answer": ip.user_ns["answer"],
        "memory": json.dumps([m.to_data() for m in session.history]),
        "store": json.dumps([m.to_data() for m in store.messages(session.info.id)]),
        "export": str(session.export("json")),
        **_disk(data_dir),
    }
    assert _leaks(haystacks) == []
    assert "I will store [REDACTED] for you." in _labels(out.outputs[-1].data["text/markdown"])


def test_a_streaming_key_is_never_shown_as_a_prefix():
    """The live view holds back the unfinished last word, so no update shows a key's first
    characters before the whole key is there to be recognised."""
    from jupyter_session_agent.core.messages import AssistantMessage, TextPart
    from jupyter_session_agent.ui.live import LiveView

    view = LiveView(live=False)
    message = AssistantMessage(
        id="msg_2",
        session_id="ses_1",
        parent_id="msg_1",
        time_created=1,
        provider_id="openai",
        model_id="scripted",
    )
    view.on_message(message)
    part = TextPart("prt_1", "ses_1", "msg_2")
    seen = []
    for i in range(0, len(f"key: {KEY} ok"), 3):
        view.on_delta(part, f"key: {KEY} ok"[i : i + 3])
        seen.append(json.dumps(view.view()._repr_mimebundle_(), ensure_ascii=False))
    assert not [s for s in seen if KEY[:12] in s]
    assert "key: [REDACTED] " in _labels(seen[-1]) and " ok" not in seen[-1]  # "ok" may go on


# -- a real kernel: what a browser would receive -------------------------------------


@pytest.mark.slow
def test_a_real_kernel_sends_no_key_to_the_front_end(tmp_path):
    with (
        ScriptedServer() as server,
        real_kernel(
            server.base_url,
            tmp_path / "data",
            tmp_path,
            api_key=KEY,
            MY_SERVICE_TOKEN=TOKEN,
            LEGACY_SERVICE_TOKEN=TOKEN[::-1],
        ) as kc,
    ):
        _, setup = execute(
            kc,
            (
                "%load_ext jupyter_session_agent\n"
                "%config AgentMagics.model = 'openai/scripted'\n"
                "%config AgentMagics.titles = False\n"
                "%config AgentMagics.permission = {'*': 'allow'}\n"
                "import os, sys\n"
                "kernel_stdout, kernel_stderr = sys.stdout, sys.stderr\n"
                "legacy = os.environ.pop('LEGACY_SERVICE_TOKEN')\n"
            ),
        )
        assert not [m for m in setup if m["msg_type"] == "error"], setup
        server.enqueue(
            Reply(
                text=f"Here: {KEY} and {TOKEN}.",
                chunk_chars=3,
                delay=0.01,
                tool_calls=(
                    {
                        "name": "python",
                        "arguments": {"code": SHOW_EVERYTHING + "print(legacy)\n"},
                    },
                ),
            ),
            Reply(text=f"All shown, {KEY}.", chunk_chars=3, delay=0.01),
            Reply(status=401, echo_authorization=True),
        )
        _, turn = execute(kc, "%%agent --new\nshow the keys", timeout=90.0)
        _, failed = execute(kc, "%%agent\nand again", timeout=90.0)
    everything = {
        f"{m['msg_type']} {i}": json.dumps(m["content"], ensure_ascii=False)
        for i, m in enumerate(turn + failed)
    }
    secrets = (KEY, TOKEN, TOKEN[::-1], KEY[:16])
    assert _leaks(everything, secrets) == []
    types = [m["msg_type"] for m in turn]
    assert "display_data" in types and "update_display_data" in types and "stream" in types
    text = "\n".join(everything.values())
    assert "<b>[REDACTED:OPENAI_API_KEY]</b>" in text  # shown, cleaned
    assert "stale stdout [REDACTED:OPENAI_API_KEY]" in text  # the kernel's own stream
    errors = [m for m in turn if m["msg_type"] == "error"]
    # the formatter's error, sent to the front end by the shell's traceback sink
    assert errors and "[REDACTED:OPENAI_API_KEY]" in json.dumps(errors[0]["content"])
    last = [m for m in failed if m["msg_type"] == "error"]
    assert len(last) == 1 and last[0]["content"]["traceback"][0].startswith("AuthError: HTTP 401")
    assert _leaks(_disk(tmp_path / "data"), secrets) == []


# --------------------------------------------------------------------------
# a cut never shows the start of a secret


def _windows(secret: str, width: int = 8) -> set[str]:
    """Every ``width``-character piece of ``secret``: a cut that keeps one has shown part of it."""
    return {secret[i : i + width] for i in range(len(secret) - width + 1)}


def _pieces_shown(texts: dict[str, str], secrets=(KEY, TOKEN)) -> list[tuple[str, str]]:
    return [
        (where, piece)
        for where, text in texts.items()
        for secret in secrets
        for piece in _windows(secret)
        if piece in text
    ]


# Where the secret starts in a line that the compact view (80 characters), the pending-approval
# panel (100), a title (50 / 100) or a bounded field cuts: every offset across each cut.
CUT_OFFSETS = sorted({limit - shift for limit in (50, 80, 100) for shift in range(2, 30, 3)})


def test_a_cut_never_keeps_the_start_of_a_secret_in_any_form(tmp_path):
    """In a real kernel with the live view on, the model's calls put a key, then a value known
    only from the environment, at every offset across the lengths the compact view, the
    approval panel and the titles cut at: what reaches the front end (the bundles' JSON tool
    summaries, Markdown, text, the pending-approval code and question, the footer; live
    updates and final) and the stored history hold no 8-character piece of either."""
    calls = []
    for offset in CUT_OFFSETS:
        secret = KEY if offset % 2 else TOKEN
        lead = "x" * max(0, offset - len("print('") - 1)
        calls.append({"name": "python", "arguments": {"code": f"print('{lead} {secret}')"}})
        lead = "y" * max(0, offset - len("curl -sH 'X: ") - 1)
        calls.append(
            {"name": "bash", "arguments": {"command": f"curl -sH 'X: {lead} {secret}' ./none"}}
        )
    with (
        ScriptedServer() as server,
        real_kernel(
            server.base_url, tmp_path / "data", tmp_path, api_key=KEY, MY_SERVICE_TOKEN=TOKEN
        ) as kc,
    ):
        _, setup = execute(
            kc,
            (
                "%load_ext jupyter_session_agent\n"
                "%config AgentMagics.model = 'openai/scripted'\n"
                "%config AgentMagics.titles = False\n"
                "%config AgentMagics.permission = {}\n"  # the defaults: python and bash ask
                "%config AgentMagics.max_steps = 100\n"
                "from jupyter_session_agent.session.approval import ScriptedApprover\n"
                "magics = get_ipython().magics_manager.registry['AgentMagics']\n"
                f"magics.current(new=True).approver = ScriptedApprover(['once'] * {len(calls)})\n"
            ),
        )
        assert not [m for m in setup if m["msg_type"] == "error"], setup
        server.enqueue(*(Reply(tool_calls=(call,)) for call in calls), Reply(text="Done."))
        _, turn = execute(kc, "%%agent\nrun them", timeout=240.0)
        _, show = execute(kc, "%agent show")
        _, asked = execute(kc, "print(len(magics.session.approver.asked))")
    everything = {
        f"{m['msg_type']} {i}": json.dumps(m["content"], ensure_ascii=False)
        for i, m in enumerate(turn + show)
    }
    (count,) = [m["content"]["text"] for m in asked if m["msg_type"] == "stream"]
    assert int(count) >= len(CUT_OFFSETS)  # a panel at every offset
    assert any('"asking"' in text for text in everything.values())  # the panel was drawn
    assert any('"summary"' in text for text in everything.values())  # the compact lines
    found = _pieces_shown(everything)
    if found:
        where, piece = found[0]
        text = everything[where]
        at = text.index(piece)
        raise AssertionError(f"{len(found)} pieces; {where}: …{text[max(0, at - 300) : at + 80]}…")
    assert _pieces_shown(_disk(tmp_path / "data")) == []


@pytest.mark.parametrize("offset", CUT_OFFSETS)
def test_a_title_cut_from_a_prompt_keeps_no_piece_of_a_secret(offset, monkeypatch):
    """A title is shown cleaned; the cut that made it must leave the secret whole to clean."""
    from jupyter_session_agent.core.redact import clean
    from jupyter_session_agent.session import title

    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    for secret in (KEY, TOKEN):
        prompt = "a" * offset + " " + secret + " and more words after it"
        for made in (title.from_prompt(prompt), title.clean_title(prompt)):
            assert _pieces_shown({"title": clean(made, refresh=True)}) == [], made
        prompt = secret + " " + " ".join(["word"] * (offset // 5))  # the first word: cut inside
        assert _pieces_shown({"title": clean(title.from_prompt(prompt))}) == []
