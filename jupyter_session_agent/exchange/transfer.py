"""Export a session (Markdown, self-contained HTML, JSON bundle) and import a bundle back.

* ``md``: the transcript for reading under a header
  with the session's id, models, tokens and cost (title and subagents included).
* ``html``: one file, no external assets (inline CSS, images as ``data:`` URLs,
  no scripts): the transcript as the notebook view shows it, with reasoning
  and tool calls in collapsible ``<details>`` and subagent sessions nested in
  their ``task`` call. Share it as a file or an attachment: no server needed.
* ``json``: a bundle — OpenCode's export shape ``{"info": Session,
  "messages": [{"info", "parts"}]}`` plus ``"format"``, ``"version"`` and
  ``"children"`` (subagent sessions, recursively). It holds every stored
  message, hidden (reverted) ones and the revert state included, so
  :func:`import_bundle` restores the session exactly: same ids, same values.

Importing a bundle whose session already exists is a no-op when the stored
session is identical, and refused (one line naming the fix) when it differs.
``import_bundle`` also reads the output of ``opencode export``.

A bundle is input from outside: every id in it (sessions, messages, parts,
parents, fork and revert points, compaction tails, task sessions, tool call
ids, snapshot trees) must follow the id grammar (``ids.check``) or nothing is
imported; a saved-output path (``metadata.outputPath``) outside this data
directory's ``tool-output`` folder is dropped, and counted in the result.
"""

from __future__ import annotations

import html
import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import AgentError, SessionNotFoundError, UsageError
from ..core.messages import (
    AgentPart,
    AssistantMessage,
    CompactionPart,
    FilePart,
    PatchPart,
    ReasoningPart,
    RetryPart,
    Session,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
    message_from_data,
    read_part,
    replace,
    tool_label,
    tool_status,
)
from ..core.redact import clean, clean_value

BUNDLE_FORMAT = "jupyter-session-agent/session"
BUNDLE_VERSION = 1
FORMATS = ("md", "html", "json")
MAX_DEPTH = 4  # nesting of subagent sessions in exports


# --------------------------------------------------------------------------
# export


def export(store, session_id: str, format: str = "md", out: str | os.PathLike | None = None):
    """The session as ``format`` text; written to ``out`` (a file, or a folder for the default
    name) when given, and then the path is returned."""
    if format not in FORMATS:
        raise UsageError(f"unknown export format {format!r} — use md, html or json")
    info = store.session(ids.check_ref(session_id, "session"))
    # every export is redacted and encodable (``redact.clean``), whatever the history holds
    if format == "json":
        text = json.dumps(clean_value(bundle(store, info.id)), ensure_ascii=False, indent=1) + "\n"
    elif format == "md":
        text = clean(markdown(store, info))
    else:
        text = clean(html_page(store, info))
    if out is None:
        return text
    path = Path(out).expanduser()
    if path.is_dir():
        path = path / default_name(info, format)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def default_name(info: Session, format: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.title).strip("-").lower()[:48] or "session"
    return f"{slug}.{re.sub(r'[^A-Za-z0-9]', '', info.id[-8:])}.{format}"


def bundle(store, session_id: str, depth: int = 0) -> dict:
    """The JSON bundle of a session and (recursively) its subagent sessions."""
    from ..store.tree import children

    info = store.session(session_id)
    out: dict[str, Any] = {}
    if depth == 0:
        out.update(format=BUNDLE_FORMAT, version=BUNDLE_VERSION, exported=int(time.time() * 1000))
    out["info"] = info.to_data()
    out["messages"] = [m.to_data() for m in store.messages(info.id)]
    kids = children(store, info.id)
    if kids:
        out["children"] = [
            bundle(store, c.id, depth + 1) for c in sorted(kids, key=lambda s: s.time_created)
        ]
    return out


