"""bash runs in an OS sandbox, and the checker that decides when to ask cannot be outrun.

Through the public path: a real IPython shell runs ``%%agent`` against the scripted server,
which scripts the model's bash calls; the assertions look at the disk, the history and what
the model server received. The shell has no stdin, so a question is a denial that stops the
turn: a call that completes ran without asking.

* With the sandbox (``sandbox = 'auto'``, the default rules): commands run without asking,
  writes land only in the session folder (and a private ``/tmp``), credentials read as
  empty, there is no network unless ``network`` is allowed — for every spelling of a write
  outside (a generated corpus), since the boundary is the OS's, not the checker's.
* Without it (``sandbox = 'off'``): the first call says so in one line and bash asks.
* The checker (the layer that decides ask vs allow) treats every variable the line can
  assign (``PWD``, ``HOME``, ``CDPATH``, ``OLDPWD``) as unknown, reads values glued to short
  options, treats ``xargs``'s input as unknown arguments, and bounds its own time and globs.
"""

from __future__ import annotations

import itertools
import os
import time

import pytest

from jupyter_session_agent.core import permission as P
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.tools.sandbox import status


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def bash(server, *commands):
    server.enqueue(
        *(Reply(tool_calls=({"name": "bash", "arguments": {"command": c}},)) for c in commands),
        Reply(text="done"),
    )


