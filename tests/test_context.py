"""Notebook-native context, end to end through a real IPython shell and the scripted server:
interpolation, attachments (files, images, PDFs, notebook values), the notebook tool,
``%agent fix``, ``-c``/``%agent code``, and the one-line errors that send nothing."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest

from jupyter_session_agent.context import ContextError
from jupyter_session_agent.core.messages import FilePart, TextPart
from jupyter_session_agent.testing.scripted_server import Reply


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def cell(ip, code):
    """Run ``code`` as a numbered notebook cell; its number."""
    number = ip.execution_count
    ip.run_cell(code, store_history=True)
    return number


def last_user(server):
    return [m for m in server.requests[-1]["messages"] if m["role"] == "user"][-1]


def content_text(message) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n\n".join(c.get("text", "") for c in content if c["type"] == "text")


def png_bytes(size=(4, 3), color=(200, 30, 30)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def pdf_bytes(*pages: str) -> bytes:
    """A small valid PDF with one line of Helvetica text per page (written by hand)."""
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        None,
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in pages:
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        content = len(objects)
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {content} 0 R >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def vision(magics):
    """The scripted model accepts images (the catalogue cannot know a test server's model)."""
    limits = magics.model_overrides["openai/scripted"]
    magics.model_overrides = {"openai/scripted": {**limits, "images": True}}


def refused(ip, prompt, line=""):
    """The one-line error of a cell whose context cannot be built."""
    with pytest.raises(ContextError) as info:
        run(ip, prompt, line)
    lines = info.value._render_traceback_()
    assert len(lines) == 1 and "\n" not in lines[0] and " — " in lines[0]
    return str(info.value)


# -- interpolation ---------------------------------------------------------------------------


def test_interpolation_sends_values_and_keeps_the_template(ip, server, store, magics):
    import pandas as pd

    ip.user_ns["df"] = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    source = cell(ip, "rate = 0.25")
    shown = cell(ip, "6 * 7")
    failed = cell(ip, "def ratio(a, b):\n    return a / b\nratio(1, 0)")
    server.enqueue(Reply(text="done"))
    template = (
        f"shape {{df.shape}}, columns {{df.columns[1]}}, rate {{rate:.1%}}, "
        f"cell {{In[{source}]}} gave {{Out[{shown}]}}; error:\n{{Err[{failed}]}}\n"
        'literal {{rate}}, JSON {"a": {"b": 1}}, code `{rate}` and\n'
        '```python\nprint(f"{rate}")\n```'
    )
    run(ip, template)
    sent = last_user(server)["content"]
    assert sent.startswith(
        "shape (3, 2), columns b, rate 25.0%, cell rate = 0.25 gave 42; error:\n"
    )
    assert "ZeroDivisionError: division by zero" in sent and f'"Cell In[{failed}]", line 3' in sent
    assert "return a / b" in sent  # the traceback shows the cell's lines
    assert (
        'literal {rate}, JSON {"a": {"b": 1}}, code `{rate}` and\n```python\nprint(f"{rate}")\n```'
    ) in sent
    # the history keeps what was sent and the template it came from
    prompt = store.messages(magics.session.info.id)[0].parts[0]
    assert prompt.text == sent
    assert prompt.metadata["template"] == template
    assert prompt.metadata["interpolated"] == [
        "{df.shape}",
        "{df.columns[1]}",
        "{rate:.1%}",
        f"{{In[{source}]}}",
        f"{{Out[{shown}]}}",
        f"{{Err[{failed}]}}",
    ]
    rows = store.sql("select data from part where type = 'text' order by id limit 1")
    assert json.loads(rows["data"][0])["metadata"]["template"] == template


def test_no_interpolate_per_cell_and_for_all(ip, server, store, magics):
    ip.user_ns["x"] = 5
    server.enqueue(Reply(text="a"), Reply(text="b"), Reply(text="c"))
    run(ip, "x is {x}", "--no-interpolate")
    assert last_user(server)["content"] == "x is {x}"
    magics.interpolate = False
    run(ip, "x is {x} and {missing}")
    assert last_user(server)["content"] == "x is {x} and {missing}"
    magics.interpolate = True
    run(ip, "x is {x}")
    assert last_user(server)["content"] == "x is 5"
    history = store.messages(magics.session.info.id)
    assert history[0].parts[0].metadata is None  # nothing filled in: no template kept
    with pytest.raises(Exception) as info:
        magics.interpolate = "yes"
    assert "interpolate must be True or False" in str(info.value) and magics.interpolate is True


def test_bad_references_are_one_line_and_nothing_is_sent(ip, server, store, magics):
    ip.user_ns["x"] = 5
    fine = cell(ip, "x + 1")  # an output, no error
    cases = {
        "{nope}": "name 'nope' is not defined",
        "{x.real.nothing}": "x.real has no attribute 'nothing'",
        "{x._private}": "private attributes",
        "{x.__class__}": "private attributes",
        "{In[99999]}": "there is no cell 99999",
        f"{{Out[{fine}]}} {{Out[99999]}}": "cell 99999 has no output",
        f"{{Err[{fine}]}}": f"cell {fine} raised no error",
    }
    for prompt, words in cases.items():
        message = refused(ip, f"look: {prompt}")
        assert words in message, message
        assert "--no-interpolate" in message or "give one of them" in message
    assert server.requests == [] and store.sessions() == [] and magics.session is None


def test_interpolation_only_looks_up_never_evaluates(ip, server, tmp_path):
    calls = []

    class Probe:
        def __call__(self):
            calls.append("called")
            return "ran"

    ip.user_ns["probe"] = Probe()
    ip.user_ns["x"] = 3
    server.enqueue(Reply(text="ok"))
    prompt = (
        "{__import__('os').system('touch pwned')} {probe()} {x + 1} {x if x else 0} "
        "{[x for x in ()]} {x!r}"
    )
    run(ip, prompt)
    assert last_user(server)["content"] == (
        "{__import__('os').system('touch pwned')} {probe()} {x + 1} {x if x else 0} "
        "{[x for x in ()]} 3"
    )
    assert not (tmp_path / "pwned").exists() and calls == []


def test_interpolated_values_are_redacted(ip, server, store, magics):
    key = "sk-proj-" + "Zq7" * 12
    ip.user_ns["creds"] = {"key": key}
    server.enqueue(Reply(text="ok"))
    run(ip, "use {creds[key]} and {creds}")
    sent = json.dumps(server.requests[-1])
    assert key not in sent and "[REDACTED:openai]" in sent
    journals = "".join(p.read_text() for p in magics.settings().data_dir.rglob("*.jsonl"))
    assert key not in journals


# -- attachments -------------------------------------------------------------------------------


def test_text_files_by_flag_glob_and_mention(ip, server, store, magics, tmp_path):
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "data" / "b.csv").write_text("x,y\n3,4\n")
    (tmp_path / "example.com").write_text("not an attachment")
    (tmp_path / "property").write_text("not an attachment either")
    server.enqueue(Reply(text="read them"))
    run(
        ip,
        "Compare @notes.txt. Mail bob@example.com; keep @property and @app.route, and "
        "`@notes.txt` in code stays text.",
        "-f 'data/*.csv'",
    )
    sent = content_text(last_user(server))
    assert sent.startswith("Compare @notes.txt. Mail bob@example.com;")
    for name, body in (
        ("data/a.csv", "x,y\n1,2"),
        ("data/b.csv", "x,y\n3,4"),
        ("notes.txt", "alpha\nbeta"),
    ):
        assert f"Attached file {name} (" in sent
        assert f'<file path="{(tmp_path / name).resolve()}">\n{body}\n</file>' in sent
    assert "not an attachment" not in sent
    parts = store.messages(magics.session.info.id)[0].parts
    files = [p for p in parts if isinstance(p, FilePart)]
    assert [f.filename for f in files] == ["a.csv", "b.csv", "notes.txt"]
    assert all(f.mime == "text/plain" and f.url.startswith("file:///") for f in files)
    assert files[2].source["text"] == {"value": "@notes.txt", "start": 8, "end": 18}
    texts = [p for p in parts if isinstance(p, TextPart) and p.synthetic]
    assert [t.metadata["attachment"] for t in texts] == [f.id for f in files]
    # SQL sees them as file parts
    rows = store.sql(
        "select json_extract_string(data, '$.filename') as f from part "
        "where type = 'file' order by id"
    )
    assert list(rows["f"]) == ["a.csv", "b.csv", "notes.txt"]


