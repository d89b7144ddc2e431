"""Typed settings in one place: every setting is a field of a frozen dataclass in
``core/settings.py`` (type, default, spec, one-line doc), and the ``%config`` traits, the
``%agent help`` list and ``docs/settings.md`` are generated from those fields. A bad value is
refused on every path (``%config``, a Python assignment, the session API) with one line that
names the setting and the fix, and the old value stays."""

from __future__ import annotations

import ast
import logging
import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core import settings as S
from jupyter_session_agent.core.errors import ConfigError
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.ui.commands import settings_markdown
from jupyter_session_agent.ui.magics import AgentMagics, SettingError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
TOP = (S.Settings, S.NotebookSettings)  # every %config AgentMagics.<name>
KEYED = {"compaction": S.CompactionSettings, "snapshot": S.SnapshotSettings}
KEYED["memory"] = S.MemorySettings
DECLARATIONS = (*TOP, *KEYED.values())


@pytest.fixture(autouse=True)
def _config_restored(_shell):
    """``%config`` writes into the shell's config, which outlives a test: put it back."""
    from copy import deepcopy

    before = deepcopy(_shell.config["AgentMagics"]) if "AgentMagics" in _shell.config else None
    yield
    _shell.config.pop("AgentMagics", None)
    if before is not None:
        _shell.config["AgentMagics"] = before


def top_fields():
    return [f for cls in TOP for f in fields(cls)]


# --------------------------------------------------------------------------
# one declaration


@pytest.mark.parametrize("cls", DECLARATIONS, ids=lambda c: c.__name__)
def test_every_field_is_declared_with_a_spec_a_doc_and_a_default_it_allows(cls):
    assert cls.__dataclass_params__.frozen
    for f in fields(cls):
        doc, spec = f.metadata.get("doc"), f.metadata.get("spec")
        assert doc and "\n" not in doc and len(doc) >= 10, f.name
        assert spec is not None and spec.allowed, f.name
        default = next(i.default for i in S.declared(cls) if i.name == f.name)
        spec.check(default, f.name)  # the default is a value the setting allows


def test_a_field_declared_without_setting_is_refused():
    @dataclass(frozen=True)
    class Loose:
        fine: int = S.setting(1, S.whole(0), "a declared setting")
        plain: int = 2

    with pytest.raises(TypeError, match="Loose.plain must be declared with setting"):
        S.declared(Loose)

    @dataclass(frozen=True)
    class Plain:
        plain: dict = field(default_factory=dict)

    with pytest.raises(TypeError):
        S.declared(Plain)
    for doc in ("", "two\nlines"):
        with pytest.raises(TypeError, match="one-line doc"):
            S.setting(1, S.whole(0), doc)


def test_the_registry_is_the_fields_in_order():
    assert [s.name for s in S.SETTINGS] == [f.name for f in top_fields()]
    assert set(S.SCHEMA) == set(S.EXAMPLES) == {f.name for f in top_fields()}
    # every error can show an example: the declared one, else a default that shows something
    for s in S.SETTINGS:
        assert S.EXAMPLES[s.name] not in (None, "") or s.keys, s.name


@pytest.mark.parametrize("name", sorted(KEYED))
def test_a_dict_settings_keys_defaults_and_checks_are_its_dataclass(name):
    cls = KEYED[name]
    value = cls()
    declared = {f.name: getattr(value, f.name) for f in fields(cls)}
    schemas = {"compaction": S.COMPACTION_SCHEMA, "snapshot": S.SNAPSHOT_SCHEMA}
    schemas["memory"] = S.MEMORY_SCHEMA
    assert dict(schemas[name].defaults) == declared
    assert list(schemas[name].fields) == list(declared)
    info = next(s for s in S.SETTINGS if s.name == name)
    assert [k.name for k in info.keys] == list(declared)
    assert all(key in info.help for key in declared)  # the help never omits a key
    # the session's value is the typed value: the declared defaults with the user's keys over them
    assert getattr(S.Settings(), name) == value and type(getattr(S.Settings(), name)) is cls
    changed = {"compaction": ("auto", False), "snapshot": ("exclude", ["*.csv"])}
    changed["memory"] = ("top_k", 9)
    key, new = changed[name]
    typed = getattr(S.Settings(**{name: {key: new}}), name)
    assert isinstance(typed, cls) and typed == cls(**{key: new})
    assert getattr(typed, key) == (tuple(new) if isinstance(new, list) else new)
    others = {k: v for k, v in declared.items() if k != key}
    assert {k: getattr(typed, k) for k in others} == others  # the rest keep their defaults
    hash(typed)  # frozen all the way down: a list is kept as a tuple
    # a typed value passes where the dict does, and a changed copy keeps it
    assert replace(S.Settings(), **{name: typed}) == S.Settings(**{name: {key: new}})
    assert getattr(replace(S.Settings(**{name: typed}), titles=False), name) is typed
    # as a value, a key is checked as the dict is
    bad = {"compaction": ("threshold", 5), "snapshot": ("max_files", 0)}
    bad["memory"] = ("top_k", 0)
    key, wrong = bad[name]
    with pytest.raises(ConfigError) as info_dict:
        S.Settings(**{name: {key: wrong}})
    with pytest.raises(ConfigError) as info_value:
        cls(**{key: wrong})
    assert str(info_dict.value) == str(info_value.value)
    message = str(info_value.value)
    assert message.startswith(f"{name}[{key!r}] must be") and " — e.g. " in message


