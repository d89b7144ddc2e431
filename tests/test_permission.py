"""Permission rules (OpenCode's ``permission/next.test.ts`` cases), what our tools ask,
the gate the processor calls (doom loop, replies), and the notebook flow end to end."""

from __future__ import annotations

import os

import pytest

from jupyter_session_agent.core import permission as P
from jupyter_session_agent.core.errors import ConfigError, UsageError
from jupyter_session_agent.core.permission import (
    ApprovalUnavailable,
    Broker,
    CorrectedError,
    DeniedError,
    Gate,
    RejectedError,
    Rule,
    disabled,
    evaluate,
    from_config,
    merge,
)
from jupyter_session_agent.session.approval import (
    ScriptedApprover,
    StdinApprover,
    parse_answer,
    prompt_line,
)
from jupyter_session_agent.testing.scripted_server import Reply

HOME = os.path.expanduser("~")


def R(permission, pattern, action):
    return Rule(permission, pattern, action)


# -- fromConfig ---------------------------------------------------------------


def test_from_config_string_and_object_values_keep_key_order():
    assert from_config({"bash": "allow"}) == (R("bash", "*", "allow"),)
    assert from_config(
        {"bash": {"*": "allow", "rm": "deny"}, "edit": "allow", "webfetch": "ask"}
    ) == (
        R("bash", "*", "allow"),
        R("bash", "rm", "deny"),
        R("edit", "*", "allow"),
        R("webfetch", "*", "ask"),
    )
    assert from_config({}) == ()
    assert [
        r.permission
        for r in from_config({"bash": "allow", "*": "ask", "edit": "deny", "mcp_*": "allow"})
    ] == ["bash", "*", "edit", "mcp_*"]
    assert from_config("allow") == (R("*", "*", "allow"),)


def test_from_config_expands_home_only_at_the_start():
    assert (
        from_config({"external_directory": {"~/projects/*": "allow"}})[0].pattern
        == f"{HOME}/projects/*"
    )
    assert (
        from_config({"external_directory": {"$HOME/projects/*": "allow"}})[0].pattern
        == f"{HOME}/projects/*"
    )
    assert from_config({"external_directory": {"$HOME": "allow"}})[0].pattern == HOME
    assert from_config({"external_directory": {"~": "allow"}})[0].pattern == HOME
    assert (
        from_config({"external_directory": {"/some/~/path": "allow"}})[0].pattern == "/some/~/path"
    )
    ruleset = from_config({"external_directory": {"~/projects/*": "allow"}})
    assert evaluate("external_directory", f"{HOME}/projects/file.txt", ruleset).action == "allow"


def test_from_config_order_decides_precedence():
    wildcard_first = from_config({"*": "deny", "bash": "allow"})
    specific_first = from_config({"bash": "allow", "*": "deny"})
    assert evaluate("bash", "ls", wildcard_first).action == "allow"
    assert evaluate("bash", "ls", specific_first).action == "deny"
    ruleset = from_config({"bash": {"*": "deny", "git *": "allow"}})
    assert evaluate("bash", "rm foo", ruleset).action == "deny"
    assert evaluate("bash", "git status", ruleset).action == "allow"
    ruleset = from_config({"*": "ask", "bash": "allow", "edit": "deny"})
    assert [
        evaluate(p, x, ruleset).action
        for p, x in [("bash", "ls"), ("edit", "foo.ts"), ("read", "foo.ts")]
    ] == ["allow", "deny", "ask"]


def test_from_config_errors_are_one_line_config_errors():
    for bad in ({"bash": "yes"}, {"bash": {"*": "sure"}}, {"bash": 3}, ["bash"], {"grep": "deny"}):
        with pytest.raises(ConfigError) as info:
            from_config(bad)
        assert "\n" not in str(info.value)
    assert from_config({"write": "allow"}) == (R("edit", "*", "allow"),)  # write follows edit


# -- merge --------------------------------------------------------------------


