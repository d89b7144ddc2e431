"""The quickstart's closing hint opens the executed notebook in JupyterLab as printed: it does
not ask to install JupyterLab when it is installed, and it starts as root (JupyterLab refuses
to without ``--allow-root``). The quickstart runs in a subprocess against the scripted server,
then the printed command is started (with a free port, a token and no browser) and must serve.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jupyter_session_agent.testing.scripted_server import ScriptedServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_printed_open_command_starts_jupyterlab(tmp_path):
    pytest.importorskip(
        "jupyterlab", reason="jupyterlab is not installed (pip install -e '.[test]')"
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "OPENAI"))
    }  # the user's config is not read
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / ".ipython"),
        JUPYTER_SESSION_AGENT_DIR=str(tmp_path / "history"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
    )
    replies = json.loads((ROOT / "notebooks" / "01_quickstart.replies.json").read_text())
    with ScriptedServer(replies=replies) as server:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-scripted-quickstart-test")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_session_agent",
                "quickstart",
                "--out",
                str(tmp_path / "out"),
                "--timeout",
                "60",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("open it:"))
    command = line.split("open it:", 1)[1].strip()
    assert "pip install" not in command  # jupyterlab is installed here
    executed = tmp_path / "out" / "01_quickstart.executed.ipynb"
    argv = shlex.split(command)
    assert argv[-1] == str(executed) and executed.exists()
    if os.geteuid() == 0:
        assert "--allow-root" in argv

    port, token = _free_port(), secrets.token_hex(8)
    log = open(tmp_path / "lab.log", "w")
    extra = [
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--LabApp.news_url=",
    ]
    lab = subprocess.Popen(
        argv[:-1] + extra + argv[-1:], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = (
                    f"http://127.0.0.1:{port}/api/contents/01_quickstart.executed.ipynb"
                    f"?token={token}"
                )
                with urllib.request.urlopen(url, timeout=2) as r:
                    assert json.load(r)["type"] == "notebook"  # served from the notebook's folder
                break
            except OSError:
                if lab.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "the printed command did not start JupyterLab:\n"
                        + (tmp_path / "lab.log").read_text()[-2000:]
                    )
                time.sleep(0.3)
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            lab.kill()
            lab.wait(timeout=10)
        log.close()
