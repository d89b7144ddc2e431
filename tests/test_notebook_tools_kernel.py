"""The notebook tools (read, edit, run) through a REAL kernel, as the extension answers them.

A kernel started with ``jupyter_client`` (its ``JPY_SESSION_NAME`` naming a saved notebook, as
jupyter_server sets it) runs ``%%agent`` cells against the scripted server. This test's client
is the front end: it answers the kernel's stdin questions by the protocol of
``tools/frontend.py`` — reading the request from the live view's ``frontend`` field and
answering one line of JSON with the request's nonce — from a notebook it holds, or presses
Enter as a user without the extension would, or has stdin off (nbclient). What the model
received next and the kernel's namespace are checked. The extension's side (diffs, Accept,
Reject, undo) is tested in a real JupyterLab: tests/test_notebook_tools_jupyterlab.py.
"""

from __future__ import annotations

import json
import queue
import re
import time

import pytest
from _kernel import real_kernel

from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.slow

MIME = "application/vnd.jupyter.session-agent+json"
MAGICS = "get_ipython().magics_manager.registry['AgentMagics']"
MARKER = "[jsa-frontend/1 0123456789abcdef01234567]"  # the protocol's marker, in a cell


def saved_notebook() -> dict:
    def code(cid, source, count=None, outputs=()):
        return {
            "id": cid,
            "cell_type": "code",
            "metadata": {},
            "source": source,
            "execution_count": count,
            "outputs": list(outputs),
        }

    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"id": "intro", "cell_type": "markdown", "metadata": {}, "source": ["# Sales\n"]},
            code(
                "load",
                ["rows = [3, 1, 2]\n", "total = sum(rows)\n", "total"],
                1,
                [
                    {
                        "output_type": "execute_result",
                        "execution_count": 1,
                        "metadata": {},
                        "data": {"text/plain": ["6"], "image/png": "iVBOR" * 3000},
                    }
                ],
            ),
            code("trap", f"print('{MARKER}')\ninput('{MARKER}: ')"),
        ],
    }