# --------------------------------------------------------------------------
# the traits, the help and the docs are generated from it


def test_every_field_has_a_config_trait_with_its_default_and_help():
    traits = AgentMagics.class_traits(config=True)
    assert sorted(traits) == sorted(f.name for f in top_fields())
    for s in S.SETTINGS:
        trait = traits[s.name]
        assert trait.default() == s.default, s.name
        assert trait.help == s.help and s.doc in trait.help, s.name
        assert trait.metadata["spec"] is s.spec, s.name
    help_text = AgentMagics.class_get_help()  # what `%config AgentMagics` shows
    for s in S.SETTINGS:
        assert f"--AgentMagics.{s.name}=" in help_text, s.name


def test_the_magics_settings_start_as_the_declared_defaults(data_dir):
    magics = AgentMagics()
    for s in S.SETTINGS:
        assert getattr(magics, s.name) == s.default, s.name
    assert magics.settings() == S.Settings()
    assert magics.notebook() == S.NotebookSettings()
    assert magics.settings().data_dir == data_dir


def test_values_keep_their_declared_types(ip, magics):
    ip.run_line_magic("config", "AgentMagics.request_timeout = 10")
    ip.run_line_magic("config", "AgentMagics.temperature = 0")
    ip.run_line_magic("config", "AgentMagics.tools = ('python', 'read')")
    ip.run_line_magic("config", "AgentMagics.interpolate = False")
    assert magics.request_timeout == 10.0 and isinstance(magics.request_timeout, float)
    settings = magics.settings()
    assert settings.temperature == 0.0 and isinstance(settings.temperature, float)
    assert list(settings.tools) == ["python", "read"]
    assert magics.notebook().interpolate is False
    magics.compaction = {"threshold": 0.5}
    settings = magics.settings()
    magics.compaction["threshold"] = 0.25  # the session's value is a copy
    assert settings.compaction.threshold == 0.5 and settings.compaction.auto is True
    ip.run_line_magic("config", "AgentMagics.memory = {'enabled': True, 'inject': False}")
    memory = magics.settings().memory
    assert isinstance(memory, S.MemorySettings) and memory.enabled and memory.top_k == 5
    assert memory.tool_on and not memory.inject_on  # each follows enabled unless set


def test_help_lists_exactly_the_fields_with_their_defaults_and_docs(ip):
    with capture_output() as out:
        ip.run_line_magic("agent", "help settings")
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Settings:"))
    listed = lines[start + 1 :]
    assert [line.split()[0] for line in listed] == [f.name for f in top_fields()]
    for line, s in zip(listed, S.SETTINGS):
        assert line.split()[:3] == [s.name, "=", repr(s.default).split()[0]]
        assert line.rstrip().endswith(s.help), s.name


def test_the_docs_table_is_generated_from_the_declaration():
    text = DOCS.read_text()
    begin, end = "<!-- generated from core/settings.py: begin -->", "<!-- generated from core"
    block = text.split(begin, 1)[1].split(end + "/settings.py: end -->", 1)[0].strip()
    expected = settings_markdown(S.SETTINGS)
    assert block == expected, (
        "docs/settings.md is out of date: replace its generated block with "
        "jupyter_session_agent.ui.commands.settings_markdown(core.settings.SETTINGS)"
    )
    for s in S.SETTINGS:
        assert f"| `{s.name}` |" in block
        for key in s.keys:
            assert f"| `{s.name}['{key.name}']` |" in block


def key_table(path: Path) -> dict[str, object]:
    """The ``| key | default | meaning |`` table of a hand-written doc: key → its default."""
    lines = path.read_text().splitlines()
    start = lines.index("| key | default | meaning |")
    found: dict[str, object] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names, default = [c.strip() for c in line.strip("|").split("|")][:2]
        text = re.sub(r"(?<=\d),(?=\d{3})", "", default.strip("`"))  # 40,000 → 40000
        value = ast.literal_eval(text)
        for key in re.findall(r"`([a-z_]+)`", names):
            found[key] = list(value) if isinstance(value, tuple) else value
    return found


