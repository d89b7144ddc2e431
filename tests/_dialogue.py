"""A stored dialogue for the memory tests: alternating turns, user first, one text part each."""

from __future__ import annotations

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    TextPart,
    UserMessage,
)


def dialogue(store, directory, lines, when, sid=None):
    """A session of alternating turns (user first), each text as given, a second apart from
    ``when``; returns the message ids."""
    info = Session(
        id=sid or ids.descending("session"),
        directory=str(directory),
        title="chat",
        time_created=when,
        time_updated=when + len(lines) * 1000,
    )
    store.put(info)
    out, parent = [], None
    for i, line in enumerate(lines):
        mid = ids.ascending("message")
        if i % 2 == 0:
            message = UserMessage(mid, info.id, when + i * 1000, ModelRef("openai", "x"))
            parent = mid
        else:
            message = AssistantMessage(
                mid, info.id, parent, when + i * 1000, "openai", "x", finish="stop"
            )
        store.put(message, TextPart(ids.ascending("part"), info.id, mid, text=line))
        out.append(mid)
    store.flush()
    return out
