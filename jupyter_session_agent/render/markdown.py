"""Parts and messages as Markdown: the live view's ``text/markdown`` and the Markdown export.

Every text from outside (a model's, a tool's, a file name, a title, an import) goes through
:mod:`.escape`: Markdown stays Markdown, raw HTML and script links never get through.

:data:`PART` holds one rendering per part class (:func:`part` looks it up); a part with
nothing to show (a step start, an empty text) gives ``""``.
"""

from __future__ import annotations

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
    WithParts,
    tool_label,
)
from . import escape as X
from . import words as W
from .forms import Form

code = X.code  # one value as inline code


def md(text: object) -> str:
    """Untrusted text inside a line of ours: Markdown, no active HTML, no fences."""
    return X.markdown(text, fences=False)


def fence(body: str) -> str:
    return "```\n" + body.replace("```", "`\u200b``") + "\n```"


def code_block(text: str, preview: bool = True) -> str:
    """A fenced block; a long one shows its first lines and the rest collapsed."""
    total = text.count("\n") + 1
    text = W.clip(text, W.MAX_FIELD_CHARS)
    lines = text.splitlines()
    if preview and len(lines) > W.OUTPUT_PREVIEW_LINES:
        head = fence("\n".join(lines[: W.OUTPUT_PREVIEW_LINES]))
        return (
            f"{head}\n\n<details><summary>all {total:,} lines</summary>\n\n"
            f"{fence(text)}\n\n</details>"
        )
    return fence(text)


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


# --------------------------------------------------------------------------
# one rendering per part class


def _text(part: TextPart) -> str:
    if part.ignored or not part.text:
        return ""
    if W.attachment_of(part):  # what the model reads for the file part just before it
        return _details(
            f"sent to the model ({len(part.text):,} characters)",
            code_block(part.text, preview=False),
        )
    text = f"<sub>*(synthetic)*</sub> {md(part.text)}" if part.synthetic else X.markdown(part.text)
    fields = W.interpolated(part)
    if fields:  # the history keeps the template too (metadata.template)
        text += "\n\n<sub>interpolated: " + ", ".join(code(f) for f in fields) + "</sub>"
    return text


def _reasoning(part: ReasoningPart) -> str:
    if not part.text:
        return ""
    return _details(W.reasoning_head(part), X.markdown(W.clip(part.text, W.MAX_TEXT_CHARS)))


def _tool(part: ToolPart) -> str:
    state = part.state
    # the status in words (or the exception class of a failed call): no emoji font needed
    head = f"**{md(part.tool or '?')}** {code(tool_label(part))}"
    if W.tool_title(part):
        head += f" {md(W.tool_title(part))}"
    if W.tool_took(part):
        head += f" · {W.tool_took(part)}"
    lines = [head]
    args = W.tool_input(part)
    if len(args) > W.MAX_INPUT_CHARS:  # long (code, a file's text): whole, collapsed
        lines.append(_details(f"input ({len(args):,} chars)", code_block(args, preview=False)))
    elif args:
        lines.append(f"<sub>input</sub> {code(args)}")
    if isinstance(state, ToolCompleted):
        if state.time_compacted:
            lines.append(
                f"*{W.pruned_line(part)}*\n\n"
                + _details(
                    f"original output ({len(state.output):,} chars)",
                    code_block(state.output, preview=False),
                )
            )
        else:
            lines.append(code_block(state.output))
        child = W.tool_child(part)
        if child:
            lines.append(f"<sub>subagent session {code(child)}</sub>")
    elif isinstance(state, ToolError):
        lines.append(code_block(state.error))
    return "\n\n".join(lines)


def _step_finish(part: StepFinishPart) -> str:
    return f"<sub>▪ {md(W.step_line(part))}</sub>"


def _retry(part: RetryPart) -> str:
    return f"<sub>{md(W.retry_line(part))}</sub>"


def _compaction(part: CompactionPart) -> str:
    return f"**🗜 compaction requested** ({W.compaction_kind(part)})"


def attachment_chip(part: FilePart) -> str:
    """A file part in one line: ``name`` · mime · size · where it came from."""
    details = " · ".join(W.attachment_details(part))
    return f"{code(W.attachment_name(part))} <sub>{md(details)}</sub>"


def _file(part: FilePart) -> str:
    return "📎 " + attachment_chip(part)


def _subtask(part: SubtaskPart) -> str:
    return f"🧩 **subtask** {code(part.agent)}{md(W.subtask_model(part))}: {md(part.description)}"


def _patch(part: PatchPart) -> str:
    files, more = W.patch_files(part)
    if not files:
        return ""
    return (
        "📝 files changed: "
        + ", ".join(code(f) for f in files)
        + (f" and {more} more" if more else "")
    )


def _snapshot(part: SnapshotPart) -> str:
    return f"<sub>snapshot {code(part.snapshot[:12])}</sub>" if part.snapshot else ""


def _agent(part: AgentPart) -> str:
    return f"🤖 @{md(part.name)}"


def _step_start(part: StepStartPart) -> str:
    return ""  # a step shows at its finish


def _unknown(part: UnknownPart) -> str:
    return f"<sub>❔ {md(W.unknown_line(part))}</sub>"


def _fallback(part: object) -> str:
    return f"<sub>❔ {md(W.fallback_line(part))}</sub>"


PART = Form(
    "markdown",
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


def part(p: object) -> str:
    """One part as Markdown ("" for parts with nothing to show, e.g. step-start)."""
    return PART(p)


# --------------------------------------------------------------------------
# messages


def message_header(item: WithParts, *, level: int = 4, when: bool = False) -> str:
    """``#### You``, ``#### Agent <sub>(openai/gpt · 1,234 tokens · $0.0012)</sub>``…;
    with ``when``, the time the message was created."""
    head = "#" * level + " " + W.message_role(item)
    usage = W.message_usage(item.info)
    if usage:
        head += f" <sub>({md(usage)})</sub>"
    if when:
        head += f" <sub>{W.clock(item.info.time_created)}</sub>"
    return head


def message(item: WithParts, *, level: int = 4, when: bool = False, unsaved: bool = False) -> str:
    """A message: its header, its parts, its error, and whether it is saved."""
    body = "\n\n".join(t for t in (part(p) for p in item.parts) if t)
    error = W.message_error(item.info)
    if error:
        body += f"\n\n❗ **{md(error[0])}**: {md(error[1])}"
    if unsaved:
        body += f"\n\n⚠️ **{W.NOT_SAVED}**: {W.NOT_SAVED_WHY}"
    return f"{message_header(item, level=level, when=when)}\n\n{body}".rstrip()


def messages(
    history: Iterable[WithParts],
    *,
    level: int = 4,
    when: bool = False,
    omitted: int = 0,
    unsaved: frozenset = frozenset(),
    render: Callable[..., str] | None = None,
) -> str:
    """Messages one after another, separated by rules (``*(empty session)*`` for none);
    ``render``: what draws one message (default :func:`message`; the live view's remembers)."""
    draw = render or message
    out = [f"*… {omitted:,} earlier messages not shown*"] if omitted else []
    for item in history:
        out.append(draw(item, level=level, when=when, unsaved=W.is_unsaved(item, unsaved)))
    return "\n\n---\n\n".join(out) or "*(empty session)*"