@pytest.mark.parametrize("name", ["compaction", "memory"])
def test_the_hand_written_key_tables_list_the_declared_keys_and_defaults(name):
    info = next(s for s in S.SETTINGS if s.name == name)
    declared = {
        k.name: list(k.default) if isinstance(k.default, tuple) else k.default for k in info.keys
    }
    assert key_table(DOCS.parent / f"{name}.md") == declared


# --------------------------------------------------------------------------
# a bad value is refused on every path, in one line, and the old value stays

# One value per setting that its trait type lets through and its spec refuses; enumerated, so a
# new setting must say what it refuses.
IN_KIND = {
    "model": "gpt-4o",
    "data_dir": "\x00",
    "model_overrides": {"openai/x": {"context": -1}},
    "compaction": {"threshold": 5},
    "max_steps": 0,
    "max_retries": -1,
    "max_answer_chars": 10,
    "request_timeout": 0.0,
    "first_byte_timeout": -1.0,
    "idle_timeout": math.inf,
    "max_retry_wait": math.nan,
    "local_context": 100,
    "local_model": "weights.bin",
    "local_detect": "yes",
    "local_idle_timeout": -5.0,
    "code_actions": "sometimes",
    "permission": {"bash": "maybe"},
    "sandbox": "on",
    "titles": "yes",
    "title_model": "no slash",
    "subagents": "yes",
    "subagent_model": "no slash",
    "snapshot": {"max_files": 0},
    "memory": {"scope": "world"},
    "mcp": {"time": {"type": "local"}},
    "mcp_opencode": "",
    "temperature": 5.0,
    "reasoning_effort": "extreme",
    "system_prompt": "a\x00b",
    "rules": "no",
    "tools": ["python", ""],
    "replay": 3,
    "replay_rerun": ["python", ""],
    "live": "yes",
    "view": "sideways",
    "interpolate": "yes",
}
WRONG_KIND = [[1]]  # a list of a list: no setting takes it


def source(value):
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def test_every_setting_has_a_value_it_refuses_here():
    assert list(IN_KIND) == [s.name for s in S.SETTINGS]


def one_line(err: BaseException) -> str:
    assert isinstance(err, ConfigError)
    lines = err._render_traceback_()
    assert len(lines) == 1 and "\n" not in lines[0], lines
    return str(err)


def names_the_fix(message: str, name: str) -> None:
    assert message.startswith(name) or message.startswith(f"unknown {name}"), message
    assert "must be" in message or "allowed" in message, message


@pytest.mark.parametrize("name", list(IN_KIND))
def test_a_bad_value_is_refused_through_config_python_and_the_session_api(ip, magics, caplog, name):
    before = getattr(magics, name)
    for bad in (IN_KIND[name], WRONG_KIND):
        # %config: one logged line, the old value stays
        caplog.clear()
        with capture_output() as out, caplog.at_level(logging.ERROR):
            ip.run_cell(f"%config AgentMagics.{name} = {source(bad)}")
        messages = [r.getMessage() for r in caplog.records] + [
            t for t in (out.stdout.strip(), out.stderr.strip()) if t
        ]
        assert len(messages) == 1 and "\n" not in messages[0], (bad, messages)
        names_the_fix(messages[0], name)
        assert getattr(magics, name) == before, (name, bad)
        # a Python assignment: the same line, as an error a cell shows without a traceback
        with pytest.raises(SettingError) as info:
            setattr(magics, name, bad)
        assert one_line(info.value) == messages[0]
        assert getattr(magics, name) == before
        if bad is IN_KIND[name]:
            assert " — e.g. %config AgentMagics." in messages[0], messages[0]
        # the session API: settings are values; a changed copy with a bad field is refused
        owner = S.Settings if name in {f.name for f in fields(S.Settings)} else None
        current = magics.current().settings if owner else magics.notebook()
        with pytest.raises(ConfigError) as info:
            replace(current, **{name: bad})
        names_the_fix(one_line(info.value), name)
        assert (magics.current().settings if owner else magics.notebook()) == current
    assert magics.settings() == magics.current().settings  # the next turn runs on the old values


def test_a_bad_value_from_ipython_config_is_refused_at_load_and_the_default_used(ip, magics):
    ip.run_line_magic("config", "AgentMagics.tools = ['python', 'read']")
    ip.run_line_magic("config", "AgentMagics.temperature = 9.0")  # refused, kept in the config
    with capture_output() as out:
        ip.run_line_magic("reload_ext", "jupyter_session_agent")
    again = ip.magics_manager.registry["AgentMagics"]
    assert again.tools == ["python", "read"] and again.temperature is None
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SettingError: temperature must be")
    again.model, again.data_dir = magics.model, magics.data_dir


