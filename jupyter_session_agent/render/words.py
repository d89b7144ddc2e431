"""The words a part is shown with, shared by the Markdown, HTML and text forms.

Each form adds only its markup around these phrases, so a step, a retry, a tool call or a
compaction reads the same in the live view, the Markdown export and the HTML export.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    PatchPart,
    ReasoningPart,
    RetryPart,
    StepFinishPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    UnknownPart,
    UserMessage,
    WithParts,
    now_ms,
)
from ..core.redact import before_cut
from ..tools.kernel import human

MAX_FIELD_CHARS = 20_000  # per string shown from a part (tool input/output/error, urls)
MAX_TEXT_CHARS = 100_000  # per text / reasoning part
OUTPUT_PREVIEW_LINES = 12  # a longer tool output shows this many lines, the rest collapsed
MAX_INPUT_CHARS = 300  # the longest tool input shown on its line (a longer one: collapsed)
MAX_PATCH_FILES = 20

# What a message whose latest state could not be written shows (store.unsaved(): disk full).
NOT_SAVED = "not saved yet"
NOT_SAVED_WHY = (
    "the history could not be written — kept in memory, saved by the next successful write"
)
PRUNED_NOTE = 'the model sees "[Old tool result content cleared]"'


def clip(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how many were left out (redacted first)."""
    text = before_cut(text, limit)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"


