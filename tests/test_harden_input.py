"""Bad input through the public path (a real IPython shell, the scripted server): every
``%agent`` subcommand and the ``%%agent`` options fail with one line naming the fix, never a
traceback and never a half-done change; every setting is checked when it is assigned (the old
value stays); SQL and ``%%agent`` cell bodies reach DuckDB and the model as typed."""

from __future__ import annotations

import logging
import os

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import AgentError, ConfigError, UsageError
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.commands import load_all
from jupyter_session_agent.ui.magics import SettingError

# Argument forms a careless user (or a fuzzer) types after any subcommand.
BAD_ARGUMENTS = [
    "--bogus",
    "-z",
    "'unclosed",
    '"unclosed',
    "x\\",
    "--out",
    "--at",
    "-k",
    "--format",
    "--format pdf",
    "--session",
    "--user",
    "--part",
    "--instructions",
    "a b c d e",
    "''",
    "-",
    "--",
    "=",
    "-k 0 q",
    "-k -1 q",
    "-1",
    "99999999999999999999",
    "--at 999",
    "--at -5",
    "ses_",
    "/proc/no/such/dir",
    "\x00",
]


@pytest.fixture(autouse=True)
def _config_restored(_shell):
    """``%config`` writes into the shell's config, which outlives a test: put it back."""
    from copy import deepcopy

    config = _shell.config
    before = deepcopy(config["AgentMagics"]) if "AgentMagics" in config else None
    yield
    _shell.config.pop("AgentMagics", None)
    if before is not None:
        _shell.config["AgentMagics"] = before


def source(value):
    """``value`` as Python source for a %config line."""
    if isinstance(value, float) and value != value:
        return "float('nan')"
    if isinstance(value, float) and value in (float("inf"), -float("inf")):
        return f"float('{value}')"
    return repr(value)


def shown(ip, code):
    """Run ``code`` as a cell; (the result, what the user saw on stdout and stderr)."""
    with capture_output() as out:
        result = ip.run_cell(code)
    return result, out.stdout + out.stderr


def session_ids(store):
    return sorted(s.id for s in store.sessions())


@pytest.mark.parametrize("with_session", [False, True], ids=["no-session", "with-session"])
def test_every_subcommand_answers_bad_arguments_with_one_line(
    ip, server, store, magics, with_session
):
    if with_session:
        ip.run_cell_magic("agent", "", "hello")
    failures = []
    for name in sorted(load_all()):
        for arg in BAD_ARGUMENTS:
            line = f"{name} {arg}"
            before = session_ids(store)
            try:
                ip.run_line_magic("agent", line)
            except AgentError as err:
                if "\n" in str(err) or len(err._render_traceback_()) != 1:
                    failures.append((line, "more than one line", str(err)))
                writes = name in ("delete", "fork", "import", "import-opencode")
                if session_ids(store) != before and not writes:
                    failures.append((line, "a failed command changed the sessions", str(err)))
            except BaseException as err:  # noqa: BLE001 — exactly what must not happen
                failures.append((line, type(err).__name__, str(err)[:200]))
    assert not failures, "\n".join(map(str, failures))


@pytest.mark.parametrize(
    "line",
    [
        "sql select 'x",
        "sessions 'unclosed",
        'show "abc',
        "use x\\",
        "export --format 'md",
        "recall user's preference",
    ],
)
def test_unbalanced_quotes_show_one_line_not_a_traceback(ip, line):
    result, text = shown(ip, f"%agent {line}")
    assert isinstance(result.error_in_exec, UsageError)
    assert "Traceback" not in text and text.strip().count("\n") == 0, text
    assert text.startswith("UsageError: ")
    if not line.startswith("sql"):  # sql quotes are SQL's: DuckDB says what is wrong
        assert "quote" in text or "backslash" in text


@pytest.mark.parametrize(
    "line",
    [
        "sessions --bogus",
        "sessions extra",
        "new --bogus",
        "new extra",
        "help --bogus",
        "browse x",
        "show --bogus",
        "budget -x",
        "export-parquet --bogus",
        "export-parquet a b",
    ],
)
def test_unknown_options_and_extra_words_are_refused_before_anything_happens(
    ip, store, tmp_path, line
):
    before, files = session_ids(store), sorted(os.listdir(tmp_path))
    result, text = shown(ip, f"%agent {line}")
    assert isinstance(result.error_in_exec, UsageError), text
    assert "usage: %agent" in text and text.strip().count("\n") == 0
    assert session_ids(store) == before and sorted(os.listdir(tmp_path)) == files  # nothing made


