"""Parts and messages as HTML: the self-contained HTML export (no scripts, no external assets).

:data:`PART` holds one rendering per part class (:func:`part` looks it up), with the same
words as the Markdown form (:mod:`.words`); :data:`CSS` styles the classes they use. A
``task`` call's subagent session is nested in it through ``nest`` (session id → its HTML),
which the caller supplies: rendering reads no store.

One module: the stylesheet, the Markdown subset for texts and the part renderings use the
same classes and escaping, and change together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..core.messages import (
    AgentPart,
    CompactionPart,
    FilePart,
    PatchPart,
    ReasoningPart,
    RetryPart,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UnknownPart,
    UserMessage,
    WithParts,
    tool_label,
    tool_status,
)
from . import escape as X
from . import words as W
from .forms import Form

Nest = Callable[[str], str] | None  # a subagent session's id → its messages as HTML ("": none)

CSS = """
:root{--bg:#fff;--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--user:#ddf4ff;--card:#f6f8fa;--ok:#1a7f37;--err:#cf222e;--warn:#9a6700;--code:#eff1f3}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--line:#30363d;--user:#0c2d6b;--card:#161b22;--ok:#3fb950;--err:#f85149;--warn:#d29922;--code:#1f2428}}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.55 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif}
main{max-width:920px;margin:0 auto;padding:24px 16px 64px}h1{font-size:1.6em;margin:0 0 .3em}
.meta{color:var(--muted);font-size:.9em;margin:0 0 1.5em;padding:0;list-style:none}.meta li{margin:.15em 0}
.msg{border:1px solid var(--line);border-radius:8px;margin:14px 0;padding:10px 14px;background:var(--bg)}
.msg.user{background:var(--user)}.msg.summary{border-style:dashed}.msg.hidden{opacity:.55}
.who{font-weight:600;font-size:.85em;color:var(--muted);margin-bottom:6px}.who .cost{font-weight:400}
.text p{margin:.4em 0;white-space:pre-wrap;overflow-wrap:anywhere}.text h2,.text h3,.text h4{margin:.6em 0 .3em}
code{background:var(--code);border-radius:4px;padding:.1em .3em;font:.88em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--code);border-radius:6px;padding:8px 10px;overflow:auto;max-height:480px;font:.85em/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
details{border:1px solid var(--line);border-radius:6px;margin:8px 0;background:var(--card)}
details>summary{cursor:pointer;padding:6px 10px;font-size:.9em;list-style-position:inside}
details>div{padding:0 10px 8px}details .label{color:var(--muted);font-size:.8em;margin:6px 0 2px}
.completed>summary .status{color:var(--ok)}.error>summary .status,.failed>summary .status,.interrupted>summary .status{color:var(--err)}.running>summary .status,.pending>summary .status{color:var(--warn)}
.step,.note{color:var(--muted);font-size:.8em;margin:6px 0}.marker{text-align:center;color:var(--warn);font-weight:600;margin:10px 0}
.error-line{color:var(--err);margin:6px 0}.child{border-left:3px solid var(--line);padding-left:10px;margin:8px 0}
img{max-width:100%}footer{color:var(--muted);font-size:.8em;margin-top:32px;text-align:center}
"""


e = X.html  # ``text`` escaped for HTML (quotes too)


def _details(cls: str, summary: str, body: str) -> str:
    return f'<details class="{cls}"><summary>{summary}</summary><div>{body}</div></details>'


def _pre(text: str) -> str:
    return f"<pre>{e(W.clip(text, W.MAX_FIELD_CHARS))}</pre>"


def code_block(text: str, preview: bool = True) -> str:
    """A ``<pre>``; a long one shows its first lines and the rest collapsed (as in Markdown)."""
    lines = W.clip(text, W.MAX_FIELD_CHARS).splitlines()
    if preview and len(lines) > W.OUTPUT_PREVIEW_LINES:
        total = text.count("\n") + 1
        head = _pre("\n".join(lines[: W.OUTPUT_PREVIEW_LINES]))
        return head + _details("more", f"all {total:,} lines", _pre(text))
    return _pre(text)


def _note(html: str, cls: str = "note") -> str:
    return f'<div class="{cls}">{html}</div>'


# --------------------------------------------------------------------------
# a small, safe Markdown subset for the texts: fenced code, headings, paragraphs, `code`, **bold**

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`([^`\n]+)`|\*\*([^*\n]+)\*\*")
_HEADING = re.compile(r"^(#{1,4})\s+(.*)$")


def from_markdown(text: str) -> str:
    """A text written in Markdown as HTML: only the subset above; everything else escaped."""
    out, pos = [], 0
    for match in _FENCE.finditer(text):
        out.append(_paragraphs(text[pos : match.start()]))
        out.append(f"<pre><code>{e(match.group(1).rstrip(chr(10)))}</code></pre>")
        pos = match.end()
    out.append(_paragraphs(text[pos:]))
    return "".join(out)


def _paragraphs(text: str) -> str:
    out = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        if not block.strip():
            continue
        heading = _HEADING.match(block.strip()) if "\n" not in block.strip() else None
        if heading:
            level = min(len(heading.group(1)) + 1, 4)
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        else:
            out.append(f"<p>{inline(block)}</p>")
    return "".join(out)


def inline(text: str) -> str:
    """`code` and **bold** in one line of text; the rest escaped."""
    out, pos = [], 0
    for match in _INLINE.finditer(text):
        out.append(e(text[pos : match.start()]))
        out.append(
            f"<code>{e(match.group(1))}</code>"
            if match.group(1) is not None
            else f"<b>{e(match.group(2))}</b>"
        )
        pos = match.end()
    out.append(e(text[pos:]))
    return "".join(out)


# --------------------------------------------------------------------------
# one rendering per part class


def _text(part: TextPart, nest: Nest = None) -> str:
    if part.ignored or not part.text:
        return ""
    if W.attachment_of(part):  # what the model reads for the file part just before it
        return _details(
            "attachment", f"sent to the model ({len(part.text):,} characters)", _pre(part.text)
        )
    synthetic = '<span class="note">(synthetic)</span> ' if part.synthetic else ""
    body = (
        f'<div class="text">{synthetic}{from_markdown(W.clip(part.text, W.MAX_TEXT_CHARS))}</div>'
    )
    fields = W.interpolated(part)
    if fields:
        body += _note("interpolated: " + ", ".join(f"<code>{e(f)}</code>" for f in fields))
    return body


def _reasoning(part: ReasoningPart, nest: Nest = None) -> str:
    if not part.text:
        return ""
    text = from_markdown(W.clip(part.text, W.MAX_TEXT_CHARS))
    return _details("reasoning", e(W.reasoning_head(part)), f'<div class="text">{text}</div>')


def _tool(part: ToolPart, nest: Nest = None) -> str:
    state = part.state
    title, took = W.tool_title(part), W.tool_took(part)
    summary = (
        f'<b>{e(part.tool or "?")}</b> <span class="status">{e(tool_label(part))}</span>'
        f"{' ' + e(title) if title else ''}{' · ' + took if took else ''}"
    )
    inner = []
    args = W.tool_input(part)
    if args:
        label = f"input ({len(args):,} chars)" if len(args) > W.MAX_INPUT_CHARS else "input"
        inner.append(f'<div class="label">{label}</div>{_pre(args)}')
    if isinstance(state, ToolCompleted):
        if state.time_compacted:
            inner.append(_note(f"<i>{e(W.pruned_line(part))}</i>"))
            inner.append(
                _details(
                    "original",
                    f"original output ({len(state.output):,} chars)",
                    code_block(state.output, preview=False),
                )
            )
        else:
            inner.append(code_block(state.output))
        child = W.tool_child(part)
        if child:
            nested = nest(child) if nest is not None else ""
            inner.append(f'<div class="label">subagent session <code>{e(child)}</code></div>')
            if nested:
                inner.append(f'<div class="child">{nested}</div>')
    elif isinstance(state, ToolError):
        inner.append(code_block(state.error))
    return _details(f"tool {tool_status(part)}", summary, "".join(inner))


def _step_finish(part: StepFinishPart, nest: Nest = None) -> str:
    return _note(f"▪ {e(W.step_line(part))}", "step")


def _retry(part: RetryPart, nest: Nest = None) -> str:
    return _note(e(W.retry_line(part)))


def _compaction(part: CompactionPart, nest: Nest = None) -> str:
    return _note(f"🗜 compaction requested ({e(W.compaction_kind(part))})", "marker")


def _file(part: FilePart, nest: Nest = None) -> str:
    name = W.attachment_name(part)
    chip = f"📎 <code>{e(name)}</code> {e(' · '.join(W.attachment_details(part)))}"
    if part.url.startswith("data:image/"):
        return _note(chip) + f'<div><img alt="{e(name)}" src="{e(part.url)}"></div>'
    return _note(chip)


def _subtask(part: SubtaskPart, nest: Nest = None) -> str:
    return _note(
        f"🧩 <b>subtask</b> <code>{e(part.agent)}</code>{e(W.subtask_model(part))}: "
        f"{e(part.description)}"
    )


def _patch(part: PatchPart, nest: Nest = None) -> str:
    files, more = W.patch_files(part)
    if not files:
        return ""
    shown = ", ".join(f"<code>{e(f)}</code>" for f in files)
    return _note(f"📝 files changed: {shown}{f' and {more} more' if more else ''}")


def _snapshot(part: SnapshotPart, nest: Nest = None) -> str:
    return _note(f"snapshot <code>{e(part.snapshot[:12])}</code>") if part.snapshot else ""


def _agent(part: AgentPart, nest: Nest = None) -> str:
    return _note(f"🤖 @{e(part.name)}")


def _step_start(part: StepStartPart, nest: Nest = None) -> str:
    return ""  # a step shows at its finish


def _unknown(part: UnknownPart, nest: Nest = None) -> str:
    return _note("❔ " + inline(W.unknown_line(part)))


def _fallback(part: object, nest: Nest = None) -> str:
    return _note("❔ " + inline(W.fallback_line(part)))


PART = Form(
    "html",
    {
        TextPart: _text,
        ReasoningPart: _reasoning,
        FilePart: _file,
        ToolPart: _tool,
        StepStartPart: _step_start,
        StepFinishPart: _step_finish,
        SnapshotPart: _snapshot,
        PatchPart: _patch,
        AgentPart: _agent,
        CompactionPart: _compaction,
        SubtaskPart: _subtask,
        RetryPart: _retry,
        UnknownPart: _unknown,
    },
    _fallback,
)


def part(p: object, nest: Nest = None) -> str:
    """One part as HTML ("" for parts with nothing to show, e.g. step-start)."""
    return PART(p, nest)


# --------------------------------------------------------------------------
# messages


def message(item: WithParts, nest: Nest = None) -> str:
    """A message as a ``<section>``: who, when or which model, its parts, its error."""
    info = item.info
    parts = "\n".join(x for x in (part(p, nest) for p in item.parts) if x)
    error = W.message_error(info)
    if error:
        parts += _note(f"❗ {e(error[0])}: {e(error[1])}", "error-line")
    cls = "msg user" if isinstance(info, UserMessage) else "msg"
    if getattr(info, "summary", None) is True:
        cls = "msg summary"
    who = e(W.message_role(item))
    usage = W.message_usage(info)
    if usage:
        who += f' <span class="cost">({e(usage)})</span>'
    who += f' <span class="cost">{W.clock(info.time_created)}</span>'
    return f'<section class="{cls}"><div class="who">{who}</div>{parts}</section>'


def messages(history: Iterable[WithParts], nest: Nest = None) -> str:
    return (
        "\n".join(message(item, nest) for item in history) or '<p class="note">(empty session)</p>'
    )
