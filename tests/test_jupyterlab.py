"""End to end in a real JupyterLab, the way a user works.

One ``jupyter lab`` server per module (free port, token, temporary root, its own HOME and
JUPYTER_*/IPYTHONDIR so the user's configuration is never read) with the project installed,
and one headless Chromium — Debian's, driven by Playwright with the system browser, never a
downloaded one. The kernels it starts reach the scripted OpenAI-compatible server (run as a
subprocess, its base URL given through the environment). The tests type into cells and press
Shift+Enter, answer approval questions in JupyterLab's stdin box, click the stop button and
pick a session in ``%agent browse``, then check the DOM, the saved notebook and what the model
received.

Screenshots of every step go to ``artifacts/jupyterlab/``; with ``JSA_UPDATE_SCREENSHOTS=1``
the four shown in ``docs/screenshots.md`` are copied to ``docs/screenshots/``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _synthetic import BIG_OUTPUT, synthetic_session

from jupyter_session_agent.core.budget import ModelInfo, Prices
from jupyter_session_agent.loop.budget_report import budget_report
from jupyter_session_agent.ui.display import MIME_TYPE, BudgetView, TranscriptView

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "jupyterlab"
DOC_SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
MODEL = ModelInfo(
    "openai",
    "scripted",
    context=128_000,
    output=16_384,
    prices=Prices(0.15, 0.6),
    source="catalogue",
)
# What every kernel of this server reads at start (its own IPYTHONDIR): the scripted model.
IPYTHON_CONFIG = """\
c = get_config()
c.AgentMagics.model = "openai/scripted"
c.AgentMagics.model_overrides = {"openai/scripted": {"context": 32000, "output": 4096,
                                                     "price_input": 0.15, "price_output": 0.6}}
c.AgentMagics.request_timeout = 30.0
c.AgentMagics.snapshot = {"enabled": False}
# bash unconfined: the approval prompts are the point (in the OS sandbox bash does not ask)
c.AgentMagics.sandbox = "off"
"""
LIVE_TEXT = (
    "The notebook directory holds three files. data.csv is the table to study, "
    "notes.md says where it came from and clean.py is an empty script for the cleaning "
    "steps. Shall I load data.csv and count the missing values per column next?"
)
TITLE = "Files in the notebook directory"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
# Characters every UI font has: ASCII, Latin-1 and general punctuation (— … “ ” ·).
# Emoji and dingbats (🔐 ✓ ✕ ⚙ ■ ⟳ ✂) show as empty boxes without an emoji font.
FONT_SAFE = re.compile(r"[\t\n\r\x20-\x7e\xa0-\xff\u2010-\u2027\u2030-\u205e\u20ac]*")


def _labextension_dir() -> Path | None:
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        candidate = Path(base) / "jupyter-session-agent" / "package.json"
        if candidate.exists():
            return candidate.parent
    return None


def _skip_reason() -> str | None:
    import importlib.util

    if CHROMIUM is None:
        return "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does this)"
    for module in ("playwright", "jupyterlab"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
    if _labextension_dir() is None:
        return "the JupyterLab extension is not installed (pip install -e . builds and installs it)"
    return None


if _skip_reason():
    pytest.skip(_skip_reason(), allow_module_level=True)  # one line in the summary (-ra)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _font_safe(text: str) -> bool:
    return FONT_SAFE.fullmatch(text) is not None


# -- the scripted model server, in its own process -----------------------------------------


class Scripted:
    """The scripted server's control API: script replies, read the requests it received."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.root = base_url.rsplit("/v1", 1)[0]

    def _call(self, route: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.root + route,
            data=data,
            method="GET" if data is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)

    def script(self, *replies: dict) -> None:
        """Forget earlier replies and requests; queue these."""
        self._call("/_reset", {})
        self._call("/_script", list(replies))

    def requests(self) -> list[dict]:
        return self._call("/_requests")

    def turn_requests(self) -> list[dict]:
        """The agent's own requests: without the call that titles a new session, which a test
        run on its own (its notebook's first session) also makes."""
        return [
            r
            for r in self.requests()
            if not str(r["messages"][-1].get("content", "")).startswith(
                "Generate a title for this conversation"
            )
        ]


@pytest.fixture(scope="module")
def scripted():
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_session_agent.testing.scripted_server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield Scripted(proc.stdout.readline().strip())
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- the JupyterLab server ---------------------------------------------------------------------


class Lab:
    def __init__(self, url: str, token: str, root: Path, data: Path, tmp: Path):
        self.url, self.token, self.root, self.data, self.tmp = url, token, root, data, tmp

    def api(self, path: str, body=None, method: str | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=20) as r:
                return json.load(r)
        except urllib.error.HTTPError as err:  # the server's side of it, for the failure report
            log = (self.tmp / "lab.log").read_text()[-4000:]
            raise AssertionError(f"{method or 'GET'} {path}: HTTP {err.code}\n{log}") from err


OTHER_SESSIONS = ("Plot revenue by month from sales.parquet", "Why does the merge drop rows?")


def _store_synthetic(data: Path) -> None:
    """Finished sessions with every part type in the history, as other kernels left them."""
    from jupyter_session_agent.store import Store

    store = Store(data)
    try:
        for title in ("Missing values in data.csv", *OTHER_SESSIONS):
            session, history = synthetic_session(title)
            store.put(session, *[m.info for m in history], *[p for m in history for p in m.parts])
        store.flush()
    finally:
        store.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, scripted):
    tmp = tmp_path_factory.mktemp("lab")  # kept after a failure: lab.log is there
    root, home, data = tmp / "root", tmp / "home", tmp / "data"
    for path in (root, home):
        path.mkdir()
    files = (
        ("data.csv", "age,income\n31,\n,52000\n"),
        ("notes.md", "# Source\n"),
        ("clean.py", ""),
    )
    for name, text in files:
        (root / name).write_text(text)
    _store_synthetic(data)
    profile = home / ".ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text(IPYTHON_CONFIG)
    settings = home / "settings" / "@jupyterlab"
    quiet = {"fetchNews": "false", "checkForUpdates": False}  # no toasts over the screenshots
    for plugin, values in (
        ("apputils-extension/notification", quiet),
        ("notebook-extension/tracker", {"windowingMode": "none"}),
    ):
        target = settings / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JUPYTER", "IPYTHON", "OPENAI", "PYTHONSTARTUP"))
    }
    env.update(
        HOME=str(home),
        IPYTHONDIR=str(home / ".ipython"),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / ".local" / "share" / "jupyter"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_PLATFORM_DIRS="1",
        OPENAI_BASE_URL=scripted.base_url,
        OPENAI_API_KEY="sk-scripted-jupyterlab-test",
        JUPYTER_SESSION_AGENT_DIR=str(data),
        PYTHONUNBUFFERED="1",
    )
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.news_url=",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.terminals_enabled=False",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=root,
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
                    log_text = (tmp / "lab.log").read_text()[-3000:]
                    raise RuntimeError("JupyterLab did not start:\n" + log_text)
                time.sleep(0.3)
        yield Lab(url, token, root, data, tmp)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open(browser, lab, path: str, width: int = 1280, height: int = 900):
    page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    # ?reset: a fresh workspace, with only this notebook open
    page.goto(
        f"{lab.url}/lab/tree/{path}?reset&token={lab.token}",
        wait_until="domcontentloaded",
        timeout=90_000,
    )
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="visible", timeout=90_000)
    page.locator(".jp-NotebookPanel .jp-Spinner").wait_for(state="detached", timeout=90_000)
    return page


