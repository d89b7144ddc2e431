"""The JupyterLab renderer in a real browser: JupyterLab on loopback with the
prebuilt extension installed, headless Chromium (Debian's, driven by Playwright
with the system browser — never a downloaded one) opening a notebook whose saved
outputs hold a transcript with tool calls, a pruned output and a compaction.

Writes ``artifacts/transcript.png`` (the page) and ``artifacts/transcript-output.png``
(the rendered output alone)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _synthetic import BIG_OUTPUT, synthetic_session

from jupyter_session_agent.budget import ModelInfo, Prices
from jupyter_session_agent.display import MIME_TYPE, BudgetView, TranscriptView
from jupyter_session_agent.report import budget_report

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
MODEL = ModelInfo("openai", "scripted", context=128_000, output=16_384, prices=Prices(0.15, 0.6),
                  source="catalogue")


def _labextension_dir() -> Path | None:
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        candidate = Path(base) / "jupyter-session-agent" / "package.json"
        if candidate.exists():
            return candidate.parent
    return None


def _skip_reason() -> str | None:
    if CHROMIUM is None:
        return "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does this)"
    for module in ("playwright", "jupyterlab"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test]')"
    if _labextension_dir() is None:
        return "the JupyterLab extension is not installed (pip install -e . builds and installs it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(path: Path) -> dict:
    import nbformat

    session, history = synthetic_session("Missing values in data.csv")
    report = budget_report(history, MODEL, {})
    transcript = TranscriptView(history, session=session, report=report)._repr_mimebundle_()
    gauge = BudgetView(report, session=session)._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A saved transcript\nRendered by the jupyter-session-agent extension."),
        nbformat.v4.new_code_cell(
            "%%agent\nLoad data.csv with pandas and tell me which column has the most missing values.",
            outputs=[nbformat.v4.new_output("display_data", data=transcript)],
            execution_count=1,
        ),
        nbformat.v4.new_code_cell("%agent budget", outputs=[nbformat.v4.new_output("display_data", data=gauge)],
                                  execution_count=2),
    ]
    nbformat.write(nb, path)
    return transcript[MIME_TYPE]


@pytest.fixture
def lab(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "root"
    root.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings")}
    news = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))  # no "Jupyter news?" toast over the screenshot
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.news_url=", *(["--allow-root"] if os.geteuid() == 0 else [])],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.3)
        yield url, token, root, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_lab_renders_a_saved_transcript(lab):
    from playwright.sync_api import sync_playwright

    url, token, root, tmp = lab
    data = _notebook(root / "transcript.ipynb")
    # the server sees the prebuilt extension
    with urllib.request.urlopen(f"{url}/lab/api/extensions?token={token}", timeout=10) as r:
        names = [e["name"] for e in json.load(r)]
    assert "jupyter-session-agent" in names

    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 3400},  # tall: the whole output fits
        )
        try:
            page = context.new_page()
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{url}/lab/tree/transcript.ipynb?token={token}", wait_until="domcontentloaded", timeout=90_000)
            output = page.locator(".jp-OutputArea-output.jsa-transcript").first
            output.wait_for(state="visible", timeout=90_000)
            page.wait_for_timeout(500)  # Markdown of text parts renders asynchronously

            # not the Markdown fallback: our renderer drew it
            messages = output.locator(".jsa-message")
            assert messages.count() == len(data["messages"])
            assert output.locator(".jsa-title").inner_text() == "Missing values in data.csv"
            # tool calls with their states
            tools = output.locator(".jsa-part-tool")
            assert tools.count() == 6
            statuses = [tools.nth(i).get_attribute("data-status") for i in range(tools.count())]
            assert statuses == ["completed", "completed", "error", "pending", "running", "interrupted"]
            assert output.locator(".jsa-badge-status-interrupted").count() == 1
            python = tools.nth(0)
            assert "python" in python.locator(".jsa-tool-name").inner_text()
            python.locator("summary").first.click()  # tool parts are collapsible
            assert python.locator(".jsa-tool-input").inner_text().startswith("{")
            assert f"lines kept (of {len(BIG_OUTPUT):,} characters)" in python.locator(".jsa-long-output summary").inner_text()
            assert output.locator(".jsa-truncated").count() >= 1  # the 36 KB output was cut in the bundle
            # the pruned output is marked, and the original is one click away
            pruned = output.locator(".jsa-part-tool:has(.jsa-badge-pruned)")
            assert pruned.count() == 1
            pruned.locator("summary").first.click()
            note = pruned.locator(".jsa-pruned-note")
            assert "Old tool result content cleared" in note.inner_text()
            pruned.locator(".jsa-pruned details summary").click()
            assert "line 199: old listing" in pruned.locator(".jsa-pruned pre").inner_text()
            # compaction: the request and the summary are marked
            assert output.locator(".jsa-compaction-request .jsa-compaction-marker").count() == 1
            assert "automatic" in output.locator(".jsa-compaction-marker").inner_text()
            summary = output.locator(".jsa-summary")
            assert summary.count() == 1 and "Summary" in summary.locator(".jsa-role").inner_text()
            assert summary.locator(".jsa-markdown h2").first.inner_text() == "Goal"  # Markdown rendered
            # reasoning collapsed, retry shown, step boundaries with tokens and cost
            reasoning = output.locator("details.jsa-part-reasoning")
            assert reasoning.count() == 1 and reasoning.get_attribute("open") is None
            assert "retry 1 (HTTP 429)" in output.locator(".jsa-part-retry").inner_text()
            finishes = output.locator(".jsa-part-step-finish")
            assert finishes.count() == 4 and "$0.0016" in finishes.first.inner_text()
            # the budget gauge: segments, the compaction marker, per-step sparkline with a compaction mark
            gauge = output.locator(".jsa-budget")
            assert gauge.locator(".jsa-gauge .jsa-seg-used").count() == 2  # context and prune bars
            assert "compact" in gauge.locator(".jsa-marker-usable").inner_text()
            assert gauge.locator(".jsa-sparkline rect").count() == 4
            assert gauge.locator(".jsa-spark-compaction").count() == 1
            assert "2,160 / " in gauge.locator(".jsa-budget-used").inner_text()
            # the %agent budget cell: the gauge alone
            budget_only = page.locator(".jp-OutputArea-output.jsa-transcript").nth(1)
            assert budget_only.locator(".jsa-budget").count() == 1 and budget_only.locator(".jsa-message").count() == 0

            output.screenshot(path=str(ARTIFACTS / "transcript-output.png"))
            page.screenshot(path=str(ARTIFACTS / "transcript.png"), full_page=True)
        finally:
            context.close()
    assert not [e for e in errors if "jsa" in e or "session-agent" in e], errors