def tools_of(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def sent(server) -> str:
    import json

    return json.dumps(server.requests, ensure_ascii=False)


@pytest.fixture
def area():
    """A folder outside ``/tmp`` (the sandbox gives every command a private ``/tmp``, so a
    test under it could not tell a contained write from a refused one)."""
    import shutil
    import tempfile
    from pathlib import Path

    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home(ip, area, monkeypatch):
    """``$HOME`` (``area/home``) holding credentials, and the session folder ``area/proj``
    (the notebook's directory) with a ``.env``."""
    tmp_path = area
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSSHSECRET\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=AWSSECRET\n")
    (home / ".netrc").write_text("machine x login u password NETRCSECRET\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / ".env").write_text("DB_PASSWORD=DOTENVSECRET\n")
    (proj / "data.csv").write_text("a,b\n1,2\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(proj)
    return home


@pytest.fixture
def sandboxed(ip, magics, home):
    found = status()
    if not found.available:
        pytest.skip(found.reason)
    magics.sandbox = "auto"
    magics.permission = {}  # the defaults: with the sandbox, bash runs without asking
    return home


# --------------------------------------------------------------------------
# the OS boundary


def test_confined_commands_run_without_asking_and_stay_inside(
    ip, server, store, magics, sandboxed, area
):
    tmp_path = area
    proj = tmp_path / "proj"
    bash(
        server,
        "wc -l data.csv && echo made > out.txt && mkdir -p res && cp data.csv res/",
        "echo owned >> ~/.bashrc; echo x > ../outside.txt; touch /tmp/private && ls /tmp",
        "cat ~/.ssh/id_rsa",
    )
    run(ip, "work")
    parts = tools_of(store, magics.session.info.id)
    assert [p.state.status for p in parts] == ["completed", "completed", "error"]
    # the checker still asks for a credential a command names (a read of it)
    assert parts[2].state.metadata["permission"]["permission"] == "read"
    assert (proj / "out.txt").read_text() == "made\n"
    assert (proj / "res" / "data.csv").exists()
    assert not (sandboxed / ".bashrc").exists()
    assert not (tmp_path / "outside.txt").exists()
    assert not os.path.exists("/tmp/private")  # a private /tmp, gone with the command
    second = parts[1].state.output
    assert "Read-only file system" in second and "private" in second
    assert parts[0].state.metadata["sandbox"] == {"network": False, "writable": []}

    # even when the user allows every read, the OS shows the credential stores empty
    magics.permission = {"read": "allow"}
    wire = sent(server)
    server.reset()  # the denial stopped the turn before its last reply was taken
    bash(server, "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc; ls -a ~/.ssh; echo end")
    run(ip, "more")
    last = tools_of(store, magics.session.info.id)[-1]
    assert last.state.status == "completed" and "end" in last.state.output
    wire += sent(server)
    for secret in ("SSHSECRET", "AWSSECRET", "NETRCSECRET"):
        assert secret not in wire  # hidden by the OS: the files read as empty


def test_dotenv_in_the_session_folder_reads_empty_even_when_allowed(
    ip, server, store, magics, sandboxed
):
    magics.permission = {"read": "allow"}  # the user allowed reading everything
    bash(server, "cat .env; cat ./.env | wc -c; grep -r PASSWORD . || echo none")
    run(ip, "look")
    part = tools_of(store, magics.session.info.id)[0]
    assert part.state.status == "completed"
    assert "DOTENVSECRET" not in sent(server)
    assert "none" in part.state.output


def test_network_is_off_unless_the_network_permission_allows_it(
    ip, server, store, magics, sandboxed
):
    port = server.base_url.split(":")[-1].split("/")[0]
    probe = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=3); print('CONNECTED')\" 2>&1 | tail -1"
    )
    bash(server, probe)
    run(ip, "net")
    first = tools_of(store, magics.session.info.id)[0]
    assert first.state.status == "completed"
    assert "CONNECTED" not in first.state.output

    ip.run_line_magic("agent", "permit network allow")
    bash(server, probe)
    run(ip, "net again")
    second = tools_of(store, magics.session.info.id)[-1]
    assert "CONNECTED" in second.state.output
    assert second.state.metadata["sandbox"]["network"] is True


def test_an_allowed_outside_folder_is_writable_and_nothing_else(
    ip, server, store, magics, sandboxed, area
):
    tmp_path = area
    shared = tmp_path / "shared"
    shared.mkdir()
    ip.run_line_magic("agent", f'permit external_directory "{shared}/*" allow')
    bash(server, f"echo ok > {shared}/f.txt; echo no > {tmp_path}/g.txt; echo end")
    run(ip, "write")
    part = tools_of(store, magics.session.info.id)[0]
    assert part.state.status == "completed"
    assert (shared / "f.txt").read_text() == "ok\n"
    assert not (tmp_path / "g.txt").exists()


def _outside_spellings() -> list[str]:
    """Generated ways to write ``../F`` (outside the session folder): redirections, tools
    with an output argument, glued options, variables the line assigns, xargs, code."""
    target = ["../F", "$PWD/../F", "${PWD}/../F", "~/../proj/../F", '"$(dirname "$PWD")/F"']
    writers = [
        "echo x > {t}",
        "echo x >> {t}",
        "echo x | tee {t}",
        "cp data.csv {t}",
        "touch {t}",
        "dd if=data.csv of={t} status=none",
        "sort -o{t} data.csv",
        "sort -ro{t} data.csv",
        "tar -cf{t} data.csv",
        "ln -s data.csv {t}",
        "mkdir -p {t}",
        "xargs touch <<< {t}",
        "python3 -c \"open('{t}', 'w').write('x')\"",
    ]
    lines = [w.format(t=t) for w, t in itertools.product(writers, target)]
    lines += [
        "read PWD <<< /; echo x > $PWD/F",
        "printf -v PWD %s ..; echo x > $PWD/F",
        "declare PWD=..; echo x > $PWD/F",
        "export HOME=..; echo x > ~/F",
        "for PWD in ..; do echo x > $PWD/F; done",
        "mapfile -t P <<< ..; cd $P && touch F",
        "read CDPATH <<< ..; cd proj && cd .. && touch F",
        "cd .. && touch F",
        "(cd ..; touch F)",
        "mv data.csv ../F || true; cp -r . ../F",
    ]
    return lines


def test_no_spelling_of_a_write_outside_gets_out(ip, server, store, magics, sandboxed, area):
    """The corpus runs in one turn, without asking, and nothing appears outside."""
    tmp_path = area
    lines = _outside_spellings()
    bash(server, *lines)
    magics.max_steps = len(lines) + 2
    run(ip, "try them all")
    parts = tools_of(store, magics.session.info.id)
    assert len(parts) == len(lines)
    assert all(p.state.status == "completed" for p in parts), [
        (p.state.input, p.state.error) for p in parts if p.state.status != "completed"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "proj"]
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [".aws", ".netrc", ".ssh"]


def test_without_a_sandbox_the_first_call_says_so_and_bash_asks(
    ip, server, store, magics, home, monkeypatch
):
    from jupyter_session_agent.tools import shell

    monkeypatch.setattr(shell, "_told", set())  # as in a fresh process
    magics.sandbox = "off"
    magics.permission = {}  # the defaults: bash asks (no stdin here: a denial)
    bash(server, "echo hi > hi.txt")
    run(ip, "x")
    part = tools_of(store, magics.session.info.id)[0]
    assert part.state.status == "error" and not os.path.exists("hi.txt")

    magics.permission = {"bash": "allow"}
    server.reset()  # the denial stopped the turn before its last reply was taken
    bash(server, "echo one", "echo two")
    run(ip, "y")
    done = tools_of(store, magics.session.info.id)[1:]
    notes = [p.state.output for p in done if "OS sandbox is off" in p.state.output]
    assert len(notes) == 1 and "OS sandbox is off" in done[0].state.output  # at the first call
    assert [line for line in notes[0].splitlines() if "sandbox" in line] == [
        "(the OS sandbox is off (sandbox = 'off'): commands run unconfined, and by default "
        "each one asks first.)"
    ]
    assert all("off" in p.state.metadata["sandbox"] for p in done)


# --------------------------------------------------------------------------
# the checker: what the line can assign, glued options, xargs, bounds


def _asks(command: str, directory: str, rules) -> bool:
    """Would ``command`` ask (or be denied) under ``rules``? (The gate itself decides.)"""
    asked = []

    def approver(request):
        asked.append(request)
        return "once", None

    gate = P.Gate(session_id="s", directory=directory, ruleset=lambda: rules, approver=approver)
    try:
        gate("bash", {"command": command})
    except P.DeniedError:
        return True
    return bool(asked)


ALLOWED = P.merge(
    P.defaults(),
    P.from_config(
        {
            "bash": {
                "*": "ask",
                **{
                    f"{c} *": "allow"
                    for c in (
                        "read",
                        "printf",
                        "echo",
                        "declare",
                        "export",
                        "typeset",
                        "local",
                        "mapfile",
                        "readarray",
                        "cd",
                        "touch",
                        "sort",
                        "tar",
                        "cp",
                        "gzip",
                        "xargs",
                        "getopts",
                        "unset",
                        "set",
                        "true",
                        "ls",
                        "cut",
                        "uniq",
                        "split",
                        "shuf",
                        "install",
                        "zip",
                        "wget",
                        "curl",
                        "patch",
                        "git",
                        "readonly",
                        "tee",
                    )
                },
            }
        }
    ),
)


def _assignments(name: str) -> list[str]:
    """Generated ways a bash line can give ``name`` a value."""
    quoted = [name, f'"{name}"', f"'{name}'", f'{name[0]}"{name[1:]}"', f"\\{name}"]
    forms = []
    for n in quoted:
        forms += [
            f"read {n} <<< /etc",
            f"read -r {n} <<< /etc",
            f"printf -v {n} %s /etc",
            f"printf -v{n} %s /etc",
            f"declare {n}=/etc",
            f"declare -g {n}=/etc",
            f"export {n}=/etc",
            f"typeset {n}=/etc",
            f"readonly {n}=/etc",
            f"mapfile -t {n} <<< /etc",
            f"readarray {n} <<< /etc",
            f"getopts a {n}",
            f"for {n} in /etc; do true; done",
        ]
    forms += [f"{name}=/etc", f"{name}+=/etc", f"export {name}; {name}=/etc"]
    return forms


USES = {
    "PWD": ["touch $PWD/F", 'touch "${PWD}/F"', "touch ~+/F", "cd ~+ && touch F"],
    "HOME": ["touch $HOME/F", "touch ~/F", "cd && touch F", 'touch "${HOME}"/F'],
    "OLDPWD": ["touch ~-/F", "cd - && touch F", "touch $OLDPWD/F"],
    "CDPATH": ["cd sub && touch F", "cd sub; touch F"],
}


@pytest.mark.parametrize("name", sorted(USES))
def test_every_variable_the_line_can_assign_is_unknown(tmp_path, name):
    (tmp_path / "sub").mkdir()
    directory = str(tmp_path)
    missed = [
        f"{a}; {u}"
        for a in _assignments(name)
        for u in USES[name]
        if not _asks(f"{a}; {u}", directory, ALLOWED)
    ]
    assert not missed, missed[:10]


GLUED = [
    "sort -o{t} in.txt",
    "sort -ro{t} in.txt",
    "sort -rno{t} in.txt",
    "tar -cf{t} in.txt",
    "tar -czf{t} in.txt",
    "tar -cvzf{t} in.txt",
    "gzip -S{t} in.txt",
    "cp -t{t} in.txt",
    "cp -at{t} in.txt",
    "split -a2 in.txt {t}",
    "shuf -o{t} in.txt",
    "uniq in.txt {t}",
    "install -D in.txt {t}",
    "zip -r{t} in.txt",
    "wget -O{t} http://x",
    "wget -qO{t} http://x",
    "curl -o{t} http://x",
    "curl -so{t} http://x",
    "patch -o{t} in.txt",
    "git -C{t} status",
    "cut -d, -f1 --output-delimiter=x in.txt > {t}",
    "ls -la --color=never > {t}",
    "tee -a {t} < in.txt",
]
TARGETS = ["../F", "../../F", "/etc/F", "~/F", "sub/../../F", "./../F"]


@pytest.mark.parametrize("template", GLUED)
def test_a_value_glued_to_short_options_is_checked(tmp_path, monkeypatch, template):
    monkeypatch.setenv("HOME", str(tmp_path.parent))
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    missed = [
        template.format(t=t) for t in TARGETS if not _asks(template.format(t=t), str(work), ALLOWED)
    ]
    assert not missed, missed


@pytest.mark.parametrize(
    "command",
    [
        "xargs touch <<< ../F",
        "echo ../F | xargs touch",
        "echo ../F | xargs -n1 touch",
        "echo ../F | xargs -I{} touch {}",
        "printf '%s\\0' ../F | xargs -0 cp in.txt",
        "ls | xargs",
        "cat list.txt | xargs -r rm",
    ],
)
def test_xargs_input_is_unknown_arguments(tmp_path, command):
    assert _asks(command, str(tmp_path), ALLOWED)


def test_the_checker_bounds_its_own_time(tmp_path):
    started = time.monotonic()
    assert _asks("ls /*/*/*/*/*/*/*/nomatch", str(tmp_path), ALLOWED)
    assert time.monotonic() - started < 3
    line = "echo a #c\n" * 40_000  # 400 KB
    started = time.monotonic()
    P.tool_asks("bash", {"command": line}, str(tmp_path))
    assert time.monotonic() - started < 6


def test_the_checker_still_allows_plain_lines(tmp_path):
    (tmp_path / "in.txt").write_text("x\n")
    for command in ("sort -r in.txt", "tar -czf out.tgz in.txt", "echo $PWD", "ls -la", "cd ."):
        assert not _asks(command, str(tmp_path), ALLOWED), command


def test_a_confined_command_that_times_out_leaves_nothing_running(area):
    """The timeout kills the whole process group through bwrap, as without the sandbox."""
    import subprocess

    from jupyter_session_agent.tools.base import ToolContext
    from jupyter_session_agent.tools.sandbox import Confinement
    from jupyter_session_agent.tools.shell import BashTool

    found = status()
    if not found.available:
        pytest.skip(found.reason)
    ctx = ToolContext("s", "m", "c", area, area / ".data", sandbox=Confinement(True))
    marker = f"sleep 37.{os.getpid()}"
    started = time.monotonic()
    result = BashTool().run({"command": f"{marker} & {marker}; echo end", "timeout": 1000}, ctx)
    assert time.monotonic() - started < 5
    assert "timed out" in result.output and "end" not in result.output
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert not left.strip(), left


ISSUE_LINES = [
    'read PWD <<< "$HOME"; echo x >> "$PWD/.bashrc"',
    'printf -v PWD %s "$HOME"; echo x >> "$PWD/.bashrc"',
    "read CDPATH <<< ..; cd sib && touch F",
    "sort -ro../F data.csv",
    "tar -cf../F data.csv",
    "xargs touch <<< ../F",
]


@pytest.mark.parametrize("line", ISSUE_LINES)
def test_the_lines_that_got_past_the_checker_now_ask(ip, server, store, magics, home, line):
    """Unconfined, with every command of the line allowed by a rule: the line asks (a denial
    here), and nothing is written outside."""
    area = home.parent
    (area / "sib").mkdir()
    magics.sandbox = "off"
    allowed = ("read", "echo", "printf", "cd", "touch", "sort", "tar", "xargs")
    magics.permission = {"bash": {f"{c} *": "allow" for c in allowed}}
    bash(server, line)
    run(ip, "go")
    part = tools_of(store, magics.session.info.id)[0]
    assert part.state.status == "error"
    assert part.state.metadata["permission"]["permission"] == "external_directory"
    assert not (home / ".bashrc").exists()
    assert not (area / "F").exists() and not (area / "sib" / "F").exists()