def test_a_long_text_file_is_cut_with_a_note(ip, server, tmp_path):
    (tmp_path / "big.log").write_text("".join(f"line {i}\n" for i in range(10_000)))
    server.enqueue(Reply(text="ok"))
    run(ip, "summarise", "-f big.log")
    sent = content_text(last_user(server))
    assert "line 1999\n" in sent and "line 2000\n" not in sent
    assert "Cut: 2,000 of 10,000 lines shown" in sent and len(sent) < 60_000


def test_image_is_image_content_for_a_vision_model_and_a_placeholder_otherwise(
    ip, server, store, magics, tmp_path
):
    data = png_bytes()
    (tmp_path / "shot.png").write_bytes(data)
    server.enqueue(Reply(text="text-only"), Reply(text="I see red"))
    run(ip, "what is in @shot.png")  # the scripted model is text-only by default
    assert last_user(server)["content"] == "what is in @shot.png\n\n[Attached image/png: shot.png]"
    text_only = magics.session.info.id
    vision(magics)
    run(ip, "and now?", "--new -f shot.png")
    content = last_user(server)["content"]
    assert content[0] == {"type": "text", "text": "and now?"}
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    assert content[1] == {"type": "image_url", "image_url": {"url": url}}
    files = [
        p
        for s in (text_only, magics.session.info.id)
        for m in store.messages(s)
        for p in m.parts
        if isinstance(p, FilePart)
    ]
    assert [f.mime for f in files] == ["image/png", "image/png"]
    assert files[0].source["size"] == len(data)
    assert files[0].url == files[1].url  # stored alike: what is sent depends on the model