def _shot(target, name: str, doc: str | None = None, top: int | None = None) -> None:
    """A screenshot of the page or of one element (its first ``top`` pixels if given), kept as
    an artifact (and for the docs). An element taller than the window gets a taller window for
    the shot: the notebook scrolls inside the page, so the rest of it would be cut off."""
    path = ARTIFACTS / f"{name}.png"
    page = getattr(target, "page", None)
    if page is None:  # a page
        target.screenshot(path=str(path), animations="disabled")
    else:
        size = page.viewport_size
        height = target.bounding_box()["height"] if top is None else top
        if height + 120 > size["height"]:
            page.set_viewport_size({"width": size["width"], "height": min(6000, int(height) + 160)})
            page.wait_for_timeout(200)
        try:
            if top is None:
                target.scroll_into_view_if_needed()
                target.screenshot(path=str(path), animations="disabled")
            else:
                target.evaluate("e => e.scrollIntoView({block: 'start'})")
                box = target.bounding_box()
                clip = {
                    "x": box["x"],
                    "y": box["y"],
                    "width": box["width"],
                    "height": min(top, box["height"]),
                }
                page.screenshot(path=str(path), animations="disabled", clip=clip)
        finally:
            page.set_viewport_size(size)
    if doc and os.environ.get("JSA_UPDATE_SCREENSHOTS") == "1":
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_SHOTS / f"{doc}.png")


def _our_errors(page) -> list[str]:
    return [e for e in page.errors if "jsa" in e or "session-agent" in e]


# -- the saved notebook ----------------------------------------------------------------------------


def _failed_call_bundle() -> dict:
    """A turn whose python call raised: stored completed (its prints matter), shown failed."""
    from jupyter_session_agent.core import ids
    from jupyter_session_agent.core.messages import (
        AssistantMessage,
        ModelRef,
        TextPart,
        ToolCompleted,
        ToolPart,
        UserMessage,
        WithParts,
    )

    sid, t0 = ids.descending("session"), 1_760_000_000_000
    user = UserMessage(ids.ascending("message"), sid, t0, ModelRef("openai", "scripted"))
    reply = AssistantMessage(
        ids.ascending("message"),
        sid,
        user.id,
        t0 + 1,
        "openai",
        "scripted",
        time_completed=t0 + 2,
        finish="tool-calls",
    )
    output = (
        '--- error ---\n  File "<python-tool call_1>", line 1\n    def broken(:\n'
        "SyntaxError: invalid syntax"
    )
    call = ToolCompleted(
        {"code": "def broken(:\n    pass"},
        output,
        "def broken(:",
        {"error": "SyntaxError"},
        t0 + 1,
        t0 + 2,
    )
    prompt = TextPart(ids.ascending("part"), sid, user.id, text="Define broken()")
    tool = ToolPart(
        ids.ascending("part"), sid, reply.id, call_id="call_1", tool="python", state=call
    )
    history = [WithParts(user, (prompt,)), WithParts(reply, (tool,))]
    return TranscriptView(history)._repr_mimebundle_()


def _browse_outputs(data: Path) -> list[dict]:
    """What ``%agent browse`` leaves in a saved notebook: the widget's view (its model is gone
    with the kernel that made it) and the static fallback displayed after it."""
    import nbformat

    from jupyter_session_agent.store import Store
    from jupyter_session_agent.ui.widgets import SessionBrowser

    store = Store(data)
    try:
        browser = SessionBrowser(store)
        widget = browser._repr_mimebundle_()
        fallback = browser.fallback()._repr_mimebundle_()
        browser.close()
    finally:
        store.close()
    assert "application/vnd.jupyter.widget-view+json" in widget
    return [
        nbformat.v4.new_output("display_data", data=widget),
        nbformat.v4.new_output("display_data", data=fallback),
    ]


def _saved_notebook(path: Path, data: Path) -> dict:
    """An executed notebook as a user would find it later: outputs saved, no kernel, not trusted."""
    import nbformat

    session, history = synthetic_session("Missing values in data.csv")
    report = budget_report(history, MODEL, {})
    transcript = TranscriptView(history, session=session, report=report)._repr_mimebundle_()
    gauge = BudgetView(report, session=session)._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "# A saved transcript\nRendered by the jupyter-session-agent extension."
        ),
        nbformat.v4.new_code_cell(
            "%%agent\nLoad data.csv with pandas and tell me which column has the most missing "
            "values.",
            outputs=[nbformat.v4.new_output("display_data", data=transcript)],
            execution_count=1,
        ),
        nbformat.v4.new_code_cell(
            "%agent budget",
            execution_count=2,
            outputs=[nbformat.v4.new_output("display_data", data=gauge)],
        ),
        nbformat.v4.new_code_cell(
            "%%agent\nDefine broken()",
            execution_count=3,
            outputs=[nbformat.v4.new_output("display_data", data=_failed_call_bundle())],
        ),
        nbformat.v4.new_code_cell(
            "%agent browse", execution_count=4, outputs=_browse_outputs(data)
        ),
    ]
    nbformat.write(nb, path)
    return transcript[MIME_TYPE]


