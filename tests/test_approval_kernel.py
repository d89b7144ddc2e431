"""Approval through a REAL IPython kernel: ``input()`` in a busy ``%%agent`` cell.

A kernel started with ``jupyter_client`` runs ``%load_ext jupyter_session_agent``
and ``%%agent`` cells against a scripted server in this process. The test
answers the kernel's ``input_request`` messages on the stdin channel as a user
would type them, then checks the stored tool states (read from the history by
this process) and what the model received next. With ``allow_stdin=False`` the
kernel cannot ask: the call is denied with a one-line fix, and nothing hangs.
"""

from __future__ import annotations

import ast
import queue
import time

import pytest
from _kernel import real_kernel

from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.slow

MAGICS = "get_ipython().magics_manager.registry['AgentMagics']"


@pytest.fixture(scope="module")
def server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def kernel(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel")
    work, data = root / "work", root / "data"
    work.mkdir()
    with real_kernel(server.base_url, data, work) as kc:
        k = Kernel(kc, work, data)
        reply, _, out = k.run(
            "%load_ext jupyter_session_agent\n"
            "%config AgentMagics.model = 'openai/scripted'\n"
            "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000, 'output': 4096}}\n"
            "%config AgentMagics.request_timeout = 10.0\n"
            "%config AgentMagics.live = True\n"
            # the approval prompt is the point here: bash unconfined, so that it asks (with
            # the OS sandbox bash runs without asking: tests/test_sandbox.py)
            "%config AgentMagics.sandbox = 'off'\n"
        )
        assert reply["content"]["status"] == "ok", out
        yield k


class Kernel:
    def __init__(self, kc, work, data):
        self.kc, self.work, self.data = kc, work, data

    def run(self, code, answers=(), *, allow_stdin=True, timeout=60.0):
        """Execute ``code``; answer input requests from ``answers``. Returns (reply, prompts, outputs)."""
        kc = self.kc
        answers = list(answers)
        msg_id = kc.execute(code, allow_stdin=allow_stdin)
        prompts, outputs = [], []
        reply, idle = None, False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the kernel did not finish in {timeout}s; prompts {prompts}; outputs {outputs}"
                )
            try:
                msg = kc.get_stdin_msg(timeout=0.02)
                if msg["msg_type"] == "input_request":
                    prompts.append(msg["content"]["prompt"])
                    kc.input(answers.pop(0) if answers else "r")
            except queue.Empty:
                pass
            while True:
                try:
                    msg = kc.get_iopub_msg(timeout=0.01)
                except queue.Empty:
                    break
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
                elif kind in (
                    "stream",
                    "display_data",
                    "update_display_data",
                    "execute_result",
                    "error",
                    "clear_output",
                ):
                    outputs.append(msg["content"])
            if reply is None:
                try:
                    msg = kc.get_shell_msg(timeout=0.02)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        reply = msg
                except queue.Empty:
                    pass
        return reply, prompts, outputs

    def eval(self, expression):
        msg_id = self.kc.execute("", user_expressions={"value": expression})
        reply = self.kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        value = reply["content"]["user_expressions"]["value"]
        assert value["status"] == "ok", value
        return ast.literal_eval(value["data"]["text/plain"])

    def agent(self, prompt, answers=(), *, allow_stdin=True, options="--new"):
        reply, prompts, outputs = self.run(
            f"%%agent {options}\n{prompt}", answers, allow_stdin=allow_stdin
        )
        assert reply["content"]["status"] == "ok", outputs
        # the background title call would take the next test's scripted replies
        self.run(f"{MAGICS}.session.wait_title()")
        session_id = self.eval(f"{MAGICS}.session.info.id")
        return session_id, prompts, outputs


def tools(data, session_id):
    store = Store(data)
    try:
        return [
            p for m in store.messages(session_id) for p in m.parts if p.type == "tool"
        ], store.session(session_id)
    finally:
        store.close()


def steps(server):
    return [r for r in server.requests if "tools" in r]


@pytest.fixture
def fresh(server):
    server.reset()
    return server


def test_once_runs_the_call_and_remembers_nothing(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo once > once.txt"}},)),
        Reply(text="wrote it"),
    )
    session_id, prompts, _ = kernel.agent("write once.txt", ["o"])
    assert len(prompts) == 1
    assert (
        "bash: echo once > once.txt" in prompts[0]
        and "[o]nce" in prompts[0]
        and "[a]lways" in prompts[0]
    )
    assert (kernel.work / "once.txt").read_text() == "once\n"
    (tool,), info = tools(kernel.data, session_id)
    assert tool.state.status == "completed"
    assert tool.state.metadata["approval"] == {"reply": "once", "permission": "bash"}
    assert info.permission is None
    sent = steps(fresh)[1]["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"] == tool.state.output


def test_always_allows_the_prefix_for_the_session_and_is_stored(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo one"}},)),
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo two"}},)),
        Reply(text="both ran"),
    )
    session_id, prompts, _ = kernel.agent("echo twice", ["a"])
    assert len(prompts) == 1 and "echo *" in prompts[0]  # the second call was not asked
    found, info = tools(kernel.data, session_id)
    assert [t.state.status for t in found] == ["completed", "completed"]
    assert "two" in found[1].state.output
    assert info.permission == ({"permission": "bash", "pattern": "echo *", "action": "allow"},)
    assert steps(fresh)[-1]["messages"][-1]["content"] == found[1].state.output
    # it survives in the session: the next turn is not asked either
    fresh.reset()
    fresh.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo three"}},)),
        Reply(text="ok"),
    )
    _, prompts, _ = kernel.agent("once more", [], options="")
    assert prompts == []


