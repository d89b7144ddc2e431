"""The record of a compaction: :class:`CompactionEvent`, written to the history for
every prune and summary compaction (journal kind ``event``, SQL view
``compaction_event``), :class:`CompactionResult`, what ``Compactor.compact`` returns, and
:class:`EventLog`, which stamps and stores the events of one compactor."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ...core import ids
from ...core.messages import WithParts, now_ms

_EVENT_KEYS = {"session_id": "sessionID"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


@dataclass(frozen=True)
class CompactionEvent:
    """One prune or summary compaction, as stored (journal kind ``event``) and
    queried (view ``compaction_event``). Token numbers are the estimated size
    of the next model request (chars / 4, calibrated by the last reported
    usage), so before and after compare like with like."""

    JOURNAL_KIND: ClassVar[str] = "event"
    TYPE: ClassVar[str] = "compaction"

    id: str
    session_id: str
    kind: str  # "prune" | "summary"
    cause: str  # "auto" | "manual" | "overflow"
    outcome: str  # "ok" | "rejected" | "failed" | "no-gain"
    time_created: int
    duration_ms: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    usable: int | None = 0  # None: not known (an imported event)
    trigger: int | None = 0
    step_tokens: int | None = None  # the reported usage that triggered it
    parts_pruned: int = 0
    tokens_pruned: int = 0
    head_messages: int = 0
    head_tokens: int = 0
    tail_messages: int = 0
    tail_tokens: int = 0
    summary_tokens: int = 0  # what the model sees of the summary (text + pinned), estimated
    summary_input_tokens: int = 0  # prompt tokens of the summary calls, as reported
    summary_output_tokens: int = 0
    llm_calls: int = 0
    cost: float = 0.0
    summary_input: str | None = None  # "transcript" | "messages"
    model: str | None = None
    request_id: str | None = None
    summary_id: str | None = None
    tail_start_id: str | None = None
    attempts: tuple = ()  # per summary call: {"level", "inputTokens", "outcome"}
    error: str | None = None
    source: str | None = None  # None: this package's compactor; "opencode": derived by an import

    @property
    def tokens_freed(self) -> int:
        return self.tokens_before - self.tokens_after

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[_EVENT_KEYS.get(f.name) or _camel(f.name)] = (
                list(value) if isinstance(value, tuple) else value
            )
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CompactionEvent:
        kw: dict[str, Any] = {}
        for f in fields(cls):
            key = _EVENT_KEYS.get(f.name) or _camel(f.name)
            if key in data:
                kw[f.name] = tuple(data[key]) if f.name == "attempts" else data[key]
        return cls(**kw)


@dataclass
class CompactionResult:
    event: CompactionEvent
    added: list[WithParts] = field(default_factory=list)
    message: str = ""  # one line when the outcome is not "ok"

    @property
    def ok(self) -> bool:
        return self.event.outcome == "ok"


@dataclass(frozen=True)
class EventLog:
    """Builds a compactor's events (id, session, time, duration, the window's numbers) and
    stores them, flushed at once."""

    store: Any
    usable: int
    trigger: int

    def event(
        self,
        history: Sequence[WithParts],
        kind: str,
        *,
        cause: str,
        outcome: str,
        start: float,
        **values: Any,
    ) -> CompactionEvent:
        """An event of ``kind`` begun at ``start`` (``time.monotonic()``)."""
        return CompactionEvent(
            id=ids.ascending("event"),
            session_id=history[0].info.session_id if history else "",
            kind=kind,
            cause=cause,
            outcome=outcome,
            time_created=now_ms(),
            duration_ms=int((time.monotonic() - start) * 1000),
            usable=self.usable,
            trigger=self.trigger,
            **values,
        )

    def record(self, event: CompactionEvent) -> CompactionEvent:
        self.store.put(event)
        self.store.flush(sync=True)
        return event
