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
    printed = "".join(o.get("text", "") for o in outputs if "text" in o)
    assert (
        "import os\nprint('harmless')⟨U+001B⟩[1A⟨U+001B⟩[2K\nos.system('touch X')  # ⟨U+202E⟩"
        in printed
    )
    assert "\x1b[1A" not in printed
    (tool,), _ = tools(kernel.data, session_id)
    assert (
        tool.state.status == "error" and tool.state.metadata["permission"]["outcome"] == "rejected"
    )
