"""The journals: one JSONL file per writing process, locked for life, compacted to Parquet.

Row format, layout and the liveness rule are described in the package
docstring (``store/__init__.py``); this module owns writing them, the
``flock`` that tells live writers from dead ones, and compaction of a dead
writer's journal to Parquet.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Literal

from .problems import HistoryWriteError, report, report_file, write_error
from .schema import COLUMN_LIST, COLUMNS, EMPTY_RELATION, KINDS, quote, read_json_sql  # noqa: F401 - re-exported
from .segment import compact

Kind = Literal["session", "message", "part", "event"]  # event: e.g. compaction.CompactionEvent


_rev_lock = threading.Lock()
_last_rev = 0


def next_rev() -> int:
    """A revision strictly greater than every earlier one in this process."""
    global _last_rev
    with _rev_lock:
        _last_rev = max(time.time_ns(), _last_rev + 1)
        return _last_rev


# --------------------------------------------------------------------------
# writing


class Journal:
    """This process's journal: a buffer of snapshot lines and the locked file they go to."""

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
        """Flush, compact the journal to Parquet, then release the lock (idempotent, never
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
                        compact(self.path, self.history)
                    except Exception:
                        pass  # the journal stays; a later reader compacts it as a dead writer's
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


def list_files(folder: Path, suffix: str) -> tuple[str, ...]:
    """The regular files named ``*suffix`` in ``folder`` (not hidden), sorted. Anything else
    with that name (a folder, a link, a FIFO) is left out with one warning."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(suffix) and e.name[0] != "."]
    except FileNotFoundError:
        return ()
    except OSError as err:  # e.g. `live` is a file: nothing to read there
        report_file(folder.parent, str(folder), f"not a folder: {os.strerror(err.errno or 0)}")
        return ()
    files = []
    for entry in entries:
        try:
            regular = entry.is_file(follow_symlinks=False)
        except OSError:
            continue  # vanished meanwhile (compacted)
        if regular:
            files.append(entry.path)
        else:
            report_file(folder.parent, entry.path, "not a regular file")
    return tuple(sorted(files))


def events_sql(jsonl: tuple[str, ...], parquet: tuple[str, ...]) -> str:
    """Every row of the journals and Parquet files (journal kinds: derived rows left out)."""
    parts = []
    if jsonl:
        parts.append(f"SELECT {COLUMN_LIST} FROM {read_json_sql(jsonl)} WHERE id IS NOT NULL")
    if parquet:
        files = ", ".join(quote(p) for p in parquet)
        parts.append(
            f"SELECT {COLUMN_LIST}::JSON AS data FROM read_parquet([{files}], union_by_name=true) "
            f"WHERE kind IN ({', '.join(repr(k) for k in KINDS)})"
        )
    return " UNION ALL ".join(parts) or EMPTY_RELATION