def test_merge_is_concatenation_in_order():
    a, b = [R("bash", "*", "allow")], [R("bash", "*", "deny")]
    assert merge(a, b) == [R("bash", "*", "allow"), R("bash", "*", "deny")]
    assert merge([R("bash", "foo", "ask")], [R("bash", "*", "deny")]) == [
        R("bash", "foo", "ask"),
        R("bash", "*", "deny"),
    ]
    assert merge(a, [R("bash", "rm", "ask")], [R("edit", "*", "allow")]) == [
        R("bash", "*", "allow"),
        R("bash", "rm", "ask"),
        R("edit", "*", "allow"),
    ]
    assert merge(a, []) == a
    assert merge([{"permission": "edit", "pattern": "src/*", "action": "allow"}]) == [
        R("edit", "src/*", "allow")
    ]
    merged = merge([R("*", "*", "ask")], [R("bash", "*", "allow")])
    assert (
        evaluate("bash", "ls", merged).action == "allow"
        and evaluate("edit", "foo.ts", merged).action == "ask"
    )
    assert (
        evaluate("bash", "ls", merge([R("bash", "*", "allow")], [R("bash", "*", "ask")])).action
        == "ask"
    )


# -- evaluate -----------------------------------------------------------------


@pytest.mark.parametrize(
    "permission,pattern,rules,expected",
    [
        ("bash", "rm", [R("bash", "rm", "deny")], "deny"),
        ("bash", "rm", [R("bash", "*", "allow")], "allow"),
        ("bash", "rm", [R("bash", "*", "allow"), R("bash", "rm", "deny")], "deny"),
        ("bash", "rm", [R("bash", "rm", "deny"), R("bash", "*", "allow")], "allow"),
        ("edit", "src/foo.ts", [R("edit", "src/*", "allow")], "allow"),
        (
            "edit",
            "src/components/Button.tsx",
            [R("edit", "src/*", "deny"), R("edit", "src/components/*", "allow")],
            "allow",
        ),
        (
            "edit",
            "src/components/Button.tsx",
            [R("edit", "src/components/*", "allow"), R("edit", "src/*", "deny")],
            "deny",
        ),
        ("unknown_tool", "anything", [R("bash", "*", "allow")], "ask"),
        ("bash", "rm", [], "ask"),
        ("edit", "etc/passwd", [R("edit", "src/*", "allow")], "ask"),
        (
            "edit",
            "src/secret.ts",
            [
                R("edit", "*", "ask"),
                R("edit", "src/*", "allow"),
                R("edit", "src/secret.ts", "deny"),
            ],
            "deny",
        ),
        (
            "edit",
            "src/foo.ts",
            [R("edit", "*", "ask"), R("edit", "test/*", "deny"), R("edit", "src/*", "allow")],
            "allow",
        ),
        ("bash", "/bin/rm", [R("bash", "*", "allow"), R("bash", "/bin/rm", "deny")], "deny"),
        ("bash", "/bin/rm", [R("bash", "/bin/rm", "deny"), R("bash", "*", "allow")], "allow"),
        # wildcard permissions
        ("bash", "rm", [R("*", "*", "deny")], "deny"),
        ("bash", "rm", [R("*", "rm", "deny")], "deny"),
        ("mcp_server_tool", "anything", [R("mcp_*", "*", "allow")], "allow"),
        ("bash", "rm", [R("*", "*", "deny"), R("bash", "*", "allow")], "allow"),
        ("edit", "src/foo.ts", [R("*", "*", "deny"), R("edit", "src/*", "allow")], "allow"),
        (
            "mcp_dangerous",
            "anything",
            [R("*", "*", "ask"), R("mcp_*", "*", "allow"), R("mcp_dangerous", "*", "deny")],
            "deny",
        ),
        ("unknown_tool", "anything", [R("*", "*", "ask"), R("bash", "*", "allow")], "ask"),
        ("bash", "rm", [R("bash", "*", "allow"), R("*", "*", "deny")], "deny"),
    ],
)
def test_evaluate_last_matching_rule_wins(permission, pattern, rules, expected):
    assert evaluate(permission, pattern, rules).action == expected