def duration(ms: int | float) -> str:
    seconds = max(0.0, ms / 1000)
    if seconds < 60:
        return f"{seconds:.2f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def clock(ms: int | None) -> str:
    """Local ``YYYY-MM-DD HH:MM`` of a millisecond timestamp, ``—`` for none."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "—"


# --------------------------------------------------------------------------
# parts


def attachment_of(part: Any) -> str | None:
    """The id of the file part a synthetic text part carries the content of (an attachment's
    text: a file inlined, a PDF's text, a notebook value), else ``None``."""
    if isinstance(part, TextPart) and part.synthetic and isinstance(part.metadata, dict):
        found = part.metadata.get("attachment")
        return found if isinstance(found, str) else None
    return None


def interpolated(part: TextPart) -> list[str]:
    """The ``{…}`` fields a prompt's text was interpolated from (at most ten)."""
    fields = (part.metadata or {}).get("interpolated") if part.metadata else None
    return [str(f) for f in list(fields)[:10]] if fields else []


def attachment_name(part: FilePart) -> str:
    return part.filename or clip(part.url, 80)


def attachment_details(part: FilePart) -> list[str]:
    """What a file part is, after its name: mime, size, where it came from."""
    source = part.source if isinstance(part.source, dict) else {}
    bits = [part.mime]
    size = source.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        bits.append(human(size))
    if source.get("type") == "variable":
        bits.append(f"notebook value ({source.get('kind', '?')})")
    elif isinstance(source.get("text"), dict) and source["text"].get("value"):
        bits.append(f"mentioned as {source['text']['value']}")
    return [str(b) for b in bits]


def reasoning_head(part: ReasoningPart) -> str:
    took = (
        f" · {duration(part.time_end - part.time_start)}"
        if part.time_end and part.time_start
        else ""
    )
    return f"💭 reasoning{took}"


def tool_title(part: ToolPart) -> str:
    """The call's title when it says more than the tool's name, else ""."""
    title = getattr(part.state, "title", None) or ""
    return title if title != part.tool else ""


def tool_took(part: ToolPart) -> str:
    state = part.state
    if isinstance(state, (ToolCompleted, ToolError)):
        return duration(state.time_end - state.time_start)
    return ""


def tool_input(part: ToolPart) -> str:
    """The call's arguments as one line of JSON ("" for none)."""
    args = json.dumps(part.state.input, ensure_ascii=False)
    return "" if args in ("{}", "") else args


def tool_child(part: ToolPart) -> str | None:
    """The subagent session a finished ``task`` call ran in."""
    if part.tool != "task" or not isinstance(part.state, ToolCompleted):
        return None
    child = (part.state.metadata or {}).get("sessionId")
    return child if isinstance(child, str) and child else None


def pruned_line(part: ToolPart) -> str:
    """What a pruned output says instead of itself."""
    state = part.state
    when = clock(state.time_compacted) if isinstance(state, ToolCompleted) else "—"
    return f"output pruned at {when} — {PRUNED_NOTE}"


def step_line(part: StepFinishPart) -> str:
    """``step · 1,380 tokens: 1,200 in (1,000 cached) / 180 out · $0.0016 · stop``."""
    t = part.tokens
    est = " (estimated)" if t.estimated else ""
    cache = f" ({t.cache_read:,} cached)" if t.cache_read else ""
    reasoning = f" / {t.reasoning:,} reasoning" if t.reasoning else ""
    return (
        f"step · {t.count:,} tokens{est}: {t.prompt:,} in{cache} / {t.output:,} out{reasoning}"
        f" · ${part.cost:.4f} · {part.reason}"
    )


def retry_label(part: RetryPart, now: int | None = None) -> str:
    """``retry 1 in 12 s…`` while the wait runs (the live view re-renders every second),
    ``retry 1 after 12 s`` once it is over, ``retry 1`` for parts that did not record it."""
    if not part.time_next:
        return f"retry {part.attempt}"
    left = part.time_next - (now_ms() if now is None else now)
    if left > 0:
        return f"retry {part.attempt} in {max(1, -(-left // 1000))} s…"
    waited = f"{max(0, part.time_next - part.time_created) / 1000:.2f}".rstrip("0").rstrip(".")
    return f"retry {part.attempt} after {waited} s"


def retry_line(part: RetryPart) -> str:
    """``⟳ retry 1 after 2 s (HTTP 429): Rate limit reached``."""
    err = part.error.get("data", {}) if isinstance(part.error, dict) else {}
    err = err if isinstance(err, dict) else {}
    status = f" (HTTP {err['statusCode']})" if err.get("statusCode") else ""
    return f"⟳ {retry_label(part)}{status}: {err.get('message', '')}"


def compaction_kind(part: CompactionPart) -> str:
    kind = "automatic" if part.auto else "manual"
    return kind + (", context overflow" if part.overflow else "")


def subtask_model(part: SubtaskPart) -> str:
    return f" · {part.model}" if part.model else ""


def patch_files(part: PatchPart) -> tuple[list[str], int]:
    """The files a patch changed (the first :data:`MAX_PATCH_FILES`) and how many more."""
    files = [str(f) for f in part.files]
    return files[:MAX_PATCH_FILES], max(0, len(files) - MAX_PATCH_FILES)


def unknown_line(part: UnknownPart) -> str:
    return (
        f"`{part.stored_type}` part: unknown to this version — kept unchanged, "
        "not sent to the model"
    )


def fallback_line(part: Any) -> str:
    """A part of a class no form has a rendering for: its type and fields, in one line."""
    data = part.to_data() if hasattr(part, "to_data") else {}
    rest = {k: v for k, v in data.items() if k not in ("id", "sessionID", "messageID", "type")}
    kind = getattr(part, "type", "") or type(part).__name__
    return clip(f"`{kind}` part: {json.dumps(rest, ensure_ascii=False, default=str)}", 300)


# --------------------------------------------------------------------------
# messages


def is_compaction_request(item: WithParts) -> bool:
    return isinstance(item.info, UserMessage) and any(
        isinstance(p, CompactionPart) for p in item.parts
    )


def message_role(item: WithParts) -> str:
    """``You``, ``🗜 Compaction request``, ``📋 Summary`` or ``Agent``."""
    info = item.info
    if isinstance(info, UserMessage):
        return "🗜 Compaction request" if is_compaction_request(item) else "You"
    return "📋 Summary" if info.summary else "Agent"


def message_usage(info: Any) -> str:
    """``openai/gpt · 1,234 tokens · $0.0012`` for an assistant message, "" for a user's."""
    if not isinstance(info, AssistantMessage):
        return ""
    used = f" · {info.tokens.count:,} tokens" if info.tokens.count else ""
    cost = f" · ${info.cost:.4f}" if info.cost else ""
    return f"{info.provider_id}/{info.model_id}{used}{cost}"


def message_error(info: Any) -> tuple[str, str] | None:
    """(name, message) of an assistant message's error."""
    error = getattr(info, "error", None)
    if not error:
        return None
    data = error.get("data", {})
    message = data.get("message", "") if isinstance(data, dict) else ""
    return str(error.get("name", "Error")), str(message)


def is_unsaved(item: WithParts, unsaved: frozenset) -> bool:
    """Whether ``item`` or one of its parts is among the ids a failed write left unsaved."""
    return bool(unsaved) and (item.info.id in unsaved or any(p.id in unsaved for p in item.parts))
