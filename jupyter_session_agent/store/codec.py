"""Values ↔ journal rows: which kind a value is, a row's line (redacted), decoding back."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from typing import Any

from ..core import messages as M
from ..core.errors import UsageError
from ..core.messages import Session, ToolError, ToolPart, now_ms
from ..core.redact import redact as _redact
from ..core.text import has_surrogates, safe_text
from .problems import report, report_row
from .schema import Kind


def journal_kind(value: Any) -> Kind:
    """The journal kind a value is stored as (UsageError for anything the store cannot hold)."""
    if isinstance(value, Session):
        return "session"
    if isinstance(value, (M.UserMessage, M.AssistantMessage)):
        return "message"
    if type(value) in M.PART_TYPES.values() or type(value) is M.UnknownPart:
        return "part"
    if (
        getattr(type(value), "JOURNAL_KIND", None) == "event"
    ):  # immutable records, e.g. compaction events
        return "event"
    raise UsageError(
        f"cannot store a {type(value).__name__} — put() takes a Session, message, part or event"
    )


def encode(row: dict) -> bytes:
    """One journal line, always valid UTF-8 JSON. A lone surrogate (a latin-1 file name, a
    broken prompt) is written as ``text.safe_text`` shows it (``\\xe9``), the same text every
    other outbound path gives. Secrets are redacted (``redact.py``): nothing written to a
    journal may hold an API key."""
    text = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    if has_surrogates(text):
        text = safe_text(text, json=True)
    return (_redact(text) + "\n").encode("utf-8")


# --------------------------------------------------------------------------
# decoding: messages.decoder() is from_data compiled once per class


@functools.cache
def decoders():
    """(UserMessage decoder, AssistantMessage decoder, part type → decoder)."""
    return (
        M.decoder(M.UserMessage),
        M.decoder(M.AssistantMessage),
        {name: M.decoder(cls) for name, cls in M.PART_TYPES.items()},
    )


@contextlib.contextmanager
def gc_paused():
    """No collection while decoding; afterwards the new (long-lived, cached) objects go
    straight to the oldest generation.

    Otherwise the first allocation after ``gc.enable()`` traverses every object just
    made (60-100 ms for a 10,000-message session), and later young collections do it
    again. ``freeze()`` + ``unfreeze()`` moves all tracked objects to the oldest
    generation and resets the young count, without a traversal; cyclic garbage made
    before the call is then found by the next full collection instead of a young one.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def decode(kind: str, data: dict):
    """A value from OpenCode JSON: ``kind`` is "session", "message" or "part" (a part this
    version cannot read is an ``UnknownPart``; anything else unreadable raises)."""
    if kind == "part":
        return M.read_part(data)
    if kind == "message":
        return M.decoder(M.UserMessage if data.get("role") == "user" else M.AssistantMessage)(data)
    return M.decoder(Session)(data)


def undecodable(row: tuple, data: Any, session_id: str, err: Exception):
    """What a message or part row that its decoder refused becomes: an ``UnknownPart`` (kept,
    reported once) for a part stored as a JSON object, else None (left out, reported once).
    ``row`` is ``(id, message_id, …)``, ``data`` its JSON with the ids already set."""
    kind = "message" if row[1] is None else "part"
    if kind == "part" and isinstance(data, dict) and "messageID" in data:
        part = M.read_part(data)  # the one rule: what this version cannot read is an UnknownPart
        if type(part) is not M.UnknownPart:
            return part
        report(
            ("unknown", session_id, part.problem),
            f"history: session {session_id} has a part this version cannot read "
            f"({part.problem}) — kept unchanged, shown as unknown, not sent to the model; "
            "a newer version may read it",
        )
        return part
    why = (
        f"{type(err).__name__}: {err}"
        if isinstance(data, dict)
        else f"not a JSON object: {type(data).__name__}"
    )
    report_row(kind, row[0], session_id, why)
    return None


def interrupted(part: ToolPart) -> ToolPart:
    """A dead writer's unfinished tool call, as OpenCode shows it after a crash."""
    state, now = part.state, now_ms()
    metadata = {**(getattr(state, "metadata", None) or {}), "interrupted": True}
    error = ToolError(
        input=dict(state.input),
        error="Tool execution was interrupted",
        time_start=getattr(state, "time_start", None) or now,
        time_end=now,
        metadata=metadata,
    )
    return M.replace(part, state=error)
