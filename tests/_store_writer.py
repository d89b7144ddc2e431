"""A writer process for the store's multi-process tests.

Usage::

    python _store_writer.py DATA_DIR turns N TAG   # N turns, flush per turn, then exit (compacts)
    python _store_writer.py DATA_DIR crash TAG     # one running tool, then turns forever (for SIGKILL)

After every flush it prints ``flushed <turn index> <session id>`` so the parent
knows exactly which rows are durable.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_session_agent.core import ids  # noqa: E402
from jupyter_session_agent.core.messages import (  # noqa: E402
    AssistantMessage,
    ModelRef,
    Session,
    StepStartPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    ToolRunning,
    UserMessage,
    now_ms,
)
from jupyter_session_agent.store import Store  # noqa: E402


def turn(tag: str, index: int, *, running: bool = False) -> list:
    """A session with a user message, an assistant message and three parts."""
    now = now_ms()
    session = Session(
        id=ids.descending("session"),
        directory="/w",
        title=f"{tag} {index}",
        time_created=now,
        time_updated=now,
    )
    user = UserMessage(
        id=ids.ascending("message"),
        session_id=session.id,
        time_created=now,
        model=ModelRef("openai", "m"),
    )
    reply = AssistantMessage(
        id=ids.ascending("message"),
        session_id=session.id,
        parent_id=user.id,
        time_created=now,
        provider_id="openai",
        model_id="m",
    )
    keys = dict(session_id=session.id, message_id=reply.id)
    state = (
        ToolRunning(input={"command": "sleep 100"}, time_start=now)
        if running
        else ToolCompleted(
            input={"command": "ls"},
            output="a\n",
            title="ls",
            metadata={},
            time_start=now,
            time_end=now,
        )
    )
    return [
        session,
        user,
        TextPart(
            id=ids.ascending("part"),
            session_id=session.id,
            message_id=user.id,
            text=f"turn {index}",
        ),
        reply,
        StepStartPart(id=ids.ascending("part"), **keys),
        ToolPart(
            id=ids.ascending("part"), call_id=f"call_{index}", tool="bash", state=state, **keys
        ),
    ]


def main(data_dir: str, mode: str, *args: str) -> None:
    store = Store(data_dir)
    tag = args[-1]
    count = int(args[0]) if mode == "turns" else None
    index = 0
    while count is None or index < count:
        values = turn(tag, index, running=(mode == "crash" and index == 0))
        store.put(*values)
        store.flush()
        print(f"flushed {index} {values[0].id}", flush=True)
        index += 1
        time.sleep(float(os.environ.get("JSA_WRITER_PAUSE", "0")))  # lets a reader see it write
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