def test_evaluate_merges_rulesets_and_accepts_dicts():
    assert (
        evaluate("bash", "rm", [R("bash", "*", "allow")], [R("bash", "rm", "deny")]).action
        == "deny"
    )
    assert (
        evaluate("bash", "ls", [{"permission": "bash", "pattern": "*", "action": "allow"}]).action
        == "allow"
    )


@pytest.mark.parametrize(
    "text,pattern,expected",
    [
        ("ls", "ls *", True),  # a trailing " *" is optional
        ("ls -la", "ls *", True),
        ("lsof", "ls *", False),
        ("src/a/b.py", "*.py", True),  # * crosses /
        ("a.py", "?.py", True),
        ("ab.py", "?.py", False),
        ("print(1)\nprint(2)", "print*", True),  # dot matches newline
        ("C:\\work\\a.py", "C:/work/*", True),  # backslashes are /
        ("x.txt", "*.py", False),  # anchored
        ("a+b (c)", "a+b (c)", True),  # regex characters are literal
        ("/p/.env", "*.env", True),
        ("/p/.env.local", "*.env.*", True),
    ],
)
def test_wildcard_match(text, pattern, expected):
    assert P.match(text, pattern) is expected


# -- disabled -----------------------------------------------------------------


def test_disabled_hides_only_on_a_last_match_star_deny():
    assert disabled(["bash", "edit", "read"], [R("*", "*", "allow")]) == set()
    assert disabled(["bash", "edit", "read"], [R("*", "*", "allow"), R("bash", "*", "deny")]) == {
        "bash"
    }
    assert disabled(["bash"], [R("bash", "*", "allow"), R("bash", "rm *", "deny")]) == set()
    assert disabled(["bash", "edit"], [R("*", "*", "ask")]) == set()
    assert disabled(["bash"], [R("bash", "*", "deny"), R("bash", "echo *", "allow")]) == set()
    assert disabled(["bash"], [R("bash", "rm *", "deny"), R("bash", "*", "allow")]) == set()
    assert disabled(
        ["bash", "edit", "webfetch"],
        [R("bash", "*", "deny"), R("edit", "*", "deny"), R("webfetch", "*", "deny")],
    ) == {"bash", "edit", "webfetch"}
    assert disabled(["bash", "edit", "read"], [R("*", "*", "deny")]) == {"bash", "edit", "read"}
    assert disabled(["bash", "edit", "read"], [R("*", "*", "deny"), R("bash", "*", "allow")]) == {
        "edit",
        "read",
    }


def test_disabled_edit_family_follows_edit_and_search_tools_follow_read():
    rules = [R("*", "*", "allow"), R("edit", "*", "deny")]
    assert disabled(["edit", "write", "patch", "multiedit", "apply_patch", "bash"], rules) == {
        "edit",
        "write",
        "patch",
        "multiedit",
        "apply_patch",
    }
    assert disabled(["read", "list", "glob", "grep"], [R("read", "*", "deny")]) == {
        "read",
        "list",
        "glob",
        "grep",
    }
    assert (
        disabled(["edit", "write"], [R("edit", "*", "deny"), R("edit", "*.py", "allow")]) == set()
    )


# -- ask / reply (Broker) -----------------------------------------------------


def test_ask_allow_resolves_deny_throws_ask_stays_pending():
    broker = Broker()
    assert broker.ask("s", "bash", ["ls"], ruleset=[R("bash", "*", "allow")]) is None
    with pytest.raises(DeniedError) as info:
        broker.ask("s", "bash", ["rm -rf /"], ruleset=[R("bash", "*", "deny")])
    assert "bash" in str(info.value) and "'*' → deny" in str(info.value)
    request = broker.ask(
        "s",
        "bash",
        ["ls"],
        metadata={"cmd": "ls"},
        always=["ls"],
        call_id="call_1",
        ruleset=[R("bash", "*", "ask")],
    )
    assert request is not None and broker.list() == [request]
    assert (request.permission, request.patterns, request.always, request.call_id) == (
        "bash",
        ("ls",),
        ("ls",),
        "call_1",
    )


