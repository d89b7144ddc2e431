"""Untrusted text (a model's, a tool's, a file's, a title, an import, an MCP server's) made safe
for the HTML and the Markdown the product builds. Every renderer goes through these functions.

* :func:`html`: text for an HTML element or attribute (``&``, ``<``, ``>`` and quotes escaped).
* :func:`markdown`: text that stays Markdown (emphasis, lists, headings, fenced code, `code`,
  http(s) and mailto links) but can hold no active HTML, whichever Markdown parser renders it
  (JupyterLab's marked, nbconvert's mistune, GitHub): every ``<`` outside code becomes
  ``&lt;`` (so no tag, comment or autolink), a link, image or reference definition whose
  target is not http(s), mailto or a relative path is shown as text, a fenced
  block left open is closed, and a code span with a character a parser might read as HTML
  becomes an HTML ``<code>`` element whose text is escaped.
* :func:`code`: one value as inline code; :func:`cell`: one Markdown table cell.

Fenced code blocks keep their text unchanged, and are written anew so that every parser sees
them open and close in the same place: a fence is code only at the very start of a line (as
the text's first line or after any line), and is rewritten with a plain info string and a
fence longer than any backtick run inside; a fence-like line anywhere else (indented, after a
list or quote marker) is shown as text, so no parser opens a block this module did not see.
Anything this module cannot be sure is code is escaped as text: the worst case is a ``&lt;``
shown inside an indented code block or a list's fence, never a tag.
"""

from __future__ import annotations

import bisect
import functools
import html as _html
import re
from typing import Any

SAFE_SCHEMES = ("http", "https", "mailto")

# a fence kept as code: at the very start of a line, backticks with no backtick after them, or
# tildes; a fence anywhere else (indented, after a list or quote marker) is shown as text
_FENCE_OPEN = re.compile(r"^(`{3,}(?=[^`]*$)|~{3,})(.*)$")
_FENCE_LIKE = re.compile(r"^((?:[ \t>]|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t]))*)(`{3}|~{3})", re.M)
_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):")
_DROP = re.compile(r"[\x00-\x20\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_DEFINITION = re.compile(r"^( {0,3})(\[[^\]\n]*\]:)(\s*)(\S*)", re.MULTILINE)


def _plain_code(text: str) -> bool:
    """Whether a code span's text is harmless even if a parser does not see the span: no tag
    start, no table-cell split, no link."""
    return not any(s in text for s in ("<", "|", "](", "]:"))


def html(text: Any) -> str:
    """``text`` escaped for HTML content and quoted attributes."""
    return _html.escape(str(text), quote=True)


def safe_url(url: str) -> bool:
    """Whether a link target opens nothing but a web page, a mail or a relative path: read as a
    browser reads it (entities decoded, backslash escapes, whitespace and controls dropped)."""
    plain = _DROP.sub("", _html.unescape(re.sub(r"\\(.)", r"\1", url))).lstrip("<").lower()
    scheme = _SCHEME.match(plain)
    return scheme is None or scheme.group(1) in SAFE_SCHEMES


def _entities(text: str) -> str:
    """Every character but letters, digits and spaces as a numeric entity (no parser reads
    Markdown or HTML syntax in it; the browser shows the text)."""
    return "".join(c if c.isalnum() or c == " " else f"&#{ord(c)};" for c in text)


def code(text: Any) -> str:
    """``text`` as inline code: backticks when no character in it could be read as HTML or as
    a link, else an HTML ``<code>`` element with the text escaped."""
    text = str(text).replace("\n", " ")
    if _plain_code(text):
        longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
        ticks = "`" * (longest + 1)
        pad = " " if text.startswith("`") or text.endswith("`") else ""
        return f"{ticks}{pad}{text}{pad}{ticks}"
    return f"<code>{_entities(text)}</code>"


def cell(text: Any) -> str:
    """``text`` as one Markdown table cell: one line, ``|`` escaped, no active HTML."""
    line = re.sub(r"\s*\n\s*", " ", str(text))
    return markdown(line, fences=False).replace("|", "&#124;")