class FrontEnd:
    """The notebook the extension would hold: the saved cells, edited as answers say."""

    def __init__(self, cells, *, decisions=(), answer=True):
        self.cells = [
            dict(c, source="".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in cells
        ]
        self.decisions = list(decisions)  # per proposed edit: "accept" or feedback text
        self.answer = answer  # False: a user without the extension presses Enter
        self.requests: list[dict] = []

    def respond(self, request: dict) -> str:
        self.requests.append(request)
        if not self.answer:
            return ""
        nonce = request["nonce"]
        if request["action"] == "read":
            cells = [
                {
                    "id": c["id"],
                    "cell_type": c["cell_type"],
                    "source": c["source"],
                    "execution_count": c.get("execution_count"),
                    "outputs": c.get("outputs", []),
                }
                for c in self.cells
            ]
            return json.dumps({"nonce": nonce, "cells": cells})
        results = []
        for edit in request["edits"]:
            said = (
                "accept"
                if request["allowed"]
                else (self.decisions.pop(0) if self.decisions else "reject")
            )
            if said != "accept":
                feedback = "" if said == "reject" else said
                results.append({"status": "rejected", "feedback": feedback})
                continue
            index = next((i for i, c in enumerate(self.cells) if c["id"] == edit["cell"]), None)
            if edit["op"] == "insert":
                new = {
                    "id": f"new{len(self.cells)}",
                    "cell_type": edit["cell_type"],
                    "source": edit["source"],
                    "execution_count": None,
                    "outputs": [],
                }
                self.cells.insert(len(self.cells) if index is None else index + 1, new)
                results.append({"status": "accepted", "cell_id": new["id"]})
            elif edit["op"] == "replace":
                self.cells[index] = dict(self.cells[index], source=edit["source"])
                results.append({"status": "accepted", "cell_id": edit["cell"]})
            else:
                del self.cells[index]
                results.append({"status": "accepted"})
        return json.dumps({"nonce": nonce, "results": results})


@pytest.fixture(scope="module")
def server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def kernel(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("nbtools")
    work, data = root / "work", root / "data"
    work.mkdir()
    path = work / "sales.ipynb"
    path.write_text(json.dumps(saved_notebook()))
    with real_kernel(server.base_url, data, work, JPY_SESSION_NAME=str(path)) as kc:
        k = Kernel(kc)
        k.run(
            "%load_ext jupyter_session_agent\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000, 'output': 4096}}\n"
            "%config AgentMagics.request_timeout = 10.0\n"
            "%config AgentMagics.live = True\n"
            "%config AgentMagics.sandbox = 'off'\n",
            None,
        )
        yield k


class Kernel:
    def __init__(self, kc):
        self.kc = kc

    def run(self, code, front, *, approvals=(), allow_stdin=True, timeout=60.0):
        """Run ``code``; stdin questions go to ``front`` (notebook requests) or take the next
        of ``approvals`` (permission questions). Returns (prompts, outputs)."""
        kc, approvals = self.kc, list(approvals)
        msg_id = kc.execute(code, allow_stdin=allow_stdin)
        prompts, outputs, request, idle, reply = [], [], None, False, None
        deadline = time.monotonic() + timeout
        while not (idle and reply):
            assert time.monotonic() < deadline, (prompts, outputs[-3:])
            try:
                question = kc.get_stdin_msg(timeout=0.02)
            except queue.Empty:
                question = None
            while True:
                try:
                    msg = kc.get_iopub_msg(timeout=0.01)
                except queue.Empty:
                    break
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                content = msg["content"]
                if msg["msg_type"] == "status" and content["execution_state"] == "idle":
                    idle = True
                if msg["msg_type"] in ("display_data", "update_display_data"):
                    data = content.get("data", {}).get(MIME) or {}
                    request = data.get("frontend") or request
                outputs.append(content)
            if question is not None:  # the view's update came before the question: read now
                prompt = question["content"]["prompt"]
                prompts.append(prompt)
                found = re.search(r"\[jsa-frontend/1 ([0-9a-f]+)\]: $", prompt)
                if found and front is not None and request and request["nonce"] == found[1]:
                    kc.input(front.respond(request))
                else:
                    kc.input(approvals.pop(0) if approvals else "")
            if reply is None:
                try:
                    msg = kc.get_shell_msg(timeout=0.02)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        reply = msg
                except queue.Empty:
                    pass
        assert reply["content"]["status"] == "ok", outputs[-3:]
        return prompts, outputs

    def agent(self, server, prompt, front, new=True, **kw):
        prompts, outputs = self.run(f"%%agent {'--new' if new else ''}\n{prompt}", front, **kw)
        self.run(f"{MAGICS}.session.wait_title()", None)
        return prompts, outputs

    def eval(self, expression):
        self.kc.execute("", user_expressions={"value": expression})
        reply = self.kc.get_shell_msg(timeout=30)
        return reply["content"]["user_expressions"]["value"]["data"]["text/plain"]


def tool_output(server) -> str:
    sent = [r for r in server.requests if "tools" in r][-1]["messages"]
    return sent[-1]["content"]


@pytest.fixture
def fresh(server):
    server.reset()
    return server


def test_read_gives_the_live_notebook_and_a_cell_with_the_marker_intact(kernel, fresh):
    front = FrontEnd(saved_notebook()["cells"])
    front.cells[1]["source"] += "\n# edited, not saved yet"
    fresh.enqueue(
        Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read"}},)),
        Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read", "cell": "trap"}},)),
        Reply(text="read"),
    )
    prompts, outputs = kernel.agent(fresh, "read the notebook", front)
    assert [r["action"] for r in front.requests] == ["read", "read"], (
        prompts,
        [r["messages"][-1] for r in fresh.requests],
    )
    assert len({r["nonce"] for r in front.requests}) == 2  # a fresh nonce per request
    steps = [r for r in fresh.requests if "tools" in r]
    whole = steps[1]["messages"][-1]["content"]
    assert "3 cells" in whole and "# edited, not saved yet" in whole  # the live model
    assert "--- cell 1 · id load · code, In [1]" in whole and "(the saved" not in whole
    one = steps[2]["messages"][-1]["content"]
    assert one.startswith("cell 2 of 3") and MARKER in one  # the marker is just text
    assert "notebook_edit" in json.dumps(steps[0]["tools"]) and "notebook_run" in json.dumps(
        steps[0]["tools"]
    )
    # the answers (long JSON lines) were typed as a password and their echo cleared
    assert any("wait" in o and o.get("wait") is True for o in outputs)


def test_without_the_extension_read_falls_back_to_the_saved_file_once(kernel, fresh):
    front = FrontEnd([], answer=False)  # JupyterLab without the extension: Enter
    fresh.enqueue(
        Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read"}},)),
        Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read"}},)),
        Reply(text="read"),
    )
    prompts, _ = kernel.agent(fresh, "read the notebook", front)
    assert len(front.requests) == 1 and len(prompts) == 1  # asked once, never again
    assert "press Enter" in prompts[0]
    text = tool_output(fresh)
    assert text.startswith("(the saved sales.ipynb on the disk")
    assert "# edited" not in text and "rows = [3, 1, 2]" in text
    assert "image/png (15,000 chars)" in text  # outputs summarised, never the image itself
    # edits cannot be applied there: one line naming the fallback
    fresh.reset()
    fresh.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "notebook_edit",
                    "arguments": {"edits": [{"op": "insert", "source": "print(1)"}]},
                },
            )
        ),
        Reply(text="ok"),
    )
    kernel.agent(fresh, "add a cell", None)
    failure = tool_output(fresh)
    assert "cannot apply edits" in failure and "%%agent -c" in failure
    assert "\n" not in failure.strip()