def test_one_denied_pattern_out_of_several_throws():
    broker = Broker()
    rules = [R("bash", "*", "allow"), R("bash", "rm *", "deny")]
    with pytest.raises(DeniedError) as info:
        broker.ask("s", "bash", ["echo hi", "rm -rf x", "ls"], ruleset=rules)
    assert info.value.pattern == "rm -rf x"
    assert broker.list() == []


def test_reply_once_resolves():
    broker = Broker()
    request = broker.ask("s", "bash", ["ls"], id="per_1")
    assert broker.reply(request.id, "once") == {"per_1": None}
    assert broker.list() == []
    assert broker.ask("s", "bash", ["ls"]) is not None  # once is not remembered


def test_reply_reject_throws_and_rejects_every_other_pending_request_of_the_session():
    broker = Broker()
    a = broker.ask("same", "bash", ["ls"], id="per_a")
    b = broker.ask("same", "edit", ["foo.ts"], id="per_b")
    other = broker.ask("other", "bash", ["ls"], id="per_c")
    outcome = broker.reply(a.id, "reject")
    assert set(outcome) == {"per_a", "per_b"}
    assert all(type(e) is RejectedError for e in outcome.values())
    assert broker.list() == [other]


def test_reply_reject_with_message_is_a_correction():
    broker = Broker()
    request = broker.ask("s", "bash", ["ls"])
    error = broker.reply(request.id, "reject", "Use a safer command")[request.id]
    assert isinstance(error, CorrectedError) and "Use a safer command" in str(error)


def test_reply_always_approves_and_resolves_matching_pending_requests_of_the_session():
    broker = Broker()
    a = broker.ask("same", "bash", ["ls"], always=["ls"], id="per_a")
    b = broker.ask("same", "bash", ["ls"], id="per_b")
    c = broker.ask("same", "bash", ["rm x"], id="per_c")
    elsewhere = broker.ask("other", "bash", ["ls"], id="per_d")
    assert broker.reply(a.id, "always") == {"per_a": None, "per_b": None}
    assert broker.list() == [c, elsewhere]
    assert broker.ask("same", "bash", ["ls"]) is None  # remembered for the session
    assert broker.ask("other", "bash", ["ls"]) is not None  # only for that session
    assert broker.approved["same"] == [R("bash", "ls", "allow")]


def test_reply_to_an_unknown_request_is_a_usage_error():
    with pytest.raises(UsageError):
        Broker().reply("per_nope", "once")


# -- what our tools ask ---------------------------------------------------------


def asks(tool, args, directory="/home/u/proj"):
    return [(a.permission, a.patterns, a.always) for a in P.tool_asks(tool, args, directory)]


def test_tool_asks_table():
    assert asks("write", {"filePath": "src/a.py"}) == [("edit", ("src/a.py",), ("*",))]
    assert asks("edit", {"filePath": "/home/u/proj/b.py"}) == [("edit", ("b.py",), ("*",))]
    assert asks("read", {"filePath": ".env"}) == [
        ("read", ("/home/u/proj/.env",), ("/home/u/proj/.env",))
    ]
    assert asks("grep", {"pattern": "x"}) == [("read", ("/home/u/proj",), ("/home/u/proj",))]
    assert asks("python", {"code": "x = 1\nx"}) == [("python", ("x = 1\nx",), ("*",))]
    assert asks("bash", {"command": "git checkout main"}) == [
        ("bash", ("git checkout main",), ("git checkout *",))
    ]
    assert asks("bash", {"command": "npm run dev -- --port 3"})[0][2] == ("npm run dev *",)
    assert asks("bash", {"command": "pip install pandas"})[0][2] == ("pip install *",)
    assert asks("bash", {"command": "python -m pytest -q"})[0][2] == ("python -m pytest *",)
    assert asks("bash", {"command": "ls -la"})[0][2] == ("ls *",)


