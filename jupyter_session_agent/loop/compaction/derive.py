"""Compaction events of a history written elsewhere (an OpenCode import):
:func:`events_from_history`.

OpenCode records no event of its own; what it leaves is enough to rebuild one:

* a **summary event** per compaction request (a user message with a ``compaction`` part):
  cause ``overflow`` / ``auto`` / ``manual`` from the part, outcome from the summary message
  that answers it (``ok``; ``failed`` when it has an error or there is none), the summary
  call's usage, cost, model and time, the tail (``tail_start_id``) and the head before it.
  *Before* is the token count of the last step before the request (what OpenCode compares
  with its limit), *after* the prompt of the first step after the summary, as reported;
* a **prune event** per loop end that cleared outputs: tool parts whose
  ``state.time.compacted`` falls before the same next user message, with their estimated
  tokens; before / after are the neighbouring steps' counts.

Ids are stable (the same history gives the same ids), so importing again replaces the rows
instead of adding new ones; every event says where it came from (``source``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ...core import budget as B
from ...core.messages import (
    AssistantMessage,
    CompactionPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    WithParts,
)
from .events import CompactionEvent
from .items import is_real_user, is_request, is_summary

Steps = list[tuple[int, AssistantMessage]]  # (index in the history, a step with usage)
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def stable_event_id(ms: int, key: str) -> str:
    """An event id in the id grammar, ordered by ``ms`` like a new one, fixed by ``key``."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:12], "big")
    tail = ""
    for _ in range(14):
        digest, r = divmod(digest, 62)
        tail += _BASE62[r]
    return f"evt_{(max(0, ms) * 0x1000) & ((1 << 48) - 1):012x}{tail}"


def events_from_history(history: Sequence[WithParts], *, source: str) -> list[CompactionEvent]:
    """The summary and prune events ``history`` shows, oldest first (see the module docstring)."""
    items = list(history)
    if not items:
        return []
    session_id = items[0].info.session_id
    steps = [
        (i, m.info)
        for i, m in enumerate(items)
        if isinstance(m.info, AssistantMessage) and not m.info.summary and m.info.tokens.count > 0
    ]
    out = _summaries(items, steps, session_id, source) + _prunes(items, steps, session_id, source)
    return sorted(out, key=lambda e: (e.time_created, e.id))


def _count_before(steps: Steps, index: int) -> int:
    return next((info.tokens.count for i, info in reversed(steps) if i < index), 0)


def _prompt_after(steps: Steps, index: int) -> int:
    return next((info.tokens.prompt for i, info in steps if i > index), 0)


def _answer(items: list[WithParts], i: int) -> tuple[int, WithParts, AssistantMessage] | None:
    """(index, message, its info) of the summary answering the request at ``i``, else None."""
    request_id = items[i].info.id
    for j, m in enumerate(items[i + 1 :], i + 1):
        if (
            is_summary(m)
            and isinstance(m.info, AssistantMessage)
            and m.info.parent_id == request_id
        ):
            return j, m, m.info
    return None


def _summaries(
    items: list[WithParts], steps: Steps, session_id: str, source: str
) -> list[CompactionEvent]:
    out = []
    visible = 0  # where what the model saw starts: the previous compaction's tail (or the start)
    for i, item in enumerate(items):
        if not is_request(item):
            continue
        part = next(p for p in item.parts if isinstance(p, CompactionPart))
        cause = "overflow" if part.overflow else "auto" if part.auto else "manual"
        answer = _answer(items, i)
        tail_at = next((k for k in range(i) if items[k].info.id == part.tail_start_id), i)
        kept = [k for k in range(visible, i) if not (is_request(items[k]) or is_summary(items[k]))]
        head = sum(1 for k in kept if k < tail_at)
        values: dict = dict(
            tokens_before=_count_before(steps, i),
            head_messages=head,
            tail_messages=len(kept) - head,
            tail_start_id=part.tail_start_id,
            request_id=item.info.id,
        )
        outcome = "failed"
        error: str | None = "no summary message answers this compaction request"
        if answer is not None:
            j, summary, info = answer
            text = "".join(
                p.text for p in summary.parts if isinstance(p, TextPart) and not p.synthetic
            )
            values.update(
                summary_id=info.id,
                llm_calls=1,
                cost=info.cost,
                model=f"{info.provider_id}/{info.model_id}",
                summary_input_tokens=info.tokens.prompt,
                summary_output_tokens=info.tokens.output,
                summary_tokens=B.estimate(text),
                tokens_after=_prompt_after(steps, j),
                duration_ms=max(
                    0, (info.time_completed or info.time_created) - item.info.time_created
                ),
            )
            if info.error:
                data = info.error.get("data") or {}
                error = str(data.get("message") or info.error.get("name") or "error")
            elif not text.strip():
                error = "the summary is empty"
            else:
                outcome, error = "ok", None
                visible = tail_at if tail_at < i else j + 1
        # timed as ours: when it finished (it began duration_ms earlier)
        out.append(
            CompactionEvent(
                id=stable_event_id(item.info.time_created, f"{session_id}:{part.id}"),
                session_id=session_id,
                kind="summary",
                cause=cause,
                outcome=outcome,
                time_created=item.info.time_created + values.get("duration_ms", 0),
                usable=None,
                trigger=None,
                error=error,
                source=source,
                **values,
            )
        )
    return out


def _prunes(
    items: list[WithParts], steps: Steps, session_id: str, source: str
) -> list[CompactionEvent]:
    """One event per loop end: the cleared outputs before the same next user message."""
    turns = [m.info.time_created for m in items if is_real_user(m)]
    # (when it was cleared, the part id, its output) per loop end
    buckets: dict[int, list[tuple[int, str, str]]] = {}
    for item in items:
        for p in item.parts:
            if (
                isinstance(p, ToolPart)
                and isinstance(p.state, ToolCompleted)
                and p.state.time_compacted
            ):
                at = p.state.time_compacted
                cleared = (at, p.id, p.state.output)
                buckets.setdefault(next((t for t in turns if t > at), 1 << 62), []).append(cleared)
    out = []
    for _, parts in sorted(buckets.items()):
        parts.sort(key=lambda c: (c[0], c[1]))
        at = parts[0][0]
        index = max((k for k, m in enumerate(items) if m.info.time_created <= at), default=0)
        out.append(
            CompactionEvent(
                id=stable_event_id(at, f"{session_id}:{parts[0][1]}:prune"),
                session_id=session_id,
                kind="prune",
                cause="auto",
                outcome="ok",
                time_created=at,
                usable=None,
                trigger=None,
                source=source,
                tokens_before=_count_before(steps, index + 1),
                tokens_after=_prompt_after(steps, index),
                parts_pruned=len(parts),
                tokens_pruned=B.estimate_sum(output for _, _, output in parts),
            )
        )
    return out
