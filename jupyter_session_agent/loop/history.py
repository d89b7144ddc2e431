"""The conversation history of one session: the one object that changes it.

A :class:`History` is a read-only sequence of ``WithParts`` (oldest first) whose methods are
the only way it changes: :meth:`~History.add` (a prompt, a step, a compaction's messages),
:meth:`~History.put_back` (a stored message updated: a summary pinned or rejected, a request
marked), :meth:`~History.update_parts` (tool outputs pruned), :meth:`~History.reset` (revert,
unrevert, a fork's copies, what another kernel wrote). The invariants live here: items are
``WithParts``, ids are unique, and an update replaces the message with the same id (it never
adds one). ``tests/test_architecture.py`` checks that no other module mutates a history
(no list method such as ``append``, no item or slice assignment, no attribute assignment).

The history also holds the calibration of its token estimate (a :class:`Calibration`, which
the compactor updates through its method), which outlives a turn.

A ``History`` never hands out its list: the constructor copies what it is given (a session
built from a list does not share it with the caller), reads return copies or items, and slices
are new lists. Only :meth:`History.of` adopts a plain list in place, for a loop function called
with a list its caller owns (tests, benchmarks, a replay's renumbered copy): that caller sees the
changes; a session's history is a ``History`` already, which ``of`` returns unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from ..core.budget import ModelInfo
from ..core.chat import filter_compacted, to_chat_messages, without_failed_compactions
from ..core.messages import Part, WithParts


class History(Sequence[WithParts]):
    """The messages of one session, oldest first; changed only by its methods."""

    __slots__ = ("_items", "calibration")

    def __init__(self, items: Iterable[WithParts] = ()):
        self._items: list[WithParts] = list(items)  # a copy: no caller holds this list
        self.calibration = Calibration()

    @classmethod
    def of(cls, items: History | list[WithParts]) -> History:
        """``items`` as a ``History``: itself, or a plain list the caller owns adopted in place
        (not copied), so the caller sees what the loop adds."""
        if isinstance(items, History):
            return items
        adopted = cls()
        adopted._items = items
        return adopted

    # -- reading ---------------------------------------------------------------

    @overload
    def __getitem__(self, index: int) -> WithParts: ...

    @overload
    def __getitem__(self, index: slice) -> list[WithParts]: ...

    def __getitem__(self, index: int | slice) -> WithParts | list[WithParts]:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[WithParts]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[WithParts]:
        return reversed(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return self._items == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({len(self._items)} messages)"

    # -- the only writers ----------------------------------------------------------

    def add(self, item: WithParts) -> None:
        """Add a new message (a prompt, a step, a compaction's request, summary or follow-up)."""
        if not isinstance(item, WithParts):
            raise TypeError(f"a history holds WithParts, not {type(item).__name__}")
        self._items.append(item)

    def put_back(self, item: WithParts) -> None:
        """Replace the message with ``item``'s id (newest first: it is usually recent); a
        message not in the history is left out (it was hidden meanwhile)."""
        for i in range(len(self._items) - 1, -1, -1):
            if self._items[i].info.id == item.info.id:
                self._items[i] = item
                return

    def update_parts(self, parts: Iterable[Part]) -> None:
        """Replace parts by id in the messages that hold them (pruned tool outputs)."""
        updated = {p.id: p for p in parts}
        if not updated:
            return
        for i, item in enumerate(self._items):
            if any(p.id in updated for p in item.parts):
                self._items[i] = WithParts(
                    item.info, tuple(updated.get(p.id, p) for p in item.parts)
                )

    def reset(self, items: Iterable[WithParts]) -> None:
        """Replace every message: what a revert leaves visible, what unrevert brings back,
        what the store holds after another kernel wrote."""
        self._items[:] = list(items)


def visible(history: Sequence[WithParts]) -> list[WithParts]:
    """What the model sees of ``history``: after the last completed compaction, without
    failed compactions."""
    return without_failed_compactions(filter_compacted(history))


def model_chat(visible: Sequence[WithParts], system_prompt: str, model: ModelInfo) -> list[dict]:
    """The chat sent to the main model: the system prompt, then the ``visible`` history (a
    model that takes no images gets "[Attached image/png: name]" in their place). The loop
    sends it; the compactor sizes the next request with it."""
    return [
        {"role": "system", "content": system_prompt},
        *to_chat_messages(visible, strip_media=not model.images),
    ]


class Calibration:
    """Reported prompt tokens per estimated token (1.0 until a step reported usage), kept
    between turns; changed only by :meth:`set`."""

    __slots__ = ("_ratio",)

    def __init__(self, ratio: float = 1.0):
        self._ratio = float(ratio)

    @property
    def ratio(self) -> float:
        return self._ratio

    def set(self, ratio: float) -> None:
        """Keep a new ratio, clamped to 0.5–2×."""
        self._ratio = min(2.0, max(0.5, float(ratio)))


__all__ = ["Calibration", "History", "model_chat", "visible"]