def test_pdf_is_sent_as_its_text(ip, server, store, magics, tmp_path):
    (tmp_path / "report.pdf").write_bytes(pdf_bytes("Revenue grew 12 percent", "Costs fell"))
    server.enqueue(Reply(text="ok"))
    run(ip, "summarise @report.pdf")
    sent = content_text(last_user(server))
    assert "Attached PDF report.pdf (2 pages" in sent
    assert "--- page 1 ---\nRevenue grew 12 percent" in sent
    assert "--- page 2 ---\nCosts fell" in sent
    assert "[Attached application/pdf" not in sent  # its text stands for it
    parts = store.messages(magics.session.info.id)[0].parts
    part = next(p for p in parts if isinstance(p, FilePart))
    assert part.mime == "application/pdf" and part.source["pages"] == 2


def test_values_dataframe_schema_and_figure(ip, server, store, magics):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    ip.user_ns["df"] = pd.DataFrame({"city": ["Oslo", "Lima", None], "temp": [3.5, 19.0, 25.5]})
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([1, 2, 3])
    ip.user_ns["fig"] = fig
    from PIL import Image

    ip.user_ns["photo"] = Image.new("L", (5, 4), 128)
    vision(magics)
    server.enqueue(Reply(text="ok"))
    run(ip, "explain", "-a df -a fig -a photo")
    content = last_user(server)["content"]
    text = content_text(last_user(server))
    assert "DataFrame df: 3 rows × 2 columns" in text
    assert "city: " in text and "2 non-null" in text and "temp: float64, 3 non-null" in text
    assert "Oslo" in text and "25.5" in text  # the first rows
    images = [c["image_url"]["url"] for c in content if c["type"] == "image_url"]
    pngs = [base64.b64decode(url.split(",", 1)[1]) for url in images]
    assert len(pngs) == 2 and all(png.startswith(b"\x89PNG") for png in pngs)
    assert Image.open(io.BytesIO(pngs[1])).size == (5, 4)
    files = [p for p in store.messages(magics.session.info.id)[0].parts if isinstance(p, FilePart)]
    assert [(f.filename, f.mime, f.source["type"], f.source["kind"]) for f in files] == [
        ("df", "text/plain", "variable", "DataFrame"),
        ("fig.png", "image/png", "variable", "Figure"),
        ("photo.png", "image/png", "variable", "Image"),
    ]
    plt.close(fig)