def test_bash_splits_commands_so_an_allowed_prefix_cannot_smuggle_another():
    # the output of $(whoami) could name any path: it asks external_directory (unsure) first
    (external, _, _), (_, patterns, always) = asks(
        "bash", {"command": "echo hi && rm -rf build; echo $(whoami) | tee log"}
    )
    assert external == "external_directory"
    assert patterns == ("echo hi", "rm -rf build", "echo $(whoami)", "tee log", "whoami")
    assert always == ("echo *", "rm *", "tee *", "whoami *")
    rules = [R("bash", "*", "deny"), R("bash", "echo *", "allow")]
    with pytest.raises(DeniedError):
        Broker().ask("s", "bash", patterns, ruleset=rules)
    assert P.split_commands("git commit -m 'a && b' 2>&1 # note") == ["git commit -m 'a && b' 2>&1"]


def test_paths_outside_the_session_directory_ask_external_directory_first():
    assert asks("read", {"filePath": "/etc/passwd"}) == [
        ("external_directory", ("/etc/*",), ("/etc/*",)),
        ("read", ("/etc/passwd",), ("/etc/passwd",)),
    ]
    assert asks("write", {"filePath": "../other/x.py"}) == [
        ("external_directory", ("/home/u/other/*",), ("/home/u/other/*",)),
        ("edit", ("../other/x.py",), ("*",)),
    ]
    assert asks("list", {"path": "/tmp/data"})[0] == (
        "external_directory",
        ("/tmp/data/*",),
        ("/tmp/data/*",),
    )
    assert asks("glob", {"pattern": "/usr/lib/*.so"})[0] == (
        "external_directory",
        ("/usr/lib/*",),
        ("/usr/lib/*",),
    )
    assert asks("bash", {"command": "cat /etc/hosts.txt > out.txt 2>/dev/null"})[0] == (
        "external_directory",
        ("/etc/*",),
        ("/etc/*",),
    )
    assert (
        asks("bash", {"command": "ls src && cat notes.txt"})[0][0] == "bash"
    )  # inside: no extra question


def test_defaults_suit_a_notebook(tmp_path):
    data_dir = str(tmp_path / "data")
    rules = P.defaults(data_dir=data_dir)

    def action(tool, args, directory="/home/u/proj"):
        return [
            (a.permission, evaluate(a.permission, a.patterns[0], rules).action)
            for a in P.tool_asks(tool, args, directory)
        ]

    assert action("read", {"filePath": "notes.txt"}) == [("read", "allow")]
    assert action("read", {"filePath": ".env"}) == [("read", "ask")]
    assert action("read", {"filePath": "config/.env.local"}) == [("read", "ask")]
    assert action("read", {"filePath": ".env.example"}) == [("read", "allow")]
    assert action("glob", {"pattern": "*.py"}) == [("read", "allow")]
    for tool, args in [
        ("python", {"code": "1"}),
        ("bash", {"command": "ls"}),
        ("write", {"filePath": "a.txt"}),
        ("edit", {"filePath": "a.txt"}),
    ]:
        assert action(tool, args)[-1][1] == "ask"
    assert action("read", {"filePath": "/etc/passwd"})[0] == ("external_directory", "ask")
    assert action("read", {"filePath": f"{data_dir}/tool-output/tool_1"}) == [
        ("external_directory", "allow"),
        ("read", "allow"),
    ]
    assert evaluate("doom_loop", "bash", rules).action == "ask"
    assert (
        disabled(["python", "bash", "read", "write", "edit", "list", "glob", "grep"], rules)
        == set()
    )