def test_export_parquet_into_a_folder_that_cannot_be_written_is_one_line(
    ip, server, store, magics, tmp_path
):
    ip.run_cell_magic("agent", "", "hello")
    blocker = tmp_path / "a-file.txt"
    blocker.write_text("not a folder")
    targets = [
        (blocker / "sub", "a part of the path is a file"),
        ("/proc/no/such/dir", "does not exist"),
    ]
    if os.geteuid() != 0:  # root writes anywhere: the permission case needs a user
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        targets.append((locked / "out", "you may write to"))
    for target, fix in targets:
        result, text = shown(ip, f"%agent export-parquet {target}")
        assert isinstance(result.error_in_exec, UsageError), text
        assert text.strip().count("\n") == 0 and "Traceback" not in text
        cause = result.error_in_exec.__cause__
        assert isinstance(cause, OSError)  # the full exception is kept
        assert fix in text and str(cause.filename) in text
    assert blocker.read_text() == "not a folder"
    assert not list(tmp_path.glob("**/.export-*"))  # no half-written export left behind
    # the history is intact and still exports where it can
    result, text = shown(ip, f"%agent export-parquet {tmp_path / 'ok'}")
    assert result.error_in_exec is None and (tmp_path / "ok" / "views.sql").exists()


@pytest.mark.parametrize(
    "line, fix",
    [
        ("--bogus", "unrecognized arguments"),
        ("-s", "expected one argument"),
        ("-m", "expected one argument"),
        ("-p bash=sometimes", "allow|ask|deny"),
        ("-p 'bash=allow", "quote is not closed"),
        ("-o 1x", "Python variable name"),
        ("-o class", "Python variable name"),
        ("-m nonsense", "'provider/model'"),
        ("-m 'openai/ gpt'", "'provider/model'"),
        ("--fork --new", "--fork"),
    ],
)
def test_bad_agent_cell_options_are_one_line_and_nothing_runs(ip, server, store, line, fix):
    result, text = shown(ip, f"%%agent {line}\nhello")
    assert isinstance(result.error_in_exec, UsageError), text
    assert fix in text and text.strip().count("\n") == 0 and "Traceback" not in text
    assert server.requests == [] and session_ids(store) == []  # no model call, nothing stored


def test_sql_reaches_duckdb_as_typed(ip, magics):
    ip.user_ns.update(v="EXPANDED", x=1)
    frame = ip.run_line_magic("agent", "sql select '$v' as a, '{v}' as b, '{x+1}' as c, '$$' as d")
    assert frame.iloc[0].tolist() == ["$v", "{v}", "{x+1}", "$$"]
    cell = ip.run_cell_magic("agent_sql", "out <<", "select '$v' as a, '{v}' as b")
    assert cell.iloc[0].tolist() == ["$v", "{v}"]
    assert ip.user_ns["out"].iloc[0].tolist() == ["$v", "{v}"]
    # through a real cell too (IPython's transformer, then the magic)
    result, _ = shown(ip, "r = %agent sql select '{v}' || '$v' as s")
    assert result.error_in_exec is None and ip.user_ns["r"].s[0] == "{v}$v"


def test_other_subcommands_still_expand_names_also_inside_functions(ip, magics, tmp_path):
    ip.user_ns["target"] = str(tmp_path / "from-user-ns")
    result, text = shown(ip, "%agent export-parquet {target}")
    assert result.error_in_exec is None, text
    assert (tmp_path / "from-user-ns" / "views.sql").exists()
    here = str(tmp_path / "from-locals")
    code = (
        f"def export_here():\n    here = {here!r}\n    %agent export-parquet $here\nexport_here()"
    )
    result, text = shown(ip, code)
    assert result.error_in_exec is None, text
    assert (tmp_path / "from-locals" / "views.sql").exists()


def test_agent_cell_body_reaches_the_model_as_typed(ip, server, store, magics):
    ip.user_ns.update(v="EXPANDED", x=1)
    body = "Explain {v} and $v and {x+1} and $$ literally"
    server.enqueue(Reply(text="ok"), Reply(text="ok"))
    result, text = shown(ip, f"%%agent --no-interpolate\n{body}")
    assert result.error_in_exec is None, text
    assert server.requests[-1]["messages"][-1] == {"role": "user", "content": body}
    history = store.messages(magics.session.info.id)
    assert history[0].parts[0].text == body  # stored as typed
    # without the flag only {name} references are filled in (lookups, context/interpolate.py):
    # no $var, no expression is ever evaluated
    result, text = shown(ip, f"%%agent\n{body}")
    assert result.error_in_exec is None, text
    assert server.requests[-1]["messages"][-1]["content"].endswith(
        "Explain EXPANDED and $v and {x+1} and $$ literally"
    )


