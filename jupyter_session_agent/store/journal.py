"""The journals: one JSONL file per writing process, locked for life.

Row format, layout and the liveness rule are described in the package docstring
(``store/__init__.py``). This module owns writing them (:class:`Writer`: this process's journal
of one history, its rows and their revisions), the ``flock`` that tells live writers from dead
ones (:func:`writer_alive`, :func:`claim`); turning a dead writer's journal into Parquet is
``segment.journal_to_parquet``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import threading
import time
import weakref
from pathlib import Path

from .codec import encode
from .problems import HistoryWriteError, report, write_error
from .schema import Kind
from .segment import journal_to_parquet

_rev_lock = threading.Lock()
_last_rev = 0


def _next_rev() -> int:
    """A revision strictly greater than every earlier one in this process."""
    global _last_rev
    with _rev_lock:
        _last_rev = max(time.time_ns(), _last_rev + 1)
        return _last_rev


# --------------------------------------------------------------------------
# writing


class Writer:
    """This process's journal of one history: rows are buffered, then appended by ``flush``.

    The journal file is made by the first row (none before: a store that only reads never
    writes), again after ``close()`` and in a forked child (which must not write its parent's).
    Remembers, for each id this process wrote, its session, message and creation time (a
    later revision keeps the creation time; ``delete`` needs the session).
    """

    def __init__(self, history: Path) -> None:
        self._history = history
        self._journal: _Journal | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()
        self._known: dict[str, tuple] = {}  # id → (session, message, time_created)

    @property
    def name(self) -> str | None:
        """This process's writer name (the rows' ``writer``), None before its first row."""
        journal = self._journal
        return journal.writer if journal is not None else None

    @property
    def path(self) -> Path | None:
        """This process's journal file, None before its first row."""
        journal = self._journal
        return journal.path if journal is not None else None

    def known(self, id: str) -> tuple | None:
        """(session_id, message_id, time_created) of an id this process wrote, else None."""
        return self._known.get(id)

    def write(
        self,
        kind: Kind,
        id: str,
        session_id: str | None,
        message_id: str | None,
        data: dict,
        deleted: bool,
        now: int,
        created: int | None = None,
    ) -> tuple[int, int]:
        """Buffer one row (the last of an id before a flush wins); (its rev, its time_created).

        ``created`` is the creation time of an id this process has not written before
        (default: ``now``); an id written before keeps the creation time it had then."""
        known = self._known.get(id)
        if known is None:
            known = self._known[id] = (session_id, message_id, created or now)
        journal = self._current()
        rev = _next_rev()
        row = {
            "kind": kind,
            "id": id,
            "session_id": session_id,
            "message_id": message_id,
            "rev": rev,
            "writer": journal.writer,
            "deleted": deleted,
            "time_created": known[2],
            "time_updated": now,
            "data": data,
        }
        journal.add(id, encode(row))
        return rev, known[2]

    def flush(self, sync: bool) -> None:
        """Append the buffer in one write (fsync when ``sync``); HistoryWriteError keeps it."""
        self._current().append(sync)

    def flush_quietly(self) -> None:
        """Append the buffer without fsync so that reads see it; a failed write leaves it
        buffered (reads go on over what is saved; the next ``flush`` raises)."""
        journal = self._journal
        if journal is not None and journal.pending():
            try:
                journal.append(sync=False)
            except HistoryWriteError:
                pass

    def unsaved(self) -> frozenset[str]:
        """Ids whose latest row could not be written yet (the last write failed), else empty."""
        journal = self._journal
        return journal.unsaved() if journal is not None else frozenset()

    def close(self) -> bool:
        """Flush, turn the journal into Parquet, release its lock (never raises); True if there
        was a journal to close."""
        with self._lock:
            finalizer, self._journal, self._finalizer = self._finalizer, None, None
        if finalizer is None:
            return False
        finalizer()
        return True

    def _current(self) -> _Journal:
        """This process's journal; a new one after close() or in a forked child."""
        with self._lock:
            if self._journal is None or self._journal.pid != os.getpid():
                if self._journal is not None:
                    self._journal.close()  # in a child: only drops the inherited fd
                self._journal = _Journal(self._history)
                self._finalizer = weakref.finalize(self, self._journal.close)
            return self._journal