def test_a_saved_executed_notebook_renders_every_part(lab, browser):
    data = _saved_notebook(lab.root / "saved.ipynb", lab.data)
    names = [e["name"] for e in lab.api("/lab/api/extensions")]
    assert "jupyter-session-agent" in names  # the server sees the prebuilt extension

    page = _open(browser, lab, "saved.ipynb", height=3600)  # tall: the whole output fits
    try:
        output = page.locator(".jp-OutputArea-output.jsa-transcript").first
        output.wait_for(state="visible", timeout=60_000)
        page.wait_for_timeout(500)  # Markdown of text parts renders asynchronously
        # as a user finds it: the notebook's top, parts as rendered (errors open, the rest closed)
        page.set_viewport_size({"width": 1100, "height": 900})
        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
        page.locator(".jp-Cell").nth(1).evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        _shot(page, "01-saved-transcript", doc="saved-transcript")
        page.set_viewport_size({"width": 1100, "height": 3600})
        text = output.inner_text()
        # our renderer drew it: no raw JSON, no Markdown fallback, no emoji that need a font
        assert '"version"' not in text and '"parts"' not in text and "{'info'" not in text
        fallbacks = page.locator(".jp-RenderedJSON, .jp-RenderedMarkdown.jp-OutputArea-output")
        assert fallbacks.count() == 0
        assert "####" not in text and _font_safe(text), [c for c in text if not _font_safe(c)]
        messages = output.locator(".jsa-message")
        assert messages.count() == len(data["messages"])
        assert output.locator(".jsa-title").inner_text() == "Missing values in data.csv"
        # tool calls with their states, each badge with its icon drawn as SVG
        tools = output.locator(".jsa-part-tool")
        assert tools.count() == 6
        statuses = [tools.nth(i).get_attribute("data-status") for i in range(tools.count())]
        assert statuses == ["completed", "completed", "error", "pending", "running", "interrupted"]
        for status in set(statuses):
            badge = output.locator(f".jsa-badge-status-{status}").first
            assert badge.locator("svg.jsa-icon").count() == 1, status
            assert badge.inner_text().strip() == status
        python = tools.nth(0)
        assert "python" in python.locator(".jsa-tool-name").inner_text()
        python.locator("summary").first.click()  # tool parts are collapsible
        # code as code: the python input highlighted, not escaped JSON
        code = python.locator(".jsa-tool-input.jsa-code")
        assert code.inner_text().strip() == "df = pd.read_csv('data.csv')\ndf.isna().sum()"
        assert code.locator("span[class]").count() >= 3  # tokens coloured by the theme
        more = python.locator(".jsa-long-output summary").inner_text()
        assert f"lines kept (of {len(BIG_OUTPUT):,} characters)" in more
        assert output.locator(".jsa-truncated").count() >= 1  # the 36 KB output was cut
        # the pruned output is marked, and the original is one click away
        pruned = output.locator(".jsa-part-tool:has(.jsa-badge-pruned)")
        assert pruned.count() == 1
        pruned.locator("summary").first.click()
        assert "Old tool result content cleared" in pruned.locator(".jsa-pruned-note").inner_text()
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
        # the budget gauge: segments, the compaction marker, tokens per step, a compaction mark
        gauge = output.locator(".jsa-budget")
        assert gauge.locator(".jsa-gauge .jsa-seg-used").count() == 2  # context and prune bars
        assert "compact" in gauge.locator(".jsa-marker-usable").inner_text()
        assert gauge.locator(".jsa-sparkline rect.jsa-spark-bar").count() == 4
        assert gauge.locator(".jsa-spark-compaction").count() == 1
        assert "2,160 / " in gauge.locator(".jsa-budget-used").inner_text()
        _assert_sparkline_filled(gauge)
        # the %agent budget cell: the gauge alone
        budget_only = page.locator(".jp-OutputArea-output.jsa-transcript").nth(1)
        assert budget_only.locator(".jsa-budget").count() == 1
        assert budget_only.locator(".jsa-message").count() == 0
        # a python call whose code raised: completed in the data, a red "SyntaxError" badge
        failed = page.locator(".jp-OutputArea-output.jsa-transcript").nth(2)
        failed.scroll_into_view_if_needed(timeout=30_000)
        call = failed.locator(".jsa-part-tool").first
        call.wait_for(state="visible", timeout=30_000)
        assert call.get_attribute("data-status") == "failed"
        badge = call.locator(".jsa-badge-status-failed")
        assert badge.inner_text().strip() == "SyntaxError"
        assert badge.locator("svg.jsa-icon").count() == 1
        assert failed.locator(".jsa-badge-status-completed").count() == 0
        assert call.get_attribute("open") is not None  # opened like an error
        assert "SyntaxError: invalid syntax" in call.locator(".jsa-tool-output").first.inner_text()
        # the exception line first, above the code and the traceback
        problem = call.locator(".jsa-tool-problem")
        assert problem.inner_text() == "SyntaxError: invalid syntax"
        above = "(a, b) => a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING"
        assert problem.evaluate(above, call.locator(".jsa-tool-output").first.element_handle())
        background = "e => getComputedStyle(e).backgroundColor"
        green = output.locator(".jsa-badge-status-completed").first.evaluate(background)
        assert badge.evaluate(background) != green  # not the green of a completed call

        _shot(output, "01-saved-transcript-opened")
        # %agent browse, reopened: its widget is gone with its kernel; the static list instead
        browse = page.locator(".jp-Cell").nth(4)
        browse.scroll_into_view_if_needed()
        fallback = browse.locator(".jsa-fallback.jsa-fallback-shown")
        _wait_for(lambda: fallback.count() == 1, 30, "the browse fallback")
        shown = browse.locator(".jp-OutputArea").inner_text()
        assert "Error displaying widget" not in shown and "Session browser:" not in shown
        listed = fallback.locator(".jsa-fallback-text").inner_text()
        assert "Missing values in data.csv" in listed and "title" in listed.splitlines()[0]
        _shot(browse, "01c-saved-browse-fallback", doc="browse-reopened")
    finally:
        page.close()
    assert not _our_errors(page), page.errors


def _assert_sparkline_filled(gauge) -> None:
    """The tallest bar reaches the top of the chart; a usable line is drawn only inside it."""
    box = gauge.locator("svg.jsa-spark")
    height = float(box.get_attribute("height"))
    bars = gauge.locator("svg.jsa-spark rect.jsa-spark-bar")
    tops = [float(bars.nth(i).get_attribute("y")) for i in range(bars.count())]
    assert min(tops) <= 0.15 * height, (tops, height)  # no empty band above the bars
    line = gauge.locator("svg.jsa-spark .jsa-spark-usable")
    if line.count():
        assert 0 <= float(line.get_attribute("y1")) <= height


