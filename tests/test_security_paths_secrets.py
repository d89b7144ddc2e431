"""One path primitive, secrets that never leave, and bounds on what the model sends.

Through the public path: a real IPython shell runs ``%%agent`` against the scripted server,
which scripts the model's tool calls; assertions look at the disk, the history and what the
model server received. The shell has no stdin: an ask is a denial that stops the turn.

* Paths: links are resolved before ``..`` (``data/../secret.txt`` with ``data -> /x/a/b``
  is ``/x/a/secret.txt``, outside: it asks), for every file tool, over generated link
  layouts; the file opened is the one checked (``paths.open_nofollow``).
* Secrets: with the notebook in ``$HOME``, ``.ssh/id_rsa``, ``.aws/credentials``, ``.netrc``
  ask; ``cat .env`` under a ``cat *`` allow asks; an ``edit`` of ``.env`` shows only the
  changed line; ``env`` output, the notebook tool and ``%agent mcp`` show no secret;
  generated token formats are redacted.
* Bounds: arguments nested 100,000 deep are one tool error; a 30 MB answer is cut with one
  line and the kernel does not grow by hundreds of MB.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import string

import pytest

from jupyter_session_agent.core import redact
from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


_EARLIER: list[str] = []  # requests of turns before a reset (see call)


def call(server, tool, **arguments):
    """Script one call of ``tool``; a reply left over by a turn a denial stopped is dropped
    first (the requests seen so far are kept for :func:`sent`)."""
    if server.pending:
        _EARLIER.append(json.dumps(server.requests, ensure_ascii=False))
        server.reset()
    server.enqueue(Reply(tool_calls=({"name": tool, "arguments": arguments},)), Reply(text="ok"))


def tools_of(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def sent(server) -> str:
    """Everything the model server received in this test."""
    return "".join(_EARLIER) + json.dumps(server.requests, ensure_ascii=False)


@pytest.fixture(autouse=True)
def _fresh_record():
    _EARLIER.clear()


def outcome(part) -> str:
    if part.state.status == "completed":
        return "completed"
    return ((part.state.metadata or {}).get("permission") or {}).get("outcome", "error")


@pytest.fixture
def proj(ip, magics, tmp_path, monkeypatch):
    """The session folder ``tmp_path/proj``; ``tmp_path/x/a/b`` and ``tmp_path/x/a/secret.txt``
    outside it; the default rules; bash without the sandbox (the checker decides)."""
    path = tmp_path / "proj"
    path.mkdir()
    (tmp_path / "x" / "a" / "b").mkdir(parents=True)
    (tmp_path / "x" / "a" / "secret.txt").write_text("OUTSIDESECRET\n")
    monkeypatch.chdir(path)
    magics.permission = {}
    magics.sandbox = "off"
    return path


# --------------------------------------------------------------------------
# paths: links before ..


def test_dotdot_after_a_link_is_resolved_after_the_link(ip, server, store, magics, proj, tmp_path):
    (proj / "data").symlink_to(tmp_path / "x" / "a" / "b")
    call(server, "read", filePath="data/../secret.txt")
    run(ip, "read it")
    part = tools_of(store, magics.session.info.id)[0]
    assert outcome(part) != "completed"
    assert part.state.metadata["permission"]["permission"] == "external_directory"
    assert "OUTSIDESECRET" not in sent(server)


def _layouts(tmp_path):
    """Generated link layouts: (link name, target) pairs and the spellings that reach
    ``x/a/secret.txt`` through them."""
    outside = tmp_path / "x" / "a"
    layouts = []
    for depth in range(1, 4):
        target = outside.joinpath(*["b"] * 1, *["c"] * (depth - 1))
        target.mkdir(parents=True, exist_ok=True)
        ups = "/".join([".."] * depth)
        layouts.append((f"l{depth}", target, f"l{depth}/{ups}/secret.txt"))
        layouts.append((f"m{depth}", target, f"./m{depth}/./{ups}/secret.txt"))
        layouts.append((f"n{depth}", target, f"n{depth}//{ups}//secret.txt"))
    return layouts


@pytest.mark.parametrize("tool", ["read", "write", "edit", "list", "glob", "grep"])
def test_no_link_layout_reaches_outside_without_asking(
    ip, server, store, magics, proj, tmp_path, tool
):
    layouts = _layouts(tmp_path)
    for name, target, _ in layouts:
        (proj / name).symlink_to(target)
    # a chain: k -> l1 (inside) -> outside
    (proj / "k").symlink_to(proj / "l1")
    layouts.append(("k", None, "k/../secret.txt"))
    calls = []
    for _, _, spelling in layouts:
        if tool == "read":
            calls.append({"filePath": spelling})
        elif tool == "write":
            calls.append({"filePath": spelling, "content": "x"})
        elif tool == "edit":
            calls.append({"filePath": spelling, "oldString": "OUTSIDE", "newString": "x"})
        elif tool == "list":
            calls.append({"path": spelling.rsplit("/", 1)[0]})
        elif tool == "glob":
            calls.append({"pattern": "*.txt", "path": spelling.rsplit("/", 1)[0]})
        else:
            calls.append({"pattern": "OUTSIDE", "path": spelling.rsplit("/", 1)[0]})
    for arguments in calls:
        call(server, tool, **arguments)
        run(ip, "go")
    parts = tools_of(store, magics.session.info.id)
    assert len(parts) == len(calls)
    ran = [p.state.input for p in parts if outcome(p) == "completed"]
    assert not ran, ran
    assert (tmp_path / "x" / "a" / "secret.txt").read_text() == "OUTSIDESECRET\n"
    assert "OUTSIDESECRET" not in sent(server)


def test_the_file_opened_is_the_file_checked(tmp_path):
    """A component swapped for a link after resolving is refused, not followed."""
    from jupyter_session_agent.core.errors import ToolFailure
    from jupyter_session_agent.tools.paths import open_nofollow

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("inside")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("outside")
    checked = tmp_path / "d" / "f"
    os.close(open_nofollow(checked, os.O_RDONLY))
    os.rename(tmp_path / "d", tmp_path / "d.old")
    (tmp_path / "d").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ToolFailure, match="symbolic link"):
        open_nofollow(checked, os.O_RDONLY)


# --------------------------------------------------------------------------
# secrets


@pytest.fixture
def in_home(ip, magics, tmp_path, monkeypatch):
    """The notebook in ``$HOME``, which holds credentials; the default rules."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SSHKEYSECRET\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key=AWSKEYSECRET\n")
    (home / ".netrc").write_text("machine h password NETRCSECRET\n")
    (home / ".env").write_text("A=1\nDB_PASSWORD=DOTENVSECRET\nZ=2\n")
    (home / "notes.txt").write_text("plain\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    magics.permission = {}
    magics.sandbox = "off"
    return home


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read", {"filePath": ".ssh/id_rsa"}),
        ("read", {"filePath": ".aws/credentials"}),
        ("read", {"filePath": ".netrc"}),
        ("read", {"filePath": "~/.ssh/id_rsa"}),
        ("grep", {"pattern": "SECRET", "path": ".ssh"}),
    ],
)
def test_credentials_in_home_are_not_read_silently(
    ip, server, store, magics, in_home, tool, arguments
):
    call(server, tool, **arguments)
    run(ip, "look")
    part = tools_of(store, magics.session.info.id)[0]
    wire = sent(server)
    for secret in ("SSHKEYSECRET", "AWSKEYSECRET", "NETRCSECRET"):
        assert secret not in wire
    if tool == "read":
        assert outcome(part) != "completed"
    # a plain file still reads without asking
    call(server, "read", filePath="notes.txt")
    run(ip, "plain")
    assert outcome(tools_of(store, magics.session.info.id)[-1]) == "completed"