def test_reject_stops_the_turn_and_the_code_never_runs(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": "rejected_var = 1"}},)),
        Reply(text="should not be requested"),
    )
    session_id, prompts, _ = kernel.agent("set a variable", ["r"])
    assert len(prompts) == 1 and "python: rejected_var = 1" in prompts[0]
    (tool,), _ = tools(kernel.data, session_id)
    assert tool.state.status == "error" and tool.state.error == "rejected by the user"
    assert tool.state.metadata["permission"]["outcome"] == "rejected"
    assert tool.state.metadata["approval"] == {"reply": "reject", "permission": "python"}
    assert len(steps(fresh)) == 1  # blocked: the model was not called again
    assert kernel.eval("'rejected_var' in globals()") is False


def test_reject_with_feedback_goes_back_to_the_model(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "rm -rf build"}},)),
        Reply(text="understood, I will not delete it"),
    )
    (kernel.work / "build").mkdir()
    session_id, prompts, _ = kernel.agent("clean up", ["no, keep the build directory"])
    assert len(prompts) == 1
    assert (kernel.work / "build").is_dir()
    (tool,), _ = tools(kernel.data, session_id)
    assert tool.state.status == "error" and "no, keep the build directory" in tool.state.error
    assert tool.state.metadata["permission"]["outcome"] == "corrected"
    assert tool.state.metadata["approval"]["feedback"] == "no, keep the build directory"
    second = steps(fresh)[1]["messages"]
    assert second[-1]["role"] == "tool" and "no, keep the build directory" in second[-1]["content"]


def test_without_stdin_the_call_is_denied_clearly_and_nothing_hangs(kernel, fresh):
    fresh.enqueue(
        Reply(tool_calls=({"name": "bash", "arguments": {"command": "echo nope > nope.txt"}},)),
        Reply(text="should not be requested"),
    )
    start = time.monotonic()
    session_id, prompts, outputs = kernel.agent("try it", allow_stdin=False)
    assert time.monotonic() - start < 30
    assert prompts == [] and not (kernel.work / "nope.txt").exists()
    (tool,), _ = tools(kernel.data, session_id)
    assert tool.state.status == "error" and "\n" not in tool.state.error
    assert (
        "%agent permit bash allow" in tool.state.error
        and "AgentMagics.permission" in tool.state.error
    )
    assert len(steps(fresh)) == 1
    assert not [o for o in outputs if "ename" in o]  # no traceback in the cell


MIME = "application/vnd.jupyter.session-agent+json"


def _bundles(outputs):
    return [o["data"] for o in outputs if MIME in o.get("data", {})]


def test_the_live_view_shows_the_pending_call_and_the_saved_output_the_decision(kernel, fresh):
    code = "import math\nprint(math.factorial(20))"
    fresh.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)),
        Reply(text="20! is 2432902008176640000."),
    )
    _, prompts, outputs = kernel.agent("What is 20 factorial?", ["o"])
    assert len(prompts) == 1 and "[o]nce" in prompts[0]
    index = next(i for i, o in enumerate(outputs) if o.get("data", {}).get(MIME, {}).get("asking"))
    pending = outputs[index]["data"]
    asking = pending[MIME]["asking"]
    assert asking["code"] == code and asking["language"] == "python"
    assert pending[MIME]["progress"]["waiting"] == "approval" and pending[MIME]["live"] is True
    # the fallback (no extension) shows the code in the Markdown form, not in a printed preamble
    assert "```python\nimport math" in pending["text/markdown"]
    assert not [o for o in outputs if o.get("name") == "stdout" and "wants to run" in o["text"]]
    # the answer's echo is cleared and the view shown again; the final view is compact
    cleared = [i for i, o in enumerate(outputs) if set(o) == {"wait"}]
    assert cleared and cleared[-1] > index
    bundles = _bundles(outputs)
    final = bundles[-1]
    assert final[MIME]["live"] is False and "asking" not in final[MIME]
    assert final[MIME]["detail"] == "compact"
    (info,) = [v for v in final[MIME]["tools"].values()]
    assert info["decision"] == "allowed once by you" and info["language"] == "python"
    markdown = final["text/markdown"]
    assert "allowed once by you" in markdown and "2432902008176640000" in markdown
    assert "step ·" not in markdown.split("<details")[0]  # the telemetry is folded


def test_a_failed_cell_shows_its_error_alone(kernel, fresh):
    fresh.enqueue(Reply(text="The first answer."))
    kernel.agent("a first question")
    # a model this kernel cannot reach (no OPENROUTER_API_KEY): the turn fails before its prompt
    reply, _, outputs = kernel.run("%%agent -m openrouter/nosuch-model\nhi")
    assert reply["content"]["status"] == "error"
    assert _bundles(outputs) == []  # the previous turn is not rendered again
    (error,) = [o for o in outputs if "ename" in o]
    assert "OPENROUTER_API_KEY" in error["evalue"]


def test_full_per_cell_and_the_view_setting(kernel, fresh):
    fresh.enqueue(Reply(text="Full view."))
    _, _, outputs = kernel.agent("show me everything", options="--new --full")
    final = _bundles(outputs)[-1]
    assert final[MIME]["detail"] == "full" and "footer" not in final[MIME]
    reply, _, out = kernel.run("%config AgentMagics.view = 'sideways'")
    assert "compact" in str(out) and "full" in str(out)  # one line naming the choices
