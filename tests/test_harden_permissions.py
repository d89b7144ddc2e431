"""Permissions mean what they say.

* bash lines are read by a real parser and fail closed: each simple command (nested ones
  included) is checked on its own, and what the checker cannot account for asks;
* paths outside the session directory ask ``external_directory`` however they are spelled
  (``..``, ``~``, ``~+``, ``$HOME``, ``$PWD``, expansions, symbolic links);
* file tools check the file a link reaches; listings and searches never follow a link out;
* a subagent stays within its parent's rules;
* the approval prompt shows the whole code, control characters made visible;
* the last allowed step runs no tool.

Every end-to-end case drives a real IPython shell against the scripted server, with rules set
as a user sets them; the shell has no stdin, so an "ask" is a denial that stops the turn.
"""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from jupyter_session_agent.core import permission as P
from jupyter_session_agent.session.approval import (
    ScriptedApprover,
    StdinApprover,
    prompt_line,
    prompt_text,
)
from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def tools_of(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def call(server, tool, **arguments):
    server.enqueue(Reply(tool_calls=({"name": tool, "arguments": arguments},)), Reply(text="done"))


def outcome(part):
    """``completed``, or the permission outcome of an error (``denied``, ``unavailable``…)."""
    if part.state.status == "completed":
        return "completed"
    return ((part.state.metadata or {}).get("permission") or {}).get("outcome", "error")


@pytest.fixture
def proj(ip, tmp_path, monkeypatch):
    """The session directory ``tmp_path/proj`` (with ``sub/``); ``tmp_path`` is outside it,
    and so is ``$HOME`` (``tmp_path/home``)."""
    path = tmp_path / "proj"
    (path / "sub").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return path


# --------------------------------------------------------------------------
# bash: every command is checked, and what the checker cannot read asks

# With {"bash": {"echo *": "allow"}} each of these must not run `touch X`: it asks.
ECHO_ASKS = [
    "echo $'\\''; touch X; echo $'\\''",  # ANSI-C quoting hid the command from the old splitter
    "echo a\\ #$(touch X)",  # an escaped space: `#` does not start a comment
    "echo `touch X`",
    "echo $(touch X)",
    'echo "$(touch X)"',
    'echo "a$(touch X)b"',
    "echo `echo \\`touch X\\``",  # backticks read twice
    "echo a; touch X",
    "echo a && touch X",
    "false || touch X",
    "echo a | touch X",
    "echo a & touch X",
    "echo a |& touch X",
    "echo a\ntouch X",
    "echo a;\\\ntouch X",
    "to\\\nuch X",  # a line continuation inside a word
    "echo hi; to\\\nuch X",
    "{ echo a; touch X; }",
    "(echo a; touch X)",
    "echo X | xargs touch",
    "env A=1 touch X",
    "command touch X",
    "find . -maxdepth 0 -exec touch X \\;",
    "if echo a; then touch X; fi",
    "for i in 1; do touch X; done",
    "while echo a; do touch X; break; done",
    "echo <(touch X)",
    "echo a > >(touch X)",
    "echo ${x:-$(touch X)}",
    "echo $((1)) $(touch X)",
    "echo a#; touch X",
    'echo $"$(touch X)"',
    "echo touch X | bash",
    "echo touch X | sh",
    "bash -c 'touch X'",
    "echo; eval 'touch X'",
    "echo touch X > s.sh; . ./s.sh",
    "echo touch X > s.sh && source s.sh",
    "f() { touch X; }; f",
    "echo x; exec touch X",
    "trap 'touch X' EXIT; echo hi",
    "shopt -s expand_aliases; alias e=touch\ne X",
    "cat <<EOF\n$(touch X)\nEOF",
    "x=$(touch X); echo $x",
    "$(echo touch) X",
    "[[ $(touch X) ]]; echo",
    "echo $(case x in x) touch X;; esac)",
    'echo "$(echo ")"; touch X)"',
    "echo $'touch X' | bash",
    "echo hi\u00a0; touch X",
]


@pytest.mark.parametrize("command", ECHO_ASKS)
def test_an_allowed_echo_cannot_smuggle_another_command(ip, server, store, magics, proj, command):
    magics.permission = {"bash": {"echo *": "allow"}}
    call(server, "bash", command=command)
    run(ip, "run it")
    assert not (proj / "X").exists()
    (part,) = tools_of(store, magics.session.info.id)
    assert part.state.status == "error" and outcome(part) == "unavailable", part.state
    assert "\n" not in part.state.error  # one line naming the fix


# ... and these are plain echo lines: they run.
ECHO_RUNS = [
    ("echo hi > out.txt", "hi\n"),
    ("echo 'a; touch X' > out.txt", "a; touch X\n"),
    ('echo "a && touch X" > out.txt', "a && touch X\n"),
    ("echo '$(touch X)' > out.txt", "$(touch X)\n"),
    ("echo \\`touch X\\` > out.txt", "`touch X`\n"),
    ("echo \\$\\(touch X\\) > out.txt", "$(touch X)\n"),
    ("echo a > out.txt # ; touch X", "a\n"),
    ("echo a \\\n b > out.txt", "a b\n"),
    ("echo 'a'\"b\"c > out.txt", "abc\n"),
    ("echo $? > out.txt", "0\n"),
    ("echo x 2>&1 > out.txt", "x\n"),
    ("echo a > out.txt; echo b >> out.txt", "a\nb\n"),
]


@pytest.mark.parametrize("command, written", ECHO_RUNS)
def test_plain_echo_lines_run(ip, server, store, magics, proj, command, written):
    magics.permission = {"bash": {"echo *": "allow"}}
    call(server, "bash", command=command)
    run(ip, "run it")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "completed", part.state
    assert (proj / "out.txt").read_text() == written
    assert not (proj / "X").exists()


# With {"bash": {"*": "allow", "touch *": "deny"}}: a wrapper, quoting or a string of shell
# code cannot get past the deny — the deny denies, or the line asks.
DENY_CASES = [
    ("touch X", "denied"),
    ("t\\ouch X", "denied"),
    ("'touch' X", "denied"),
    ("to''uch X", "denied"),
    ("env touch X", "denied"),
    ("env -i A=1 touch X", "denied"),
    ("command touch X", "denied"),
    ("nohup touch X", "denied"),
    ("timeout 5 touch X", "denied"),
    ("time touch X", "denied"),
    ("nice -n 1 touch X", "denied"),
    ("echo X | xargs touch", "denied"),
    ("echo X | xargs -I{} touch {}", "denied"),
    ("find . -maxdepth 0 -exec touch X \\;", "denied"),
    ("f() { touch X; }; f", "denied"),
    ("A=1 touch X", "denied"),
    ("echo &x=* touch X", "denied"),
    ("PATH=/usr/bin:$PATH touch X", "denied"),
    ("ls $(touch X)", "denied"),
    ("bash -c 'touch X'", "unavailable"),
    ("sh -c 'touch X'", "unavailable"),
    ("bash -ec 'touch X'", "unavailable"),
    ("echo touch X | bash", "unavailable"),
    ("bash <<< 'touch X'", "unavailable"),
    ("eval touch X", "unavailable"),
    ("builtin eval touch X", "unavailable"),
    ("echo touch X > s.sh; . ./s.sh", "unavailable"),
    ("exec touch X", "unavailable"),
    ("$(echo touch) X", "unavailable"),
    ("x=touch; $x X", "unavailable"),
    ("$'touch' X", "denied"),
    ("trap 'touch X' EXIT", "unavailable"),
    ("x='a[$(touch X)]'; echo $((x))", "unavailable"),
    ("x='a[$(touch X)]'; [[ x -eq 0 ]]", "unavailable"),
    ("printf -v 'a[$(touch X)]' %s 1", "unavailable"),
    ("ls; to\\\nuch X", "unavailable"),
]


@pytest.mark.parametrize("command, expected", DENY_CASES)
def test_a_deny_rule_holds_whatever_the_spelling(
    ip, server, store, magics, proj, command, expected
):
    magics.permission = {"bash": {"*": "allow", "touch *": "deny"}}
    call(server, "bash", command=command)
    run(ip, "run it")
    assert not (proj / "X").exists()
    (part,) = tools_of(store, magics.session.info.id)
    assert part.state.status == "error" and outcome(part) == expected, part.state
    # what asks may be the bash line or a path it computes (``$((x))`` could name any file)
    assert part.state.metadata["permission"]["permission"] in (
        ("bash",) if expected == "denied" else ("bash", "external_directory")
    )


def test_an_unreadable_line_runs_when_bash_is_allowed_for_everything(
    ip, server, store, magics, proj
):
    magics.permission = {"bash": "allow"}  # every command: nothing the parser misses is unallowed
    call(server, "bash", command="echo $'a\\tb' > out.txt; f() { echo in; }; f >> out.txt")
    run(ip, "run it")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "completed", part.state
    assert (proj / "out.txt").read_text() == "a\tb\nin\n"


# --------------------------------------------------------------------------
# paths outside the session directory ask external_directory

OUTSIDE_WRITES = [
    "echo x > ./../F",
    "echo x > sub/../../F",
    "echo x >> sub/../../F",
    "echo x &> ../F",
    "echo x > ${PWD%/*}/F",
    "echo x > ~+/../F",
    "echo x > ~/../F",
    "echo x > $HOME/../F",
    "echo x > ${HOME}/../F",
    'echo x > "$HOME"/../F',
    'echo x > "$PWD"/../F',
    "echo x > $(dirname $PWD)/F",
    "echo x > `dirname $PWD`/F",
    "X=..; echo x > $X/F",
    "cd .. && echo x > F",
    "cd sub/../.. && echo x > F",
    "echo x | tee ../F",
    "touch ../F",
    "cp /dev/null ../F",
    "echo x > linkout/F",  # a link inside the directory that points outside
    "echo x > linkout/../proj/../F",
]


@pytest.mark.parametrize("command", OUTSIDE_WRITES)
def test_writing_outside_the_session_directory_asks(
    ip, server, store, magics, proj, tmp_path, command
):
    (proj / "linkout").symlink_to(tmp_path)
    magics.permission = {"bash": "allow"}  # bash runs; external_directory still asks (the default)
    call(server, "bash", command=command)
    run(ip, "write it")
    assert not (tmp_path / "F").exists()
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "unavailable", part.state
    assert part.state.metadata["permission"]["permission"] == "external_directory"


def test_writing_inside_the_session_directory_does_not_ask(ip, server, store, magics, proj):
    magics.permission = {"bash": "allow"}
    call(
        server,
        "bash",
        command="echo x > sub/F && echo y > ./sub/../G && echo z > ~+/sub/H && cat sub/F",
    )
    run(ip, "write it")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "completed", part.state
    assert (proj / "sub" / "F").exists() and (proj / "G").exists() and (proj / "sub" / "H").exists()


def test_an_allowed_outside_directory_is_allowed_and_nothing_else(
    ip, server, store, magics, proj, tmp_path
):
    other = tmp_path / "other"
    other.mkdir()
    magics.permission = {"bash": "allow", "external_directory": {f"{other}/*": "allow"}}
    call(server, "bash", command="echo x > ../other/F")
    run(ip, "write it")
    assert (other / "F").exists()
    call(server, "bash", command="echo x > ../other/../F")
    run(ip, "write it")
    assert not (tmp_path / "F").exists()
    outcomes = [outcome(p) for p in tools_of(store, magics.session.info.id)]
    assert outcomes == ["completed", "unavailable"]


# --------------------------------------------------------------------------
# symbolic links: the file tools check the file a link reaches


@pytest.fixture
def links(proj, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET outside\n")
    (proj / "etclink").symlink_to(outside)
    (proj / "filelink.txt").symlink_to(outside / "secret.txt")
    (proj / ".env").write_text("API_TOKEN=dotenv-value\n")
    (proj / "notes.txt").symlink_to(proj / ".env")
    (proj / "mine.txt").write_text("mine\n")
    return outside


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read", {"filePath": "etclink/secret.txt"}),
        ("read", {"filePath": "filelink.txt"}),
        ("read", {"filePath": "sub/../etclink/secret.txt"}),
        ("list", {"path": "etclink"}),
        ("glob", {"pattern": "*", "path": "etclink"}),
        ("grep", {"pattern": "SECRET", "path": "etclink"}),
        ("grep", {"pattern": "SECRET", "path": "filelink.txt"}),
    ],
)
def test_reading_through_a_link_that_points_outside_asks(
    ip, server, store, magics, links, tool, arguments
):
    magics.permission = {}  # the defaults: reading inside the directory is allowed
    call(server, tool, **arguments)
    run(ip, "look")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "unavailable", part.state
    assert part.state.metadata["permission"]["permission"] == "external_directory"
    assert "TOP-SECRET" not in str(part.state)


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("write", {"filePath": "etclink/secret.txt", "content": "owned\n"}),
        ("write", {"filePath": "etclink/new.txt", "content": "owned\n"}),
        ("write", {"filePath": "filelink.txt", "content": "owned\n"}),
        (
            "edit",
            {"filePath": "etclink/secret.txt", "oldString": "TOP-SECRET", "newString": "owned"},
        ),
        ("edit", {"filePath": "filelink.txt", "oldString": "TOP-SECRET", "newString": "owned"}),
    ],
)
def test_writing_through_a_link_that_points_outside_asks(
    ip, server, store, magics, links, tool, arguments
):
    magics.permission = {"edit": "allow"}  # editing inside is allowed: outside still asks
    call(server, tool, **arguments)
    run(ip, "change it")
    assert (links / "secret.txt").read_text() == "TOP-SECRET outside\n"
    assert not (links / "new.txt").exists()
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "unavailable", part.state
    assert part.state.metadata["permission"]["permission"] == "external_directory"