def _totals(store, info: Session, history: Sequence[WithParts]) -> dict:
    from ..store.tree import children_cost

    own = sum(m.info.cost for m in history if isinstance(m.info, AssistantMessage))
    title = float((info.title_usage or {}).get("cost") or 0.0)
    kids = children_cost(store, info.id)
    models = sorted(
        {
            f"{m.info.provider_id}/{m.info.model_id}"
            for m in history
            if isinstance(m.info, AssistantMessage)
        }
    )
    tokens_in = sum(
        p.tokens.prompt for m in history for p in m.parts if isinstance(p, StepFinishPart)
    )
    tokens_out = sum(
        p.tokens.output for m in history for p in m.parts if isinstance(p, StepFinishPart)
    )
    steps = sum(1 for m in history for p in m.parts if isinstance(p, StepFinishPart))
    return {
        "own": own,
        "title": title,
        "children": kids,
        "total": own + title + kids,
        "models": models,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "steps": steps,
    }


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "—"


def _visible(info: Session, history: list[WithParts]) -> list[WithParts]:
    from ..core.chat import visible

    return visible(history, info.revert)


def markdown(store, info: Session) -> str:
    history = _visible(info, store.messages(info.id))
    t = _totals(store, info, history)
    lines = [
        f"# {info.title}",
        "",
        f"- session `{info.id}` · {_when(info.time_created)} → {_when(info.time_updated)} · `{info.directory}`",
        f"- models: {', '.join(t['models']) or '—'} · {t['steps']} LLM step(s) · "
        f"{t['tokens_in']:,} tokens in / {t['tokens_out']:,} out",
        f"- cost: **${t['total']:.4f}** (messages ${t['own']:.4f}, title ${t['title']:.4f}, "
        f"subagents ${t['children']:.4f})",
    ]
    if info.forked_from:
        lines.append(
            f"- forked from `{info.forked_from.get('sessionID')}`"
            + (
                f" before `{info.forked_from['messageID']}`"
                if info.forked_from.get("messageID")
                else ""
            )
        )
    if info.parent_id:
        lines.append(f"- subagent of `{info.parent_id}`")
    if info.revert:
        lines.append(f"- reverted at `{info.revert.get('messageID')}`: later messages are hidden")
    body = "\n\n---\n\n".join(_message_md(item) for item in history) or "*(empty session)*"
    return "\n".join(lines) + "\n\n---\n\n" + body + "\n"


def _message_md(item: WithParts) -> str:
    info = item.info
    body = "\n\n".join(x for x in (_part_md(p) for p in item.parts) if x)
    if isinstance(info, UserMessage):
        return f"### You <sub>{_when(info.time_created)}</sub>\n\n{body}".rstrip()
    label = "Summary" if info.summary else "Agent"
    used = (
        f" · {info.tokens.count:,} tokens · ${info.cost:.4f}"
        if info.tokens.count or info.cost
        else ""
    )
    error = ""
    if info.error:
        error = f"\n\n❗ **{info.error.get('name', 'Error')}**: {info.error.get('data', {}).get('message', '')}"
    return (
        f"### {label} <sub>{info.provider_id}/{info.model_id}{used}</sub>\n\n{body}{error}".rstrip()
    )


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}\n{text}\n{ticks}"


