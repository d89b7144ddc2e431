"""Shared fixtures: a real IPython shell with the extension loaded, a scripted
OpenAI-compatible server over real HTTP, and an isolated data directory."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_session_agent.testing.scripted_server import ScriptedServer


@pytest.fixture(scope="session")
def _shell():
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history sqlite per test shell
    shell = InteractiveShell.instance(config=config)
    shell.displayhook.flush = lambda: None
    return shell


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    path = tmp_path / "data"
    monkeypatch.setenv("JUPYTER_SESSION_AGENT_DIR", str(path))
    monkeypatch.delenv("JUPYTER_SESSION_AGENT_REPLAY", raising=False)  # cells call the server
    # no global rules file of the machine's user reaches a test's system prompt (context/rules.py)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return path


@pytest.fixture
def ip(_shell, server, data_dir, tmp_path, monkeypatch):
    """The shell with ``%load_ext jupyter_session_agent`` done and pointed at ``server``."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.chdir(tmp_path)
    _shell.run_line_magic("load_ext", "jupyter_session_agent")
    magics = _shell.magics_manager.registry["AgentMagics"]
    magics.model = "openai/scripted"
    magics.data_dir = str(data_dir)
    magics.model_overrides = {
        "openai/scripted": {
            "context": 100_000,
            "output": 4_096,
            "price_input": 1.0,
            "price_output": 2.0,
        }
    }
    magics.max_retries = 2
    magics.request_timeout = 5.0
    magics.live = True
    # The defaults ask before python/bash/write/edit run, and these shells have no stdin:
    # end-to-end tests allow everything; tests of the permission model set their own rules.
    magics.permission = {"*": "allow"}
    # bash unconfined: these tests are about the checker and the other layers, and the
    # sandbox's private /tmp would hide their tmp_path files; tests/test_sandbox.py turns it on.
    magics.sandbox = "off"
    # A title call after a session's first turn would take the next scripted reply:
    # off here; tests of titles turn it on (tests/test_lifecycle.py).
    magics.titles = False
    yield _shell
    _shell.run_line_magic("unload_ext", "jupyter_session_agent")
    for name in ("x", "answer", "df"):
        _shell.user_ns.pop(name, None)


@pytest.fixture
def magics(ip):
    return ip.magics_manager.registry["AgentMagics"]


@pytest.fixture
def store(magics):
    return magics.store()
