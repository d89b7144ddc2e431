"""The SQL side of :class:`~jupyter_session_agent.store.Store`: its private in-memory DuckDB,
bringing the catalog up to date before each read, read-only ``sql()``, and compacting the
journals of writers that have finished. Also :func:`scratch_connection`.

``_Query`` is a mixin of ``Store``: it uses the attributes ``Store.__init__`` sets
(``_read_lock``, ``_con``, ``_con_pid``, ``_root``, ``_history``, ``_files``, ``_catalog``,
``_next_sweep``, ``_journal``).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from ..errors import UsageError
from .catalog import _Catalog
from .journal import _EMPTY, _claim, _compact, _events_sql, _listdir, _quote
from .readonly import _check_read_only, _one_line
from .views import _VIEWS


class _Query:
    """Store's SQL methods (see the module docstring)."""

    # ---- SQL -----------------------------------------------------------------

    def sql(self, query: str, params: list | dict | None = None):
        """Run read-only SQL over the history's views (``docs/analytics.md`` lists them).

        Returns a pandas DataFrame of the last statement; ``params`` fill ``$1``/``$name``
        placeholders. Anything but SELECT (and EXPLAIN SELECT, DESCRIBE, SHOW,
        SUMMARIZE) raises ReadOnlyError; DuckDB errors become a one-line UsageError.
        The first query loads the catalog (every file, once); later ones read only
        what was appended since.
        """
        import duckdb

        with self._read_lock:
            _check_read_only(self._connection(), query)
            con = self._prepare()
            run = (lambda c, *_: c.execute(query, params).df()) if params else (lambda c, *_: c.execute(query).df())
            try:
                self._refresh(con)
                if _EVENTS.search(query):  # the raw revisions: read from the files themselves
                    return self._over_files(con, run, view=True)
                return run(con)
            except duckdb.Error as err:
                raise UsageError(_one_line(err)) from None

    def _read(self, tables_sql: str, files_sql: str, params: list | None = None) -> list[tuple]:
        """Rows of ``tables_sql`` over the catalog once it is loaded, else of ``files_sql`` over the files."""
        with self._read_lock:
            con = self._prepare()
            if self._catalog is not None and self._catalog.loaded:
                self._refresh(con)
                return con.execute(tables_sql, params or []).fetchall()
            return self._over_files(con, lambda c, events: c.execute(
                files_sql.replace("__events__", events), params or []).fetchall())

    def _prepare(self):
        """The connection, after writing this process's buffer (read your own writes) and,
        every 10 s, compacting the journals of writers that have finished."""
        journal = self._journal
        if journal is not None and journal.buffer:
            journal.append(sync=False)
        con = self._connection()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + 10.0
            self._sweep()
        return con

    def _refresh(self, con) -> None:
        """Bring the catalog up to date with the files.

        A compaction can remove a journal between listing and reading it; then
        the listing has changed and the refresh goes again, so it also reads the
        Parquet file that replaced the journal. An I/O error with an unchanged
        listing is real and raised.
        """
        import duckdb

        if self._catalog is None:  # the first query: the tables, then the views over them
            self._catalog = _Catalog(con)
            for name, body in _VIEWS.items():
                con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
        for _ in range(100):
            files = self._listing()
            try:
                self._catalog.refresh(con, *files)
            except duckdb.IOException:
                if self._listing() == files:
                    raise
                continue
            if self._listing() == files:
                return
        raise UsageError("the history keeps changing under the query — try again")

    def _over_files(self, con, fn, *, view: bool = False):
        """``fn(con, events)``: ``events`` is a relation over the current files, the ``events``
        view when ``view`` (for users' SQL), else a subquery (one bind instead of two).
        Retried as in _refresh."""
        import duckdb

        for _ in range(100):  # each retry means another writer's journal was compacted
            files = self._listing()
            try:
                if not view:
                    return fn(con, f"({_events_sql(*files)})")
                if files != self._files:
                    self._files = None
                    con.execute(f"CREATE OR REPLACE VIEW events AS {_events_sql(*files)}")  # opens them
                    self._files = files
                return fn(con, "events")
            except duckdb.IOException:
                if self._listing() == files:
                    raise
        raise UsageError("the history keeps changing under the query — try again")

    def _connection(self):
        """The private in-memory DuckDB (no file, so no lock), locked down to the history folder."""
        if self._con is None or self._con_pid != os.getpid():
            import duckdb

            self._root = self._history.resolve()
            con = duckdb.connect()
            for setting in (
                "SET autoinstall_known_extensions=false",  # offline: fail in 0 s, not 4 s
                "SET autoload_known_extensions=false",
                "SET enable_external_file_cache=false",  # journals grow in place; never serve stale blocks
                "SET enable_progress_bar=false",  # long first loads must not print into the cell
                f"SET allowed_directories=[{_quote(str(self._root) + os.sep)}]",
                "SET enable_external_access=false",
                "SET lock_configuration=true",
            ):
                con.execute(setting)
            con.execute(f"CREATE VIEW events AS {_EMPTY}")
            self._con, self._con_pid, self._files, self._catalog = con, os.getpid(), (), None
        return self._con

    def _listing(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return _listdir(self._root / "live", ".jsonl"), _listdir(self._root / "parquet", ".parquet")

    def _sweep(self) -> None:
        me = self._journal.writer if self._journal is not None else None
        for path in _listdir(self._root / "live", ".jsonl"):
            if Path(path).stem == me:
                continue
            fd = _claim(Path(path))
            if fd is not None:
                try:
                    _compact(Path(path), self._root)
                except Exception:
                    pass  # stays a journal; still readable
                finally:
                    os.close(fd)


_EVENTS = re.compile(r"\bevents\b", re.IGNORECASE)


def scratch_connection():
    """A private in-memory DuckDB for derived indexes (memory search): no file, no lock,
    offline settings. It lives here so that this package stays the only one importing duckdb."""
    import duckdb

    con = duckdb.connect()
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions", "enable_progress_bar"):
        con.execute(f"SET {setting}=false")
    return con