# --------------------------------------------------------------------------
# settings, checked when assigned

# At least one value each setting must refuse; every configurable trait needs an entry here,
# so a setting added without thinking about its allowed values fails this file.
BAD_SETTINGS = {
    "model": ["nonsense", "openai/", "/gpt", "openai/gpt 4o", 5],
    "data_dir": ["\x00", "FILE"],
    "model_overrides": [
        {"openai/x": {"context": "big"}},
        {"openai/x": {"context_window": 5}},
        {"openai/x": {"price_input": -1}},
        {"openai/x": {"compaction_threshold": 2}},
        {"openai/x": {"images": "yes"}},
        {"": {}},
        {"openai/x": 5},
    ],
    "compaction": [
        {"threshold": 5},
        {"threshold": 0},
        {"bogus": 1},
        {"auto": "yes"},
        {"prune_protect": -1},
        {"model": "no-slash"},
        {"protected_tools": "skill"},
    ],
    "max_steps": [0, -1, "x", 2.5, True],
    "max_retries": [-1, "x"],
    "max_answer_chars": [0, 999, "lots", True, 1.5],
    "sandbox": ["on", True, "bwrap", None],
    "request_timeout": [-1, 0, float("nan"), float("inf"), "x"],
    "first_byte_timeout": [0, -5, "soon"],
    "idle_timeout": [0, -1.5, None],
    "max_retry_wait": [-1, float("inf"), "1h"],
    "mcp": [
        {"time": {"type": "local"}},
        {"time": {"type": "sse", "url": "http://x"}},
        {"": {}},
        {"web": {"type": "remote", "url": "ftp://x"}},
        {"time": "python -m x"},
        ["time"],
    ],
    "mcp_opencode": ["", 5, None],
    "local_context": [0, 100, "x"],
    "local_idle_timeout": [-1, "soon", True],
    "code_actions": ["sometimes", 5, ["a\x00b"]],
    "live": ["yes please", 2],
    "interpolate": ["yes please", 2],
    "permission": [{"bash": "sometimes"}, {"bash": {"*": "maybe"}}, "always", 5, {"grep": "allow"}],
    "titles": ["yes please"],
    "title_model": ["nonsense"],
    "subagents": ["yes please"],
    "subagent_model": ["no model"],
    "snapshot": [
        {"max_files": "x"},
        {"max_files": 0},
        {"max_size": 1},
        {"enabled": "yes"},
        {"exclude": "*.py"},
    ],
    "memory": [
        {"enabled": "yes please"},
        {"top_k": 0},
        {"extractor": "magic"},
        {"scope": "world"},
        {"inject_everything": True},
        {"threshold": -1},
    ],
    "temperature": [-0.5, 3, "hot", True, float("nan")],
    "system_prompt": [5, "a\x00b", ["be brief"]],
    "rules": ["off", 2, None, ["AGENTS.md"]],
    "tools": ["python", [""], [5], {"python": True}],
    "replay": [5, "a\x00b", ["on"]],
    "view": ["sideways", 3],
    "local_detect": ["yes", 2],
    "reasoning_effort": ["extreme", 5],
    "local_model": ["weights.bin", 5],
    "replay_rerun": ["python", [""], [5]],
}
GOOD_SETTINGS = {
    "model": "ollama/qwen2.5-coder:7b",
    "request_timeout": 10,
    "max_steps": 3,
    "model_overrides": {
        "openai/gpt-4o": {"context": 128_000, "price_input": 2.5},
        "gpt-4o": {"output": 1},
    },
    "compaction": {"threshold": 0.8, "reserved": None, "model": "openai/gpt-4o-mini"},
    "snapshot": {"enabled": False, "exclude": ["*.csv"]},
    "memory": {"enabled": True, "embeddings": None},
    "permission": {"bash": {"git *": "allow"}, "edit": "ask"},
    "title_model": "",
}


def configurable(magics):
    return sorted(magics.class_trait_names(config=True))


