"""What other processes write to one session, watched cheaply (no DuckDB on the common path).

Every row of a session carries its id in its journal line, so counting the id in what other
writers' journals appended since the last look tells whether they wrote to the session (a row
of another session that names it, e.g. a fork's origin, only makes the kernel read the history
once more): a journal is read from the offset reached last time, in blocks. A Parquet file
that appeared since the first look (a writer that finished meanwhile) is counted by DuckDB,
once; the files present at the first look were read with the session.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_BLOCK = 16 << 20  # bytes read at a time from a journal
WATCHED = 16  # sessions watched at a time (the ones asked about last)


class Watches:
    """The :class:`_Watch` of each session asked about lately (thread-safe)."""

    def __init__(self) -> None:
        self._watches: dict[str, _Watch] = {}  # session → its watch, most recently used last
        self._lock = threading.Lock()

    def mark(
        self,
        session_id: str,
        live: tuple[str, ...],
        parquet: tuple[str, ...],
        own: str | None,
        count,
    ) -> tuple[int, int]:
        """The session's :meth:`_Watch.mark` for this listing (see there)."""
        with self._lock:
            watch = self._watches.pop(session_id, None) or _Watch(session_id)
            self._watches[session_id] = watch
            while len(self._watches) > WATCHED:
                del self._watches[next(iter(self._watches))]
            return watch.mark(live, parquet, own, count)


class _Watch:
    """The mark of one session: (hits in other writers' journals, its rows in new Parquet files)."""

    def __init__(self, session_id: str) -> None:
        self.needle = session_id.encode("utf-8", "replace")
        self.journals: dict[str, tuple[int, int, int]] = {}  # path → (inode, offset read, hits)
        self.parquet: dict[str, int] | None = None  # path → the session's rows; None: first look

    def mark(
        self, live: tuple[str, ...], parquet: tuple[str, ...], own: str | None, count
    ) -> tuple[int, int]:
        """The mark now, given the listing; ``own`` is this process's writer (its journal is
        skipped), ``count(path)`` the session's rows in a Parquet file (once per new file)."""
        hits = sum(self._scan(path) for path in live if Path(path).stem != own)
        self.journals = {p: v for p, v in self.journals.items() if p in live}
        if self.parquet is None:  # the first look: what is there now was read with the session
            self.parquet = dict.fromkeys(parquet, 0)
        for path in parquet:
            if path not in self.parquet:
                self.parquet[path] = count(path)
        self.parquet = {p: n for p, n in self.parquet.items() if p in parquet}
        return hits, sum(self.parquet.values())

    def _scan(self, path: str) -> int:
        """Hits of the needle in the journal so far, reading only what was appended."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return self.journals.get(path, (0, 0, 0))[2]
        try:
            st = os.fstat(fd)
            inode, offset, hits = self.journals.get(path, (st.st_ino, 0, 0))
            if inode != st.st_ino or st.st_size < offset:  # replaced: read it again
                offset, hits = 0, 0
            keep = len(self.needle) - 1  # a needle cut by a block's end is found in the next
            while offset < st.st_size:
                start = max(0, offset - keep)
                block = os.pread(fd, min(_BLOCK, st.st_size - offset) + (offset - start), start)
                if len(block) <= offset - start:
                    break
                hits += block.count(self.needle)
                offset = start + len(block)
            self.journals[path] = (st.st_ino, offset, hits)
            return hits
        except OSError:
            return self.journals.get(path, (0, 0, 0))[2]
        finally:
            os.close(fd)