def test_stdin_off_reads_the_saved_file_without_asking(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read", "cell": "0"}},)),
        Reply(text="read"),
    )
    prompts, _ = kernel.agent(fresh, "read it", None, allow_stdin=False)
    assert prompts == []
    text = tool_output(fresh)
    assert "does not answer the kernel's questions" in text and "# Sales" in text


def test_edits_are_reviewed_and_a_rejected_edit_never_runs(fresh, server, tmp_path):
    # a kernel of its own: the previous tests taught theirs that no extension answers
    path = tmp_path / "sales.ipynb"
    path.write_text(json.dumps(saved_notebook()))
    with real_kernel(
        server.base_url, tmp_path / "data", tmp_path, JPY_SESSION_NAME=str(path)
    ) as kc:
        kernel = Kernel(kc)
        kernel.run(
            "%load_ext jupyter_session_agent\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            "%config AgentMagics.request_timeout = 10.0\n"
            "%config AgentMagics.live = True\n",
            None,
        )
        front = FrontEnd(saved_notebook()["cells"], decisions=["accept", "do not touch my data"])
        evil = "rows = []\npwned = True"
        fresh.enqueue(
            Reply(
                tool_calls=(
                    {
                        "name": "notebook_edit",
                        "arguments": {
                            "edits": [
                                {
                                    "op": "insert",
                                    "cell": "load",
                                    "source": "mean = total / len(rows)\nmean",
                                },
                                {"op": "replace", "cell": "load", "source": evil},
                            ]
                        },
                    },
                )
            ),
            Reply(tool_calls=({"name": "notebook_run", "arguments": {"cell": "load"}},)),
            Reply(tool_calls=({"name": "notebook_run", "arguments": {"cell": "new3"}},)),
            Reply(text="done"),
        )
        prompts, outputs = kernel.agent(fresh, "add the mean", front, approvals=["o", "o"])
        steps = [r for r in fresh.requests if "tools" in r]
        review = steps[1]["messages"][-1]["content"]
        assert review.startswith("1 of 2 edits accepted, reviewed by the user; none of them ran.")
        assert "edit 0 (insert cell load): accepted — now cell id new3" in review
        assert (
            "edit 1 (replace cell load): rejected — the user says: do not touch my data" in review
        )
        assert front.requests[0]["allowed"] is False
        # the edit's question was the review; the runs asked like python, naming the cell
        approvals = [p for p in prompts if "jsa-frontend" not in p]
        assert len(approvals) == 2 and "run notebook cell load" in approvals[0]
        ran = steps[2]["messages"][-1]["content"]
        assert ran.startswith("ran cell 1 (id load):") and "6" in ran  # the old source ran
        assert "2.0" in steps[3]["messages"][-1]["content"]
        assert kernel.eval("'pwned' in globals()") == "False"
        assert kernel.eval("mean") == "2.0"
        # a rule allows edits: applied without the review's wait, still shown
        fresh.reset()
        fresh.enqueue(
            Reply(
                tool_calls=(
                    {
                        "name": "notebook_edit",
                        "arguments": {"edits": [{"op": "delete", "cell": "trap"}]},
                    },
                )
            ),
            Reply(text="done"),
        )
        kernel.run('%agent permit edit "*" allow', None)
        kernel.agent(fresh, "delete the trap", front, new=False)
        assert front.requests[-1]["allowed"] is True
        assert tool_output(fresh).startswith("1 of 1 edits accepted, applied (a rule allows edits)")
        assert [c["id"] for c in front.cells] == ["intro", "load", "new3"]