def _part_md(part) -> str:
    if isinstance(part, TextPart):
        return "" if part.ignored else part.text
    if isinstance(part, ReasoningPart):
        return (
            f"<details><summary>💭 reasoning</summary>\n\n{part.text}\n\n</details>"
            if part.text
            else ""
        )
    if isinstance(part, ToolPart):
        state = part.state
        status = tool_status(
            part
        )  # failed: completed, but the code raised (the class is the label)
        title = getattr(state, "title", None) or ""
        head = (
            f"{_ICON.get(status, '')} **{part.tool}**"
            f"{' · ' + title if title and title != part.tool else ''} · {tool_label(part)}"
        )
        inner = ["input:", _fence(json.dumps(state.input, ensure_ascii=False, indent=1))]
        if isinstance(state, ToolCompleted):
            inner += [
                "output:",
                _fence("[output pruned by compaction]" if state.time_compacted else state.output),
            ]
            child = (state.metadata or {}).get("sessionId") if part.tool == "task" else None
            if child:
                inner.append(f"subagent session `{child}`")
        elif isinstance(state, ToolError):
            inner += ["error:", _fence(state.error)]
        return (
            f"<details><summary>{html.escape(head, quote=False)}</summary>\n\n"
            + "\n\n".join(inner)
            + "\n\n</details>"
        )
    if isinstance(part, StepFinishPart):
        t = part.tokens
        return (
            f"<sub>step · {t.prompt:,} in / {t.output:,} out{' (estimated)' if t.estimated else ''}"
            f" · ${part.cost:.4f} · {part.reason}</sub>"
        )
    if isinstance(part, PatchPart):
        return "📝 files changed: " + ", ".join(f"`{os.path.basename(f)}`" for f in part.files)
    if isinstance(part, CompactionPart):
        return f"**— compaction requested ({'auto' if part.auto else 'manual'}) —**"
    if isinstance(part, FilePart):
        return f"📎 {part.filename or part.url} ({part.mime})"
    if isinstance(part, RetryPart):
        return f"<sub>⟳ retry {part.attempt}: {part.error.get('data', {}).get('message', '')}</sub>"
    if isinstance(part, SubtaskPart):
        return f"🧩 subtask @{part.agent}: {part.description}"
    if isinstance(part, AgentPart):
        return f"@{part.name}"
    return ""


# --------------------------------------------------------------------------
# HTML

