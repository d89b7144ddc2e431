"""The Store: one history's writing and reading, composed of parts that each own their state.

- :class:`~.journal.Writer`: this process's journal (rows buffered, then appended; ``flush``)
- :class:`~.query.Query`: the private DuckDB, the views over the files, ``sql()``; it owns
  the folder's listing (``files.py``), the tail (``catalog.py``) and the upkeep (``upkeep.py``)
- :class:`~.sessions.SessionReader`: sessions and messages as values, decoded once per revision
- :class:`~.export.Exporter`: the Parquet and DuckDB exports
- :class:`~.watch.Watches`: what other processes write to a session (``foreign``)

The Store routes each call to its part and does what spans two: a ``put`` is written by the
writer and remembered by the reader; a tool left running by a dead writer, found by a read, is
written back as interrupted.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.messages import Session, WithParts, now_ms
from .codec import journal_kind
from .export import Exporter
from .journal import Writer
from .merge import merge
from .query import Query
from .schema import Kind
from .sessions import SessionReader
from .watch import Watches


class Store:
    """The history of every session, shared by all processes using ``data_dir``.

    Writing (``put``/``delete``/``flush``) touches only this process's journal
    and never opens DuckDB. Reading sees every row any process has flushed,
    newest revision per id; a read first writes this process's buffer (without
    fsync) so it sees its own puts. Thread-safe; cheap to construct (no I/O
    until used).
    """

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        history = self.data_dir / "history"
        self._history = history
        self._writer = Writer(history)
        self._query = Query(history, self._writer)
        self._reader = SessionReader(self._query)
        self._exporter = Exporter(self._query)
        self._watches = Watches()

    # ---- writing -----------------------------------------------------------

    def put(self, *values: Any, time_created: int | None = None) -> None:
        """Buffer a snapshot of each value; the last put of an id before flush() wins.

        ``time_created`` (ms) is the rows' creation time for ids this process has not
        written before (imports keep their source's times); default: the creation time read
        from the history, else now.
        """
        now = now_ms()
        writer, reader = self._writer, self._reader
        for value in values:
            kind = journal_kind(value)
            data = value.to_data()
            data.pop("id", None)
            session_id = value.id if kind == "session" else data.pop("sessionID", None)
            message_id = data.pop("messageID", None) if kind == "part" else None
            created = time_created or reader.created(session_id, value.id)
            rev, created = writer.write(
                kind, value.id, session_id, message_id, data, False, now, created
            )
            if kind in ("message", "part"):
                reader.remember(session_id, value.id, rev, created, value)

    def delete(self, kind: Kind, id: str) -> None:
        """Buffer a tombstone: the id disappears from every view and from messages()."""
        if kind not in ("session", "message", "part"):
            raise UsageError(f"cannot delete a {kind!r} — kind is 'session', 'message' or 'part'")
        known = self._writer.known(id) or self._reader.newest(id)
        session_id, message_id = known[:2] if known else (id if kind == "session" else None, None)
        created = self._reader.created(session_id, id)
        self._writer.write(kind, id, session_id, message_id, {}, True, now_ms(), created)
        self._reader.forget(session_id, id)

    def flush(self, *, sync: bool = True) -> None:
        """Append everything buffered in one write; fsync when ``sync``.

        Raises a one-line ``HistoryWriteError`` when the journal cannot be written (disk full):
        the rows stay buffered (see :meth:`unsaved`) and the next successful flush writes them."""
        self._writer.flush(sync)

    def unsaved(self) -> frozenset[str]:
        """Ids whose latest put could not be written yet (the last write failed), else empty."""
        return self._writer.unsaved()

    @property
    def journal_path(self) -> Path | None:
        """This process's journal of the history (its name is the rows' ``writer``), None
        before the first put."""
        return self._writer.path

    def close(self) -> None:
        """Flush, turn this process's journal into Parquet, release its lock and the
        connection; then merge the small files if enough wait (``merge.py``; never raises)."""
        if self._writer.close():
            try:
                merge(self._history)
            except Exception:  # noqa: BLE001 - a failed merge leaves every file as it was
                pass
        self._query.close()

    # ---- reading -----------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The session with this id, or with this unique id prefix."""
        return self._reader.session(session_id)

    def sessions(
        self, *, include_archived: bool = False, limit: int | None = None, offset: int = 0
    ) -> list[Session]:
        """All sessions, newest first (descending ids sort newest first); ``limit``/``offset``:
        one page of them."""
        return self._reader.sessions(include_archived=include_archived, limit=limit, offset=offset)

    def session_count(self, *, include_archived: bool = False) -> int:
        """How many sessions :meth:`sessions` lists."""
        return self._reader.session_count(include_archived=include_archived)

    def messages(self, session_id: str) -> list[WithParts]:
        """The session's messages oldest first, each with its parts in id order.

        A pending/running tool whose writer has died comes back as an
        interrupted ``ToolError``, and that fix is written to the history.
        Decoded values are cached by revision, so repeated calls parse only
        what changed.
        """
        own = self._writer.name
        reader = self._reader

        def gone(writer: str | None) -> bool:
            return writer is not None and writer != own and not reader.running(writer)

        history, interrupted = reader.messages(session_id, gone)
        if interrupted:
            self.put(*interrupted)
            self.flush()
        return history

    def sql(self, query: str, params: list | dict | None = None):
        """Run read-only SQL over the history's views (``docs/analytics.md`` lists them).

        Returns a pandas DataFrame of the last statement; ``params`` fill ``$1``/``$name``
        placeholders. Anything but SELECT (and EXPLAIN SELECT, DESCRIBE, SHOW,
        SUMMARIZE) raises ReadOnlyError; DuckDB errors become a one-line UsageError.
        The views scan the merged files in place; only the tail (live journals and small
        files) is kept in memory, read incrementally.
        """
        return self._query.sql(query, params)

    def tidy(self) -> None:
        """Turn the journals of processes that have finished into Parquet and merge small
        files in the background if enough wait, now (reads do it at most every 10 s)."""
        self._query.tidy()

    # ---- other writers of a session (two kernels continuing it) ---------------

    def foreign(self, session_id: str) -> tuple:
        """A mark that moves whenever another process writes or deletes a row of the session.

        A kernel continuing the session compares it before each turn and reloads the history
        when it moved (``AgentSession``). Cheap: other writers' journals are read only where
        they grew, by text search, and DuckDB only counts Parquet files new since the first
        call (``watch.py``); this process's own journal is never read.
        """
        query = self._query
        live, parquet = query.plan().files
        return self._watches.mark(
            session_id,
            live,
            parquet,
            self._writer.name,
            lambda path: query.count_rows(path, session_id),
        )

    def live_writer(self, id: str) -> str | None:
        """The other process that wrote the newest revision of ``id``, if it still runs."""
        return self._reader.live_writer(id, self._writer.name)

    # ---- exports -------------------------------------------------------------

    def export_parquet(
        self, directory: str | os.PathLike, *, user: str | None = None
    ) -> dict[str, int]:
        """Write the history as Parquet, Hive-partitioned by day, for Spark, Trino or DuckDB
        (``export.Exporter.to_parquet``). Returns the rows of each table in the days written."""
        return self._exporter.to_parquet(directory, user=user)

    def export_duckdb(self, path: str | os.PathLike) -> dict[str, int]:
        """Write the history and its views into a DuckDB database file
        (``export.Exporter.to_duckdb``). Returns the rows copied per table."""
        return self._exporter.to_duckdb(path)


_shared: dict[Path, Store] = {}
_shared_lock = threading.Lock()


def shared(data_dir: str | os.PathLike) -> Store:
    """The process-wide Store for ``data_dir``: one journal and one tail per history
    (the magics and ``jupyter_session_agent.sql()`` use it, so the tail is read once)."""
    key = Path(data_dir).expanduser().absolute()
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = _shared[key] = Store(key)
        return store
