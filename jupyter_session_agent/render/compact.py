"""A turn in its compact form: the answer first, the telemetry on demand.

What a ``%%agent`` cell shows by default (the JupyterLab renderer draws the same structure from
the JSON form; this module gives the ``text/markdown`` form for front ends without it, and the
phrases both use): the prompt, the answer, each tool call as one line (name, a summary of its
input, status, duration; its code and output folded under it), and a one-line footer (tokens,
share of the context, cost, steps) that folds the step boundaries, finish reasons, snapshot
hashes and the budget gauge. The gauge opens by itself only near a prune or compaction threshold,
or when one happened in the turn (:func:`gauge_opens`).

One module: the compact form's structure and every phrase it shows (input summaries, exception
lines, decisions, the footer, progress) are one contract with the JupyterLab renderer, which
draws the same turn from the phrases this module puts into the bundle.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    WithParts,
    tool_label,
)
from ..core.redact import before_cut
from ..core.text import visible
from . import markdown
from . import words as W

#: The gauge opens by itself when the context (or the tool output the prune walk counts) is at
#: least this share of its trigger.
NEAR_THRESHOLD = 0.85
SUMMARY_CHARS = 80  # the longest input summary on a tool call's line

#: Parts that move into the footer's details in the compact form.
TELEMETRY = (StepStartPart, StepFinishPart, SnapshotPart)
#: The input keys that say what a call does, in the order they are looked for.
_SUMMARY_KEYS = (
    "command",
    "code",
    "filePath",
    "file_path",
    "path",
    "pattern",
    "query",
    "url",
    "description",
    "prompt",
)
#: A line that names an exception: ``KeyError: 'x'``, ``pandas.errors.ParserError: …``.
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit|Iteration)\b(?::.*)?$"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def code_language(part: ToolPart) -> str | None:
    """``python`` or ``bash`` when the call's input is code of that language, else ``None``."""
    state_input = part.state.input or {}
    if part.tool == "python" and isinstance(state_input.get("code"), str):
        return "python"
    if part.tool == "bash" and isinstance(state_input.get("command"), str):
        return "bash"
    return None


def input_code(part: ToolPart) -> str | None:
    """The code a python or bash call runs, every invisible character made :func:`visible`
    (``None`` for other calls): what is shown is what runs."""
    language = code_language(part)
    if language is None:
        return None
    return visible(str(part.state.input["code" if language == "python" else "command"]))


def input_summary(part: ToolPart, limit: int = SUMMARY_CHARS) -> str:
    """What a call does, in one short line: its command, the first line of its code that is
    not a comment (with how many lines follow), its path or pattern; else its arguments."""
    state_input = part.state.input or {}
    notebook = notebook_summary(part.tool, state_input)
    if notebook is not None:
        return _cut(visible(notebook), limit)
    for key in _SUMMARY_KEYS:
        value = state_input.get(key)
        if isinstance(value, str) and value.strip():
            lines = [line for line in value.strip().splitlines() if line.strip()]
            shown = next((line for line in lines if not line.lstrip().startswith("#")), lines[0])
            text = " ".join(shown.split())
            rest = len(lines) - 1
            if rest > 0:
                text += f"  (+{rest} line{'' if rest == 1 else 's'})"
            return _cut(visible(text), limit)
    return _cut(W.tool_input(part), limit)


def notebook_summary(tool: str, args: Any) -> str | None:
    """The notebook tools' calls in words: ``run cell 2``, ``insert after cell prices,
    delete cell title``, ``read the notebook``; ``None`` for other calls."""
    if not isinstance(args, dict):
        return None
    if tool == "notebook_run":
        return f"run cell {args.get('cell')}"
    if tool == "notebook" and args.get("action") == "read":
        return f"read cell {args['cell']}" if args.get("cell") else "read the notebook"
    if tool == "notebook_edit" and isinstance(args.get("edits"), list):
        words = []
        for edit in args["edits"][:6]:
            if not isinstance(edit, dict):
                continue
            op, cell = str(edit.get("op")), edit.get("cell")
            if op == "insert":
                words.append("insert at the end" if cell is None else f"insert after cell {cell}")
            else:
                words.append(f"{op} cell {cell}")
        more = len(args["edits"]) - 6
        return ", ".join(words) + (f" (+{more} more)" if more > 0 else "")
    return None


def exception_line(text: str) -> str | None:
    """The line that names the exception in a traceback or error text (the last such line),
    or ``None``; colour codes removed."""
    for line in reversed(_ANSI.sub("", text).splitlines()):
        line = line.strip()
        if _EXCEPTION.match(line):
            return line
    return None


