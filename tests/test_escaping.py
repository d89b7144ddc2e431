"""Untrusted text never reaches HTML unescaped, and model answers still read as Markdown.

Through the public path: a real IPython shell runs ``%%agent`` against the scripted
OpenAI-compatible server, whose model answers, invents tool names, reads files with hostile
names and writes hostile titles; ``%agent sessions``, ``turns``, ``memory``, ``show`` and
``export`` build their outputs from that. Each output's ``text/markdown`` is rendered by real
Markdown parsers (mistune, the one ``jupyter nbconvert`` uses; markdown-it-py, a CommonMark
one) and by ``jupyter nbconvert --to html`` of a notebook holding the outputs, and the HTML is
parsed: no script, no event handler, no script URL. The payloads are generated (``_xss.py``).
The browser side (JupyterLab with and without the extension) is ``test_escaping_jupyterlab.py``.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys

import pytest
from _bundles import fresh_ids
from _xss import active_content, payloads, split_pairs
from IPython.utils.capture import capture_output

from jupyter_session_agent.core import ids
from jupyter_session_agent.render import escape as X
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.display import MIME_TYPE

needs_bs4 = pytest.mark.skipif(
    importlib.util.find_spec("bs4") is None, reason="beautifulsoup4 is not installed"
)


def _parsers():
    out = []
    if importlib.util.find_spec("mistune"):
        import mistune

        md = mistune.create_markdown(escape=False, plugins=["table", "strikethrough"])
        out.append(("mistune", md))  # raw HTML passes, as in nbconvert
    if importlib.util.find_spec("markdown_it"):
        from markdown_it import MarkdownIt

        md = MarkdownIt("commonmark", {"html": True}).enable("table")
        out.append(("markdown-it", md.render))
    return out


def rendered(markdown_text: str) -> list[tuple[str, str]]:
    return [(name, render(markdown_text)) for name, render in _parsers()]


def assert_inert(markdown_text: str, what: str) -> None:
    from bs4 import BeautifulSoup

    for name, html in rendered(markdown_text):
        found = active_content(BeautifulSoup(html, "html.parser"))
        assert not found, f"{what} via {name}: {found}\n{markdown_text[:2000]}"


def outputs_of(ip, magic: str, line: str, cell: str | None = None) -> list[dict]:
    """The rich outputs (mime bundles) a magic displays or returns, as a notebook keeps them."""
    with capture_output() as out:
        value = (
            ip.run_cell_magic(magic, line, cell)
            if cell is not None
            else ip.run_line_magic(magic, line)
        )
    bundles = [o.data for o in out.outputs]
    if value is not None:
        data, _ = ip.display_formatter.format(value)
        bundles.append(data)
    return bundles


def markdown_of(bundles: list[dict]) -> str:
    return "\n\n".join(b["text/markdown"] for b in bundles if "text/markdown" in b)


# --------------------------------------------------------------------------
# the escaping function itself: Markdown kept, HTML escaped


def test_markdown_stays_markdown_where_that_is_safe():
    from bs4 import BeautifulSoup

    text = (
        "Here is *the* **plan**:\n\n- load `data.csv`\n- keep rows where `a < b`\n\n"
        "```python\nif a < b and c > d:\n    print('<b>')\n```\n\n"
        "See [the docs](https://pandas.pydata.org) or <b>this</b>."
    )
    for name, html in rendered(X.markdown(text)):
        soup = BeautifulSoup(html, "html.parser")
        assert soup.find("em").text == "the" and soup.find("strong").text == "plan", name
        assert [li.text for li in soup.find_all("li")] == ["load data.csv", "keep rows where a < b"]
        assert soup.find("pre").text == "if a < b and c > d:\n    print('<b>')\n", name
        assert soup.find("a")["href"] == "https://pandas.pydata.org", name
        assert soup.find("b") is None and "<b>this</b>" in soup.text, name


@needs_bs4
def test_every_generated_payload_is_inert_in_every_parser():
    corpus = payloads()
    assert len(corpus) > 400
    for n, text in corpus:
        assert_inert(X.markdown(text), f"payload {n}")
        assert_inert(f"| a |\n|---|\n| {X.cell(text)} |", f"payload {n} in a cell")
        assert_inert(f"**{X.markdown(text, fences=False)}** x", f"payload {n} inline")
        assert_inert(X.code(text), f"payload {n} as code")
    # one text holding many payloads: a fence or code span opened by one must not uncover another
    texts = [t for _, t in corpus]
    assert_inert(X.markdown("\n\n".join(texts)), "the whole corpus as one answer")
    rng = random.Random(24)
    for k in range(200):
        joined = rng.choice(["\n", "\n\n", " "]).join(rng.sample(texts, 4))
        assert_inert(X.markdown(joined), f"random join {k}")


# --------------------------------------------------------------------------
# through the magics


def _hostile_session(ip, server, magics, tmp_path) -> tuple[str, list[int]]:
    """A session whose answers, tool names, file names and title carry payloads."""
    corpus = payloads()
    chosen = corpus[:: max(1, len(corpus) // 60)]
    answer = "\n\n".join(text for _, text in chosen)
    bad_file = "<img src=x onerror=Object.assign(window,{__xss:[1]})>.csv"
    (tmp_path / bad_file).write_text("a,b\n1,2\n")
    calls = (
        {"name": "<svg onload=Object.assign(window,{__xss:[2]})>", "arguments": {"x": 1}},
        {"name": "read", "arguments": {"filePath": bad_file}},
        {
            "name": "python",
            "arguments": {"code": "print('<img src=x onerror=Object.assign(window,{__xss:[3]})>')"},
        },
    )
    server.enqueue(Reply(tool_calls=calls), Reply(text=answer))
    bundles = outputs_of(
        ip, "agent", "", "look at <b onmouseover=Object.assign(window,{__xss:[4]})>the data</b>"
    )
    session = magics.session
    session.update_info(
        title="<img src=x onerror=Object.assign(window,{__xss:[5]})> [t](javascript:alert(5))"
    )
    for n, first, second in split_pairs(10_000):
        server.enqueue(Reply(text=first + "\n" + second))
        bundles += outputs_of(ip, "agent", "", f"split {n}")
    return session.info.id, bundles


@needs_bs4
def test_magics_outputs_hold_no_active_content(ip, server, magics, tmp_path):
    sid, live = _hostile_session(ip, server, magics, tmp_path)
    assert any(MIME_TYPE in b for b in live)
    memory_dir = None
    from jupyter_session_agent import memory

    memory_dir = memory.project_dir(magics.settings().data_dir, str(tmp_path))
    memory_dir.mkdir(parents=True, exist_ok=True)
    (memory_dir / "MEMORY.md").write_text(
        "# Memory\n\n- the user likes <img src=x onerror=Object.assign(window,{__xss:[6]})>\n"
    )
    outputs = {
        "live view": live,
        "sessions": outputs_of(ip, "agent", "sessions"),
        "turns": outputs_of(ip, "agent", "turns"),
        "show": outputs_of(ip, "agent", f"show {sid}"),
        "memory": outputs_of(ip, "agent", "memory"),
    }
    for what, bundles in outputs.items():
        text = markdown_of(bundles)
        assert text, what
        assert_inert(text, what)
    # what the user reads is still there, as text
    from bs4 import BeautifulSoup

    for name, html in rendered(markdown_of(outputs["sessions"])):
        shown = BeautifulSoup(html, "html.parser").get_text()
        assert "<img src=x onerror=Object.assign(window,{__xss:[5]})> [t](javascript" in shown, name
    show = markdown_of(outputs["show"])
    assert "&lt;svg onload=Object.assign(window,{__xss:[2]})>" in show  # the invented tool name
    for format in ("md", "html"):
        ip.run_line_magic("agent", f"export {sid} --format {format} --out {tmp_path}/e.{format}")
    assert_inert((tmp_path / "e.md").read_text(), "md export")

    page = (tmp_path / "e.html").read_text()
    assert not active_content(BeautifulSoup(page, "html.parser").find("main"))


@needs_bs4
def test_nbconvert_html_of_the_notebook_holds_no_active_content(ip, server, magics, tmp_path):
    import nbformat
    from bs4 import BeautifulSoup

    sid, live = _hostile_session(ip, server, magics, tmp_path)
    nb = nbformat.v4.new_notebook()
    cells = [live, outputs_of(ip, "agent", "sessions"), outputs_of(ip, "agent", "turns")]
    for bundles in cells:
        outputs = [nbformat.v4.new_output("display_data", data=b) for b in bundles]
        nb.cells.append(nbformat.v4.new_code_cell("%agent", outputs=outputs))
    path = tmp_path / "hostile.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    soup = BeautifulSoup((tmp_path / "hostile.html").read_text(), "html.parser")
    areas = soup.select(".jp-OutputArea-output")
    assert len(areas) >= 3
    for area in areas:
        assert not active_content(area), str(area)[:3000]
    text = " ".join(a.get_text(" ") for a in areas)
    assert "onerror=Object.assign(window,{__xss:[5]})" in text  # the title is shown, as text


def test_one_part_of_an_unknown_type_does_not_blank_the_transcript(ip, server, magics, tmp_path):
    server.enqueue(Reply(text="the first answer"))
    ip.run_cell_magic("agent", "", "hello")
    sid = magics.session.info.id
    out = tmp_path / "b.json"
    ip.run_line_magic("agent", f"export --format json --out {out}")
    data = json.loads(out.read_text())
    new = fresh_ids(data)["info"]["id"]
    data["messages"][-1]["parts"].append(
        {"id": ids.ascending("part"), "type": "x y", "text": "<img src=x onerror=alert(1)>"}
    )
    out.write_text(json.dumps(data))
    ip.run_line_magic("agent", f"import {out}")
    assert sid != new
    text = markdown_of(outputs_of(ip, "agent", f"show {new}"))
    assert "the first answer" in text and "x y" in text and "<img" not in text
