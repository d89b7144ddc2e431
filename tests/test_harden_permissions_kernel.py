"""The approval prompt in a REAL kernel shows the complete code before the question.

Reuses the kernel harness of ``test_approval_kernel.py`` (a kernel started with
``jupyter_client``, a scripted server in this process, input requests answered on the stdin
channel as a user would type them).
"""

from __future__ import annotations

import pytest
from test_approval_kernel import fresh, kernel, server, tools  # noqa: F401  (module fixtures)

from jupyter_session_agent.testing.scripted_server import Reply

pytestmark = pytest.mark.slow


def test_a_multi_line_call_is_shown_in_full_before_the_question(kernel, fresh):  # noqa: F811
    code = "import os\nprint('harmless')\x1b[1A\x1b[2K\nos.system('touch X')  # \u202e"
    fresh.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)),
        Reply(text="never requested"),
    )
    session_id, prompts, outputs = kernel.agent("run it", ["r"])
    assert not (kernel.work / "X").exists()
    (prompt,) = prompts
    assert "\n" not in prompt and "the 3-line python code above" in prompt and "(+" not in prompt
    # the live view shows the whole code above the question (its Markdown for any front end,
    # its JSON for the JupyterLab renderer), every invisible character made visible
    mime = "application/vnd.jupyter.session-agent+json"
    asking = [o["data"] for o in outputs if o.get("data", {}).get(mime, {}).get("asking")]
    shown = "import os\nprint('harmless')⟨U+001B⟩[1A⟨U+001B⟩[2K\nos.system('touch X')  # ⟨U+202E⟩"
    assert asking and asking[-1][mime]["asking"]["code"] == shown
    assert shown in asking[-1]["text/markdown"]
    codes = set()
    for data in [o["data"] for o in outputs if mime in o.get("data", {})]:
        assert "\x1b" not in data["text/markdown"] and "\u202e" not in data["text/markdown"]
        codes.update(tool["code"] for tool in data[mime].get("tools", {}).values())
    assert codes - {None} == {shown}  # what the renderer highlights: visible too
    (tool,), _ = tools(kernel.data, session_id)
    assert (
        tool.state.status == "error" and tool.state.metadata["permission"]["outcome"] == "rejected"
    )