# -- a notebook a user works in -------------------------------------------------------------


class Notebook:
    """One open notebook: type cells, run them, read their outputs."""

    def __init__(self, page):
        self.page = page
        self.panel = page.locator(".jp-NotebookPanel:visible")
        self.cells = self.panel.locator(".jp-Notebook .jp-Cell")

    def run(self, source: str, *, wait: bool = True, timeout: float = 60):
        """Type ``source`` into a new cell at the end and press Shift+Enter; returns the cell."""
        page = self.page
        last = self.cells.last
        if last.locator(".cm-content").inner_text().strip():
            last.locator(".jp-InputPrompt").click()  # command mode on the last cell
            page.keyboard.press("Escape")
            page.keyboard.press("b")  # a new cell below
        index = self.cells.count() - 1
        cell = self.cells.nth(index)
        cell.locator(".cm-content").click()
        page.keyboard.type(source)
        page.keyboard.press("Shift+Enter")
        prompt = cell.locator(".jp-InputPrompt")
        for _ in range(100):  # the run starts: [ ] becomes [*] (or the count, for a fast cell)
            if prompt.inner_text().strip() != "[ ]:":
                break
            page.wait_for_timeout(100)
        else:  # the key went astray while JupyterLab was busy (2 loaded cores): press it again
            cell.locator(".cm-content").click()
            page.keyboard.press("Shift+Enter")
        if wait:
            self.wait(cell, timeout)
        return cell

    def wait(self, cell, timeout: float = 60) -> None:
        """Until the cell has run: its prompt shows an execution count instead of ``*``."""
        deadline = time.monotonic() + timeout
        while not re.fullmatch(r"\[\d+\]:", cell.locator(".jp-InputPrompt").inner_text().strip()):
            if time.monotonic() > deadline:
                _shot(self.page, "failure")
                raise AssertionError(
                    f"the cell did not finish in {timeout} s:\n"
                    f"{cell.inner_text()[-2000:]}\n"
                    "(the page: artifacts/jupyterlab/failure.png)"
                )
            self.page.wait_for_timeout(100)


def _transcript(cell):
    return cell.locator(".jp-OutputArea-output.jsa-transcript").last


def _wait_for(predicate, timeout: float = 30, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def notebook(lab, browser):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [nbformat.v4.new_code_cell("")]
    lab.api(
        "/api/contents/live.ipynb", {"type": "notebook", "format": "json", "content": nb}, "PUT"
    )
    page = _open(browser, lab, "live.ipynb")
    _wait_for(
        lambda: any(
            s["path"] == "live.ipynb" and s["kernel"]["execution_state"] == "idle"
            for s in lab.api("/api/sessions")
        ),
        90,
        "the notebook's kernel",
    )
    page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
        state="attached", timeout=60_000
    )
    notebook = Notebook(page)
    # the file browser closed: the cell gets the window's width
    page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
    cell = notebook.run("%load_ext jupyter_session_agent", timeout=90)
    assert cell.locator(".jp-OutputArea-output").count() == 0, cell.inner_text()  # loads silently
    try:
        yield notebook
    finally:
        _shot(page, "99-last-page")  # where the notebook ended: what to look at on a failure
        page.close()
        assert not _our_errors(page), page.errors


def _tool_message(request: dict) -> str:
    tools = [m for m in request["messages"] if m.get("role") == "tool"]
    return json.dumps(tools, ensure_ascii=False)


def test_a_live_turn_streams_in_place_and_takes_the_generated_title(notebook, scripted, lab):
    scripted.script(
        {"tool_calls": [{"name": "list", "arguments": {"path": "."}}]},
        {"text": LIVE_TEXT, "chunk_chars": 6, "delay": 0.06},  # about 2.5 s of streaming
        {"text": TITLE, "first_delay": 1.5},  # the title call, answered after the turn has ended
    )
    page = notebook.page
    cell = notebook.run("%%agent\nWhat is in this directory?", wait=False)
    view = _transcript(cell)
    view.locator(".jsa-badge-live").wait_for(timeout=30_000)
    assert "jsa-live" in view.get_attribute("class")
    # progress: the elapsed time and what the turn waits for (read while the answer streams)
    progress = view.locator(".jsa-progress")
    clocks: list[str] = []
    # the answer grows in place while the model streams it: one output, updated
    seen: list[str] = []
    shot = False
    while view.locator(".jsa-badge-live").count():
        clocks.extend(progress.all_inner_texts())  # no waiting: it goes with the final render
        answer = view.locator(".jsa-assistant .jsa-part-text").last
        if answer.count():
            text = answer.inner_text()
            if not seen or text != seen[-1]:
                seen.append(text)
            if not shot and len(text) > len(LIVE_TEXT) // 2:
                shot = True
                _shot(cell, "02-live-turn-streaming")
        page.wait_for_timeout(40)
    assert len(seen) >= 4, seen
    assert all(re.fullmatch(r"\d+ s · (waiting for the model.*|running list)", c) for c in clocks)
    assert len({c.split(" s ")[0] for c in clocks}) >= 2, clocks  # the seconds went on
    assert all(b.startswith(a.rstrip()[:-1]) for a, b in zip(seen, seen[1:])), seen  # appended
    assert len(seen[0]) < len(LIVE_TEXT) // 2
    assert cell.locator(".jp-OutputArea-output.jsa-transcript").count() == 1
    notebook.wait(cell)
    # the final state: not live, the whole answer, the tool completed, steps and budget
    assert "jsa-live" not in view.get_attribute("class")
    assert view.locator(".jsa-assistant .jsa-part-text").last.inner_text().strip() == LIVE_TEXT
    tool = view.locator(".jsa-part-tool")
    assert tool.count() == 1 and tool.get_attribute("data-status") == "completed"
    assert "data.csv" in tool.locator(".jsa-tool-output").text_content()  # collapsed: completed
    assert view.locator(".jsa-part-step-finish").count() == 2
    assert view.locator(".jsa-budget .jsa-budget-used").count() == 1
    _assert_sparkline_filled(view.locator(".jsa-budget"))
    _assert_compact(view, tools=1, steps=2)
    # the title generated after the first turn replaces "New session - <timestamp>" in this cell
    title = view.locator(".jsa-header .jsa-title")
    _wait_for(
        lambda: title.inner_text() == TITLE, 20, f"the title {TITLE!r}, not {title.inner_text()!r}"
    )
    asked = [r["messages"][-1]["content"] for r in scripted.requests()]
    assert asked[-1].endswith("What is in this directory?")  # the title call, after the turn
    _shot(cell, "03-live-turn-final", doc="compact-turn")
    # details on demand: the call's input and output, then the steps and the budget gauge
    tool.locator("summary").first.click()
    assert tool.locator(".jsa-tool-output").first.is_visible()
    footer = view.locator("details.jsa-footer")
    footer.locator("summary").first.click()
    assert view.locator(".jsa-budget").is_visible()
    assert view.locator(".jsa-part-step-finish").first.is_visible()
    _shot(cell, "03b-live-turn-details", doc="compact-turn-details")
    tool.locator("summary").first.click()
    footer.locator("summary").first.click()
    # saved: the notebook file holds the final view, with the title
    _save(notebook, lab, "live.ipynb")
    cells = lab.api("/api/contents/live.ipynb?content=1")["content"]["cells"]
    saved = [o["data"][MIME_TYPE] for o in cells[1]["outputs"] if MIME_TYPE in o.get("data", {})]
    assert len(saved) == 1 and saved[0]["live"] is False and saved[0]["session"]["title"] == TITLE
    assert [m["info"]["role"] for m in saved[0]["messages"]] == ["user", "assistant", "assistant"]
    assert saved[0]["detail"] == "compact" and "progress" not in saved[0]
    # reopened in another window, as a colleague would open the file: the same compact turn
    page = notebook.page.context.browser.new_page(viewport={"width": 1280, "height": 900})
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    try:
        page.goto(f"{lab.url}/lab/tree/live.ipynb?reset&token={lab.token}", timeout=90_000)
        reopened = page.locator(".jp-OutputArea-output.jsa-transcript").first
        reopened.wait_for(state="visible", timeout=60_000)
        assert "jsa-live" not in reopened.get_attribute("class")
        _assert_compact(reopened, tools=1, steps=2)
        assert reopened.locator(".jsa-title").inner_text() == TITLE
        _shot(reopened, "03c-reopened")
    finally:
        page.close()
    assert not _our_errors(page), page.errors


