"""No script from a model, a tool, a file name, a title or an import runs in a real JupyterLab,
with our extension and without it (a JupyterLab that does not load it renders the
``text/markdown`` fallback of every output).

The outputs are made through the public path (a real IPython shell runs ``%%agent`` against the
scripted server and ``%agent sessions`` / ``turns`` / ``show``) with generated payloads
(``_xss.py``), saved in a notebook that is *trusted* (signed as ``jupyter trust`` does), so
JupyterLab renders them as it renders a live session's outputs: unsanitized. Every payload that
runs sets ``window.__xss``; after rendering, the page must have none, and the
output DOM no script, event handler or script URL. One imported part of an unknown type must
not blank the transcript our renderer draws.
"""

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
from _bundles import fresh_ids
from _xss import DOM_CHECK, RUN, payloads, split_pairs

from jupyter_session_agent.core import ids
from jupyter_session_agent.testing.scripted_server import Reply

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


def _skip_reason() -> str | None:
    import importlib.util

    if CHROMIUM is None:
        return "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does this)"
    for module in ("playwright", "jupyterlab", "nbformat"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


if _skip_reason():
    pytest.skip(_skip_reason(), allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _outputs(ip, magic, line, cell=None):
    from IPython.utils.capture import capture_output

    with capture_output() as out:
        value = (
            ip.run_cell_magic(magic, line, cell)
            if cell is not None
            else ip.run_line_magic(magic, line)
        )
    bundles = [o.data for o in out.outputs]
    if value is not None:
        bundles.append(ip.display_formatter.format(value)[0])
    return bundles


def _hostile_notebook(ip, server, magics, tmp_path, root: Path) -> list[int]:
    """The notebook ``root/hostile.ipynb``: outputs of a session full of payloads."""
    import nbformat

    magics.request_timeout = 300.0  # the whole corpus in one answer
    corpus = payloads()
    numbers = [n for n, _ in corpus]
    text = "\n\n".join(t for _, t in corpus)
    bad_file = "<img src=x onerror=Object.assign(window,{__xss:[901]})>.csv"
    (tmp_path / bad_file).write_text("a\n1\n")
    calls = (
        {"name": "<svg onload=Object.assign(window,{__xss:[902]})>", "arguments": {}},
        {"name": "read", "arguments": {"filePath": bad_file}},
    )
    server.enqueue(Reply(tool_calls=calls), Reply(text=text))
    cells = [
        _outputs(ip, "agent", "", "go <img src=x onerror=Object.assign(window,{__xss:[903]})>")
    ]
    magics.session.update_info(title=f"<img src=x onerror={RUN.replace('{n}', '904')}>")
    for n, first, second in split_pairs(20_000):
        server.enqueue(Reply(text=first + "\n" + second))
        cells.append(_outputs(ip, "agent", "", f"split {n}"))
        numbers.append(n)
    cells.append(_outputs(ip, "agent", "sessions"))
    cells.append(_outputs(ip, "agent", "turns"))
    # an imported session with one part of a type this renderer does not know
    out = tmp_path / "b.json"
    server.enqueue(Reply(text="the readable answer"))
    ip.run_cell_magic("agent", "--new", "hello")
    ip.run_line_magic("agent", f"export --format json --out {out}")
    data = json.loads(out.read_text())
    new = fresh_ids(data)["info"]["id"]
    data["messages"][-1]["parts"].insert(0, {"id": ids.ascending("part"), "type": "x y"})
    out.write_text(json.dumps(data))
    ip.run_line_magic("agent", f"import {out}")
    ip.run_line_magic("agent", f"use {new}")
    from jupyter_session_agent.ui.display import TranscriptView

    view = TranscriptView(magics.store().messages(new), session=magics.session.info)
    cells.append([view._repr_mimebundle_()])
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for i, bundles in enumerate(cells):
        outputs = [nbformat.v4.new_output("display_data", data=b) for b in bundles]
        nb.cells.append(nbformat.v4.new_code_cell("%agent", outputs=outputs, execution_count=i + 1))
    nbformat.write(nb, root / "hostile.ipynb")
    return numbers + [901, 902, 903, 904]


class _Lab:
    def __init__(self, tmp: Path, extension: bool):
        self.tmp, self.root, self.home = tmp, tmp / "root", tmp / "home"
        self.root.mkdir(parents=True)
        self.home.mkdir()
        self.data_dir = self.home / ".local" / "share" / "jupyter"
        self.config_dir = self.home / ".jupyter"
        build = Path(__file__).resolve().parents[1] / "jupyter_session_agent" / "labextension"
        if extension and (build / "package.json").exists():
            # this tree's build first: JUPYTER_PATH comes before every other place
            target = self.home / "jupyter-path" / "labextensions" / "jupyter-session-agent"
            shutil.copytree(build, target)
            shutil.copy(build.parents[1] / "labextension" / "install.json", target)
        tracker = self.home / "settings" / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True)  # every cell rendered, not only those in view
        (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        if not extension:  # as `jupyter labextension disable jupyter-session-agent` writes it
            labconfig = self.config_dir / "labconfig"
            labconfig.mkdir(parents=True)
            (labconfig / "page_config.json").write_text(
                json.dumps({"disabledExtensions": {"jupyter-session-agent": True}})
            )

    def sign(self, path: Path) -> None:
        """Trust the notebook for this server (``jupyter trust``)."""
        import nbformat
        from nbformat.sign import NotebookNotary

        self.data_dir.mkdir(parents=True, exist_ok=True)
        nb = nbformat.read(path, as_version=4)
        NotebookNotary(data_dir=str(self.data_dir)).sign(nb)

    def __enter__(self):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JUPYTER", "IPYTHON", "OPENAI", "PYTHONSTARTUP"))
        }
        env.update(
            HOME=str(self.home),
            JUPYTER_CONFIG_DIR=str(self.config_dir),
            JUPYTER_DATA_DIR=str(self.data_dir),
            JUPYTER_PATH=str(self.home / "jupyter-path"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(self.home / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(self.home / "workspaces"),
            JUPYTER_PLATFORM_DIRS="1",
        )
        self.log = open(self.tmp / "lab.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.news_url=",
                "--ServerApp.terminals_enabled=False",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.root,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(
                    f"{self.url}/api/status?token={self.token}", timeout=2
                ) as r:
                    json.load(r)
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((self.tmp / "lab.log").read_text()[-3000:]) from None
                time.sleep(0.3)

    def extensions(self) -> dict[str, bool]:
        request = urllib.request.Request(
            f"{self.url}/lab/api/extensions", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=20) as r:
            return {e["name"]: e.get("enabled", True) for e in json.load(r)}

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def _render(lab: _Lab, path: str):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 4000})
            page.goto(f"{lab.url}/lab/tree/{path}?reset&token={lab.token}", timeout=120_000)
            outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
            outputs.first.wait_for(state="visible", timeout=120_000)
            page.wait_for_timeout(3000)  # Markdown renders asynchronously
            for i in range(outputs.count()):  # every output drawn and seen
                outputs.nth(i).scroll_into_view_if_needed()
            page.wait_for_timeout(2000)
            ran = page.evaluate("window.__xss || []")
            if ran:  # where it ran from, for the failure report
                where = page.evaluate(
                    "(n) => Array.from(document.querySelectorAll('audio,video,img,svg,source'))"
                    ".filter(e => e.outerHTML.includes('__xss')).map(e => "
                    "e.outerHTML.slice(0, 200) + ' IN ' + e.parentElement.outerHTML.slice(0, 300))",
                    ran[0],
                )
                ran = [ran, where[:5]]
            title = page.title()
            found = []
            for i in range(outputs.count()):
                found += outputs.nth(i).evaluate(DOM_CHECK)
            texts = [outputs.nth(i).inner_text() for i in range(outputs.count())]
            ours = page.locator(".jsa-transcript").count()
            return ran, title, found, texts, ours
        finally:
            browser.close()


@pytest.mark.parametrize("extension", [True, False], ids=["with-extension", "without-extension"])
def test_no_payload_runs_in_jupyterlab(ip, server, magics, tmp_path, extension):
    lab = _Lab(tmp_path / "lab", extension)
    numbers = _hostile_notebook(ip, server, magics, tmp_path, lab.root)
    lab.sign(lab.root / "hostile.ipynb")
    with lab:
        enabled = lab.extensions().get("jupyter-session-agent")
        if extension and enabled is None:
            pytest.skip("the JupyterLab extension is not installed (pip install -e . builds it)")
        assert bool(enabled) == extension
        ran, title, found, texts, ours = _render(lab, "hostile.ipynb")
    assert ran == [] and not title.startswith("XSS"), (ran, title)
    assert found == [], found[:20]
    assert (ours > 0) == extension
    joined = "\n".join(texts)
    (tmp_path / f"texts-{extension}.txt").write_text(joined)
    assert "onerror=Object.assign(window,{__xss:[904]})" in joined  # shown, as text
    assert "the readable answer" in joined  # a part of type "x y" blanks nothing
    assert len(numbers) > 400
