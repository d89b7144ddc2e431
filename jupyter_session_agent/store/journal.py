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

from ..messages import now_ms

Kind = Literal["session", "message", "part", "event"]  # event: e.g. compaction.CompactionEvent

COLUMNS = (
    "{kind: 'VARCHAR', id: 'VARCHAR', session_id: 'VARCHAR', message_id: 'VARCHAR', rev: 'BIGINT', "
    "writer: 'VARCHAR', deleted: 'BOOLEAN', time_created: 'BIGINT', time_updated: 'BIGINT', data: 'JSON'}"
)
_NAMES = "kind, id, session_id, message_id, rev, writer, deleted, time_created, time_updated, data"
_EMPTY = (  # the typed relation a history with no files yet reads as
    "SELECT NULL::VARCHAR kind, NULL::VARCHAR id, NULL::VARCHAR session_id, NULL::VARCHAR message_id, "
    "NULL::BIGINT rev, NULL::VARCHAR writer, NULL::BOOLEAN deleted, NULL::BIGINT time_created, "
    "NULL::BIGINT time_updated, NULL::JSON data WHERE false"
)


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


class _Journal:
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

    def append(self, sync: bool) -> None:
        with self.lock:
            if not self.buffer or os.getpid() != self.pid:
                return
            if self.fd is not None and os.fstat(self.fd).st_nlink == 0:  # someone deleted the history
                os.close(self.fd)
                self.fd = None
            if self.fd is None:
                self.fd = _create_locked(self.path)
            data = (b"\n" if self.torn else b"") + b"".join(self.buffer.values())
            self.torn = True
            view = memoryview(data)
            while view:  # a regular-file write is whole unless the disk is full
                view = view[os.write(self.fd, view):]
            if sync:
                os.fsync(self.fd)
            self.torn = False
            self.buffer.clear()

    def close(self) -> None:
        """Flush, compact the journal to Parquet, then release the lock (idempotent)."""
        if os.getpid() != self.pid:  # a forked child must not touch its parent's journal
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            return
        try:
            self.append(sync=True)
        finally:
            with self.lock:
                if self.fd is not None:
                    try:
                        _compact(self.path, self.history)
                    except Exception:
                        pass  # the journal stays; a later reader compacts it as a dead writer's
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    os.close(self.fd)
                    self.fd = None


def _create_locked(path: Path) -> int:
    """Create ``path`` already locked: a reader must never see it unlocked while we live."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, path)
    return fd


def _compact(journal: Path, history: Path) -> None:
    """Journal → ``parquet/<writer>.parquet`` (tmp + rename), then remove the journal.

    Only for a finished writer (the caller holds the journal's lock): keeps
    the newest row per id and turns its pending/running tools into
    interrupted errors. Readers may list both files for a moment; the
    duplicate rows carry the same ``rev`` so they collapse.
    """
    import duckdb

    out_dir = history / "parquet"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{journal.stem}.parquet.tmp"
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false")
        con.execute("SET enable_progress_bar=false")
        rows = con.execute(
            # Older revisions in one journal can never win, so only the newest per id is kept;
            # sorting by session lets min/max statistics skip row groups of other sessions.
            # Its writer is finished, so its unfinished tools were interrupted: settle them here too.
            f"COPY (SELECT {_NAMES.replace(' data', f' {_SETTLED} AS data')} FROM {_read_json([journal])} "
            f"WHERE id IS NOT NULL QUALIFY row_number() OVER (PARTITION BY id ORDER BY rev DESC) = 1 "
            f"ORDER BY kind, session_id, id) TO {_quote(tmp)} (FORMAT parquet)", [now_ms()]).fetchone()[0]
    finally:
        con.close()
    if rows:
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.rename(tmp, out_dir / f"{journal.stem}.parquet")
        _fsync_dir(out_dir)
    else:
        tmp.unlink(missing_ok=True)
    journal.unlink()


# A pending/running tool part rewritten as the interrupted ToolError messages() would show ($1 = now).
_SETTLED = """CASE WHEN kind = 'part' AND data->>'type' = 'tool' AND data->'state'->>'status' IN ('pending', 'running')
    THEN json_merge_patch(json_merge_patch(data, '{"state": null}'), json_object('state', json_object(
        'status', 'error', 'input', coalesce(data->'state'->'input', '{}'::JSON),
        'error', 'Tool execution was interrupted',
        'time', json_object('start', coalesce(TRY_CAST(data->'state'->'time'->>'start' AS BIGINT), $1), 'end', $1),
        'metadata', json_merge_patch(coalesce(data->'state'->'metadata', '{}'::JSON), '{"interrupted": true}'))))
    ELSE data END"""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _quote(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _read_json(paths) -> str:
    files = ", ".join(_quote(p) for p in paths)
    return f"read_json([{files}], format='newline_delimited', ignore_errors=true, columns={COLUMNS})"


def _alive(path: Path) -> bool:
    """Whether the journal's writer still runs: it holds LOCK_EX on it for life."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # compacted: its writer has finished
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared, so probers never block each other
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the probe's lock


def _claim(path: Path) -> int | None:
    """A dead writer's journal, locked for compaction; None if alive, gone or claimed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino == os.stat(path).st_ino:  # not compacted by someone else meanwhile
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None


def _listdir(folder: Path, suffix: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(e.path for e in os.scandir(folder) if e.name.endswith(suffix) and e.name[0] != "."))
    except FileNotFoundError:
        return ()


def _events_sql(jsonl: tuple[str, ...], parquet: tuple[str, ...]) -> str:
    parts = []
    if jsonl:
        parts.append(f"SELECT {_NAMES} FROM {_read_json(jsonl)} WHERE id IS NOT NULL")
    if parquet:
        files = ", ".join(_quote(p) for p in parquet)
        parts.append(f"SELECT {_NAMES}::JSON AS data FROM read_parquet([{files}], union_by_name=true)")
    return " UNION ALL ".join(parts) or _EMPTY