def _assert_compact(view, *, tools: int, steps: int) -> None:
    """The compact view: the answer and one line per call in sight; the step lines, the
    model's meta line and the gauge folded under a one-line footer."""
    assert "jsa-compact" in view.get_attribute("class")
    calls = view.locator(".jsa-part-tool")
    assert calls.count() == tools
    for i in range(tools):
        line = calls.nth(i).locator("summary").first
        assert line.locator(".jsa-tool-name").count() == 1
        assert line.locator(".jsa-tool-summary").count() == 1
        assert calls.nth(i).get_attribute("open") is None
        assert line.bounding_box()["height"] < 40  # one line
    footer = view.locator("details.jsa-footer")
    assert footer.count() == 1 and footer.get_attribute("open") is None
    text = footer.locator("summary .jsa-footer-text").inner_text()
    assert re.fullmatch(
        rf"[\d,]+ tokens( \(estimated\))? · \d+% of the context · \$\d\.\d{{4}} · {steps} steps?",
        text,
    )
    assert view.locator(".jsa-part-step-finish").count() == steps
    assert not view.locator(".jsa-part-step-finish").first.is_visible()
    assert not view.locator(".jsa-budget").is_visible()
    assert not view.locator(".jsa-meta").first.is_visible()  # no "openai/scripted · tokens"


def _save(notebook, lab, path: str) -> None:
    """Ctrl+S, then wait until the file is written. Only its metadata is polled meanwhile:
    reading a notebook while the server writes it makes the server "recover" it from the
    half-written intermediate, and the save then fails."""

    def modified() -> str:
        return lab.api(f"/api/contents/{path}?content=0")["last_modified"]

    before = modified()
    notebook.page.keyboard.press("Escape")
    notebook.page.keyboard.press("Control+s")
    dirty = notebook.page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
    _wait_for(lambda: modified() != before and not dirty.count(), 20, "the notebook saved")
    time.sleep(0.3)  # the write has landed: the checkpoint follows it


def _asking(cell):
    """The approval panel of the running cell, once it shows; the kernel's stdin box is there
    too, hidden (the buttons answer it)."""
    view = _transcript(cell)
    panel = view.locator(".jsa-approval")
    panel.wait_for(timeout=30_000)
    cell.locator(".jp-Stdin").wait_for(state="attached", timeout=30_000)
    assert not cell.locator(".jp-Stdin").is_visible()
    return view, panel


def _no_keystroke_left(cell) -> None:
    """The saved output says what was decided, not what was typed: no stdin echo, no prompt."""
    texts = " ".join(cell.locator(".jp-OutputArea-output").all_inner_texts())
    assert "[o]nce" not in texts and "Allow python" not in texts and "Allow bash" not in texts