def tool_problem(part: ToolPart) -> str | None:
    """The one line that says why a call failed: the exception its code raised, or the
    error's first meaningful line; ``None`` for a call that did not fail."""
    state = part.state
    if isinstance(state, ToolError):
        return exception_line(state.error) or _first_line(state.error)
    if isinstance(state, ToolCompleted) and (state.metadata or {}).get("error"):
        return exception_line(state.output) or str(state.metadata["error"])
    return None


def approval_words(decision: Any) -> str | None:
    """What the user decided about a call (``state.metadata.approval``), in words."""
    if not isinstance(decision, dict):
        return None
    reply = decision.get("reply")
    words = {
        "once": "allowed once",
        "always": "allowed always",
        "reject": "rejected",
    }.get(str(reply))
    if words is None:
        return None
    feedback = decision.get("feedback")
    if reply == "reject" and isinstance(feedback, str) and feedback:
        words += f" with feedback: {_cut(' '.join(feedback.split()), 120)}"
    return words + " by you"


def tool_decision(part: ToolPart) -> str | None:
    metadata = getattr(part.state, "metadata", None) or {}
    return approval_words(metadata.get("approval"))


def tool_line(part: ToolPart) -> str:
    """``python · print(17 * 23) · completed · 0.05 s`` (plain words, no markup)."""
    bits = [part.tool or "?", input_summary(part), tool_label(part)]
    took = W.tool_took(part)
    if took:
        bits.append(took)
    return " · ".join(b for b in bits if b)


# --------------------------------------------------------------------------
# the footer and when the gauge opens


def turn_steps(history: Sequence[WithParts]) -> list[AssistantMessage]:
    return [m.info for m in history if isinstance(m.info, AssistantMessage)]


def footer_line(history: Sequence[WithParts], report: Any) -> str:
    """``1,234 tokens · 4% of the context · $0.0012 · 2 steps``: the turn in one line."""
    steps = turn_steps(history)
    tokens = sum(m.tokens.count for m in steps)
    cost = sum(m.cost for m in steps)
    estimated = any(m.tokens.estimated for m in steps)
    bits = [f"{tokens:,} tokens{' (estimated)' if estimated else ''}"]
    if report is not None and report.usable:
        bits.append(f"{report.fraction:.0%} of the context")
    bits.append(f"${cost:.4f}")
    bits.append(f"{len(steps)} step{'' if len(steps) == 1 else 's'}")
    return " · ".join(bits)


def gauge_opens(history: Sequence[WithParts], report: Any) -> str | None:
    """Why the budget gauge opens by itself under a compact turn (``None``: it stays folded):
    a compaction or a prune happened in the turn, or one is near."""
    start = min((m.info.time_created for m in history), default=0)
    for item in history:
        if getattr(item.info, "summary", False) or any(
            isinstance(p, CompactionPart) for p in item.parts
        ):
            return "compacted in this turn"
    for item in history:
        for p in item.parts:
            compacted = isinstance(p, ToolPart) and getattr(p.state, "time_compacted", None)
            if compacted and compacted >= start:
                return "pruned in this turn"
    if report is None:
        return None
    if report.overflow:
        return "compaction due"
    near = NEAR_THRESHOLD
    if report.auto_compact and report.compaction_at and report.used >= near * report.compaction_at:
        return "near the compaction threshold"
    walked = report.tool_output_tokens
    if report.prune and (report.prune_due or walked >= near * max(report.prune_trigger, 1)):
        return "near the prune threshold"
    return None


# --------------------------------------------------------------------------
# progress and the pending approval, as words


def progress_line(progress: dict[str, Any] | None) -> str:
    """``running · 12 s · waiting for the model (openai/gpt-4o)``."""
    if not progress:
        return ""
    seconds = int(progress.get("elapsed", 0)) // 1000
    waiting = progress.get("waiting") or "model"
    detail = progress.get("detail")
    what = {
        "model": "waiting for the model",
        "tool": "running a tool",
        "approval": "waiting for approval",
        "review": "waiting for your review of the notebook edits",
        "notebook": "waiting for the notebook",
    }.get(waiting, f"waiting for {waiting}")
    if detail:
        what += f" ({detail})"
    return f"running · {_seconds(seconds)} · {what}"