def test_parse_cell_rules():
    assert P.parse_rule("bash=allow") == R("bash", "*", "allow")
    assert P.parse_rule('"edit:*.py=allow"') == R("edit", "*.py", "allow")
    assert P.parse_rule("bash:git *=ask") == R("bash", "git *", "ask")
    assert P.parse_rule("write=deny") == R("edit", "*", "deny")
    for bad in ("bash", "bash=maybe", "=allow", "glob=deny"):
        with pytest.raises(UsageError):
            P.parse_rule(bad)


# -- the gate: replies, doom loop -------------------------------------------------


class Call:
    def __init__(self, call_id="call_1"):
        self.call_id = call_id


def gate(rules, answers, persisted=None):
    approver = ScriptedApprover(answers)
    g = Gate(
        session_id="ses_1",
        directory="/home/u/proj",
        ruleset=lambda: rules,
        approver=approver,
        on_always=(persisted.extend if persisted is not None else None),
    )
    return g, approver


def test_gate_once_always_reject_feedback():
    persisted: list = []
    g, approver = gate(
        [R("*", "*", "ask"), R("read", "*", "allow")],
        ["o", "a", "please use ls -la instead", "r"],
        persisted,
    )
    g("bash", {"command": "ls"}, Call())  # once
    g("bash", {"command": "git status"}, Call())  # always → "git status *"
    assert persisted == [R("bash", "git status *", "allow")]
    g("bash", {"command": "git status --short"}, Call())  # approved: not asked
    assert len(approver.asked) == 2
    with pytest.raises(CorrectedError, match="please use ls -la instead"):
        g("bash", {"command": "ls -l"}, Call())
    assert g.stopped is None  # feedback: the turn goes on
    with pytest.raises(RejectedError) as info:
        g("python", {"code": "import shutil"}, Call())
    assert type(info.value) is RejectedError and str(info.value) == "rejected by the user"
    assert info.value.metadata == {
        "permission": {
            "outcome": "rejected",
            "permission": "python",
            "patterns": ["import shutil"],
        },
        "approval": {"permission": "python", "reply": "reject"},  # what the user decided
    }
    # after a plain reject, later questions of the turn are rejected without asking
    with pytest.raises(RejectedError):
        g("bash", {"command": "echo later"}, Call())
    assert len(approver.asked) == 4
    g("read", {"filePath": "notes.txt"}, Call())  # allowed calls still run


def test_gate_denies_without_asking_and_names_the_rule():
    g, approver = gate([R("*", "*", "allow"), R("bash", "rm *", "deny")], [])
    with pytest.raises(DeniedError, match=r"rm \*"):
        g("bash", {"command": "rm -rf build"}, Call())
    assert approver.asked == []


def test_gate_without_anyone_to_ask_is_a_clear_denial():
    g, _ = gate([R("*", "*", "ask")], [])
    with pytest.raises(ApprovalUnavailable) as info:
        g("bash", {"command": "ls"}, Call())
    message = str(info.value)
    assert (
        "\n" not in message
        and "%agent permit bash allow" in message
        and "AgentMagics.permission" in message
    )
    assert g.stopped is info.value


def test_doom_loop_asks_before_the_third_identical_call():
    g, approver = gate([R("*", "*", "allow"), R("doom_loop", "*", "ask")], ["r"])
    g("bash", {"command": "echo again"}, Call())
    g("bash", {"command": "echo again"}, Call())
    g("bash", {"command": "echo other"}, Call())  # breaks the run
    g("bash", {"command": "echo again"}, Call())
    g("bash", {"command": "echo again"}, Call())
    assert approver.asked == []
    with pytest.raises(RejectedError):
        g("bash", {"command": "echo again"}, Call())
    (request,) = approver.asked
    assert request.permission == "doom_loop" and request.patterns == ("bash",)
    assert request.metadata["input"] == {"command": "echo again"}
    assert "3 times" in prompt_line(request)


