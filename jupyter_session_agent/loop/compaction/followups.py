"""The messages a summary compaction writes besides the summary: the request (a user
message with a ``compaction`` part), the synthetic continue message (auto only), the
request replayed after an overflow error (media as placeholders), and the error that
marks a summary rejected or failed (it stays stored, hidden from the model)."""

from __future__ import annotations

from typing import Any

from ...core import ids
from ...core.chat import attached_placeholder
from ...core.messages import (
    CompactionPart,
    FilePart,
    Part,
    TextPart,
    UserMessage,
    WithParts,
    error_data,
    now_ms,
    replace,
)
from ..history import History


def compaction_request(
    store: Any, last_user: UserMessage, *, auto: bool, overflow: bool
) -> WithParts:
    """The request that starts a summary compaction, stored (flushed later)."""
    info = UserMessage(
        id=ids.ascending("message"),
        session_id=last_user.session_id,
        time_created=now_ms(),
        model=last_user.model,
        agent=last_user.agent,
    )
    part = CompactionPart(
        ids.ascending("part"), info.session_id, info.id, auto=auto, overflow=overflow or None
    )
    store.put(info, part)
    store.flush(sync=False)
    return WithParts(info, (part,))


def continue_message(store: Any, request: UserMessage, text: str) -> WithParts:
    """The synthetic user message that follows an auto compaction's summary."""
    info = UserMessage(
        id=ids.ascending("message"),
        session_id=request.session_id,
        time_created=now_ms(),
        model=request.model,
        agent=request.agent,
    )
    part = TextPart(
        ids.ascending("part"),
        info.session_id,
        info.id,
        text=text,
        synthetic=True,
        metadata={"compaction_continue": True},
    )
    store.put(info, part)
    return WithParts(info, (part,))


def replayed_request(store: Any, original: WithParts) -> WithParts:
    """``original`` (the request that overflowed) again, images and PDFs as placeholders."""
    src = original.info
    assert isinstance(src, UserMessage)
    info = UserMessage(
        id=ids.ascending("message"),
        session_id=src.session_id,
        time_created=now_ms(),
        model=src.model,
        agent=src.agent,
        system=src.system,
        variant=src.variant,
        format=src.format,
    )
    parts: list[Part] = []
    for p in original.parts:
        if isinstance(p, CompactionPart):
            continue
        if isinstance(p, FilePart) and p.mime.startswith(("image/", "application/pdf")):
            parts.append(
                TextPart(
                    ids.ascending("part"), info.session_id, info.id, text=attached_placeholder(p)
                )
            )
        else:
            parts.append(replace(p, id=ids.ascending("part"), message_id=info.id))
    store.put(info, *parts)
    return WithParts(info, tuple(parts))


def reject(
    store: Any,
    history: History | list[WithParts],
    item: WithParts,
    why: str,
    *,
    name: str = "CompactionRejectedError",
) -> None:
    """Mark the summary ``item`` with an error (``name``: why), stored and put back."""
    info = replace(item.info, error=error_data(name, why))
    store.put(info)
    store.flush(sync=False)
    history = History.of(history)
    history.put_back(WithParts(info, next(m.parts for m in history if m.info.id == info.id)))