def test_a_link_to_dotenv_asks_as_dotenv_does(ip, server, store, magics, links):
    magics.permission = {}
    call(server, "read", filePath="notes.txt")
    run(ip, "read the notes")
    (part,) = tools_of(store, magics.session.info.id)
    assert outcome(part) == "unavailable", part.state
    assert part.state.metadata["permission"]["permission"] == "read"
    assert "dotenv-value" not in str(part.state)


def test_listings_and_searches_do_not_follow_links_out(ip, server, store, magics, links):
    magics.permission = {}
    server.enqueue(
        Reply(
            tool_calls=(
                {"name": "list", "arguments": {}},
                {"name": "glob", "arguments": {"pattern": "**/*.txt"}},
                {"name": "grep", "arguments": {"pattern": "SECRET|mine"}},
            )
        ),
        Reply(text="done"),
    )
    run(ip, "look around")
    listed, globbed, grepped = tools_of(store, magics.session.info.id)
    assert [outcome(p) for p in (listed, globbed, grepped)] == ["completed"] * 3
    assert "etclink" in listed.state.output and "secret.txt" not in listed.state.output
    assert "mine.txt" in globbed.state.output
    assert "secret" not in globbed.state.output and "filelink" not in globbed.state.output
    assert "mine" in grepped.state.output and "TOP-SECRET" not in grepped.state.output