def test_the_example_notebook_runs_with_the_scripted_server(tmp_path):
    """notebooks/07_notebook_edits.ipynb, executed by nbclient (no stdin): reading falls back
    to the saved file, the edit is refused in one line, the code comes back in the answer."""
    import shutil
    from pathlib import Path

    from jupyter_session_agent.testing.record import record_notebook

    source = Path(__file__).resolve().parents[1] / "notebooks" / "07_notebook_edits.ipynb"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    replies = json.loads(source.with_suffix(".replies.json").read_text())
    nb = record_notebook(copy, replies)
    cells = {c.id: c for c in nb.cells}
    assert cells["revenue"].outputs[0]["ename"] == "NameError"
    shown = "".join(
        "".join(o.get("data", {}).get("text/markdown", "")) for o in cells["agent"].outputs
    )
    assert "(the saved 07_notebook_edits.ipynb on the disk" in shown
    assert "--- cell 7 · id revenue · code" in shown
    assert "notebook_edit: this front end cannot apply edits" in shown
    assert "zip(prices, quantities)" in shown


def test_a_huge_notebook_is_read_within_bounds_and_one_cell_whole(fresh, server, tmp_path):
    cells = [
        {
            "id": f"c{i}",
            "cell_type": "code",
            "source": f"# cell {i}\n" + "x = 1\n" * 800,
            "execution_count": i,
            "outputs": [{"output_type": "stream", "text": "y" * 50_000}],
        }
        for i in range(2_000)
    ]  # about 14 MB of sources and 100 MB of outputs in the model the extension holds
    front = FrontEnd(cells)
    front.respond = _capped(front.respond)
    with real_kernel(server.base_url, tmp_path / "data", tmp_path) as kc:
        kernel = Kernel(kc)
        kernel.run(
            "%load_ext jupyter_session_agent\n%config AgentMagics.live = True\n"
            "%config AgentMagics.model = 'openai/scripted'",
            None,
        )
        fresh.enqueue(
            Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read"}},)),
            Reply(
                tool_calls=({"name": "notebook", "arguments": {"action": "read", "cell": "1999"}},)
            ),
            Reply(text="read"),
        )
        kernel.agent(fresh, "read it", front)
    steps = [r for r in fresh.requests if "tools" in r]
    whole = steps[1]["messages"][-1]["content"]
    assert len(whole) < 80_000 and "more cells not shown (the notebook is long)" in whole
    one = steps[2]["messages"][-1]["content"]
    assert one.startswith("cell 1999 of 2000") and "# cell 1999" in one
    assert "more characters]" in one  # the source and the output capped, not the call


def _capped(respond):
    """The extension's caps (labextension/src/notebook.ts): output text cut at 2,000
    characters; sources cut to 8,000, then 1,000, while the answer would be over 6,000,000."""

    def answer(request):
        data = json.loads(respond(request))
        for cell in data.get("cells", []):
            for output in cell["outputs"]:
                output["text"] = output["text"][:2000]
        for cap in (8000, 1000):
            if len(json.dumps(data)) <= 6_000_000 - 1000:
                break
            for cell in data["cells"]:
                cell["source"] = cell["source"][:cap]
        return json.dumps(data)

    return answer


def test_an_answer_to_another_request_is_refused_and_nothing_is_taken_from_it():
    """Two agent cells, or a stale answer typed again: the answer names its request's nonce,
    and a question only takes the answer to itself."""
    from jupyter_session_agent.tools import frontend

    class Shell:  # the kernel's shell is only a key here
        pass

    shell = Shell()
    first = json.dumps({"nonce": "a" * 24, "cells": []})
    with pytest.raises(frontend.Unavailable, match="another request's"):
        frontend.parse(shell, first, "b" * 24)
    with pytest.raises(frontend.Unavailable, match="not JSON"):
        frontend.parse(shell, f"[jsa-frontend/1 {'b' * 24}]", "b" * 24)
    assert frontend.parse(shell, first, "a" * 24)["cells"] == []
    assert frontend.front_end(shell) == "this is not a Jupyter kernel (plain IPython or a script)"