def test_approve_once_with_the_button_runs_the_tool(notebook, scripted):
    code = "total = 6 * 7\nprint('the total is', total)"
    answer = (
        "The python tool ran in your kernel: `total` is **42**, and it stays defined there, "
        "so the next cell can use it. Six times seven is also the number of rows in data.csv "
        "that have no missing value at all."
    )
    scripted.script(
        {"tool_calls": [{"name": "python", "arguments": {"code": code}}]},
        {"text": answer, "chunk_chars": 6, "delay": 0.05},
    )
    cell = notebook.run("%%agent\nCompute six times seven in the kernel.", wait=False)
    view, panel = _asking(cell)
    # the pending call: highlighted code once (no escaped JSON, no printed copy), four buttons
    assert panel.locator(".jsa-code").inner_text().strip() == code
    assert panel.locator(".jsa-code span[class]").count() >= 3
    shown = " ".join(cell.locator(".jp-OutputArea-output").all_inner_texts())
    assert '"code"' not in shown and "\\n" not in shown  # no escaped JSON anywhere
    stdout = "[data-mime-type='application/vnd.jupyter.stdout']"
    assert cell.locator(f".jp-OutputArea-output{stdout}").count() == 0  # no printed copy
    labels = panel.locator("button:visible").all_inner_texts()
    assert labels == ["Allow once", "Always", "Reject", "Reject with feedback"]
    badge = view.locator(".jsa-badge-live")
    assert badge.inner_text().strip() == "waiting for approval"
    # the call's own line waits too: no "running" spinner while nothing runs
    line = view.locator(".jsa-part-tool .jsa-tool-head .jsa-badge").first
    assert line.inner_text().strip() == "waiting for approval"
    assert re.fullmatch(
        r"\d+ s · waiting for your approval", view.locator(".jsa-progress").inner_text()
    )
    assert _font_safe(panel.inner_text())
    _shot(cell, "04-approval-question", doc="approval")
    panel.locator("button", has_text="Allow once").click()
    # the answer streams in under the call that ran
    _wait_for(
        lambda: (
            len(view.locator(".jsa-assistant .jsa-part-text").last.inner_text()) > 80
            if view.locator(".jsa-assistant .jsa-part-text").count()
            else False
        ),
        30,
        "the answer",
    )
    assert view.locator(".jsa-approval").count() == 0
    assert view.locator(".jsa-badge-live").inner_text().strip() == "running"
    _shot(cell, "05-live-turn-after-approval", doc="live-turn")
    notebook.wait(cell)
    assert view.locator(".jsa-badge-live").count() == 0
    tool = _transcript(cell).locator(".jsa-part-tool")
    assert tool.get_attribute("data-status") == "completed"
    assert "the total is 42" in tool.locator(".jsa-tool-output").text_content()
    assert tool.locator(".jsa-tool-decision").inner_text() == "allowed once by you"
    _no_keystroke_left(cell)
    requests = scripted.turn_requests()
    assert len(requests) == 2 and "the total is 42" in _tool_message(requests[1])
    _shot(cell, "06-approval-once-done")
    # the tool ran in this kernel: its variable is there
    check = notebook.run("print(total + 0)")
    assert check.locator(".jp-OutputArea-output").inner_text().strip() == "42"


def test_always_allows_the_next_calls_without_asking(notebook, scripted):
    scripted.script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "wc -l data.csv"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "wc -l notes.md"}}]},
        {"text": "data.csv has 3 lines, notes.md has 1."},
    )
    cell = notebook.run("%%agent\nCount the lines of data.csv and notes.md.", wait=False)
    view, panel = _asking(cell)
    assert "wc -l data.csv" in panel.locator(".jsa-code").inner_text()
    assert "wc" in panel.locator("button", has_text="Always").get_attribute("title")
    panel.locator("button", has_text="Always").click()
    notebook.wait(cell)  # the second call ran without a question
    tools = _transcript(cell).locator(".jsa-part-tool")
    assert tools.count() == 2
    assert [tools.nth(i).get_attribute("data-status") for i in range(2)] == ["completed"] * 2
    assert tools.nth(0).locator(".jsa-tool-decision").inner_text() == "allowed always by you"
    assert tools.nth(1).locator(".jsa-tool-decision").count() == 0  # allowed by the rule
    _no_keystroke_left(cell)
    assert len(scripted.turn_requests()) == 3
    _shot(cell, "06b-approval-always")


def test_reject_with_feedback_reaches_the_model_and_plain_reject_stops(notebook, scripted, lab):
    feedback = "keep the files, only list them"
    remove = {"code": "import os; os.remove('notes.md')"}
    scripted.script(
        {"tool_calls": [{"name": "python", "arguments": remove}]},
        {"text": "Understood: I will only list them."},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "rm clean.py"}}]},
        {"text": "never sent: a plain reject ends the turn"},
    )
    cell = notebook.run("%%agent\nTidy up the directory.", wait=False)
    view, panel = _asking(cell)
    panel.locator("button", has_text="Reject with feedback").click()
    panel.locator("textarea").fill(feedback)
    _shot(cell, "07a-reject-with-feedback-typing")
    panel.locator("button", has_text="Send feedback and reject").click()
    notebook.wait(cell)
    view = _transcript(cell)
    tool = view.locator(".jsa-part-tool")
    assert tool.get_attribute("data-status") == "error"
    assert feedback in tool.locator(".jsa-tool-output").text_content()
    decision = tool.locator(".jsa-tool-decision").inner_text()
    assert decision == f"rejected with feedback: {feedback} by you"
    assert "Understood" in view.locator(".jsa-assistant .jsa-part-text").last.inner_text()
    _no_keystroke_left(cell)
    requests = scripted.turn_requests()
    assert len(requests) == 2 and feedback in _tool_message(requests[1])  # the model received it
    _shot(cell, "07-reject-with-feedback")

    cell = notebook.run("%%agent\nThen remove clean.py.", wait=False)
    view, panel = _asking(cell)
    panel.locator("button", has_text="Reject").first.click()
    notebook.wait(cell)
    tool = _transcript(cell).locator(".jsa-part-tool")
    assert tool.get_attribute("data-status") == "error" and "rejected" in tool.text_content()
    assert tool.locator(".jsa-tool-decision").inner_text() == "rejected by you"
    assert len(scripted.turn_requests()) == 3  # no further call in that turn
    assert (lab.root / "clean.py").exists()
    _shot(cell, "08-plain-reject")


def test_the_compact_view_and_the_approval_in_the_dark_theme(notebook, scripted):
    page = notebook.page
    _theme(page, "JupyterLab Dark")
    try:
        scripted.script(
            {
                "tool_calls": [
                    {
                        "name": "python",
                        "arguments": {"code": "import pandas as pd\npd.DataFrame({'a': [1]})['b']"},
                    }
                ]
            },
            {"text": "There is no column `b`: the frame has only `a`."},
        )
        cell = notebook.run("%%agent\nShow column b of a small frame.", wait=False)
        view, panel = _asking(cell)
        _assert_contrast(
            view,
            [
                ".jsa-approval-head",
                ".jsa-progress",
                ".jsa-button-once",
                ".jsa-button-reject",
                ".jsa-title",
            ],
        )
        _shot(cell, "12-dark-approval", doc="dark-approval")
        panel.locator("button", has_text="Allow once").click()
        notebook.wait(cell)
        view = _transcript(cell)
        tool = view.locator(".jsa-part-tool")
        assert tool.get_attribute("data-status") == "failed"
        # the exception line in sight without opening the call, not pandas internals
        problem = tool.locator(".jsa-tool-problem")
        assert problem.is_visible() and problem.inner_text().startswith("KeyError: 'b'")
        _assert_contrast(
            view,
            [
                ".jsa-footer-text",
                ".jsa-tool-problem",
                ".jsa-tool-summary",
                ".jsa-tool-decision",
                ".jsa-title",
            ],
        )
        _shot(cell, "13-dark-compact", doc="dark-compact")
    finally:
        _theme(page, "JupyterLab Light")


