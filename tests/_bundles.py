"""An exported session bundle given new ids, as a second, distinct session (for import tests)."""

from __future__ import annotations

from jupyter_session_agent.core import ids


def fresh_ids(bundle: dict, keep_messages=(), keep_parts=()) -> dict:
    """``bundle`` (``%agent export --format json``) with a new session id and new message and
    part ids, but for the messages at the indexes in ``keep_messages`` and the parts whose ids
    are in ``keep_parts``; the parts' and messages' session links are dropped (the import sets
    them). Changed in place and returned."""
    bundle["info"]["id"] = ids.descending("session")
    for i, m in enumerate(bundle["messages"]):
        if i not in keep_messages:
            m["info"]["id"] = ids.ascending("message")
        for p in m["parts"]:
            if p["id"] not in keep_parts:
                p["id"] = ids.ascending("part")
            p.pop("sessionID", None)
            p.pop("messageID", None)
        m["info"].pop("sessionID", None)
    return bundle