def test_doom_loop_inputs_compare_as_json_and_always_allows_the_tool():
    g, approver = gate([R("*", "*", "allow"), R("doom_loop", "*", "ask")], ["a"])
    for args in ({"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2}):
        g("python", args, Call())
    assert len(approver.asked) == 1  # the 3rd asks; "always" covers the 4th


def test_answers_and_prompt_line():
    assert parse_answer("o") == ("once", None) and parse_answer(" Once ") == ("once", None)
    assert parse_answer("a") == ("always", None) and parse_answer("always") == ("always", None)
    assert parse_answer("") == ("reject", None) and parse_answer("r") == ("reject", None)
    assert parse_answer("no, use pandas") == ("reject", "no, use pandas")
    request = P.Request(
        "per_1",
        "ses_1",
        "bash",
        ("git checkout main",),
        ("git checkout *",),
        {"tool": "bash", "summary": "git checkout main"},
    )
    line = prompt_line(request)
    assert "\n" not in line and "bash: git checkout main" in line
    assert (
        "[o]nce" in line and "[a]lways" in line and "[r]eject" in line and "git checkout *" in line
    )


def test_stdin_approver_without_a_tty_denies_instead_of_blocking():
    request = P.Request("per_1", "ses_1", "bash", ("ls",), ("ls *",), {"tool": "bash"})
    with pytest.raises(ApprovalUnavailable):
        StdinApprover(shell=None)(request)  # pytest's stdin is no tty

    def eof(prompt):
        raise EOFError

    with pytest.raises(ApprovalUnavailable):
        StdinApprover(read=eof)(request)
    assert StdinApprover(read=lambda prompt: "a")(request) == ("always", None)


# -- end to end through the shell ---------------------------------------------------


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def steps(server):
    """The agent's LLM calls (a background title call carries no tools)."""
    return [r for r in server.requests if "tools" in r]


def tools_of(store, session_id):
    return [p for m in store.messages(session_id) for p in m.parts if p.type == "tool"]


def test_a_denied_bash_call_never_runs(ip, server, store, magics, tmp_path):
    magics.permission = {"bash": {"*": "allow", "touch *": "deny"}}
    marker = tmp_path / "marker.txt"
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": f"touch {marker}"}},)),
        Reply(text="could not"),
    )
    run(ip, "make a marker")
    assert not marker.exists()
    (tool,) = tools_of(store, magics.session.info.id)
    assert (
        tool.state.status == "error"
        and "permission denied" in tool.state.error
        and "touch *" in tool.state.error
    )
    assert tool.state.metadata["permission"]["outcome"] == "denied"
    # a denial is the model's tool error; the turn went on
    assert steps(server)[1]["messages"][-1]["content"] == tool.state.error
    assert store.messages(magics.session.info.id)[-1].info.finish == "stop"


def test_without_stdin_an_ask_is_a_clear_denial_and_the_turn_stops(
    ip, server, store, magics, tmp_path
):
    magics.permission = {}  # the defaults: bash asks; this shell has no stdin
    marker = tmp_path / "marker.txt"
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": f"touch {marker}"}},)),
        Reply(text="never requested"),
    )
    run(ip, "make a marker")
    assert not marker.exists()
    (tool,) = tools_of(store, magics.session.info.id)
    assert "%agent permit bash allow" in tool.state.error and "\n" not in tool.state.error
    assert tool.state.metadata["permission"]["outcome"] == "unavailable"
    assert len(steps(server)) == 1  # blocked: no further LLM call
    assert store.messages(magics.session.info.id)[-1].info.finish == "tool-calls"


def test_a_star_deny_hides_the_tool_from_the_model(ip, server, magics):
    magics.permission = {"*": "allow", "bash": "deny"}
    server.enqueue(Reply(text="ok"), Reply(text="ok"))
    run(ip, "hi")
    offered = [t["function"]["name"] for t in steps(server)[-1]["tools"]]
    assert "bash" not in offered and "python" in offered
    run(ip, "hi", '-p "bash:git *=allow"')  # a later specific allow shows it again
    assert "bash" in [t["function"]["name"] for t in steps(server)[-1]["tools"]]


