"""Sortable identifiers, byte-compatible with OpenCode's ``src/id/id.ts``.

Format: ``<prefix>_<12 hex><14 base62>``. The hex part is the low 48 bits of
``ms * 0x1000 + counter`` (bitwise NOT for descending ids), so ascending ids
compare as strings in creation order and descending ids (sessions) put the
newest first. The counter is shared by all prefixes and resets every
millisecond, as upstream.
"""

from __future__ import annotations

import os
import threading
import time

PREFIXES = {
    "session": "ses",
    "message": "msg",
    "part": "prt",
    "permission": "per",
    "question": "que",
    "user": "usr",
    "pty": "pty",
    "tool": "tool",
    "workspace": "wrk",
    "event": "evt",  # history events (compaction)
}
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_MASK48 = (1 << 48) - 1
_RANDOM_LENGTH = 14

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _random_base62(n: int) -> str:
    return "".join(_BASE62[b % 62] for b in os.urandom(n))


def _next_value(now_ms: int | None) -> int:
    global _last_ms, _counter
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms != _last_ms:
            _last_ms, _counter = ms, 0
        _counter += 1
        return ms * 0x1000 + _counter


def create(kind: str, *, descending: bool = False, now_ms: int | None = None) -> str:
    """A new id for ``kind`` (a key of :data:`PREFIXES`)."""
    value = _next_value(now_ms)
    if descending:
        value = ~value
    return f"{PREFIXES[kind]}_{value & _MASK48:012x}{_random_base62(_RANDOM_LENGTH)}"


def ascending(kind: str) -> str:
    """Message, part and tool-output ids: string order is creation order."""
    return create(kind)


def descending(kind: str) -> str:
    """Session ids: newer sessions sort first."""
    return create(kind, descending=True)


def timestamp(ascending_id: str) -> int:
    """The millisecond timestamp encoded in an ascending id (low 48 bits only)."""
    body = ascending_id.split("_", 1)[1]
    return int(body[:12], 16) // 0x1000