def _assert_contrast(root, selectors: list[str]) -> None:
    """Each element's text against what is painted behind it: 4.5:1 (WCAG AA)."""
    pairs = root.evaluate(_CONTRAST_JS, selectors)
    assert len(pairs) == len(selectors), (selectors, pairs)
    for fg, bg, what in pairs:
        hi, lo = sorted((_luminance(fg), _luminance(bg)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (what, fg, bg)


_CONTRAST_JS = """(root, selectors) => {
    const ctx = document.createElement('canvas').getContext('2d');
    const rgba = css => {
        ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
        return Array.from(ctx.getImageData(0, 0, 1, 1).data);
    };
    const over = (top, under) => top.slice(0, 3).map((c, i) =>
        Math.round(c * top[3] / 255 + under[i] * (1 - top[3] / 255)));
    const behind = e => {
        const chain = [];
        for (; e; e = e.parentElement) chain.push(getComputedStyle(e).backgroundColor);
        return chain.reverse().reduce((under, css) => over(rgba(css), under), [255, 255, 255]);
    };
    return selectors.map(q => root.querySelector(q)).filter(e => e).map(e => {
        const bg = behind(e);
        return [over(rgba(getComputedStyle(e).color), bg), bg, e.className || e.tagName];
    });
}"""


def _luminance(rgb: list[int]) -> float:
    lin = [
        c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb)
    ]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_the_stop_button_interrupts_a_turn_and_the_next_cell_works(notebook, scripted):
    scripted.script(
        {"text": "word " * 400, "chunk_chars": 5, "delay": 0.25},  # a minute and a half
        {"text": "Back after the interruption."},
    )
    page = notebook.page
    cell = notebook.run("%%agent\nWrite a very long essay.", wait=False)
    view = _transcript(cell)
    _wait_for(lambda: view.count() and "word word" in view.inner_text(), 30, "the stream to start")
    started = time.monotonic()
    stop = "[data-jp-item-name='interrupt'] button, [data-jp-item-name='interrupt'] jp-button"
    notebook.panel.locator(stop).first.click()  # the toolbar's stop button
    notebook.wait(cell, timeout=20)
    assert time.monotonic() - started < 10
    errors = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert "interrupted" in errors.inner_text()
    assert len(errors.inner_text().strip().splitlines()) == 1  # one line
    assert "jsa-live" not in view.get_attribute("class")  # the view is final
    partial = view.locator(".jsa-assistant .jsa-part-text").last.inner_text()
    assert "word word" in partial  # the partial answer is kept
    _shot(cell, "09-interrupted")
    after = notebook.run("%%agent\nAre you still there?")
    assert "Back after the interruption." in _transcript(after).inner_text()
    assert "jsa-live" not in _transcript(after).get_attribute("class")
    sent = scripted.turn_requests()[-1]["messages"]
    assert any("word word" in json.dumps(m) for m in sent if m.get("role") == "assistant")


def test_browse_lists_sessions_and_opens_the_picked_one(notebook, lab):
    page = notebook.page
    cell = notebook.run("%agent browse")
    widget = cell.locator(".jsa-browser")
    widget.wait_for(timeout=30_000)
    select = widget.locator("select")
    options = select.locator("option")
    _wait_for(lambda: options.count() == 2 + len(OTHER_SESSIONS), 20, "the session list")
    # ipywidgets shows spaces as no-break spaces, so that the columns stay as typed
    labels = [label.replace("\xa0", " ") for label in options.all_inner_texts()]
    assert any(TITLE in label for label in labels), labels
    assert any("Missing values in data.csv" in label for label in labels), labels
    _assert_fits(widget, cell)
    # its static fallback (for a reopened notebook) stays hidden while the widget lives
    fallback = cell.locator(".jsa-fallback")
    fallback.wait_for(state="attached", timeout=10_000)
    page.wait_for_timeout(700)
    assert not fallback.is_visible() and "jsa-fallback-shown" not in fallback.get_attribute("class")
    # pick the synthetic session: its transcript renders below the list, with its budget once
    index = next(i for i, label in enumerate(labels) if "Missing values in data.csv" in label)
    options.nth(index).click()
    shown = widget.locator(".jsa-transcript")
    _wait_for(
        lambda: (
            shown.count()
            and shown.locator(".jsa-title").inner_text() == "Missing values in data.csv"
        ),
        20,
        "the picked session",
    )
    assert shown.locator(".jsa-message").count() == 7
    assert shown.locator(".jsa-part-tool").count() == 6
    assert widget.locator(".jsa-budget").count() == 1  # the budget once, not twice
    assert widget.locator(".widget-progress").count() == 0
    _assert_fits(widget, cell)
    _shot(cell, "10-browse")
    _shot(cell, "10-browse-top", doc="browse", top=720)
    # narrower, and in the dark theme: still inside the cell, still legible
    for width, theme in (
        (1024, "JupyterLab Light"),
        (1280, "JupyterLab Dark"),
        (800, "JupyterLab Dark"),
    ):
        page.set_viewport_size({"width": width, "height": 900})
        _theme(page, theme)
        _assert_fits(widget, cell)
        _assert_legible(widget)
        _shot(cell, f"11-browse-{width}-{theme.split()[-1].lower()}")
    _theme(page, "JupyterLab Light")
    page.set_viewport_size({"width": 1280, "height": 900})


def _theme(page, theme: str) -> None:
    command = "window.jupyterapp.commands.execute('apputils:change-theme', {theme: %r})"
    page.evaluate(command % theme)
    page.locator(f"body[data-jp-theme-name='{theme}']").wait_for(state="attached", timeout=20_000)
    page.wait_for_timeout(400)


def _assert_fits(widget, cell) -> None:
    """No horizontal scrolling anywhere in the widget, nothing past the cell's right edge, and the
    column headers start where the rows' columns start."""
    report = widget.evaluate("""root => {
        const out = root.closest('.jp-OutputArea-output');
        const wide = [root, out, ...root.querySelectorAll('*')]
            .filter(e => e.scrollWidth > e.clientWidth + 1 && e.tagName !== 'PRE'
                         && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX))
            .map(e => e.className || e.tagName);
        const head = root.querySelector('.jsa-head');
        const option = root.querySelector('select option');
        const select = root.querySelector('select');
        const hs = getComputedStyle(head), os = getComputedStyle(option);
        const left = (e, s) => e.getBoundingClientRect().left + parseFloat(s.paddingLeft)
                              + parseFloat(s.borderLeftWidth);
        return {wide, right: root.getBoundingClientRect().right,
                outRight: out.getBoundingClientRect().right,
                headLeft: left(head, hs), rowLeft: left(option, os),
                fonts: [hs.fontFamily, hs.fontSize, os.fontFamily, os.fontSize],
                selectScroll: [select.scrollWidth, select.clientWidth]};
    }""")
    assert not report["wide"], report
    assert report["right"] <= report["outRight"] + 1, report
    assert abs(report["headLeft"] - report["rowLeft"]) <= 1, report
    assert report["fonts"][:2] == report["fonts"][2:], report


def _assert_legible(widget) -> None:
    """Text in the list, its header and the transcript's key lines contrasts with what is behind
    it (4.5:1, WCAG AA), in the dark theme too. Colours are read as pixels (so color-mix() and
    translucent backgrounds count as they are painted): each background composited over the
    ones behind it."""
    pairs = widget.evaluate("""root => {
        const ctx = document.createElement('canvas').getContext('2d');
        const rgba = css => {
            ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
            return Array.from(ctx.getImageData(0, 0, 1, 1).data);
        };
        const over = (top, under) => top.slice(0, 3).map((c, i) =>
            Math.round(c * top[3] / 255 + under[i] * (1 - top[3] / 255)));
        const behind = e => {
            const chain = [];
            for (; e; e = e.parentElement) chain.push(getComputedStyle(e).backgroundColor);
            return chain.reverse().reduce((under, css) => over(rgba(css), under), [255, 255, 255]);
        };
        return ['.jsa-head', 'select', 'select option:checked', '.jsa-transcript .jsa-title',
                '.jsa-compaction-marker', '.jsa-pruned-count', '.jsa-pruned-note',
                '.jsa-part-retry', '.jsa-budget-used', '.jsa-badge-status-completed',
                '.jsa-badge-status-error', '.jsa-badge-status-interrupted', '.jsa-badge-summary',
                '.jsa-badge-pruned']
            .map(q => root.querySelector(q)).filter(e => e).map(e => {
                const bg = behind(e);
                return [over(rgba(getComputedStyle(e).color), bg), bg, e.className || e.tagName];
            });
    }""")

    def luminance(rgb: list[int]) -> float:
        lin = [
            c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
            for c in (v / 255 for v in rgb)
        ]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    assert len(pairs) == 14, pairs
    for fg, bg, what in pairs:
        hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (what, fg, bg)


# -- attachments (notebook context) -------------------------------------------------------------


def _attachments_notebook(path: Path, files: Path) -> None:
    """A saved turn whose prompt carries a mentioned text file, an image and a DataFrame value,
    built by the same code as ``%%agent -f``/``@path``/``-a`` (``context.prompt``)."""
    import io

    import nbformat
    import pandas as pd
    from PIL import Image

    from jupyter_session_agent.context import attach
    from jupyter_session_agent.context.prompt import Prompt, build, parts
    from jupyter_session_agent.core import ids
    from jupyter_session_agent.core.messages import ModelRef, TextPart, UserMessage, WithParts

    (files / "notes.md").write_text("# Source\nthe survey of March\n")
    image = io.BytesIO()
    Image.new("RGB", (24, 16), (30, 120, 200)).save(image, format="PNG")
    (files / "chart.png").write_bytes(image.getvalue())
    typed = build("Compare @notes.md with the chart", None, files=["chart.png"], cwd=files)
    value = attach.from_value(
        "df", {"df": pd.DataFrame({"age": [31, None], "income": [None, 52000]})}
    )
    prompt = Prompt(typed.text, typed.template, (), (*typed.attachments, value))
    sid = ids.descending("session")
    user = UserMessage(
        ids.ascending("message"), sid, 1_760_000_000_000, ModelRef("openai", "scripted")
    )
    text = TextPart(ids.ascending("part"), sid, user.id, text=prompt.text)
    bundle = TranscriptView(
        [WithParts(user, (text, *parts(prompt, sid, user.id)))]
    )._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%%agent -f chart.png -a df\nCompare @notes.md with the chart",
            execution_count=1,
            outputs=[nbformat.v4.new_output("display_data", data=bundle)],
        )
    ]
    nbformat.write(nb, path)


