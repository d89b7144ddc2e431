"""A session as a document to read: its transcript in Markdown, or one self-contained HTML page.

Both open with the same header (the session's id, times, folder, models, tokens and cost with
its subagents'), computed once by :func:`totals`; the parts are rendered by ``render.markdown``
and ``render.html`` (the words the live view shows). The JSON bundle, which is read back, is
:mod:`.transfer`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..core import ids
from ..core.chat import visible
from ..core.errors import AgentError
from ..core.messages import AssistantMessage, Session, StepFinishPart, WithParts
from ..render import html as H
from ..render import markdown as M
from ..render.words import clock
from ..store.tree import children_cost

MAX_DEPTH = 4  # nesting of subagent sessions in an HTML page


def totals(store, info: Session, history: Sequence[WithParts]) -> dict:
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


def markdown(store, info: Session) -> str:
    """The session's transcript as Markdown, under a header with its id, models, tokens and cost."""
    history = visible(store.messages(info.id), info.revert)
    t = totals(store, info, history)
    lines = [
        f"# {M.md(info.title)}",
        "",
        f"- session {M.code(info.id)} · {clock(info.time_created)} → {clock(info.time_updated)}"
        f" · {M.code(info.directory)}",
        f"- models: {M.md(', '.join(t['models']) or '—')} · {t['steps']} LLM step(s) · "
        f"{t['tokens_in']:,} tokens in / {t['tokens_out']:,} out",
        f"- cost: **${t['total']:.4f}** (messages ${t['own']:.4f}, title ${t['title']:.4f}, "
        f"subagents ${t['children']:.4f})",
    ]
    if info.forked_from:
        lines.append(
            f"- forked from {M.code(info.forked_from.get('sessionID'))}"
            + (
                f" before {M.code(info.forked_from['messageID'])}"
                if info.forked_from.get("messageID")
                else ""
            )
        )
    if info.parent_id:
        lines.append(f"- subagent of {M.code(info.parent_id)}")
    if info.revert:
        lines.append(
            f"- reverted at {M.code(info.revert.get('messageID'))}: later messages are hidden"
        )
    body = M.messages(history, level=3, when=True)  # as the live view shows them
    return "\n".join(lines) + "\n\n---\n\n" + body + "\n"


# --------------------------------------------------------------------------
# HTML


def html_page(store, info: Session) -> str:
    """The session as one self-contained HTML page (inline CSS, no scripts), subagents nested."""
    t = totals(store, info, visible(store.messages(info.id), info.revert))
    meta = [
        f"<li>session <code>{H.e(info.id)}</code> · {clock(info.time_created)} → {clock(info.time_updated)}"
        f" · <code>{H.e(info.directory)}</code></li>",
        f"<li>models: {H.e(', '.join(t['models']) or '—')} · {t['steps']} LLM step(s) · "
        f"{t['tokens_in']:,} tokens in / {t['tokens_out']:,} out</li>",
        f"<li>cost: <b>${t['total']:.4f}</b> (messages ${t['own']:.4f}, title ${t['title']:.4f}, "
        f"subagents ${t['children']:.4f})</li>",
    ]
    if info.forked_from:
        meta.append(
            f"<li>forked from <code>{H.e(info.forked_from.get('sessionID', ''))}</code></li>"
        )
    body = _session_html(store, info, 0)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="generator" content="jupyter-session-agent">'
        f"<title>{H.e(info.title)}</title><style>{H.CSS}</style></head>\n<body><main>\n"
        f'<h1>{H.e(info.title)}</h1>\n<ul class="meta">{"".join(meta)}</ul>\n{body}\n'
        f"<footer>exported {time.strftime('%Y-%m-%d %H:%M')} by jupyter-session-agent</footer>\n"
        "</main></body></html>\n"
    )


def _session_html(store, info: Session, depth: int) -> str:
    """A session's messages; a ``task`` call nests its subagent session (to ``MAX_DEPTH``)."""

    def nest(child: str) -> str:
        if depth >= MAX_DEPTH:
            return ""
        try:
            child_info = store.session(ids.check(child, "session"))
        except AgentError:  # not a session id, or no such session (any more)
            return ""
        return _session_html(store, child_info, depth + 1)

    history = visible(store.messages(info.id), info.revert)
    out = H.messages(history, nest)
    if info.revert:
        out += (
            f'\n<div class="note">later messages are hidden by a revert at <code>'
            f"{H.e(info.revert.get('messageID', ''))}</code></div>"
        )
    return out
