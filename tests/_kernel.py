"""A real ipykernel for the tests that need one: started with the scripted server's address and
the package's data directory in its environment, and cells run as a front end runs them."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FAKE_KEY = "sk-kernel-test-not-real"


@contextmanager
def real_kernel(
    base_url: str, data: Path, cwd: Path, *, api_key: str = FAKE_KEY, **env: str
) -> Iterator[Any]:
    """A started, ready kernel client whose kernel talks to ``base_url`` and keeps its history
    in ``data``; ``env`` adds variables. The kernel is shut down on exit."""
    from jupyter_client import KernelManager

    environment = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": api_key,
        "JUPYTER_SESSION_AGENT_DIR": str(data),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=environment, cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc: Any, code: str, timeout: float = 60.0) -> tuple[dict, list[dict]]:
    """Run ``code`` as a numbered cell: its execute_reply content and every IOPub message it
    caused until the kernel was idle again."""
    msg_id = kc.execute(code, allow_stdin=False)
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            while True:
                reply = kc.get_shell_msg(timeout=10)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"], messages
        messages.append(msg)
    kinds = [m["msg_type"] for m in messages]
    raise AssertionError(f"the kernel did not finish in {timeout}s: {kinds}")