def test_bash_paths_through_a_link_ask(ip, server, store, magics, links):
    magics.permission = {"bash": "allow"}
    cat = {"name": "bash", "arguments": {"command": "cat etclink/secret.txt"}}
    server.enqueue(Reply(tool_calls=(cat,)))  # blocked: the turn asks for nothing more
    run(ip, "read it")
    call(server, "bash", command="cat */secret.txt")  # a glob reaching through the link
    run(ip, "read it")
    parts = tools_of(store, magics.session.info.id)
    assert [outcome(p) for p in parts] == ["unavailable", "unavailable"]
    assert all("TOP-SECRET" not in str(p.state) for p in parts)


# --------------------------------------------------------------------------
# subagents inherit their parent's rules and can only narrow them


def _task(server, child_call, *, task_id=None):
    arguments = {"description": "do it", "prompt": "Run the command."}
    if task_id:
        arguments["task_id"] = task_id
    server.enqueue(
        Reply(tool_calls=({"name": "task", "arguments": arguments},)),
        Reply(tool_calls=(child_call,)),
        Reply(text="child done"),
        Reply(text="parent done"),
    )


def _child_tools(store, parent_id):
    (task,) = [p for p in tools_of(store, parent_id) if p.tool == "task"]
    child_id = task.state.metadata["sessionId"]
    return child_id, tools_of(store, child_id)