def _seconds(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


# --------------------------------------------------------------------------
# the Markdown form


def _details(summary: str, body: str, *, open_: bool = False) -> str:
    return (
        f"<details{' open' if open_ else ''}><summary>{summary}</summary>\n\n{body}\n\n</details>"
    )


def fenced(text: str, language: str = "") -> str:
    """A fenced block in ``language`` that no backtick run in ``text`` can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{W.clip(text, W.MAX_FIELD_CHARS)}\n{ticks}"


def tool_markdown(part: ToolPart) -> str:
    """A tool call as one line, its code and output folded under it."""
    summary = (
        f"<b>{html.escape(part.tool or '?')}</b> <code>{html.escape(input_summary(part))}</code>"
        f" · {html.escape(tool_label(part))}"
    )
    took = W.tool_took(part)
    if took:
        summary += f" · {took}"
    body: list[str] = []
    code = input_code(part)
    if code is not None:
        body.append(fenced(code, code_language(part) or ""))
    elif W.tool_input(part):
        body.append(fenced(W.tool_input(part), "json"))
    decision = tool_decision(part)
    state = part.state
    problem = tool_problem(part)
    if isinstance(state, ToolCompleted):
        if state.time_compacted:
            body.append(f"*{W.pruned_line(part)}*")
        body.append(markdown.code_block(state.output))
    elif isinstance(state, ToolError):
        body.append(markdown.code_block(state.error))
    line = _details(summary, "\n\n".join(body))
    notes = []
    if problem:
        notes.append(f"**{html.escape(problem)}**")
    if decision:
        notes.append(f"*{html.escape(decision)}*")
    return line + ("\n\n" + " · ".join(notes) if notes else "")


def _approval_markdown(asking: dict[str, Any]) -> str:
    tool = str(asking.get("tool") or asking.get("permission") or "a tool")
    code = asking.get("code")
    text = f"**Waiting for your approval:** {html.escape(tool)}"
    if isinstance(code, str):
        text += " wants to run\n\n" + fenced(code, str(asking.get("language") or ""))
    else:
        text += f": {html.escape(str(asking.get('summary') or ''))}"
    return text + "\n\nAnswer in the box below (once, always, reject, or type feedback)."


def message_markdown(
    item: WithParts, unsaved: frozenset = frozenset()
) -> tuple[str, tuple[str, ...]]:
    """One message of a compact turn: its Markdown (``""`` when it shows nothing) and its
    telemetry lines (step boundaries, finishes, snapshots), which the footer folds. A message's
    value gives the same pair each time: the live view makes it once per value."""
    blocks: list[str] = []
    telemetry: list[str] = []
    for p in item.parts:
        if isinstance(p, TELEMETRY):
            text = markdown.part(p)
            if text:
                telemetry.append(text)
        elif isinstance(p, ToolPart):
            blocks.append(tool_markdown(p))
        else:
            text = markdown.part(p)
            if text:
                blocks.append(text)
    error = W.message_error(item.info)
    if error:
        blocks.append(f"**{error[0]}**: {error[1]}")
    if W.is_unsaved(item, unsaved):
        blocks.append(f"**{W.NOT_SAVED}**: {W.NOT_SAVED_WHY}")
    if not blocks:
        return "", tuple(telemetry)
    role = W.message_role(item)
    if role == "You":
        text = "> **You:** " + "\n> ".join("\n\n".join(blocks).splitlines())
    elif role == "Agent":
        text = "\n\n".join(blocks)
    else:  # a compaction request, a summary: marked as in the full form
        text = markdown.message_header(item) + "\n\n" + "\n\n".join(blocks)
    return text, tuple(telemetry)


def turn(
    history: Sequence[WithParts],
    report: Any = None,
    *,
    unsaved: frozenset = frozenset(),
    progress: dict[str, Any] | None = None,
    asking: dict[str, Any] | None = None,
    budget: str = "",
    render: Callable[[WithParts, frozenset], tuple[str, tuple[str, ...]]] = message_markdown,
    clean: Callable[[str], str] = lambda text: text,
) -> str:
    """The compact Markdown of a turn (``history``: its messages, from the prompt on);
    ``budget``: the budget gauge's Markdown, folded into the footer with the step lines.
    ``render`` gives each message's pair (:func:`message_markdown`, or a memo of it) and
    ``clean`` is applied to what is not a message's (the approval panel, progress, footer)."""
    out: list[str] = []  # a turn stands alone: the earlier messages are not counted here
    telemetry: list[str] = []
    for item in history:
        text, lines = render(item, unsaved)
        telemetry.extend(lines)
        if text:
            out.append(text)
    if asking:
        out.append(clean(_approval_markdown(asking)))
    if progress:
        out.append(clean(f"*{progress_line(progress)}*"))
    if not history:
        out.append("*Waiting for the model…*" if progress else "*(empty turn)*")
    if history and (report is not None or telemetry):
        reason = gauge_opens(history, report)
        head = html.escape(footer_line(history, report))
        if reason:
            head += f" · <b>{html.escape(reason)}</b>"
        body = "  \n".join(f"<sub>{t}</sub>" if not t.startswith("<sub>") else t for t in telemetry)
        out.append(
            _details(
                clean(head), "\n\n".join(b for b in (body, clean(budget)) if b), open_=bool(reason)
            )
        )
    return "\n\n".join(out)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith("---"):
            return _cut(line.strip(), 200)
    return ""


def _cut(text: str, limit: int) -> str:
    text = before_cut(text, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"
