"""The verbatim tail of a summary compaction: :func:`select_tail`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...core.messages import WithParts
from .items import is_real_user


def select_tail(
    items: Sequence[WithParts],
    *,
    turns: int,
    budget: int,
    size: Callable[[Sequence[WithParts]], int],
) -> int:
    """Where the verbatim tail starts in ``items`` (``len(items)``: no tail).

    Walk the real user turns backwards, at most ``turns`` of them; add whole
    turns while they fit ``budget``; if the next one does not fit, start at the
    latest message of it that does.
    """
    if turns <= 0 or budget <= 0:
        return len(items)
    starts = [i for i, item in enumerate(items) if is_real_user(item)]
    start = end = len(items)
    total = 0
    for s in reversed(starts[-turns:]):
        n = size(items[s:end])
        if total + n <= budget:
            total, start, end = total + n, s, s
            continue
        for j in range(s + 1, end):
            if total + size(items[j:end]) <= budget:
                start = j
                break
        break
    return start
