"""A form of showing parts: one rendering per part class, looked up once, and a readable
fallback for a class it has none for (a part type added later), so no part is ever skipped
without a word."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.messages import PART_TYPES, UnknownPart

PART_CLASSES: tuple[type, ...] = (*PART_TYPES.values(), UnknownPart)


class Form:
    """``form(part, *args)``: the rendering ``table`` has for ``type(part)``, else ``fallback``."""

    def __init__(
        self, name: str, table: Mapping[type, Callable[..., str]], fallback: Callable[..., str]
    ) -> None:
        self.name = name
        self.table = dict(table)
        self.fallback = fallback

    def __call__(self, part: Any, *args: Any) -> str:
        return self.table.get(type(part), self.fallback)(part, *args)

    def missing(self) -> list[type]:
        """The part classes this form has no rendering of its own for."""
        return [c for c in PART_CLASSES if c not in self.table]
