"""A bash word's value as the checker reads it: which characters are quoted, and what
quoting, escapes, globs and brace expansions make of them.

The walker in :mod:`.bashparse` builds a :class:`WordValue` for every word it reads (an
argument, an assignment's value, a redirection's target) from these pieces; nothing here sees
the syntax tree. Pure: no parser, no file system.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass
class WordValue:
    """A word's value: ``chars`` with a per-character ``mask`` (``u`` unquoted, ``q`` quoted)."""

    chars: str = ""
    mask: str = ""
    known: bool = True
    brace: bool = False  # a brace expansion ({a,b}, {1..3})

    def add(self, other: WordValue) -> WordValue:
        return WordValue(
            self.chars + other.chars,
            self.mask + other.mask,
            self.known and other.known,
            self.brace or other.brace,
        )


def literal(text: str, quoted: bool) -> WordValue:
    return WordValue(text, ("q" if quoted else "u") * len(text))


UNKNOWN = WordValue("", "", False)


def has_glob(value: WordValue) -> bool:
    return any(c in "*?[" and m == "u" for c, m in zip(value.chars, value.mask))


def exact_glob(value: WordValue) -> bool:
    """Would a plain glob of ``value.chars`` match what bash matches? Not when a glob
    character is quoted (bash takes it literally) or a POSIX class ``[:…:]`` appears."""
    quoted = any(c in "*?[" and m != "u" for c, m in zip(value.chars, value.mask))
    return not quoted and "[:" not in value.chars


def braces(value: WordValue) -> WordValue:
    """Mark an unquoted ``{a,b}`` or ``{x..y}``: bash turns it into several words."""
    chars, mask = value.chars, value.mask
    depth_start = -1
    for i, (c, m) in enumerate(zip(chars, mask)):
        if m != "u":
            continue
        if c == "{":
            depth_start = i
        elif c == "}" and depth_start != -1:
            inner = [(x, y) for x, y in zip(chars[depth_start + 1 : i], mask[depth_start + 1 : i])]
            text = "".join(x if y == "u" else "\0" for x, y in inner)
            if "," in text or ".." in text:
                return WordValue(chars, mask, value.known, True)
            depth_start = -1
    return value


def dquote(text: str) -> str:
    """Inside double quotes a backslash escapes only ``$ ` " \\`` and a newline."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def ansi_c(text: str) -> str | None:
    """The value of ``$'…'``; ``None`` when it holds an escape this decoder does not know."""
    if not (text.startswith("$'") and text.endswith("'") and len(text) >= 3):
        return None
    body, out, i = text[2:-1], [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
            continue
        rest = body[i + 1 :]
        match = (
            re.match(r"[0-7]{1,3}", rest)
            or re.match(r"x([0-9A-Fa-f]{1,2})", rest)
            or re.match(r"u([0-9A-Fa-f]{1,4})", rest)
            or re.match(r"U([0-9A-Fa-f]{1,8})", rest)
        )
        if not match:
            return None
        digits = match.group(1) if match.groups() else match.group(0)
        code = int(digits, 8 if not match.groups() else 16)
        if code == 0 or code > 0x10FFFF:
            return None  # bash cuts the string at a NUL
        out.append(chr(code))
        i += 1 + match.end()
    return "".join(out)


_ODD = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})  # control, format, separators…


def odd_characters(text: str) -> str:
    """A description of the first character bash and the parser might read differently."""
    for c in text:
        if c in "\t\n":
            continue
        category = unicodedata.category(c)
        if category in _ODD or (category == "Zs" and c != " "):
            return f"the character U+{ord(c):04X}"
    return ""