def test_bad_attachments_are_one_line_and_nothing_is_sent(ip, server, store, magics, tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf")
    with open(tmp_path / "huge.csv", "wb") as fh:  # 200 MB, sparse: nothing is written or read
        fh.truncate(200 * 1024 * 1024)
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe.txt")
    ip.user_ns.pop("nothing_here", None)
    cases = [
        ("-f missing.txt", "no such file"),
        ("-f 'nomatch/*.csv'", "matches nothing"),
        ("-f broken.pdf", "not a readable PDF"),
        ("-f huge.csv", "200.0 MB; attachments are limited to 20.0 MB"),
        ("-f blob.bin", "a binary file"),
        ("-f folder", "that is a folder"),
        ("-f pipe.txt", "not a regular file"),
        ("-a nothing_here", "name 'nothing_here' is not defined"),
        ("-a 'os.system(1)'", "-a takes a variable name"),
    ]
    for line, words in cases:
        message = refused(ip, "look at it", line)
        assert words in message, (line, message)
    message = refused(ip, "compare @broken.pdf")  # a mention of an existing file is meant
    assert "not a readable PDF" in message
    assert server.requests == [] and store.sessions() == [] and magics.session is None


# -- the notebook tool ---------------------------------------------------------------------------


def test_notebook_tool_lists_variables_and_reads_cells(ip, server, store, magics):
    import pandas as pd

    magics.permission = {}  # the defaults: the notebook tool reads, so it runs without asking
    ip.user_ns.update(df=pd.DataFrame({"a": [1, 2]}), threshold=0.5, _hidden=1)
    cell(ip, "import math\ndef helper():\n    return 1\nclass Thing:\n    pass")
    shown = cell(ip, "threshold * 4")
    failed = cell(ip, "math.sqrt(-1)")
    server.enqueue(
        Reply(
            tool_calls=tuple(
                {"name": "notebook", "arguments": a}
                for a in (
                    {"action": "variables"},
                    {"action": "cells", "last": 2},
                    {"action": "cells", "cells": [shown, 99999]},
                    {"action": "variables", "names": ["df"]},
                )
            )
        ),
        Reply(text="seen"),
    )
    run(ip, "what do I have?")
    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert "notebook" in offered
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    listing, recent, chosen, described = results
    names = [line.split(" | ")[0] for line in listing.splitlines()[1:]]
    assert "df" in names and "threshold" in names
    left_out = {"math", "helper", "Thing", "_hidden", "In", "Out", "_", "get_ipython", "exit"}
    assert not left_out & set(names)
    row = next(line for line in listing.splitlines() if line.startswith("df | "))
    assert row.startswith("df | DataFrame | 2 × 1 | a: int64 | ")
    assert f"In [{shown}]:\nthreshold * 4\nOut[{shown}]:\n2.0" in recent
    assert f"In [{failed}]:\nmath.sqrt(-1)\nError in [{failed}]: ValueError" in recent
    assert "math domain error" in recent and "Traceback" in recent
    assert "In [99999]: there is no cell 99999" in chosen and f"Out[{shown}]" in chosen
    assert "DataFrame df: 2 rows × 1 columns" in described and "Schema" in described
    tools = [p for m in store.messages(magics.session.info.id) for p in m.parts if p.type == "tool"]
    assert [t.state.status for t in tools] == ["completed"] * 4


def test_notebook_tool_follows_the_read_permission(ip, server, magics):
    magics.permission = {"*": "allow", "read": "deny"}
    server.enqueue(Reply(text="ok"))
    run(ip, "hi")
    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert "notebook" not in offered and "read" not in offered


# -- %agent fix, -c, %agent code ------------------------------------------------------------------


def test_agent_fix_sends_the_source_and_the_traceback(ip, server, store, magics):
    failed = cell(ip, "def mean(xs):\n    return sum(xs) / len(xs)\nmean([])")
    fixed = "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0"
    server.enqueue(Reply(text=f"The list is empty.\n```python\n{fixed}\n```"))
    ip.rl_next_input = None
    ip.run_line_magic("agent", "fix -c")
    sent = last_user(server)["content"]
    assert sent.startswith("Explain the cause of this error and propose a fix.")
    source = "def mean(xs):\n    return sum(xs) / len(xs)\nmean([])"
    assert f"The code of cell In [{failed}]:\n\n```python\n{source}\n```" in sent
    assert "ZeroDivisionError: division by zero" in sent
    assert f'File "Cell In[{failed}]", line 2, in mean' in sent
    assert ip.rl_next_input == fixed
    # a cell given by number; braces and @ in the source are sent as typed
    braces = cell(ip, "cfg = {'path': '@data.csv'}\ncfg['missing']")
    cell(ip, "ok = 1")
    server.enqueue(Reply(text="no such key"))
    ip.run_line_magic("agent", f"fix {braces}")
    sent = last_user(server)["content"]
    assert "cfg = {'path': '@data.csv'}" in sent and "KeyError: 'missing'" in sent
    history = store.messages(magics.session.info.id)
    assert len([m for m in history if m.info.role == "user"]) == 2  # one session, two turns
    assert not any(isinstance(p, FilePart) for m in history for p in m.parts)


def test_agent_fix_bad_cells_are_one_line(ip, server, magics):
    fine = cell(ip, "z = 1")
    for line, words in (
        ("fix 99999", "there is no cell 99999"),
        (f"fix {fine}", f"cell {fine} raised no error"),
        ("fix three", "takes a cell number"),
    ):
        with pytest.raises(Exception) as info:
            ip.run_line_magic("agent", line)
        assert words in str(info.value) and len(info.value._render_traceback_()) == 1
    assert server.requests == []


def test_code_flag_and_agent_code_set_the_next_cell(ip, server, capsys):
    server.enqueue(
        Reply(
            text="Run this:\n```bash\npip install x\n```\n```python\nimport x\n```\n"
            "then\n```py\nx.go()\n```"
        ),
        Reply(text="No code here."),
    )
    ip.rl_next_input = None
    run(ip, "how?", "-c")
    assert ip.rl_next_input == "x.go()"
    ip.rl_next_input = None
    ip.run_line_magic("agent", "code")
    assert ip.rl_next_input == "x.go()"
    ip.rl_next_input = None
    run(ip, "and?", "-c")
    assert ip.rl_next_input is None and "no python code block" in capsys.readouterr().out


# -- media stripping on overflow, with a real attachment -------------------------------------------


def test_overflow_replays_a_real_image_attachment_with_media_stripped(
    ip, server, store, magics, tmp_path
):
    vision(magics)
    data = png_bytes()
    (tmp_path / "shot.png").write_bytes(data)
    overflow = {
        "status": 400,
        "error_body": {
            "error": {
                "message": "This model's maximum context length is 8192 tokens.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        },
    }
    server.enqueue(
        Reply(text="hello"),
        overflow,
        Reply(text="## Goal\nlook at a screenshot"),
        Reply(text="I cannot see the image any more."),
    )
    run(ip, "first")
    run(ip, "look at this", "-f shot.png")
    encoded = base64.b64encode(data).decode()
    requests = server.requests
    assert encoded in json.dumps(requests[1])  # the image was sent
    assert encoded not in json.dumps(requests[2]) and encoded not in json.dumps(requests[3])
    final = [m for m in requests[3]["messages"] if m["role"] == "user"][-1]
    assert content_text(final) == "look at this\n\n[Attached image/png: shot.png]"
    history = store.messages(magics.session.info.id)
    replayed = [m for m in history if m.info.role == "user"][-1]
    assert [p.text for p in replayed.parts if isinstance(p, TextPart)] == [
        "look at this",
        "[Attached image/png: shot.png]",
    ]


# -- display ------------------------------------------------------------------------------------


def test_transcript_shows_attachment_chips(ip, server, store, magics, tmp_path):
    from jupyter_session_agent.ui.display import MIME_TYPE, TranscriptView

    (tmp_path / "notes.txt").write_text("alpha\n")
    (tmp_path / "shot.png").write_bytes(png_bytes())
    server.enqueue(Reply(text="ok"))
    run(ip, "see @notes.txt", "-f shot.png")
    view = TranscriptView(store.messages(magics.session.info.id))
    bundle = view._repr_mimebundle_()
    markdown = bundle["text/markdown"]
    assert "📎 `shot.png` <sub>image/png · " in markdown
    assert "📎 `notes.txt` <sub>text/plain · 6 bytes · mentioned as @notes.txt</sub>" in markdown
    assert "<summary>sent to the model (" in markdown and "(synthetic)" not in markdown
    assert "[file shot.png]" in bundle["text/plain"] and "[file notes.txt]" in bundle["text/plain"]
    parts = bundle[MIME_TYPE]["messages"][0]["parts"]
    assert [p["type"] for p in parts] == ["text", "file", "file", "text"]
    assert parts[1]["url"].startswith("data:image/png;base64,")


def test_cell_errors_are_recorded_only_while_loaded(ip, server):
    from jupyter_session_agent.tools.kernel import cell_log

    number = cell(ip, "raise KeyError('while loaded')")
    assert "KeyError: 'while loaded'" in cell_log(ip).error(number).traceback
    ip.run_line_magic("unload_ext", "jupyter_session_agent")
    try:
        later = cell(ip, "raise KeyError('after unload')")
        assert cell_log(ip).error(later) is None
    finally:
        ip.run_line_magic("load_ext", "jupyter_session_agent")


def test_mentions_end_before_punctuation_and_may_be_quoted(ip, server, store, magics, tmp_path):
    (tmp_path / "my notes.txt").write_text("spaced\n")
    (tmp_path / "plan.md").write_text("the plan\n")
    server.enqueue(Reply(text="ok"))
    run(ip, 'Read @"my notes.txt", then (@plan.md). Twice: @plan.md!')
    sent = content_text(last_user(server))
    assert "spaced" in sent and sent.count("the plan") == 1  # the same file is attached once
    files = [p for p in store.messages(magics.session.info.id)[0].parts if isinstance(p, FilePart)]
    assert [(f.filename, f.source["text"]["value"]) for f in files] == [
        ("my notes.txt", '@"my notes.txt"'),
        ("plan.md", "@plan.md"),
    ]


def test_an_image_counts_as_an_image_when_the_server_reports_no_usage(
    ip, server, store, magics, tmp_path
):
    from PIL import Image

    vision(magics)
    noise = Image.frombytes("RGB", (300, 300), os.urandom(300 * 300 * 3))
    noise.save(tmp_path / "noise.png")
    assert (tmp_path / "noise.png").stat().st_size > 250_000  # ~90k tokens if its base64 were text
    server.enqueue(Reply(text="noisy", usage=None))
    run(ip, "what is this?", "-f noise.png")
    answer = store.messages(magics.session.info.id)[-1].info
    assert answer.tokens.estimated and answer.tokens.input < 5_000
    assert len(server.requests) == 1  # no compaction was started by a miscount
