"""The reading side of the history: a private in-memory DuckDB, the views over the files, and
read-only ``sql()``.

The views scan the files (``generation.plan``): the current generation's large files in place
(projection and predicate pushdown: a query reads the columns and row groups it needs), plus
the tail, kept in memory by :class:`~.catalog.Catalog`. They are defined again whenever the
plan changes (a new generation, a session of the base taken over by the tail).

Every read goes through :meth:`Query._guarded`: over the current plan, again when the files
changed under it (a journal converted, a merge committed meanwhile), and without a file DuckDB
cannot read (found by the error, or by reading each file of the tail alone), which is then left
out with one warning (``files.py``) so that one stray file never stops the history from being
read.

One module: every read (``sql()``, :meth:`Query.rows`, an export's views) goes through that one
guard, which needs the connection, the plan and the tail together; the listing, the tail, the
views and the upkeep each have a module of their own.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from ..core.errors import UsageError
from .catalog import Catalog
from .files import Files
from .generation import Plan
from .journal import Writer
from .problems import BadFile, one_line
from .readonly import check_read_only
from .schema import COLUMN_LIST, EMPTY_RELATION, KINDS, quote, read_json_sql
from .upkeep import Upkeep
from .views import define_views


class Query:
    """Reads of one history folder (see the module docstring); thread-safe.

    ``writer`` is this process's journal: a read first writes its buffer (read your own
    writes), its journal is never taken for a stray file, and upkeep never converts it.
    Until the first ``sql()`` query, :meth:`rows` reads the files directly.
    """

    def __init__(self, history: Path, writer: Writer) -> None:
        self._writer = writer
        self._files = Files(history)
        self._upkeep = Upkeep()
        self._lock = threading.RLock()
        self._con = None
        self._con_pid = 0
        self._events: Plan | tuple | None = None  # the plan the ``events`` view was made for
        self._catalog: Catalog | None = None  # created by the first sql() query
        self._defined: tuple | None = None  # the plan the _store.* views were defined for
        self._views_made = False

    # ---- reads ---------------------------------------------------------------

    def sql(self, query: str, params: list | dict | None = None):
        """``Store.sql``: read-only SQL over the views, a DataFrame of the last statement; a
        query naming ``events`` reads every revision from the files themselves."""
        import duckdb

        with self._lock:
            check_read_only(self._connection(), query)
            con = self._prepare()
            run = (
                (lambda c, *_: c.execute(query, params).df())
                if params
                else (lambda c, *_: c.execute(query).df())
            )
            if _TOTALS.search(query):  # the tail's totals are summed again only when read
                ask = run

                def run(c, *rest):
                    if self._catalog is not None:
                        self._catalog.settle_totals(c)
                    return ask(c, *rest)

            try:
                if _EVENTS.search(query):  # the raw revisions: read from the files themselves
                    self._refresh(con)
                    return self._over_files(con, run, view=True)
                return self._over_views(con, run)
            except duckdb.Error as err:
                raise UsageError(one_line(err)) from None

    def rows(self, tables_sql: str, files_sql: str, params: list | None = None) -> list[tuple]:
        """Rows of ``tables_sql`` over the views once the tail is loaded, else of ``files_sql``
        over the files (:meth:`file_rows`)."""
        with self._lock:
            con = self._prepare()
            if self._catalog is not None and self._catalog.loaded:
                return self._over_views(
                    con, lambda c: c.execute(tables_sql, params or []).fetchall()
                )
            return self._file_rows(con, files_sql, params)

    def file_rows(self, sql: str, params: list | None = None) -> list[tuple]:
        """Rows of ``sql`` in which ``__events__`` is every row of the files: each revision,
        tombstones included."""
        with self._lock:
            return self._file_rows(self._prepare(), sql, params)

    def count_rows(self, path: str, session_id: str) -> int:
        """The session's rows in one Parquet file (0 if it cannot be read: reads leave it out)."""
        import duckdb

        with self._lock:
            con = self._prepare()
            try:
                return con.execute(
                    f"SELECT count(*) FROM read_parquet([{quote(path)}]) WHERE session_id = $1",
                    [session_id],
                ).fetchone()[0]
            except duckdb.Error:
                return 0

    def plan(self) -> Plan:
        """The files a read uses now (``files.Files.plan``)."""
        with self._lock:
            return self._files.plan(self._connection)

    def journal_of(self, writer: str) -> Path:
        """The live journal of another writer (a name read from a row)."""
        return self._files.journal_of(writer)

    def define_views_in(self, con) -> None:
        """Define the views in another connection ``con`` (a tail of its own), as ``sql()``
        sees them now: for an export, which writes outside the history folder."""
        self._prepare()
        catalog = Catalog(con)

        def attempt(files):
            catalog.refresh(con, files, self._typed)
            catalog.settle_totals(con)
            define_views(con, files, catalog.shadowed, tail=catalog.created)

        with self._lock:  # as in _refresh: again if a journal is converted meanwhile
            self._guarded(attempt, settle=True)

    # ---- upkeep and lifetime ---------------------------------------------------

    def tidy(self) -> None:
        """Convert the journals of finished writers and start a background merge if enough
        small files wait, now (reads do it at most every 10 s)."""
        with self._lock:
            self._upkeep.now(self._files, self._writer.name)

    def close(self) -> None:
        """Close the connection (a new one is made by the next read)."""
        with self._lock:
            if self._con is not None and self._con_pid == os.getpid():
                self._con.close()
            self._con, self._events, self._catalog = None, None, None

    # ---- inside --------------------------------------------------------------

    def _prepare(self):
        """The connection, after writing this process's buffer (read your own writes) and,
        every 10 s, the upkeep of the files (``upkeep.py``)."""
        self._writer.flush_quietly()
        con = self._connection()
        self._upkeep.when_due(self._files, self._writer.name)
        return con

    def _file_rows(self, con, sql: str, params: list | None) -> list[tuple]:
        return self._over_files(
            con,
            lambda c, events: c.execute(sql.replace("__events__", events), params or []).fetchall(),
        )

    def _over_views(self, con, fn):
        """``fn(con)`` over the views, with the tail brought up to date first."""
        import duckdb

        self._refresh(con)
        for _ in range(10):
            files = self.plan()
            try:
                return fn(con)
            except Exception as err:
                if _users_mistake(err) or not isinstance(err, duckdb.Error):
                    raise
                if self.plan() == files and not self._named_culprit(files, err):
                    raise  # the query's own error, not a file's
                self._refresh(con)  # files changed under it (a merge committed): again
        raise UsageError("the history keeps changing under the query — try again")

    def _named_culprit(self, files: Plan, err: Exception) -> bool:
        """Leave out the one file ``err`` names, if it names one (True)."""
        text = one_line(err)
        named = [p for p in (*files.files[0], *files.files[1]) if p in text]
        if len(named) != 1 or self._is_own(named[0]):
            return False
        self._files.leave_out(named[0], text)
        return True

    def _refresh(self, con) -> None:
        """Bring the tail up to date with the files and define the views over the plan (again
        if a journal was converted meanwhile, so it also reads the file that replaced it)."""
        if self._catalog is None:  # the first query: the tables, then the views over them
            self._catalog = Catalog(con)
            self._defined = None
        catalog = self._catalog

        def attempt(files):
            catalog.refresh(con, files, self._typed)
            self._define(con, files, catalog)

        self._guarded(attempt, settle=True)

    def _define(self, con, files: Plan, catalog: Catalog) -> None:
        """(Re)create ``_store.<kind>`` for this plan, then the public views once."""
        key = (files.base, tuple(sorted(catalog.shadowed.items())), catalog.created)
        if key == self._defined:
            return
        self._defined = None
        define_views(
            con, files, catalog.shadowed, public=not self._views_made, tail=catalog.created
        )
        self._views_made = True
        self._defined = key

    def _typed(self, path: str) -> bool:
        """Whether a Parquet file has the typed columns (written by this version)."""
        return self._files.meta(self._connection(), path) is not None

    def _over_files(self, con, fn, *, view: bool = False):
        """``fn(con, events)``: ``events`` is a relation over the current files, the ``events``
        view when ``view`` (for users' SQL), else a subquery (one bind instead of two)."""

        def attempt(files):
            if not view:
                return fn(con, f"({_events_sql(*files.files)})")
            if files != self._events:
                self._events = None
                con.execute(
                    f"CREATE OR REPLACE VIEW events AS {_events_sql(*files.files)}"
                )  # opens them
                self._events = files
            try:
                return fn(con, "events")
            except Exception as err:
                if _users_mistake(err):
                    raise _Theirs(err) from None
                raise

        try:
            return self._guarded(attempt)
        except _Theirs as theirs:
            raise theirs.err from None

    def _guarded(self, attempt, *, settle: bool = False):
        """``attempt(plan)`` over the current plan (``generation.Plan``).

        Tried again when the files changed under it (each retry means another writer's
        journal was converted, or a merge committed), and, when ``settle``, until they held
        still during a whole attempt. A file that made it fail is left out (one warning) and
        the attempt made again without it; a failure no single file explains is raised.
        """
        import duckdb

        for _ in range(100):
            files = self.plan()
            try:
                result = attempt(files)
            except BadFile as bad:
                if self._is_own(bad.path):  # this process's journal is never a stray
                    raise UsageError(
                        f"this kernel's journal {bad.path} cannot be read "
                        f"({bad.reason}) — check the drive"
                    ) from None
                self._files.leave_out(bad.path, bad.reason)
                continue
            except (duckdb.Error, UnicodeDecodeError) as err:  # a corrupt file's error text
                # may not even decode
                if self.plan() != files:
                    continue
                culprit = self._culprit(files, err)
                if culprit is None or self._is_own(culprit[0]):  # never a stray: the error is real
                    raise
                self._files.leave_out(*culprit)
                continue
            if not settle or self.plan() == files:
                return result
        raise UsageError("the history keeps changing under the query — try again")

    def _culprit(self, files: Plan, err: Exception) -> tuple[str, str] | None:
        """(path, reason) of the one file that makes reads fail with ``err``: the file the
        error names, else the first that fails when read alone (each file read fully)."""
        text = one_line(err)
        live, parquet = files.files
        listed = [*live, *parquet]
        named = [p for p in listed if p in text]
        if len(named) == 1:
            return named[0], text
        con = self._connection()
        for path in listed:
            sql = _events_sql(*(((path,), ()) if path in live else ((), (path,))))
            try:
                con.execute(f"SELECT {_READ_EVERY_COLUMN} FROM ({sql})").fetchall()
            except Exception as probe:  # noqa: BLE001 - whatever DuckDB makes of a broken file
                return path, one_line(probe)
        return None

    def _is_own(self, path: str) -> bool:
        own = self._writer.path
        return own is not None and os.path.basename(path) == own.name

    def _connection(self):
        """The private in-memory DuckDB (no file, so no lock), locked down to the history folder."""
        if self._con is None or self._con_pid != os.getpid():
            import duckdb

            root = self._files.root
            con = duckdb.connect(
                config={
                    "autoinstall_known_extensions": False,  # offline: fail in 0 s, not 4 s
                    "autoload_known_extensions": False,
                    "enable_external_file_cache": False,  # journals grow in place; never serve stale blocks
                }
            )
            for setting in (
                # Parquet footers are read once per file: the store never changes a file in place
                # (each is written whole, then renamed), so a cached footer is never stale
                "SET parquet_metadata_cache=true",
                f"SET allowed_directories=[{quote(str(root) + os.sep)}]",
                "SET enable_progress_bar=false",  # long first loads must not print into the cell
                "SET enable_external_access=false",
                "SET lock_configuration=true",
            ):
                con.execute(setting)
            con.execute(f"CREATE VIEW events AS {EMPTY_RELATION}")
            self._con, self._con_pid, self._events, self._catalog = con, os.getpid(), (), None
            self._defined, self._views_made = None, False
        return self._con


def _events_sql(jsonl: tuple[str, ...], parquet: tuple[str, ...]) -> str:
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


_EVENTS = re.compile(r"\bevents\b", re.IGNORECASE)
_TOTALS = re.compile(r"session_totals", re.IGNORECASE)  # a query reading them (any view)
# What a probe reads of every row, so that every column of a file is decoded.
_READ_EVERY_COLUMN = (
    "count(kind), count(id), count(session_id), count(message_id), max(rev), "
    "count(writer), count(deleted), max(time_created), max(time_updated), "
    "max(length(data::VARCHAR))"
)


class _Theirs(Exception):
    """A mistake in the user's own SQL (not a file's fault): raised as it is, no file probed."""

    def __init__(self, err: Exception) -> None:
        super().__init__(err)
        self.err = err


def _users_mistake(err: Exception) -> bool:
    import duckdb

    mistakes = (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException)
    return isinstance(err, mistakes)
