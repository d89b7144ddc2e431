"""Root conftest: example notebooks run under nbval against the scripted server.

When the collected items include notebooks, start ``scripted_server`` in a
subprocess, load ``notebooks/<name>.replies.json`` scripts into it in order,
and point the kernels nbval starts at it through the environment (kernels
inherit it). A private data directory keeps the user's history untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

_server: subprocess.Popen | None = None
_base_url: str | None = None
_notebook: Path | None = None  # the notebook whose cells run now
_KEY = "sk-scripted-notebook-test"
_NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: a replayed notebook must not call a model


def pytest_collection_modifyitems(session, config, items):
    global _server, _base_url
    notebooks = sorted(
        {Path(str(item.fspath)) for item in items if str(item.fspath).endswith(".ipynb")}
    )
    if not notebooks or _server is not None:
        return
    _server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_session_agent.testing.scripted_server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = _base_url = _server.stdout.readline().strip()
    replies = []
    for notebook in notebooks:
        script = notebook.with_suffix(".replies.json")
        if script.exists():
            replies.extend(json.loads(script.read_text()))
    request = urllib.request.Request(
        base_url.rsplit("/v1", 1)[0] + "/_script",
        data=json.dumps(replies).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).read()
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ["OPENAI_API_KEY"] = _KEY
    os.environ["JUPYTER_SESSION_AGENT_DIR"] = tempfile.mkdtemp(prefix="jsa-nbval-")


@pytest.hookimpl(tryfirst=True)  # before nbval starts the notebook's kernel: it inherits this
def pytest_runtest_setup(item):
    """Each notebook starts from its own script (reset, then load), so a notebook that used
    more or fewer replies than scripted cannot shift the next notebook's replies. A notebook
    with a record next to it (``<name>.replay.json``, docs/replay.md) is replayed from it:
    replay on, no key, and a model server address where nothing listens."""
    global _notebook
    path = Path(str(item.fspath))
    if _base_url is None or path.suffix != ".ipynb" or path == _notebook:
        return
    _notebook = path
    if path.with_suffix(".replay.json").exists():
        os.environ.update(JUPYTER_SESSION_AGENT_REPLAY="on", OPENAI_BASE_URL=_NOWHERE)
        os.environ.pop("OPENAI_API_KEY", None)
    else:
        os.environ.pop("JUPYTER_SESSION_AGENT_REPLAY", None)
        os.environ.update(OPENAI_BASE_URL=_base_url, OPENAI_API_KEY=_KEY)
    script = path.with_suffix(".replies.json")
    for route, body in (
        ("/_reset", {}),
        ("/_script", json.loads(script.read_text()) if script.exists() else []),
    ):
        request = urllib.request.Request(
            _base_url.rsplit("/v1", 1)[0] + route,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).read()


def pytest_unconfigure(config):
    if _server is not None:
        _server.terminate()
        _server.wait(timeout=10)
