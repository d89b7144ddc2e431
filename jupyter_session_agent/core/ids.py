"""Sortable identifiers, byte-compatible with OpenCode's ``src/id/id.ts``.

Format: ``<prefix>_<12 hex><14 base62>``. The hex part is the low 48 bits of
``ms * 0x1000 + counter`` (bitwise NOT for descending ids), so ascending ids
compare as strings in creation order and descending ids (sessions) put the
newest first. The counter is shared by all prefixes and resets every
millisecond, as upstream.

Ids that arrive from outside (a bundle, an OpenCode import, a magic's argument,
a model's ``task_id``) are checked against the grammar before anything uses
them: :func:`check` for a whole id, :func:`check_ref` for what a user types (an
id or a prefix of one). The grammar is ``<prefix>_`` and 1–64 ASCII letters or
digits: every id OpenCode or this package generates, and nothing that can name
another path (no ``/``, ``.``, NUL, spaces or look-alike letters). Paths built
from ids or names go through :func:`safe_child`, which resolves them and
refuses any that leaves its root.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from .errors import UsageError

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
    "replay": "rpl",  # a compaction replay run (analytics.replay)
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


# --------------------------------------------------------------------------
# ids from outside: the grammar, and paths built from ids

MAX_BODY = 64  # generated bodies have 26 characters; OpenCode also accepts caller-chosen ids
_BODY = re.compile(r"[0-9A-Za-z]{1,%d}" % MAX_BODY)
_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git object name (SHA-1 or SHA-256)
_NAME = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.:-]{0,127}")  # a tool call id: one harmless file name
_LISTS = {
    "session": "`%agent sessions` lists them",
    "message": "`%agent turns` lists the turns and their ids",
}


class InvalidIdError(UsageError):
    """An id (or id prefix) from outside that does not follow the id grammar."""


class UnsafePathError(UsageError):
    """A path built from an id or a name would leave the folder it must stay in."""


def shown(value: object, limit: int = 60) -> str:
    """``value`` for a one-line message: ASCII only (look-alike letters show as escapes), cut."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 4] + "…" + text[-3:]


def valid(value: object, kind: str) -> bool:
    """Whether ``value`` is a whole id of ``kind`` (a key of :data:`PREFIXES`)."""
    prefix = PREFIXES[kind] + "_"
    return (
        isinstance(value, str)
        and value.startswith(prefix)
        and _BODY.fullmatch(value, len(prefix)) is not None
    )


def check(value: object, kind: str, *, what: str = "") -> str:
    """``value`` when it is a whole id of ``kind``; else :class:`InvalidIdError` (one line)."""
    if valid(value, kind):
        return value  # type: ignore[return-value]
    what = what or f"the {kind} id"
    raise InvalidIdError(f"{what} {shown(value)} is not a {kind} id — {_grammar(kind)}")


def check_ref(value: object, kind: str) -> str:
    """What a user typed for an id of ``kind``: the whole id or a prefix of one."""
    prefix = PREFIXES[kind] + "_"
    if (
        isinstance(value, str)
        and value
        and (
            prefix.startswith(value)
            or (
                value.startswith(prefix)
                and (value == prefix or _BODY.fullmatch(value, len(prefix)) is not None)
            )
        )
    ):
        return value
    hint = f"; {_LISTS[kind]}" if kind in _LISTS else ""
    raise InvalidIdError(f"{shown(value)} is not a {kind} id — {_grammar(kind)}{hint}")


def is_hash(value: object) -> bool:
    """Whether ``value`` is a git object name (the trees of snapshot and patch parts)."""
    return isinstance(value, str) and _HASH.fullmatch(value) is not None


def safe_name(value: object) -> bool:
    """Whether ``value`` (a tool call id) is usable as one file name: ASCII letters, digits and
    ``_.:-``, starting with a letter or digit, at most 128 characters."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def safe_child(root: str | os.PathLike, *names: str, what: str = "the path") -> Path:
    """``root / names…`` resolved (symlinks followed), refused unless it stays inside ``root``.

    Each name must be one path component (no separator, NUL, ``.`` or ``..``); the result is
    also checked after resolving, so a symlink inside ``root`` cannot lead out of it.
    """
    base = Path(root).expanduser().resolve()
    for name in names:
        if (
            not isinstance(name, str)
            or name in ("", ".", "..")
            or "\0" in name
            or "/" in name
            or (os.altsep and os.altsep in name)
            or os.sep in name
        ):
            raise UnsafePathError(
                f"refusing {what} {shown(name)}: it is not one file name inside {base}"
            )
    path = base.joinpath(*names).resolve()
    if path != base and base not in path.parents:
        raise UnsafePathError(
            f"refusing {what} {shown('/'.join(names))}: it leads to {path}, outside {base}"
        )
    return path


def _grammar(kind: str) -> str:
    return f"ids look like {PREFIXES[kind]}_ followed by 1–{MAX_BODY} letters and digits"