@pytest.mark.parametrize("name", [f.name for f in fields(S.Settings)])
def test_a_session_given_settings_as_a_dict_checks_them_in_one_line(tmp_path, name):
    """``AgentSession.create(settings={...})``, ``open`` and ``use_settings`` take a dict of
    fields as ``Settings(**d)`` does: a bad value, an unknown field or a value that is no
    settings at all is one line naming the fix, and a session's settings stay as they were."""
    data = str(tmp_path / "data")
    with pytest.raises(ConfigError) as info:
        AgentSession.create(settings={"data_dir": data, name: IN_KIND[name]})
    names_the_fix(one_line(info.value), name)
    session = AgentSession.create(settings={"data_dir": data})
    before = session.settings
    assert isinstance(before, S.Settings) and before == S.Settings(data_dir=data)
    for bad in ({name: IN_KIND[name]}, {f"{name}_typo": 1}, [1], S.CompactionSettings()):
        with pytest.raises(ConfigError) as info:
            session.use_settings(bad)  # type: ignore[arg-type]
        one_line(info.value)
        assert session.settings is before
    with pytest.raises(ConfigError) as info:
        AgentSession.open(session.info.id, settings={"data_dir": data, name: IN_KIND[name]})
    names_the_fix(one_line(info.value), name)


# --------------------------------------------------------------------------
# settings are read as attributes: no reflective or dict reads of a typed setting

NESTED = ("compaction", "snapshot", "memory", "mcp")


def _is_settings(node: ast.expr, aliases: frozenset[str] = frozenset()) -> bool:
    """``settings``, ``x.settings``, ``x.settings.compaction`` (a nested setting), or a name
    bound to one of them in the same module (``s = self.settings``)."""
    if isinstance(node, ast.Attribute) and node.attr in NESTED:
        node = node.value
    return (isinstance(node, ast.Name) and node.id in {"settings", "cfg", "config", *aliases}) or (
        isinstance(node, ast.Attribute) and node.attr == "settings"
    )


def untyped_setting_reads(source: str) -> list[tuple[int, str]]:
    """(line, code) of each ``getattr(settings, "name")``/``hasattr``, and each ``.get(`` or
    ``[…]`` on a nested setting (``settings.compaction.get("auto", True)`` restates a
    default and hides a misspelt key from the type checker)."""
    tree = ast.parse(source)
    aliases: frozenset[str] = frozenset()
    while True:  # an alias of an alias (``c = s.compaction``) too
        more = aliases | {
            t.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _is_settings(node.value, aliases)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        if more == aliases:
            break
        aliases = more
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and _is_settings(node.args[0], aliases)
            and isinstance(node.args[1], ast.Constant)  # a walk over fields() names no field
        ):
            found.append((node.lineno, ast.unparse(node)))
        on = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            on = node.func.value if node.func.attr in ("get", "keys", "items") else None
        elif isinstance(node, ast.Subscript):
            on = node.value
        if (
            on is not None
            and isinstance(on, ast.Attribute)
            and on.attr in NESTED[:3]  # mcp is a mapping of servers by name
            and _is_settings(on, aliases)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_settings_read_scan_finds_what_it_is_meant_to_find():
    bad = (
        "def f(session, settings):\n"
        "    getattr(settings, 'titles', True)\n"
        "    session.settings.compaction.get('auto', True)\n"
        "    settings.memory['top_k']\n"
        "    hasattr(session.settings, 'mcp')\n"
        "    getattr(session.settings.snapshot, 'max_files')\n"
        "    s = self.settings\n"
        "    getattr(s, 'titles', True)\n"
        "    c = s.compaction\n"
        "    getattr(c, 'auto', True)\n"
        "    s.memory.get('top_k')\n"
    )
    assert [line for line, _ in untyped_setting_reads(bad)] == [2, 3, 4, 5, 6, 8, 10, 11]
    fine = (
        "def g(session, settings, name):\n"
        "    settings.compaction.auto\n"
        "    session.settings.mcp.get(name)\n"
        "    getattr(info, 'title', '')\n"
        "    {f.name: getattr(settings, f.name) for f in fields(settings)}\n"
    )
    assert untyped_setting_reads(fine) == []


def test_settings_are_read_as_attributes():
    package = Path(S.__file__).resolve().parents[1]
    wrong = [
        f"{path.relative_to(package.parent)}:{line}: {code}"
        for path in sorted(package.rglob("*.py"))
        for line, code in untyped_setting_reads(path.read_text(encoding="utf-8"))
    ]
    assert not wrong, (
        "a typed setting read by name or as a dict; read it as an attribute "
        "(settings.compaction.auto), its default is in core/settings.py:\n" + "\n".join(wrong)
    )
