"""The upkeep of the history's files, done by whoever reads: the journals of writers that have
finished become Parquet files, and small files are merged in the background when enough wait.

A journal that can be locked belongs to a process that has finished (a writer holds its lock
for life, ``journal.py``): its owner converts it at ``close()``; a process that died without
closing leaves it to the next reader, which claims it (so two readers never convert it both).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .files import Files
from .journal import claim
from .merge import merge, merge_due
from .segment import journal_to_parquet

EVERY = 10.0  # seconds between two rounds of upkeep by one reader


class Upkeep:
    """One reader's upkeep: a round at most every :data:`EVERY` seconds, one merge at a time."""

    def __init__(self) -> None:
        self._next = 0.0  # time.monotonic() of the next round
        self._merging: threading.Thread | None = None  # the background merge, if any

    def when_due(self, files: Files, own: str | None) -> None:
        """:meth:`now`, if the last round was at least :data:`EVERY` seconds ago."""
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + EVERY
            self.now(files, own)

    def now(self, files: Files, own: str | None) -> None:
        """Convert the journals of finished writers (``own``: this process's writer, never
        touched), then start a background merge if enough small files wait."""
        root = files.root
        for path in files.journals():
            if Path(path).stem == own:
                continue
            fd = claim(Path(path))
            if fd is not None:
                try:
                    journal_to_parquet(Path(path), root)
                except Exception:
                    pass  # stays a journal; still readable
                finally:
                    os.close(fd)
        if (self._merging is None or not self._merging.is_alive()) and merge_due(root):
            self._merging = threading.Thread(
                target=_quiet_merge, args=(root,), daemon=True, name="jupyter-session-agent-merge"
            )
            self._merging.start()


def _quiet_merge(history: Path) -> None:
    try:
        merge(history)
    except Exception:  # noqa: BLE001 - a failed merge leaves every file as it was; reads go on
        pass