def markdown(text: Any, *, fences: bool = True) -> str:
    """Untrusted ``text`` as Markdown with no active HTML (see the module's docstring).

    ``fences=False`` when the text does not start a line of its own (after other text on
    its line, or in a table cell): no fence is kept as code there."""
    text = str(text)
    if "`" not in text and "~~~" not in text:  # no code span, no fence: one pass
        return _text(text)
    lines = text.split("\n")
    out: list[str] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i]) if fences else None
        if opened is None:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            out.append(_prose("\n".join(prose)))
        prose = []
        mark = opened.group(1)
        close = re.compile(rf"^ {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        out.append(_fenced(lines[i + 1 : end], opened.group(2)))
        i = end + 1  # a fence left open is closed at the end: it would swallow what follows
    if prose:
        out.append(_prose("\n".join(prose)))
    return "\n".join(out)


def _fenced(body: list[str], info: str) -> str:
    """A fenced block written anew: at the line's start, a plain info string, and a fence
    longer than any backtick run inside, so every parser sees it open and close here."""
    longest = max((len(m) for m in re.findall(r"`+", "\n".join(body))), default=0)
    ticks = "`" * max(3, longest + 1)
    language = re.match(r"[A-Za-z0-9_+.#-]*", info.strip()).group(0)  # type: ignore[union-attr]
    return "\n".join([ticks + language, *body, ticks])


_TOKEN = re.compile(r"\\[\\`<\[\]()!*_{}#+\-.|~>&]|`+")  # an escaped character, or a backtick run
_BLANK = re.compile(r"\n[ \t]*\n")


def _prose(text: str) -> str:
    """Text outside fenced blocks: code spans kept (or made safe), every other ``<`` escaped,
    links to anything but safe targets broken. Linear in the text's length."""
    out: list[str] = []
    blanks = [m.start() for m in _BLANK.finditer(text)]  # a code span never crosses one
    plain_from = i = 0
    while True:
        token = _TOKEN.search(text, i)
        if token is None:
            break
        i = token.end()
        if token.group(0)[0] == "\\":
            continue
        run = len(token.group(0))
        next_blank = bisect.bisect_left(blanks, i)
        limit = blanks[next_blank] if next_blank < len(blanks) else len(text)
        closing = _closer(run).search(text, i, limit)
        if closing is None:
            continue  # backticks with no partner are text
        out.append(_text(text[plain_from : token.start()]))
        out.append(_span(text[i : closing.start()], token.group(0)))
        i = plain_from = closing.end()
    out.append(_text(text[plain_from:]))
    return "".join(out)


@functools.lru_cache(maxsize=64)
def _closer(run: int) -> re.Pattern[str]:
    """A backtick run of exactly ``run`` backticks (the one that closes a span it opened)."""
    return re.compile(rf"(?<!`)`{{{run}}}(?!`)")


def _span(inner: str, ticks: str) -> str:
    if _plain_code(inner):
        return f"{ticks}{inner}{ticks}"
    body = inner[1:-1] if len(inner) > 2 and inner[0] == inner[-1] == " " else inner
    return f"<code>{_entities(body.replace(chr(10), ' '))}</code>"


def _text(text: str) -> str:
    """Markdown text (no code in it): ``<`` escaped, unsafe link targets broken, and a fence
    that a parser could open here (indented, in a list or a quote) shown as text."""
    text = text.replace("<", "&lt;")
    if "```" in text or "~~~" in text:
        text = _FENCE_LIKE.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text)
    if "]" not in text:
        return text
    text = _DEFINITION.sub(
        lambda m: m.group(0) if safe_url(m.group(4)) else "&#91;" + m.group(0).lstrip(" ")[1:],
        text,
    )
    out, pos = [], 0
    for m in re.finditer(r"\]\(", text):
        target = re.match(r"\s*(\S*)", text[m.end() :])
        if target is not None and not safe_url(target.group(1).rstrip(")")):
            # the ``[`` that opens this link cannot always be told (nested brackets): every
            # one before it since the last broken link is shown as text
            out.append(text[pos : m.start()].replace("[", "&#91;"))
            pos = m.start()
    out.append(text[pos:])
    return "".join(out)