_CSS = """
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
_ICON = {"pending": "⏳", "running": "⚙️", "completed": "✅", "error": "❌", "failed": "❌"}


def html_page(store, info: Session) -> str:
    t = _totals(store, info, _visible(info, store.messages(info.id)))
    meta = [
        f"<li>session <code>{_e(info.id)}</code> · {_when(info.time_created)} → {_when(info.time_updated)}"
        f" · <code>{_e(info.directory)}</code></li>",
        f"<li>models: {_e(', '.join(t['models']) or '—')} · {t['steps']} LLM step(s) · "
        f"{t['tokens_in']:,} tokens in / {t['tokens_out']:,} out</li>",
        f"<li>cost: <b>${t['total']:.4f}</b> (messages ${t['own']:.4f}, title ${t['title']:.4f}, "
        f"subagents ${t['children']:.4f})</li>",
    ]
    if info.forked_from:
        meta.append(
            f"<li>forked from <code>{_e(info.forked_from.get('sessionID', ''))}</code></li>"
        )
    body = _session_html(store, info, 0)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="generator" content="jupyter-session-agent">'
        f"<title>{_e(info.title)}</title><style>{_CSS}</style></head>\n<body><main>\n"
        f'<h1>{_e(info.title)}</h1>\n<ul class="meta">{"".join(meta)}</ul>\n{body}\n'
        f"<footer>exported {time.strftime('%Y-%m-%d %H:%M')} by jupyter-session-agent</footer>\n"
        "</main></body></html>\n"
    )


def _session_html(store, info: Session, depth: int) -> str:
    history = _visible(info, store.messages(info.id))
    out = [_message_html(store, item, depth) for item in history]
    if info.revert:
        out.append(
            f'<div class="note">later messages are hidden by a revert at <code>'
            f"{_e(info.revert.get('messageID', ''))}</code></div>"
        )
    return "\n".join(out) or '<p class="note">(empty session)</p>'


def _message_html(store, item: WithParts, depth: int) -> str:
    info = item.info
    parts = "\n".join(x for x in (_part_html(store, p, depth) for p in item.parts) if x)
    if isinstance(info, UserMessage):
        return f'<section class="msg user"><div class="who">You · {_when(info.time_created)}</div>{parts}</section>'
    label = "Summary" if info.summary else "Agent"
    cost = (
        f" · {info.tokens.count:,} tokens · ${info.cost:.4f}"
        if info.tokens.count or info.cost
        else ""
    )
    error = ""
    if info.error:
        error = (
            f'<div class="error-line">❗ {_e(info.error.get("name", "Error"))}: '
            f"{_e(str(info.error.get('data', {}).get('message', '')))}</div>"
        )
    cls = "msg summary" if info.summary else "msg"
    return (
        f'<section class="{cls}"><div class="who">{label} <span class="cost">'
        f"({_e(info.provider_id)}/{_e(info.model_id)}{cost})</span></div>{parts}{error}</section>"
    )


def _part_html(store, part, depth: int) -> str:
    if isinstance(part, TextPart):
        return "" if part.ignored or not part.text else f'<div class="text">{_md(part.text)}</div>'
    if isinstance(part, ReasoningPart):
        return (
            ""
            if not part.text
            else (
                f'<details class="reasoning"><summary>💭 reasoning</summary><div class="text">{_md(part.text)}</div></details>'
            )
        )
    if isinstance(part, ToolPart):
        return _tool_html(store, part, depth)
    if isinstance(part, StepFinishPart):
        t = part.tokens
        est = " (estimated)" if t.estimated else ""
        return (
            f'<div class="step">step · {t.prompt:,} in / {t.output:,} out{est}'
            f"{f' / {t.reasoning:,} reasoning' if t.reasoning else ''} · ${part.cost:.4f} · {_e(part.reason)}</div>"
        )
    if isinstance(part, PatchPart):
        files = ", ".join(f"<code>{_e(os.path.basename(f))}</code>" for f in part.files)
        return f'<div class="note">📝 files changed: {files}</div>'
    if isinstance(part, CompactionPart):
        return f'<div class="marker">— compaction requested ({"auto" if part.auto else "manual"}) —</div>'
    if isinstance(part, FilePart):
        if part.url.startswith("data:image/"):
            return f'<div><img alt="{_e(part.filename or "image")}" src="{_e(part.url)}"></div>'
        return f'<div class="note">📎 {_e(part.filename or part.url)} ({_e(part.mime)})</div>'
    if isinstance(part, RetryPart):
        return f'<div class="note">⟳ retry {part.attempt}: {_e(str(part.error.get("data", {}).get("message", "")))}</div>'
    if isinstance(part, SubtaskPart):
        return f'<div class="note">🧩 subtask @{_e(part.agent)}: {_e(part.description)}</div>'
    if isinstance(part, AgentPart):
        return f'<div class="note">@{_e(part.name)}</div>'
    if isinstance(part, SnapshotPart):
        return ""
    return ""


def _tool_html(store, part: ToolPart, depth: int) -> str:
    state = part.state
    status = tool_status(part)  # failed: completed, but the code raised (the class is the label)
    title = getattr(state, "title", None) or ""
    took = ""
    if isinstance(state, (ToolCompleted, ToolError)):
        took = f" · {(state.time_end - state.time_start) / 1000:.2f} s"
    inner = [
        f'<div class="label">input</div><pre>{_e(json.dumps(state.input, ensure_ascii=False, indent=1))}</pre>'
    ]
    if isinstance(state, ToolCompleted):
        output = "[output pruned by compaction]" if state.time_compacted else state.output
        inner.append(f'<div class="label">output</div><pre>{_e(output)}</pre>')
        child = (state.metadata or {}).get("sessionId") if part.tool == "task" else None
        if child and depth < MAX_DEPTH:
            try:
                child_info = store.session(ids.check(child, "session"))
                inner.append(
                    f'<div class="label">subagent session <code>{_e(child)}</code></div>'
                    f'<div class="child">{_session_html(store, child_info, depth + 1)}</div>'
                )
            except AgentError:  # not a session id, or no such session (any more)
                pass
    elif isinstance(state, ToolError):
        inner.append(f'<div class="label">error</div><pre>{_e(state.error)}</pre>')
    return (
        f'<details class="tool {status}"><summary>{_ICON.get(status, "")} <b>{_e(part.tool)}</b>'
        f"{' · ' + _e(title) if title and title != part.tool else ''} · "
        f'<span class="status">{_e(tool_label(part))}</span>'
        f"{took}</summary><div>{''.join(inner)}</div></details>"
    )


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`([^`\n]+)`|\*\*([^*\n]+)\*\*")
_HEADING = re.compile(r"^(#{1,4})\s+(.*)$")


def _md(text: str) -> str:
    """A small, safe Markdown subset: fenced code, headings, paragraphs, `code`, **bold**."""
    out, pos = [], 0
    for match in _FENCE.finditer(text):
        out.append(_paragraphs(text[pos : match.start()]))
        out.append(f"<pre><code>{_e(match.group(1).rstrip(chr(10)))}</code></pre>")
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
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        else:
            out.append(f"<p>{_inline(block)}</p>")
    return "".join(out)


def _inline(text: str) -> str:
    out, pos = [], 0
    for match in _INLINE.finditer(text):
        out.append(_e(text[pos : match.start()]))
        out.append(
            f"<code>{_e(match.group(1))}</code>"
            if match.group(1) is not None
            else f"<b>{_e(match.group(2))}</b>"
        )
        pos = match.end()
    out.append(_e(text[pos:]))
    return "".join(out)


# --------------------------------------------------------------------------
# import


@dataclass
class ImportResult:
    session_id: str
    status: str  # "imported" | "unchanged"
    messages: int = 0
    parts: int = 0
    sessions: list[str] = field(default_factory=list)  # this one and its children
    dropped_paths: int = 0  # saved-output paths outside this data directory, not kept
    directory: str = ""  # the working folder the imported sessions use (the importer's)

    def __str__(self) -> str:
        if self.status == "unchanged":
            return f"{self.session_id} is already in the history, unchanged — nothing imported"
        kids = (
            f" and {len(self.sessions) - 1} subagent session(s)" if len(self.sessions) > 1 else ""
        )
        dropped = (
            f"; {self.dropped_paths} saved-output path(s) outside this data directory dropped"
            if self.dropped_paths
            else ""
        )
        where = f"; it works in {self.directory}" if self.directory else ""
        return (
            f"imported {self.session_id}{kids}: {self.messages} messages, {self.parts} parts "
            f"(same ids){dropped}{where}"
        )


def load_bundle(source: Any) -> dict:
    if isinstance(source, dict):
        return source
    path = Path(source).expanduser()
    hint = "give the path of a bundle file from `%agent export --format json`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no file {str(path)!r} — {hint}") from None
    except IsADirectoryError:
        raise UsageError(
            f"{path} is a folder — {hint} (for OpenCode's data folder: "
            "`%agent import-opencode DIR`)"
        ) from None
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err} — {hint}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(
            f"{path} is not JSON ({type(err).__name__}: {str(err)[:120]}) — "
            "expected a bundle from `%agent export --format json`"
        ) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("info"), dict)
        or not isinstance(data.get("messages"), list)
    ):
        raise UsageError(
            f'{path} is not a session bundle — expected {{"info": …, "messages": […]}} '
            "(from `%agent export --format json` or `opencode export`)"
        )
    version = data.get("version", 1)
    if (
        data.get("format", BUNDLE_FORMAT) != BUNDLE_FORMAT
        or not isinstance(version, int)
        or version > BUNDLE_VERSION
    ):
        raise UsageError(
            f"{path}: unsupported bundle format {ids.shown(data.get('format'))} "
            f"version {ids.shown(version)} — export it again with this version's "
            "`%agent export`"
        )
    return data


def _decode(data: dict) -> tuple[Session, list[WithParts]]:
    try:
        info = check_session(Session.from_data(data["info"]), what="the bundle's session")
        history = []
        for item in data["messages"]:
            _same_owner(item["info"], "sessionID", info.id, "message")
            message = check_message(message_from_data({**item["info"], "sessionID": info.id}))
            parts = []
            for p in item.get("parts", ()):
                _same_owner(p, "sessionID", info.id, "part")
                _same_owner(p, "messageID", message.id, "part")
                data = {**p, "sessionID": info.id, "messageID": message.id}
                parts.append(check_part(read_part(data)))  # a newer version's part is kept
            history.append(WithParts(message, tuple(parts)))
    except ids.InvalidIdError as err:
        raise UsageError(f"refusing the bundle: {err}; nothing was imported") from None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UsageError(
            f"the bundle has a malformed session, message or part "
            f"({type(err).__name__}: {str(err)[:120]})"
        ) from None
    return info, history


def _same_owner(data: Any, key: str, expected: str, kind: str) -> None:
    value = data.get(key) if isinstance(data, dict) else None
    if value is not None and value != expected:
        raise ids.InvalidIdError(
            f"a {kind} in session {expected} says its {key} is {ids.shown(value)}"
        )


# --------------------------------------------------------------------------
# the ids of imported values (bundles and OpenCode): checked before anything uses them


def check_session(info: Session, *, what: str = "the session") -> Session:
    """``info`` if every id in it follows the grammar; else ``ids.InvalidIdError``."""
    ids.check(info.id, "session", what=f"{what} id")
    if info.parent_id is not None:
        ids.check(info.parent_id, "session", what=f"{what}'s parentID")
    for key, value in (info.forked_from or {}).items():
        if key in ("sessionID", "messageID"):
            kind = "session" if key == "sessionID" else "message"
            ids.check(value, kind, what=f"{what}'s forkedFrom.{key}")
    revert = info.revert
    if revert is not None:
        if not isinstance(revert, dict):
            raise ids.InvalidIdError(f"{what}'s revert is not an object")
        ids.check(revert.get("messageID"), "message", what=f"{what}'s revert.messageID")
        if revert.get("partID") is not None:
            ids.check(revert["partID"], "part", what=f"{what}'s revert.partID")
        tree = revert.get("snapshot")
        if tree is not None and not ids.is_hash(tree):
            raise ids.InvalidIdError(f"{what}'s revert.snapshot {ids.shown(tree)} is not a tree")
    return info


def check_message(message) -> Any:
    ids.check(message.id, "message", what="a message id")
    ids.check(message.session_id, "session", what=f"message {message.id}'s sessionID")
    if isinstance(message, AssistantMessage) and message.parent_id:  # "" when OpenCode stored none
        ids.check(message.parent_id, "message", what=f"message {message.id}'s parentID")
    return message


def check_part(part) -> Any:
    where = f"part {ids.shown(part.id, 40)}"
    ids.check(part.id, "part", what="a part id")
    ids.check(part.session_id, "session", what=f"{where}'s sessionID")
    ids.check(part.message_id, "message", what=f"{where}'s messageID")
    if isinstance(part, ToolPart):
        if part.call_id and not ids.safe_name(part.call_id):
            raise ids.InvalidIdError(
                f"{where}'s callID {ids.shown(part.call_id)} is not a tool "
                "call id (letters, digits and _.:- only)"
            )
        metadata = getattr(part.state, "metadata", None) or {}
        child = metadata.get("sessionId") if part.tool == "task" else None
        if child is not None:
            ids.check(child, "session", what=f"{where}'s task sessionId")
    trees = isinstance(part, (PatchPart, SnapshotPart, StepStartPart, StepFinishPart))
    for name in ("hash", "snapshot") if trees else ():
        value = getattr(part, name, None)
        if value and not ids.is_hash(value):
            raise ids.InvalidIdError(f"{where}'s {name} {ids.shown(value)} is not a tree hash")
    if isinstance(part, PatchPart) and not all(
        isinstance(f, str) and "\0" not in f for f in part.files
    ):
        raise ids.InvalidIdError(f"{where}'s files are not all paths")
    if isinstance(part, CompactionPart) and part.tail_start_id is not None:
        ids.check(part.tail_start_id, "message", what=f"{where}'s tail_start_id")
    return part


def keep_paths_inside(part, data_dir: str | os.PathLike):
    """``(part, dropped)``: a tool part's ``metadata.outputPath`` outside ``<data_dir>/tool-output``
    removed (a path from outside is never read: it could name any file)."""
    metadata = getattr(getattr(part, "state", None), "metadata", None)
    path = metadata.get("outputPath") if isinstance(metadata, dict) else None
    if path is None:
        return part, False
    root = (Path(data_dir) / "tool-output").resolve()
    try:
        inside = isinstance(path, str) and "\0" not in path and Path(path).resolve().parent == root
    except (OSError, ValueError, RuntimeError):
        inside = False
    if inside:
        return part, False
    kept = {k: v for k, v in metadata.items() if k != "outputPath"}
    return replace(part, state=replace(part.state, metadata=kept)), True


def _same(store, info: Session, history: list[WithParts]) -> bool | None:
    """None: not stored yet; True: stored and identical; False: stored and different."""
    try:
        existing = store.session(info.id)
    except SessionNotFoundError:
        return None
    if existing.id != info.id:  # a prefix match of another session
        return None
    # the working folder is the importer's, never the bundle's: it is not compared
    return (
        replace(existing, directory=info.directory) == info and store.messages(info.id) == history
    )


def import_bundle(
    store, source: Any, *, directory: str | os.PathLike | None = None
) -> ImportResult:
    """Write a bundle's session (and its subagent sessions) into the history, ids unchanged.

    The bundle's working folder is a path from outside: the imported sessions work in
    ``directory`` (default: the current working directory) instead, so a bundle cannot point the
    tools, and the "inside the session folder" permission rules, at a folder of its choosing.
    """
    data = clean_value(load_bundle(source))  # stored as the journal keeps it: no key, encodable
    plan: list[tuple[Session, list[WithParts]]] = []
    _collect(data, plan, 0)
    home = str(Path(directory or os.getcwd()).resolve())
    plan = [(replace(info, directory=home), history) for info, history in plan]
    dropped = 0
    for _, history in plan:
        for i, item in enumerate(history):
            parts = []
            for part in item.parts:
                part, lost = keep_paths_inside(part, store.data_dir)
                parts.append(part)
                dropped += lost
            history[i] = WithParts(item.info, tuple(parts))
    if len({info.id for info, _ in plan}) != len(plan):
        raise UsageError(
            "refusing the bundle: it holds the same session twice; nothing was imported"
        )
    states = [_same(store, info, history) for info, history in plan]
    root = plan[0][0]
    if all(s is True for s in states):
        return ImportResult(root.id, "unchanged", sessions=[i.id for i, _ in plan])
    clash = next((info.id for (info, _), s in zip(plan, states) if s is False), None)
    if clash:
        raise UsageError(
            f"session {clash} is already in the history and differs from this bundle — "
            f"`%agent delete {clash}` first to replace it"
        )
    result = ImportResult(root.id, "imported", dropped_paths=dropped, directory=home)
    for (info, history), state in zip(plan, states):
        if state is True:
            continue
        store.put(info, time_created=info.time_created)
        for item in history:
            store.put(item.info, *item.parts, time_created=item.info.time_created)
            result.messages += 1
            result.parts += len(item.parts)
        result.sessions.append(info.id)
    store.flush(sync=True)
    return result


def _collect(data: dict, plan: list, depth: int, parent: str | None = None) -> None:
    if depth > 32:
        raise UsageError("the bundle nests subagent sessions more than 32 deep")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("info"), dict)
        or not isinstance(data.get("messages"), list)
        or not isinstance(data.get("children") or [], list)
    ):
        raise UsageError(
            "the bundle has a malformed subagent session — expected "
            '{"info": …, "messages": […], "children": […]}'
        )
    info, history = _decode(data)
    if parent is not None and info.parent_id != parent:
        raise UsageError(
            f"refusing the bundle: subagent session {info.id} names "
            f"{ids.shown(info.parent_id)} as its parent, not {parent}; "
            "nothing was imported"
        )
    plan.append((info, history))
    for child in data.get("children") or ():
        _collect(child, plan, depth + 1, info.id)


def iter_bundle_sessions(data: dict) -> Iterable[str]:
    yield data["info"]["id"]
    for child in data.get("children") or ():
        yield from iter_bundle_sessions(child)