def test_cat_dotenv_under_a_cat_allow_still_asks(ip, server, store, magics, in_home):
    magics.permission = {"bash": {"cat *": "allow"}}
    call(server, "bash", command="cat .env")
    run(ip, "show env")
    part = tools_of(store, magics.session.info.id)[0]
    assert outcome(part) != "completed"
    assert part.state.metadata["permission"]["permission"] == "read"
    assert "DOTENVSECRET" not in sent(server)
    call(server, "bash", command="cat notes.txt")
    run(ip, "plain")
    assert outcome(tools_of(store, magics.session.info.id)[-1]) == "completed"


def test_an_edit_of_dotenv_shows_only_the_changed_line(ip, server, store, magics, in_home):
    magics.permission = {"edit": "allow", "read": "allow"}
    call(server, "edit", filePath=".env", oldString="Z=2", newString="Z=3")
    run(ip, "edit")
    part = tools_of(store, magics.session.info.id)[0]
    assert outcome(part) == "completed"
    diff = part.state.metadata["diff"]
    assert "-Z=2" in diff and "+Z=3" in diff
    assert "DOTENVSECRET" not in diff and "A=1" not in diff
    assert "DOTENVSECRET" not in sent(server)


def test_env_output_sends_no_credentials(ip, server, store, magics, proj, monkeypatch):
    values = {
        "DATABASE_URL": "postgres://app:PgPassw0rd9@db.internal:5432/app",
        "DB_PASS": "Passw0rdDbPass",
        "MYSQL_PWD": "MysqlPwd123x",
        "SENTRY_DSN": "https://abcdef0123456789@o1.ingest.sentry.io/42",
        "HF_TOKEN": "hf_" + "a1B2" * 9,
        "STRIPE_KEY": "sk_live_" + "Z9y8" * 6,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    magics.permission = {"bash": "allow"}
    call(server, "bash", command="env | sort")
    run(ip, "env")
    part = tools_of(store, magics.session.info.id)[0]
    assert outcome(part) == "completed"
    assert "DATABASE_URL=postgres://app:" in part.state.output  # the rest of the line stays
    wire = sent(server)
    for name, value in values.items():
        secret = value.split(":")[2].split("@")[0] if name == "DATABASE_URL" else value
        assert secret not in wire, name
        assert secret not in part.state.output, name


def test_the_notebook_tool_shows_no_token(ip, server, store, magics, proj):
    ip.run_cell("hf = 'hf_" + "Q" * 34 + "'\nstripe = 'sk_live_" + "R" * 24 + "'")
    ip.run_cell("db_password = 'hunter2hunter2'\nprint(db_password)")
    magics.permission = {"read": "allow"}
    call(server, "notebook", action="variables")
    run(ip, "vars")
    call(server, "notebook", action="cells", last=5)
    run(ip, "cells")
    wire = sent(server)
    for secret in ("Q" * 34, "R" * 24, "hunter2hunter2"):
        assert secret not in wire


def test_mcp_listing_redacts_keys_in_urls_and_arguments(ip, magics, capsys):
    magics.mcp = {
        "remote": {"type": "remote", "url": "https://mcp.example.com/sse?api_key=QueryKey123456"},
        "local": {
            "type": "local",
            "command": ["server", "--api-key", "ArgKey7654321", "--token=TokKey7654321"],
        },
    }
    out = ip.run_line_magic("agent", "mcp")
    shown = json.dumps(out.data if hasattr(out, "data") else str(out), default=str)
    shown += capsys.readouterr().out
    for secret in ("QueryKey123456", "ArgKey7654321", "TokKey7654321"):
        assert secret not in shown
    assert "mcp.example.com" in shown and "--api-key" in shown


def _tokens(seed: int) -> list[tuple[str, str]]:
    """Generated tokens of each format, with a kind name."""
    rng = random.Random(seed)

    def pick(alphabet, n):
        return "".join(rng.choice(alphabet) for _ in range(n))

    alnum = string.ascii_letters + string.digits
    b64url = alnum + "-_"
    return [
        ("hf", "hf_" + pick(alnum, 34)),
        ("stripe", "sk_live_" + pick(alnum, rng.randint(24, 99))),
        ("stripe-test", "rk_test_" + pick(alnum, 24)),
        ("github", rng.choice(["ghp_", "gho_", "ghs_", "ghu_"]) + pick(alnum, 36)),
        ("github-pat", "github_pat_" + pick(alnum + "_", 60)),
        (
            "slack",
            "xox" + rng.choice("abposr") + "-" + pick(string.digits, 12) + "-" + pick(alnum, 24),
        ),
        ("aws", rng.choice(["AKIA", "ASIA"]) + pick(string.ascii_uppercase + string.digits, 16)),
        ("openai", "sk-proj-" + pick(b64url, 48)),
        ("anthropic", "sk-ant-api03-" + pick(b64url, 60)),
        ("google", "AIza" + pick(b64url, 35)),
        ("gitlab", "glpat-" + pick(b64url, 20)),
        (
            "jwt",
            "eyJ" + pick(b64url, 20) + ".eyJ" + pick(b64url, 40) + "." + pick(b64url, 43),
        ),
        (
            "pem",
            "-----BEGIN RSA PRIVATE KEY-----\n"
            + "\n".join(pick(alnum + "+/", 64) for _ in range(4))
            + "\n-----END RSA PRIVATE KEY-----",
        ),
        ("url", f"postgresql://user:{pick(alnum, 14)}@host:5432/db"),
        ("query", f"https://api.example.com/v1?x=1&api_key={pick(alnum, 24)}&y=2"),
        ("option", f"tool --api-key {pick(alnum, 20)} --verbose"),
    ]


def _secret_part(kind: str, token: str) -> str:
    if kind == "url":
        return token.split(":")[2].split("@")[0]
    if kind == "query":
        return token.split("api_key=")[1].split("&")[0]
    if kind == "option":
        return token.split()[2]
    if kind == "pem":
        return token.splitlines()[2]
    return token


WRAPPERS = [
    "{t}",
    "token: {t}\n",
    '{{"key": "{t}"}}',
    "export X='{t}'",
    "<td>{t}</td>",
    "value={t};",
    "  {t}  trailing words",
]


@pytest.mark.parametrize("seed", range(8))
def test_generated_token_formats_are_redacted(seed):
    missed = []
    for (kind, token), wrapper in itertools.product(_tokens(seed), WRAPPERS):
        text = wrapper.format(t=token)
        if _secret_part(kind, token) in redact.redact(text):
            missed.append((kind, text))
    assert not missed, missed[:5]


def test_plain_text_is_left_alone():
    for text in (
        "sort -o out.txt in.txt",
        "https://example.com/page?id=12&sort=asc",
        "postgres://localhost/db",
        "the key is in the lock",
        "skip_live_recording and sk_ later",
        "eyJ alone",
    ):
        assert redact.redact(text) == text, text


# --------------------------------------------------------------------------
# bounds


def test_arguments_nested_100000_deep_are_one_tool_error(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    deep = '{"command": ' + "[" * 100_000 + "]" * 100_000 + "}"
    magics.request_timeout = 60.0
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": deep},), chunk_chars=65536),
        Reply(text="understood"),
    )
    run(ip, "deep")
    part = tools_of(store, magics.session.info.id)[0]
    assert part.state.status == "error"
    assert "nest 100,001 levels deep" in part.state.error
    assert "RecursionError" not in part.state.error
    assert "understood" in sent(server) or len(server.requests) == 2


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(field)


@pytest.fixture
def remote_server(monkeypatch):
    """The scripted server in another process, so that only the kernel's own memory is
    measured (it builds a reply's chunks in memory); the shell is pointed at it."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_session_agent.testing.scripted_server"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = proc.stdout.readline().strip()
        monkeypatch.setenv("OPENAI_BASE_URL", base)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _script(base: str, *replies: dict) -> None:
    import urllib.request

    root = base.rsplit("/v1", 1)[0]
    request = urllib.request.Request(
        root + "/_script", data=json.dumps(list(replies)).encode(), method="POST"
    )
    urllib.request.urlopen(request, timeout=30).read()


def test_a_30_mb_answer_is_cut_with_one_line_and_memory_stays_bounded(
    ip, store, magics, proj, remote_server
):
    magics.permission = {"*": "allow"}
    magics.max_answer_chars = 100_000  # the minimum is 1,000; 100,000 fits the context
    magics.request_timeout = 120.0
    _script(remote_server, {"text": "warm up"})
    run(ip, "warm")
    _script(remote_server, {"text": "word " * 6_000_000, "chunk_chars": 512})  # 30 MB
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak (VmHWM) to the current size
    except OSError:
        pytest.skip("this kernel cannot reset the peak RSS (/proc/self/clear_refs)")
    before = _status("VmRSS")
    run(ip, "talk")
    peak = _status("VmHWM")
    messages = store.messages(magics.session.info.id)
    text = "".join(p.text for p in messages[-1].parts if p.type == "text")
    assert 100_000 <= len(text) < 101_000
    assert text.count("answer cut") == 1
    assert text.rstrip().endswith("raise max_answer_chars to keep more]")
    assert peak - before < 40 * 1024 * 1024, (peak - before) / 1e6


def test_mcp_log_redacts_keys_of_the_command(ip, magics, data_dir):
    """The log's start line names the command: its ``--api-key`` value is not in it, nor in
    the one-line error the restart shows."""
    import sys

    pytest.importorskip("mcp")
    magics.mcp = {
        "dies": {
            "type": "local",
            "command": [
                sys.executable,
                "-c",
                "import sys; sys.exit(3)",
                "--api-key",
                "LogKey98765",
            ],
            "timeout": 5,
        }
    }
    with pytest.raises(Exception) as info:
        ip.run_line_magic("agent", "mcp restart dies")
    assert "LogKey98765" not in str(info.value)
    logs = list((data_dir / "mcp").glob("dies.log*"))
    assert logs, "the server's log was not written"
    text = "".join(p.read_text() for p in logs)
    assert "--api-key" in text and "LogKey98765" not in text