def test_a_cell_deny_binds_the_subagent(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    magics.subagents = True
    _task(server, {"name": "bash", "arguments": {"command": "touch X"}})
    run(ip, "delegate", '-p "bash=deny"')
    assert not (proj / "X").exists()
    _, (child_bash,) = _child_tools(store, magics.session.info.id)
    assert child_bash.state.status == "error"
    # bash is not even offered to the child
    child_request = server.requests[1]
    assert "bash" not in [t["function"]["name"] for t in child_request.get("tools", ())]


def test_a_session_deny_binds_the_subagent(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    magics.subagents = True
    ip.run_line_magic("agent", 'permit bash "touch *" deny')
    _task(server, {"name": "bash", "arguments": {"command": "touch X"}})
    run(ip, "delegate")
    assert not (proj / "X").exists()
    _, (child_bash,) = _child_tools(store, magics.session.info.id)
    assert outcome(child_bash) == "denied"


def test_a_parent_ask_binds_the_subagent(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    magics.subagents = True
    _task(server, {"name": "python", "arguments": {"code": "open('X', 'w').close()"}})
    run(ip, "delegate", '-p "python=ask"')
    assert not (proj / "X").exists()
    _, (child_python,) = _child_tools(store, magics.session.info.id)
    assert outcome(child_python) == "unavailable"


def test_a_child_rule_cannot_widen_the_parent(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    magics.subagents = True
    _task(server, {"name": "bash", "arguments": {"command": "echo first > first.txt"}})
    run(ip, "delegate")
    parent_id = magics.session.info.id
    child_id, (first,) = _child_tools(store, parent_id)
    assert outcome(first) == "completed"
    # the user gives the child session its own allow; the parent continues the task under a deny
    ip.run_line_magic("agent", f"use {child_id}")
    ip.run_line_magic("agent", "permit bash allow")
    ip.run_line_magic("agent", f"use {parent_id}")
    assert store.session(child_id).permission[-1]["action"] == "allow"
    _task(server, {"name": "bash", "arguments": {"command": "touch X"}}, task_id=child_id)
    run(ip, "continue the task", '-p "bash:touch *=deny"')
    assert not (proj / "X").exists()
    second = tools_of(store, child_id)[-1]
    assert outcome(second) == "denied"
    assert "session that started this subagent" in second.state.error


def test_the_subagent_inherits_what_the_parent_allows(ip, server, store, magics, proj):
    magics.permission = {}  # the defaults: python and bash ask
    magics.subagents = True
    ip.run_line_magic("agent", "permit python allow")  # a session rule of the parent
    ip.run_line_magic("agent", "permit task allow")
    session = magics.current()
    session.approver = ScriptedApprover(["a"])  # "always" for the parent's first bash call only
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo a > a.txt"}},)),
        Reply(tool_calls=({"name": "task", "arguments": {"description": "it", "prompt": "go"}},)),
        Reply(
            tool_calls=(
                {"name": "python", "arguments": {"code": "open('p.txt', 'w').close()"}},
                {"name": "bash", "arguments": {"command": "echo b > b.txt"}},
                {"name": "bash", "arguments": {"command": "echo c > c.txt"}},
            )
        ),
        Reply(text="child done"),
        Reply(text="parent done"),
    )
    run(ip, "delegate", '-p "bash:echo c *=allow"')
    (task,) = [p for p in tools_of(store, session.info.id) if p.tool == "task"]
    assert task.state.status == "completed", task.state
    assert (proj / "a.txt").exists() and (proj / "p.txt").exists()
    assert (proj / "b.txt").exists() and (proj / "c.txt").exists()
    assert len(session.approver.asked) == 1  # the child asked nothing: session, answer, cell rule
    _, child_parts = _child_tools(store, session.info.id)
    assert [outcome(p) for p in child_parts] == ["completed"] * 3


# --------------------------------------------------------------------------
# the approval prompt shows what runs


def test_the_prompt_shows_the_whole_code_with_control_characters_visible(
    ip, server, store, magics, proj
):
    magics.permission = {}
    session = magics.current()
    session.approver = ScriptedApprover(["r"])
    code = "import os\nprint('hi')\x1b[1A\x1b[2K\nos.system('touch X')  # \u202e hidden"
    call(server, "python", code=code)
    run(ip, "run it")
    assert not (proj / "X").exists()
    (shown,) = session.approver.shown
    assert "os.system('touch X')" in shown and "(+" not in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "⟨U+001B⟩[1A⟨U+001B⟩[2K" in shown and "⟨U+202E⟩" in shown
    (line,) = session.approver.prompts
    assert "\n" not in line and line in shown and shown.index(line) > shown.index("touch X")
    assert outcome(tools_of(store, session.info.id)[0]) == "rejected"


def test_stdin_prompt_prints_the_full_code_before_the_question(capsys):
    lines = "\n".join(f"x{i} = {i}" for i in range(40)) + "\nimport shutil; shutil.rmtree('/')"
    request = P.Request(
        "per_1",
        "ses_1",
        "python",
        (lines,),
        ("*",),
        {"tool": "python", "summary": lines, "code": lines},
    )
    asked = []
    StdinApprover(read=lambda prompt: asked.append(prompt) or "r")(request)
    printed = capsys.readouterr().out
    assert lines in printed and "\n" not in asked[0] and "41-line" in asked[0]
    short = P.Request(
        "per_2",
        "ses_1",
        "bash",
        ("ls",),
        ("ls *",),
        {"tool": "bash", "summary": "ls", "command": "ls"},
    )
    assert prompt_text(short) == prompt_line(short) and "bash: ls" in prompt_line(short)


# --------------------------------------------------------------------------
# the last step runs no tool


def test_the_last_step_offers_no_tools_and_runs_none(ip, server, store, magics, proj):
    magics.permission = {"*": "allow"}
    magics.max_steps = 2
    touch = {"name": "bash", "arguments": {"command": "touch X"}}
    first = {"name": "bash", "arguments": {"command": "echo 1 > one.txt"}}
    server.enqueue(Reply(tool_calls=(first,)), Reply(tool_calls=(touch,)), Reply(text="never"))
    run(ip, "loop")
    assert (proj / "one.txt").exists() and not (proj / "X").exists()
    assert "tools" in server.requests[0] and "tools" not in server.requests[1]
    done, refused = tools_of(store, magics.session.info.id)
    assert outcome(done) == "completed"
    assert refused.state.status == "error" and "max steps reached" in refused.state.error
    assert len(server.requests) == 2


# --------------------------------------------------------------------------
# the checker against bash itself: whatever it allows never runs a hidden command

TOKENS = [
    " ",
    " ",
    "'",
    '"',
    "\\",
    "$",
    "(",
    ")",
    "`",
    ";",
    "&",
    "|",
    "\n",
    "#",
    "{",
    "}",
    "a",
    "=",
    "<",
    ">",
    "$'",
    "\\\n",
    "*",
    "~",
    "[",
    "]",
    "$(",
    "${",
    "<<",
    "x=",
    "\\'",
    '\\"',
    "\t",
    "((",
    "))",
    "<(",
    "&&",
    "||",
    "%",
    ":",
    ",",
    "-",
    "env ",
    "command ",
    "touch X",
    " case ",
    " in ",
    " esac",
    ";;",
    " if ",
    " then ",
    " fi",
    " do ",
    " done",
    "f() ",
    "{ ",
    "<<EOF\n",
    "\nEOF\n",
    "<<<",
    "&>",
    "2>&1",
    "xargs ",
    " -exec ",
]


def _decision(command, config, directory):
    rules = [*P.defaults(), *P.from_config(config)]
    try:
        for ask in P.tool_asks("bash", {"command": command}, directory):
            if P.Broker().ask("s", ask.permission, ask.patterns, ruleset=rules, unsure=ask.unsure):
                return "ask"
    except P.DeniedError:
        return "deny"
    return "allow"


def test_random_lines_the_checker_allows_never_run_a_hidden_command(tmp_path):
    rng = random.Random(12)
    configs = [{"bash": {"echo *": "allow"}}, {"bash": {"*": "allow", "touch *": "deny"}}]
    allowed = 0
    for n in range(300):
        line = "echo " + "".join(rng.choice(TOKENS) for _ in range(rng.randint(2, 8)))
        line += rng.choice([" touch X", ";touch X", "$(touch X)", "`touch X`", "\ntouch X"])
        work = tmp_path / f"w{n}"
        work.mkdir()
        for config in configs:
            if _decision(line, config, str(work)) != "allow":
                continue
            allowed += 1
            try:
                subprocess.run(
                    ["bash", "-c", line],
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=5,
                    env={"PATH": os.environ["PATH"], "HOME": str(work)},
                )
            except subprocess.TimeoutExpired:
                pass
            assert not (work / "X").exists(), f"{config} allowed {line!r}, and bash ran touch X"
    assert allowed > 20  # the property was tested on lines that do run
