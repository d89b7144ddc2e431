"""The session owns its state, and every model call beside a turn is paid for in SQL.

- No module outside ``session/`` assigns an attribute of an ``AgentSession`` (an ``ast``
  scan of the package; it fails on a new assignment).
- ``AgentSession.update_info`` is the only writer of ``info`` (another scan).
- Memory extraction's model call has its tokens and cost stored (``llm_call``, ``daily_cost``),
  whether it runs through the session (``auto_remember``) or from ``memory.remember``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jupyter_session_agent import memory
from jupyter_session_agent.core.messages import AssistantMessage
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.providers.base import Provider
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

ROOT = Path(__file__).resolve().parents[1] / "jupyter_session_agent"
SESSION_MODULE = ROOT / "session" / "agent_session.py"
# A name a session is held under, for attributes the class does not declare (yet)
HOLDERS = {"session", "parent", "child", "sess", "agent_session"}
# Where ``info`` is assigned: the constructor, the one writer, and catching up with what
# another kernel stored (a read of the stored revision, not a change)
INFO_WRITERS = {"__init__", "update_info", "_catch_up"}
# Methods that change a list or dict in place
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}
MUTATORS |= {"update", "setdefault", "popitem", "__setitem__", "__delitem__"}

PRICE_IN, PRICE_OUT = 1.0, 2.0  # USD per million tokens
SECTIONS = (
    "## Decisions\n- Ruff lints the project.\n## Preferences and constraints\n- (none)\n"
    "## Facts learned\n- (none)\n## Open tasks\n- (none)\n"
)


def session_attributes() -> set[str]:
    """Every attribute ``AgentSession`` has: what it assigns on ``self``, its methods and
    properties."""
    tree = ast.parse(SESSION_MODULE.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentSession")
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(cls):
        for target in _targets(node):
            base = _base(target)
            if isinstance(base, ast.Attribute) and _is_self(base.value):
                names.add(base.attr)
    return names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in _unpack(target)]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return _unpack(node.target)
    if isinstance(node, ast.Delete):
        return [t for target in node.targets for t in _unpack(target)]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _unpack(node.target)
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return _unpack(node.optional_vars)
    if isinstance(node, ast.NamedExpr):
        return [node.target]
    return []


def _unpack(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _unpack(elt)]
    if isinstance(target, ast.Starred):
        return _unpack(target.value)
    return [target]


def _base(target: ast.expr) -> ast.expr:
    """``x.a`` for ``x.a[i][j]`` (an item assignment changes ``x.a``), else ``target``."""
    while isinstance(target, ast.Subscript):
        target = target.value
    return target


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _holder(node: ast.expr) -> str | None:
    """The name ``node`` ends in: ``session`` for ``session``, ``self.session``, ``m.session``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def attribute_writes(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, target) of each assignment of a session attribute in ``source``: a declared
    attribute (``names``) on anything but ``self``, or any attribute on a name a session
    is held under; ``setattr`` with a literal name counts too, and so does a mutating
    method called on a session attribute (``session.history.append(…)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and isinstance(node.func.value, ast.Attribute)
            and not _is_self(node.func.value.value)
            and _holder(node.func.value.value) in HOLDERS
        ):
            found.append((node.lineno, ast.unparse(node.func)))
        for target in _targets(node):
            base = _base(target)
            if not isinstance(base, ast.Attribute) or _is_self(base.value):
                continue
            if base.attr in names or _holder(base.value) in HOLDERS:
                found.append((node.lineno, ast.unparse(target)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and (node.args[1].value in names or _holder(node.args[0]) in HOLDERS)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_what_it_is_meant_to_find():
    names = session_attributes()
    assert {"info", "history", "providers", "approver", "turns", "_foreign"} <= names
    bad = (
        "def f(session, parent, child, other, m):\n"
        "    session.info = 1\n"
        "    other.history[:] = []\n"
        "    parent._has_children = True\n"
        "    child.inherited_rules = None\n"
        "    m.session.settings += 1\n"
        "    setattr(other, 'providers', None)\n"
        "    a, m.session.gate = 1, 2\n"
        "    m.session.history.append(3)\n"
    )
    assert sorted(line for line, _ in attribute_writes(bad, names)) == [2, 3, 4, 5, 6, 7, 8, 9]
    fine = (
        "class A:\n"
        "    def __init__(self):\n"
        "        self.info = 1\n"
        "def g(ids, item, part):\n"
        "    ids[item.info.id] = 1\n"
        "    part.text_value = 2\n"
    )
    assert attribute_writes(fine, names) == []


def test_no_module_outside_session_assigns_a_session_attribute():
    names = session_attributes()
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] == "session":
            continue
        for line, target in attribute_writes(path.read_text(encoding="utf-8"), names):
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {target}")
    assert not wrong, (
        "modules outside session/ assign a session's attributes; call its methods "
        "(update_info, use_settings, …) instead:\n" + "\n".join(wrong)
    )


def info_writes(source: str) -> list[tuple[int, str]]:
    """(line, innermost function) of each assignment of an ``info`` attribute in ``source``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            for target in _targets(child):
                base = _base(target)
                if isinstance(base, ast.Attribute) and base.attr == "info":
                    found.append((child.lineno, func))  # type: ignore[attr-defined]
            inner = (
                child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            )
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def test_update_info_is_the_only_writer_of_info():
    assert info_writes("def f(s):\n    def g():\n        s.info = 1\n") == [(3, "g")]
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        for line, func in info_writes(path.read_text(encoding="utf-8")):
            if path == SESSION_MODULE and func in INFO_WRITERS:
                continue
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line} in {func}")
    assert not wrong, "only AgentSession.update_info changes a session's info:\n" + "\n".join(wrong)
    # and the writers named are all there: the scan looks at the module it means to
    assert {func for _, func in info_writes(SESSION_MODULE.read_text(encoding="utf-8"))} == (
        INFO_WRITERS
    )


def test_update_info_stores_each_change_and_keeps_read_modify_write_atomic(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", titles=False)
    store = Store(settings.data_dir)
    session = AgentSession.create(settings, store=store, directory=tmp_path)
    before = session.info.time_updated
    info = session.update_info(title="Renamed")
    assert info is session.info and info.title == "Renamed" and info.time_updated >= before
    assert store.session(info.id).title == "Renamed"
    # an edit computed from the current info, under the same lock as the title call
    session.update_info(lambda current: {"title": current.title + " again"})
    assert store.session(info.id).title == "Renamed again"
    session.allow([{"permission": "bash", "pattern": "ls *", "action": "allow"}])
    session.allow([{"permission": "bash", "pattern": "ls *", "action": "allow"}])
    assert len(store.session(info.id).permission) == 1  # moved to the end, not repeated
    store.close()


def test_the_openai_and_code_action_providers_are_providers():
    from jupyter_session_agent.providers.codeactions import CodeActionProvider
    from jupyter_session_agent.providers.openai_provider import OpenAIProvider

    inner = OpenAIProvider(provider_id="openai", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert isinstance(inner, Provider)
    assert isinstance(CodeActionProvider(inner, server_side=False), Provider)


# --------------------------------------------------------------------------
# memory extraction's cost, in SQL


def _settings(tmp_path, **memory_options) -> Settings:
    return Settings(
        model="openai/scripted",
        data_dir=tmp_path / "data",
        titles=False,
        model_overrides={
            "openai/scripted": {
                "context": 100_000,
                "output": 4_096,
                "price_input": PRICE_IN,
                "price_output": PRICE_OUT,
            }
        },
        memory={"embeddings": None, **memory_options},
    )


@pytest.fixture
def env(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def test_extraction_through_the_session_has_its_tokens_and_cost_in_sql(env, server, tmp_path):
    settings = _settings(tmp_path, auto_remember=True, extractor="llm")
    store = Store(settings.data_dir)
    usage = {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340}
    server.enqueue(Reply(text="Noted."), Reply(text=SECTIONS, usage=usage))
    session = AgentSession.create(settings, store=store, directory=tmp_path)
    session.prompt("We decided to use ruff for linting.")
    assert len(server.requests) == 2  # the turn, then the extraction call
    expected = (300 * PRICE_IN + 40 * PRICE_OUT) / 1e6
    calls = store.sql(
        "SELECT purpose, provider, model, input_tokens, output_tokens, cost, attempts "
        f"FROM llm_call WHERE session_id = '{session.info.id}'"
    )
    assert calls.to_dict("records") == [
        {
            "purpose": "memory",
            "provider": "openai",
            "model": "scripted",
            "input_tokens": 300,
            "output_tokens": 40,
            "cost": pytest.approx(expected),
            "attempts": 1,
        }
    ]
    turn = sum(m.info.cost for m in session.history if isinstance(m.info, AssistantMessage))
    daily = store.sql("SELECT sum(calls) calls, sum(cost) cost FROM daily_cost")
    assert daily["calls"][0] == 2
    assert daily["cost"][0] == pytest.approx(turn + expected)
    rollup = store.sql(
        "SELECT calls_cost, own_cost, total_cost FROM session_cost "
        f"WHERE session_id = '{session.info.id}'"
    ).to_dict("records")[0]
    assert rollup["calls_cost"] == pytest.approx(expected)
    assert rollup["own_cost"] == rollup["total_cost"] == pytest.approx(turn + expected)
    summary = store.sql(
        f"SELECT calls_cost, total_cost FROM session_summary WHERE session_id = '{session.info.id}'"
    )
    assert summary["total_cost"][0] == pytest.approx(turn + expected)
    assert session.cost == pytest.approx(turn + expected)
    store.close()


def test_extraction_from_remember_has_its_tokens_and_cost_in_sql(env, server, tmp_path):
    settings = _settings(tmp_path)
    store = Store(settings.data_dir)
    server.enqueue(Reply(text="Noted."))
    session = AgentSession.create(settings, store=store, directory=tmp_path)
    session.prompt("We decided to use ruff for linting.")
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    server.enqueue(Reply(status=503), Reply(text=SECTIONS, usage=usage))  # retried once
    done = memory.remember(store, session.info.id, settings, extractor="llm")
    assert done.extractor == "llm:openai/scripted"
    row = store.sql(
        "SELECT purpose, input_tokens, output_tokens, cost, attempts FROM llm_call "
        f"WHERE session_id = '{session.info.id}'"
    ).to_dict("records")
    assert row == [
        {
            "purpose": "memory",
            "input_tokens": 120,
            "output_tokens": 30,
            "cost": pytest.approx((120 * PRICE_IN + 30 * PRICE_OUT) / 1e6),
            "attempts": 2,
        }
    ]
    store.close()


# --------------------------------------------------------------------------
# the one retry loop of calls beside a turn


def test_calls_beside_a_turn_retry_as_the_loop_does(server):
    from jupyter_session_agent.core.budget import ModelInfo
    from jupyter_session_agent.core.errors import ProviderError
    from jupyter_session_agent.core.retry import RetryWaitError
    from jupyter_session_agent.providers.base import call
    from jupyter_session_agent.providers.openai_provider import ChatRequest, OpenAIProvider

    provider = OpenAIProvider(provider_id="openai", base_url=server.base_url, api_key="sk-test")
    request = ChatRequest(model="scripted", messages=[{"role": "user", "content": "hi"}])
    info = ModelInfo("openai", "scripted")
    waits: list[float] = []
    options = dict(session_id="ses_x", purpose="memory", retries=2, max_wait=10.0)

    server.enqueue(Reply(status=503), Reply(status=503), Reply(text="ok"))
    text, record = call(provider, request, info, sleep=waits.append, **options)
    assert (text, record.attempts, len(waits)) == ("ok", 3, 2)
    assert waits == sorted(waits) and 0 < waits[0] <= 10.0  # backoff, capped by max_wait

    server.enqueue(Reply(status=503), Reply(status=503), Reply(status=503))
    with pytest.raises(ProviderError):  # retries exhausted: the last failure is raised
        call(provider, request, info, sleep=waits.append, **options)

    asked = len(server.requests)
    server.enqueue(Reply(status=429, headers={"retry-after": "120"}))
    with pytest.raises(RetryWaitError):  # a server asking for longer than max_wait: no retry
        call(provider, request, info, sleep=waits.append, **options)
    server.enqueue(Reply(status=400))
    with pytest.raises(ProviderError):  # not retryable: raised at once
        call(provider, request, info, sleep=waits.append, **options)
    assert len(server.requests) == asked + 2
