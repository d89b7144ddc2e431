"""Values ↔ journal rows: which kind a value is, a row's line (redacted), decoding back."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from typing import Any

from .. import messages as M
from ..errors import UsageError
from ..messages import Session, ToolError, ToolPart, now_ms
from ..redact import redact as _redact
from .journal import Kind


def _kind(value: Any) -> Kind:
    if isinstance(value, Session):
        return "session"
    if isinstance(value, (M.UserMessage, M.AssistantMessage)):
        return "message"
    if type(value) in M.PART_TYPES.values():
        return "part"
    if getattr(type(value), "JOURNAL_KIND", None) == "event":  # immutable records, e.g. compaction events
        return "event"
    raise UsageError(f"cannot store a {type(value).__name__} — put() takes a Session, message, part or event")


def _encode(row: dict) -> bytes:
    """One journal line. A lone surrogate would make DuckDB drop the whole line, so replace it.
    Secrets are redacted (``redact.py``): nothing written to a journal may hold an API key."""
    text = _redact(json.dumps(row, ensure_ascii=False, separators=(",", ":"))) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


# --------------------------------------------------------------------------
# decoding: messages.decoder() is from_data compiled once per class


@functools.cache
def _decoders():
    """(UserMessage decoder, AssistantMessage decoder, part type → decoder)."""
    return (M.decoder(M.UserMessage), M.decoder(M.AssistantMessage),
            {name: M.decoder(cls) for name, cls in M.PART_TYPES.items()})


@contextlib.contextmanager
def _gc_paused():
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


def _decode(kind: str, data: dict):
    """A value from OpenCode JSON: ``kind`` is "session", "message" or "part"."""
    if kind == "part":
        return M.decoder(M.PART_TYPES[data["type"]])(data)
    if kind == "message":
        return M.decoder(M.UserMessage if data.get("role") == "user" else M.AssistantMessage)(data)
    return M.decoder(Session)(data)


def _interrupted(part: ToolPart) -> ToolPart:
    """A dead writer's unfinished tool call, as OpenCode shows it after a crash."""
    state, now = part.state, now_ms()
    metadata = {**(getattr(state, "metadata", None) or {}), "interrupted": True}
    error = ToolError(input=dict(state.input), error="Tool execution was interrupted",
                      time_start=getattr(state, "time_start", None) or now, time_end=now, metadata=metadata)
    return M.replace(part, state=error)