def test_session_rules_persist_and_cell_rules_last_one_cell(ip, server, store, magics, tmp_path):
    from jupyter_session_agent.session.agent_session import AgentSession

    magics.permission = {}
    ip.run_line_magic("agent", "permit python allow")
    session_id = magics.session.info.id
    assert store.session(session_id).permission == (
        {"permission": "python", "pattern": "*", "action": "allow"},
    )
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": "permitted = 1"}},)),
        Reply(text="done"),
    )
    run(ip, "set it")
    assert ip.user_ns.pop("permitted") == 1
    # a reloaded session keeps its rules
    reopened = AgentSession.open(session_id, magics.settings(), store=store)
    assert P.from_data(reopened.info.permission) == (R("python", "*", "allow"),)
    # a cell rule applies to that cell only
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo cell > cell.txt"}},)),
        Reply(text="done"),
    )
    run(ip, "write it", '-p "bash=allow"')
    assert (tmp_path / "cell.txt").exists()
    server.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo next > next.txt"}},)),
        Reply(text="done"),
    )
    run(ip, "again")
    assert not (tmp_path / "next.txt").exists()
    listing = ip.run_line_magic("agent", "permit")
    assert "| session | `python` | `*` | allow |" in listing.text
    with pytest.raises(UsageError):
        ip.run_line_magic("agent", "permit bash maybe")
    with pytest.raises(UsageError, match="read"):
        ip.run_line_magic("agent", "permit grep deny")
    ip.run_line_magic("agent", 'permit bash "git *" allow')
    assert store.session(session_id).permission[-1] == {
        "permission": "bash",
        "pattern": "git *",
        "action": "allow",
    }
    ip.run_line_magic("agent", "permit --clear")
    assert store.session(session_id).permission is None


def test_always_is_stored_on_the_session(ip, server, store, magics):
    magics.permission = {}
    session = magics.current()
    session.approver = ScriptedApprover(["a"])
    call = {"name": "python", "arguments": {"code": "counter = 1"}}
    server.enqueue(Reply(tool_calls=(call,)), Reply(tool_calls=(call,)), Reply(text="done"))
    run(ip, "twice")
    assert len(session.approver.asked) == 1
    assert store.session(session.info.id).permission == (
        {"permission": "python", "pattern": "*", "action": "allow"},
    )
    assert [t.state.status for t in tools_of(store, session.info.id)] == ["completed", "completed"]


def test_a_broken_permission_setting_is_a_one_line_config_error(ip, server, magics):
    before = magics.permission
    with pytest.raises(ConfigError) as info:  # refused when assigned; the old value stays
        magics.permission = {"bash": "sometimes"}
    assert "\n" not in str(info.value) and "allow, ask or deny" in str(info.value)
    assert magics.permission == before


def test_doom_loop_across_steps_asks_before_the_third_call(ip, server, store, magics, tmp_path):
    ip.run_line_magic(
        "config", 'AgentMagics.permission = {"bash": "allow"}'
    )  # doom_loop still asks
    session = magics.current()
    session.approver = ScriptedApprover(["r"])
    loop = {"name": "bash", "arguments": {"command": "echo again >> loop.txt"}}
    server.enqueue(*[Reply(tool_calls=(loop,)) for _ in range(4)], Reply(text="never"))
    run(ip, "loop")
    (request,) = session.approver.asked
    assert request.permission == "doom_loop" and request.patterns == ("bash",)
    assert (tmp_path / "loop.txt").read_text() == "again\nagain\n"  # the third never ran
    statuses = [t.state.status for t in tools_of(store, session.info.id)]
    assert statuses == ["completed", "completed", "error"]
    assert len(steps(server)) == 3  # rejected: the turn stopped


def test_bad_cell_rules_are_usage_errors(ip, server, magics):
    with pytest.raises(UsageError, match="TOOL=allow"):
        run(ip, "hi", '-p "bash=perhaps"')
    assert steps(server) == []