def test_a_python_deny_pattern_stops_notebook_run_of_a_cell_whose_code_it_matches(
    fresh, server, tmp_path
):
    """The run's question names the cell; the user's python rules are about code. A rule that
    denies some code (``python "*subprocess*" deny``) stops running a cell holding that code,
    whichever tool runs it; a cell the rule does not match still runs under the allow."""
    path = tmp_path / "sales.ipynb"
    path.write_text(json.dumps(saved_notebook()))
    with real_kernel(
        server.base_url, tmp_path / "data", tmp_path, JPY_SESSION_NAME=str(path)
    ) as kc:
        kernel = Kernel(kc)
        kernel.run(
            "%load_ext jupyter_session_agent\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            "%config AgentMagics.titles = False\n"
            "%config AgentMagics.live = True\n",
            None,
        )
        front = FrontEnd(saved_notebook()["cells"])
        front.cells.append(
            {
                "id": "shell",
                "cell_type": "code",
                "source": "import subprocess\nran_shell = subprocess.run(['true']).returncode",
                "execution_count": None,
                "outputs": [],
            }
        )
        fresh.enqueue(
            Reply(tool_calls=({"name": "notebook_run", "arguments": {"cell": "shell"}},)),
            Reply(tool_calls=({"name": "notebook_run", "arguments": {"cell": "load"}},)),
            Reply(text="done"),
        )
        prompts, outputs = kernel.run(
            "%%agent -p python=allow -p 'python:*subprocess*=deny'\nrun the cells", front
        )
        steps = [r for r in fresh.requests if "tools" in r]
        assert len(steps) == 3, (prompts, outputs[-2:])
        denied = steps[1]["messages"][-1]["content"]
        assert "deny python for cell 3's code" in denied, denied
        assert kernel.eval("'ran_shell' in globals()") == "False"
        assert steps[2]["messages"][-1]["content"].startswith("ran cell 1 (id load):")


def test_rules_named_after_the_notebook_tools_mean_what_they_ask():
    """``notebook_edit`` asks ``edit``: a rule for it is an edit rule (before, it never
    matched and the user's allow was silently ignored). ``notebook_run`` asks ``python``: a
    rule for it is refused in one line naming the rule to write (before, a deny for it was
    silently ignored and the cell ran under a python allow)."""
    from jupyter_session_agent.core.errors import ConfigError, UsageError
    from jupyter_session_agent.core.rules import from_config, parse_rule

    assert parse_rule("notebook_edit=allow").permission == "edit"
    assert [r.permission for r in from_config({"notebook_edit": "allow"})] == ["edit"]
    for bad in (
        lambda: parse_rule("notebook_run=deny"),
        lambda: from_config({"notebook_run": "deny"}),
    ):
        with pytest.raises((ConfigError, UsageError), match="asks the python permission") as err:
            bad()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("ref", ["+1", "1_0", "\u0661", " 1 "])
def test_a_cell_index_is_read_as_the_extension_reads_it(ref):
    """The approval of notebook_run shows the cell the extension finds for the reference (ids
    first, then ``-?[0-9]+``); the kernel must run that cell or none. Before, ``int()`` took
    ``+1``, ``1_0`` and Arabic-Indic digits: the approval showed no cell and the kernel ran one."""
    from jupyter_session_agent.core.errors import ToolFailure
    from jupyter_session_agent.tools.notebook_doc import find

    cells = [{"id": f"c{i}"} for i in range(12)]
    if ref.strip() == "1":
        assert find(cells, ref) == 1
        return
    with pytest.raises(ToolFailure, match="no cell"):
        find(cells, ref)


def test_reading_a_notebook_whose_outputs_hold_secrets_redacts_them(fresh, server, tmp_path):
    """A cell printed a token the user keeps in a secret-named variable, and another printed
    an API key: the notebook as the model reads it (the live model, through the extension)
    holds neither — the same redaction as every tool's output."""
    token = "hf_Q9rT4uVw7xYz2AbC5dEf8GhJ1kLm3NpR"
    key = "sk-proj-" + "Zx8Kq2Lm9Np4Rs7Tv1Wy3Ab6Cd0Ef5Gh2Ij8Kl4Mn"
    with real_kernel(server.base_url, tmp_path / "data", tmp_path) as kc:
        kernel = Kernel(kc)
        kernel.run(
            "%load_ext jupyter_session_agent\n%config AgentMagics.live = True\n"
            "%config AgentMagics.titles = False\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            f"hf_token = {token!r}",
            None,
        )
        cells = [
            {
                "id": "login",
                "cell_type": "code",
                "source": "print(hf_token)",
                "execution_count": 1,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": token + "\n"}],
            },
            {
                "id": "env",
                "cell_type": "code",
                "source": "os.environ['OPENAI_API_KEY']",
                "execution_count": 2,
                "outputs": [{"output_type": "execute_result", "data": {"text/plain": repr(key)}}],
            },
        ]
        fresh.enqueue(
            Reply(tool_calls=({"name": "notebook", "arguments": {"action": "read"}},)),
            Reply(text="read"),
        )
        kernel.agent(fresh, "read it", FrontEnd(cells))
    text = tool_output(fresh)
    assert "id login" in text and "id env" in text
    assert token not in text and key not in text, text