class _Journal:
    """One process's journal file: a buffer of snapshot lines and the locked file they go to."""

    def __init__(self, history: Path) -> None:
        self.history = history
        self.writer = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = history / "live" / f"{self.writer}.jsonl"
        self.buffer: dict[str, bytes] = {}  # id → line; last put per id wins
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.pid = os.getpid()
        self.torn = False  # a failed write may have left half a line
        self.error: HistoryWriteError | None = None  # the last append failed: the buffer is unsaved

    def add(self, id: str, line: bytes) -> None:
        """Buffer the line of a row (the last of an id before an append wins)."""
        with self.lock:
            self.buffer[id] = line

    def pending(self) -> bool:
        """Whether lines wait to be appended."""
        return bool(self.buffer)

    def unsaved(self) -> frozenset[str]:
        """Ids whose lines the last append failed to write, else empty."""
        if self.error is None:
            return frozenset()
        with self.lock:
            return frozenset(self.buffer)

    def append(self, sync: bool) -> None:
        """Write the buffer (one ``write``, ``fsync`` when ``sync``), then empty it.

        A failed write (disk full, read-only folder) raises a one-line HistoryWriteError and
        keeps the buffer, so the next successful append writes it: a line the failure cut in
        half is ended first (readers skip it; the rewritten copy carries the same ``rev``)."""
        with self.lock:
            if not self.buffer or os.getpid() != self.pid:
                return
            try:
                if (
                    self.fd is not None and os.fstat(self.fd).st_nlink == 0
                ):  # the history was deleted
                    os.close(self.fd)
                    self.fd = None
                if self.fd is None:
                    self.fd = _create_locked(self.path)
                data = (b"\n" if self.torn else b"") + b"".join(self.buffer.values())
                view = memoryview(data)
                while view:  # a regular-file write is whole unless the disk is full
                    view = view[os.write(self.fd, view) :]
                    self.torn = bool(view)
                if sync:
                    os.fsync(self.fd)
            except OSError as err:
                self.error = write_error(err, self.history)
                raise self.error from err
            self.torn = False
            self.error = None
            self.buffer.clear()

    def close(self) -> None:
        """Flush, turn the journal into Parquet, then release the lock (idempotent, never
        raises: at exit, rows that cannot be written are reported by one warning)."""
        if os.getpid() != self.pid:  # a forked child must not touch its parent's journal
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            return
        try:
            self.append(sync=True)
        except HistoryWriteError as err:
            report(
                ("unsaved", self.writer),
                f"history: {len(self.buffer)} unsaved rows are lost at close: {err}",
            )
        finally:
            with self.lock:
                if self.fd is not None:
                    try:
                        journal_to_parquet(self.path, self.history)
                    except Exception:
                        pass  # the journal stays; a later reader converts it as a dead writer's
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    os.close(self.fd)
                    self.fd = None


def _create_locked(path: Path) -> int:
    """Create ``path`` already locked: a reader must never see it unlocked while we live."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp")
    tmp.unlink(missing_ok=True)  # ours (the writer name is unique), left by a failed rename
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, path)
    return fd


def writer_alive(path: Path) -> bool:
    """Whether the journal's writer still runs: it holds LOCK_EX on it for life."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never wait on a FIFO put in its place
    except FileNotFoundError:
        return False  # compacted: its writer has finished
    except OSError:
        return True  # cannot tell (e.g. another user's journal): never settle its tools on a guess
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared, so probers never block each other
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the probe's lock


def claim(path: Path) -> int | None:
    """A dead writer's journal, locked for compaction; None if alive, gone or claimed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino == os.stat(path).st_ino:  # not compacted by someone else meanwhile
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None