def test_attachment_chips_render(lab, browser):
    files = lab.tmp / "attachments"
    files.mkdir(exist_ok=True)
    _attachments_notebook(lab.root / "attachments.ipynb", files)
    page = _open(browser, lab, "attachments.ipynb", height=1400)
    try:
        output = page.locator(".jp-OutputArea-output.jsa-transcript").first
        output.wait_for(state="visible", timeout=60_000)
        chips = output.locator(".jsa-part-file.jsa-chip")
        assert chips.count() == 3
        names = [chips.nth(i).locator(".jsa-chip-name").inner_text() for i in range(3)]
        assert names == ["chart.png", "notes.md", "df"]
        metas = [chips.nth(i).locator(".jsa-chip-meta").inner_text() for i in range(3)]
        assert metas[0].startswith("image/png · ") and metas[0].endswith("bytes")
        assert metas[1] == "text/plain · 29 bytes · mentioned as @notes.md"
        assert metas[2].startswith("text/plain · ") and metas[2].endswith(
            "notebook value (DataFrame)"
        )
        assert all(chips.nth(i).locator("svg.jsa-icon-file").count() == 1 for i in range(3))
        thumb = chips.nth(0).locator("img.jsa-chip-thumb")
        assert thumb.evaluate("img => img.complete && img.naturalWidth") == 24  # the PNG itself
        # what the model reads for the text attachments: collapsed under the chips
        sent = output.locator("details.jsa-attachment-text")
        assert sent.count() == 2 and sent.first.get_attribute("open") is None
        assert "sent to the model (" in sent.first.locator("summary").inner_text()
        sent.nth(1).locator("summary").click()
        assert "DataFrame df: 2 rows × 2 columns" in sent.nth(1).locator("pre").inner_text()
        assert "(synthetic)" not in output.inner_text() and _font_safe(output.inner_text())
        _shot(output, "attachment-chips")
    finally:
        page.close()
    assert not _our_errors(page), page.errors
