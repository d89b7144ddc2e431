"""Text every encoder accepts: no lone surrogates in what the package writes or sends.

A Python ``str`` can hold code points no UTF-8 encoder takes: file names and
command output decoded with ``surrogateescape`` (``os.listdir`` gives
``"caf\\udce9.txt"`` for the latin-1 name ``b"caf\\xe9.txt"``), a lone
``"\\ud800"`` in a prompt or in JSON from a server, and the two halves of a
pair a server split across two stream chunks. One such character makes
``str.encode("utf-8")`` raise, so a journal line, a model request, a display
message or an export would fail, and keep failing while the text stays in
the session's history.

:func:`safe_text` turns them into text that says what was there:

- a pair of surrogates (high then low) becomes the character it encodes;
- an escaped byte (``\\udc80``–``\\udcff``, what ``surrogateescape`` makes of
  an undecodable byte) becomes ``\\xNN``, the byte in Python's notation;
- any other lone surrogate becomes ``\\uXXXX``.

``safe_text(text, json=True)`` is for serialised JSON: the backslash it
inserts is itself escaped, so the text stays valid JSON and decodes to what
``safe_text`` would give for the string inside. Cheap when there is nothing to
find: ASCII text returns at once, other text costs one regular-expression scan.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_RUN = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a code point UTF-8 cannot encode."""
    return isinstance(text, str) and not text.isascii() and _SURROGATE.search(text) is not None


def safe_text(text: str, *, json: bool = False) -> str:
    """``text`` with surrogates made encodable (see the module docstring); else ``text`` itself."""
    if not has_surrogates(text):
        return text
    slash = "\\\\" if json else "\\"

    def fix(match: re.Match) -> str:
        found = match.group()
        if len(found) == 2:
            return found.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        point = ord(found)
        if 0xDC80 <= point <= 0xDCFF:
            return f"{slash}x{point - 0xDC00:02x}"
        return f"{slash}u{point:04x}"

    return _RUN.sub(fix, text)


def map_strings(value: Any, fn: Callable[[str], str], *, utf8_bytes: bool = False) -> Any:
    """``fn`` on every string inside dicts (keys too), lists and tuples (with ``utf8_bytes``,
    on bytes that are UTF-8 text too, encoded back). Returns ``value`` itself (the same object)
    when nothing changed, so a caller can tell by identity."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        items = [
            (map_strings(k, fn, utf8_bytes=utf8_bytes), map_strings(v, fn, utf8_bytes=utf8_bytes))
            for k, v in value.items()
        ]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items())):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        out = [map_strings(v, fn, utf8_bytes=utf8_bytes) for v in value]
        if all(a is b for a, b in zip(out, value)):
            return value
        return out if isinstance(value, list) else tuple(out)
    if utf8_bytes and isinstance(value, (bytes, bytearray)) and value:
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return value  # binary (an image): no text to change
        changed = fn(text)
        return value if changed == text else changed.encode("utf-8")
    return value


def safe_value(value: Any) -> Any:
    """:func:`safe_text` on every string inside dicts (keys too), lists and tuples.
    Returns ``value`` itself (the same object) when nothing needed a change."""
    return map_strings(value, safe_text)


_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def file_name(text: str) -> str:
    """The inverse of :func:`safe_text` for a path read back from the history: each ``\\xNN``
    (``NN`` ≥ 80) becomes the escaped byte again, so ``os`` functions reach the latin-1 name
    it was written for (``"caf\\xe9"`` → ``"caf\\udce9"`` → ``b"caf\\xe9"``)."""
    if "\\x" not in text:
        return text
    return _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), text)


def decode(data: bytes) -> str:
    """Bytes from outside (a file, a process, a pipe) as text: UTF-8, other bytes as ``\\xNN``."""
    return safe_text(data.decode("utf-8", "surrogateescape"))


__all__ = [
    "map_strings",
    "safe_text",
    "safe_value",
    "has_surrogates",
    "decode",
    "file_name",
    "visible",
]


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def visible(text: str) -> str:
    """``text`` with every character that would not show as itself made visible: control
    characters (ANSI escapes included, but not newlines and tabs), format characters
    (bidirectional overrides, zero-width spaces), odd spaces and separators, lone
    surrogates — each as ``⟨U+001B⟩``, so what is shown is what runs."""
    out = []
    for c in text:
        if c in "\n\t":
            out.append(c)
            continue
        category = unicodedata.category(c)
        if category in _INVISIBLE or (category == "Zs" and c != " "):
            out.append(f"⟨U+{ord(c):04X}⟩")
        else:
            out.append(c)
    return "".join(out)