def test_every_setting_has_refused_values_in_this_file(magics):
    assert sorted(BAD_SETTINGS) == configurable(magics)


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_a_refused_config_value_is_one_line_and_the_old_value_stays(
    ip, magics, tmp_path, caplog, name
):
    before = getattr(magics, name)
    for bad in BAD_SETTINGS[name]:
        if bad == "FILE":
            bad = str(tmp_path / "a-file")
            (tmp_path / "a-file").write_text("x")
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            result, text = shown(ip, f"%config AgentMagics.{name} = {source(bad)}")
        messages = [r.getMessage() for r in caplog.records]
        messages += [text.strip()] if text.strip() else []
        assert len(messages) == 1 and "\n" not in messages[0], (bad, messages)
        # it names the setting and what is allowed (or the fix)
        assert messages[0].startswith(name) or messages[0].startswith(f"unknown {name}"), messages
        assert any(w in messages[0] for w in ("must be", "allowed", " — ")), messages
        assert getattr(magics, name) == before, (name, bad)  # the old value stays
        # assigned from Python: the same one line, as an error the cell shows without a traceback
        with pytest.raises(SettingError) as info:
            setattr(magics, name, bad)
        assert isinstance(info.value, ConfigError) and len(info.value._render_traceback_()) == 1
        assert str(info.value) == messages[0]
        assert getattr(magics, name) == before
    # and the session the next turn builds still has the old value
    assert magics.settings() is not None


def test_values_that_are_allowed_are_kept(ip, magics):
    for name, value in GOOD_SETTINGS.items():
        ip.run_line_magic("config", f"AgentMagics.{name} = {value!r}")
        assert getattr(magics, name) == value, name
    settings = magics.settings()
    assert settings.request_timeout == 10 and settings.compaction.threshold == 0.8
    # the nested settings are typed values: the keys set, the rest their declared defaults
    assert settings.compaction.model == "openai/gpt-4o-mini" and settings.compaction.auto is True
    assert settings.snapshot.enabled is False and settings.snapshot.exclude == ("*.csv",)
    assert settings.snapshot.max_files == 20_000
    assert settings.memory.tool_on and settings.memory.embeddings is None


def test_a_refused_value_leaves_the_next_turn_on_the_old_one(ip, server, store, magics):
    ip.run_line_magic("config", "AgentMagics.request_timeout = -1")
    ip.run_line_magic("config", "AgentMagics.max_steps = 0")
    ip.run_line_magic("config", "AgentMagics.compaction = {'threshold': 5}")
    server.enqueue(Reply(text="still fine"))
    ip.run_cell_magic("agent", "", "hello")
    assert store.messages(magics.session.info.id)[-1].parts[-2].text == "still fine"
    assert magics.request_timeout == 5.0 and magics.max_steps == 25 and magics.compaction == {}


def test_the_python_api_gets_the_same_checks():
    from dataclasses import fields

    names = {f.name for f in fields(Settings)}
    for name, values in BAD_SETTINGS.items():
        for bad in values:
            if bad == "FILE" or name not in names:  # live is the magics' own
                continue
            with pytest.raises(ConfigError) as info:
                Settings(**{name: bad})
            assert "\n" not in str(info.value) and name in str(info.value)
    assert Settings(model="ollama/llama3.2", request_timeout=1, compaction={"threshold": 0.5})


def test_help_lists_every_setting(ip, magics):
    with capture_output() as out:
        ip.run_line_magic("agent", "help settings")
    for name in configurable(magics):
        assert name in out.stdout


def test_a_setting_the_schema_does_not_list_is_checked_by_its_trait_type(ip, magics, monkeypatch):
    from jupyter_session_agent.core import settings

    for name in ("request_timeout", "max_retries", "title_model", "titles"):
        monkeypatch.delitem(settings.SCHEMA, name)  # as a setting added without a schema entry
    for name, bad in (
        ("request_timeout", -1.0),
        ("request_timeout", float("inf")),
        ("max_retries", -2),
        ("title_model", "a\x00b"),
        ("titles", "yes please"),
    ):
        before = getattr(magics, name)
        with pytest.raises(SettingError) as info:
            setattr(magics, name, bad)
        assert name in str(info.value) and "must be" in str(info.value)
        assert getattr(magics, name) == before
    magics.request_timeout = 1.5
    assert magics.request_timeout == 1.5


def test_a_refused_value_does_not_break_the_next_load(ip, magics):
    """The shell keeps every %config line in its own config, refused or not (and so does
    ipython_config.py): loading the extension again warns in one line and uses the default."""
    ip.run_line_magic("config", "AgentMagics.max_steps = 7")
    ip.run_line_magic("config", "AgentMagics.compaction = {'threshold': 5}")  # refused
    assert magics.compaction == {}
    with capture_output() as out:
        ip.run_line_magic("reload_ext", "jupyter_session_agent")
    again = ip.magics_manager.registry["AgentMagics"]
    assert again is not magics and again.max_steps == 7 and again.compaction == {}
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SettingError: compaction['threshold'] must be")
    assert "the default is used" in lines[0]
    assert ip.run_line_magic("agent", "sql select 1 as one").one[0] == 1  # the extension works
    again.model, again.data_dir = magics.model, magics.data_dir
