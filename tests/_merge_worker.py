"""A process for the merge tests (tests/test_store_merge.py).

Usage::

    python _merge_worker.py DATA_DIR write N TAG  # N sessions of 2 turns, flush each, exit
    python _merge_worker.py DATA_DIR revise TAG   # a new revision of every session's title
    python _merge_worker.py DATA_DIR cycle TAG    # forever: a finished kernel's file, a merge
    python _merge_worker.py DATA_DIR merge        # one forced merge

``write`` prints ``wrote <i> <session id>`` after each flush; ``cycle`` prints ``kernel <i>
<session id>`` once that kernel's journal is compacted and ``merged <i> <generation>`` after each
merge, so the parent knows what is durable when it kills the process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_session_agent.core import ids  # noqa: E402
from jupyter_session_agent.core.messages import (  # noqa: E402
    AssistantMessage,
    ModelRef,
    Session,
    StepFinishPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    now_ms,
    replace,
)
from jupyter_session_agent.store import Store, merge  # noqa: E402


def session_values(tag: str, index: int, turns: int = 2) -> list:
    """A session with ``turns`` turns: a user message with a text part, an assistant message
    with a tool call and a step-finish (cost 0.01)."""
    now = now_ms()
    session = Session(
        id=ids.descending("session"),
        directory="/w",
        title=f"{tag} {index}",
        time_created=now,
        time_updated=now,
    )
    values = [session]
    for turn in range(turns):
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
            cost=0.01,
            tokens=Tokens(input=10, output=5),
        )
        keys = dict(session_id=session.id, message_id=reply.id)
        values += [
            user,
            TextPart(
                id=ids.ascending("part"),
                session_id=session.id,
                message_id=user.id,
                text=f"{tag} {index} turn {turn}",
            ),
            reply,
            ToolPart(
                id=ids.ascending("part"),
                call_id=f"c{turn}",
                tool="bash",
                **keys,
                state=ToolCompleted(
                    input={"command": "ls"},
                    output="a\n",
                    title="ls",
                    metadata={},
                    time_start=now,
                    time_end=now + 1,
                ),
            ),
            StepFinishPart(
                id=ids.ascending("part"),
                reason="stop",
                cost=0.01,
                tokens=Tokens(input=10, output=5),
                **keys,
            ),
        ]
    return values


def main(data_dir: str, mode: str, *args: str) -> None:
    if mode == "merge":
        print(merge(Path(data_dir) / "history", force=True), flush=True)
        return
    if mode == "cycle":
        tag, index = args[0], 0
        while True:
            store = Store(data_dir)
            values = session_values(tag, index)
            store.put(*values)
            store.close()  # compacts its journal, as a finished kernel
            print(f"kernel {index} {values[0].id}", flush=True)
            done = merge(Path(data_dir) / "history", force=True)
            print(f"merged {index} {done and done['generation']}", flush=True)
            index += 1
    store = Store(data_dir)
    if mode == "write":
        count, tag = int(args[0]), args[1]
        for index in range(count):
            values = session_values(tag, index)
            store.put(*values)
            store.flush()
            print(f"wrote {index} {values[0].id}", flush=True)
    elif mode == "revise":
        for session in store.sessions():
            store.put(replace(session, title=session.title + " (revised)"))
        store.flush()
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
