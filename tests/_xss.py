"""A generated corpus of script-injection payloads, and checks that rendered HTML holds no
active content.

Every payload that could run records itself: it sets ``window.__xss`` to ``[its number]``
(with no quote, space or ``=`` in the script, so it is a valid unquoted attribute value too),
so a browser test reads which one ran. The corpus crosses vectors
(event handlers on many tags, script, javascript:/data:/vbscript: URLs in links, images,
frames, forms, SVG) with spellings (case, slashes for spaces, tabs and newlines inside,
entity-encoded, backslash escapes, unclosed tags) and Markdown contexts (paragraph, emphasis,
heading, list, table cell, link text and target, image, autolink, reference definition,
HTML comment, fenced blocks in lists, quotes and tables, a fence left open, payloads split
across two parts).
"""

from __future__ import annotations

import html
import itertools
import re

RUN = "Object.assign(window,{__xss:[{n}]})"

TAGS = (
    "<img src=x onerror={js}>",
    '<img src="x" onerror="{js}">',
    "<IMG SRC=x OnErRoR={js}>",
    "<img/src=x/onerror={js}>",
    "<img src=x\tonerror={js}>",
    "<img src=x\nonerror={js}>",
    "<svg onload={js}>",
    "<svg><animate onbegin={js} attributeName=x dur=1s>",
    "<svg><script>{js}</script></svg>",
    "<script>{js}</script>",
    '<iframe srcdoc="<script>parent.{js}</script>"></iframe>',
    "<iframe src=javascript:{js}></iframe>",
    "<details open ontoggle={js}>",
    "<body onload={js}>",
    "<video><source onerror={js}></video>",
    "<audio src=x onerror={js}>",
    "<input autofocus onfocus={js}>",
    "<object data=javascript:{js}></object>",
    "<embed src=javascript:{js}>",
    "<form><button formaction=javascript:{js}>x</button></form>",
    "<a href=javascript:{js}>link</a>",
    '<a href="  jAvAsCrIpT:{js}">link</a>',
    "<math><mtext><img src=x onerror={js}></mtext></math>",
    "<style onload={js}></style>",
    '<div style="background:url(javascript:{js})">s</div>',
    "<img src=x onerror={js}",  # unclosed
    "<<img src=x onerror={js}>>",
    "<!--><img src=x onerror={js}>-->",
)
LINKS = (
    "[click](javascript:{js})",
    "[click](JavaScript:{js})",
    "[click](jav&#x61;script:{js})",
    "[click](&#106;avascript:{js})",
    "[click](java&#9;script:{js})",
    "[click]( javascript:{js} )",
    "[click](<javascript:{js}>)",
    "[click](vbscript:{js})",
    "[click](data:text/html,<script>{js}</script>)",
    "![img](javascript:{js})",
    '![img](x "title" onerror={js})',
    "[**bold**](javascript:{js})",
    "[a [nested] link](javascript:{js})",
    "<javascript:{js}>",
    "[ref]\n\n[ref]: javascript:{js}",
    "[ref]\n\n[ref]:\n  javascript:{js}",
    "\\\\[x](javascript:{js})",
)
CONTEXTS = (
    "{p}",
    "Some *text* {p} and more.",
    "# heading {p}",
    "- item\n- {p}",
    "| a | b |\n|---|---|\n| x | {p} |",
    "| a | `b | {p} | c` |",
    "**{p}**",
    "> quote {p}",
    "text\\`{p}`",
    "1. one\n   {p}",
    "```\n{p}\n```",
    "text\n```\n{p}\n```\nafter {p}",
    "- item\n  ```\n  {p}\n  ```",
    "> ```\n> {p}\n> ```",
    "| a |\n|---|\n```\n{p}\n```",
    "```\n{p}",
    "~~~\n{p}\n~~~",
    "```py\n{p}\n````\n{p}",
    "    {p}",
    "```|x\n{p}|\n```",
    "<details>\n\n```\n{p}\n```\n\n</details>",
)


def payloads(start: int = 1) -> list[tuple[int, str]]:
    """``(n, text)``: every tag and link spelling in every context, entity-encoded forms too."""
    out: list[tuple[int, str]] = []
    n = start
    for template, context in itertools.product(TAGS + LINKS, CONTEXTS):
        p = template.replace("{js}", RUN.replace("{n}", str(n)))
        out.append((n, context.replace("{p}", p)))
        n += 1
    for template in TAGS[:6]:  # entity-encoded: must stay text, never become a tag
        p = html.escape(template.replace("{js}", RUN.replace("{n}", str(n))))
        out.append((n, p))
        n += 1
    return out


def split_pairs(start: int) -> list[tuple[int, str, str]]:
    """A payload cut in two, one half per part (the renderer joins parts)."""
    out = []
    for i, template in enumerate(TAGS[:8]):
        n = start + i
        p = template.replace("{js}", RUN.replace("{n}", str(n)))
        cut = len(p) // 2
        out.append((n, p[:cut], p[cut:]))
    return out


_URL_ATTRS = ("href", "src", "action", "formaction", "data", "xlink:href", "srcdoc", "background")
_DROP = re.compile(r"[\x00-\x20\x7f-\x9f]")


def bad_url(value: str) -> bool:
    plain = _DROP.sub("", html.unescape(value)).lower()
    return plain.startswith(("javascript:", "vbscript:", "data:text/html"))


def active_content(soup_root) -> list[str]:
    """What in a parsed (BeautifulSoup) tree could run script: script/iframe/object/embed
    elements, event-handler attributes, script URLs."""
    found = []
    for el in soup_root.find_all(True):
        if el.name in ("script", "iframe", "object", "embed", "frame", "base", "meta"):
            found.append(f"<{el.name}>")
        for attr, value in el.attrs.items():
            value = " ".join(value) if isinstance(value, list) else str(value)
            if attr.lower().startswith("on"):
                found.append(f"<{el.name} {attr}>")
            elif attr.lower() in _URL_ATTRS and bad_url(value):
                found.append(f"<{el.name} {attr}={value[:40]!r}>")
            elif attr.lower() == "style" and "javascript:" in value.lower():
                found.append(f"<{el.name} style>")
    return found


DOM_CHECK = """
(root) => {
  const found = [];
  const urlAttrs = ['href', 'src', 'action', 'formaction', 'data', 'xlink:href', 'srcdoc'];
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (['script', 'iframe', 'object', 'embed', 'frame', 'base'].includes(tag)) found.push(tag);
    for (const a of el.attributes) {
      const name = a.name.toLowerCase();
      const v = a.value.replace(/[\\x00-\\x20\\x7f-\\x9f]/g, '').toLowerCase();
      if (name.startsWith('on')) found.push(tag + ' ' + name);
      else if (urlAttrs.includes(name) && /^(javascript|vbscript|data:text\\/html)/.test(v))
        found.push(tag + ' ' + name + '=' + v.slice(0, 40) + ' in ' +
                   ((el.parentElement && el.parentElement.className) || '?'));
    }
  }
  return found;
}
"""
