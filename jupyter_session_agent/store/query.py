"""The SQL side of :class:`~jupyter_session_agent.store.Store`: its private in-memory DuckDB,
the views over the files, read-only ``sql()``, and the upkeep of the files (compacting the
journals of writers that have finished, merging small files). Also :func:`scratch_connection`.

The views scan the files (``merge.py``'s plan): the current generation's large files in place
(projection and predicate pushdown: a query reads the columns and row groups it needs), plus
the tail, kept in memory by :class:`~.catalog._Catalog`. They are defined again whenever the
plan changes (a new generation, a session of the base taken over by the tail).

Every read goes through :meth:`_Query._guarded`: over the current plan, again when the files
changed under it (a journal compacted, a merge committed meanwhile), and without a file DuckDB
cannot read (found by the error, or by reading each file of the tail alone), which is then left
out with one warning (``problems.py``) so that one stray file never stops the history from
being read.

``_Query`` is a mixin of ``Store``: it uses the attributes ``Store.__init__`` sets
(``_read_lock``, ``_con``, ``_con_pid``, ``_root``, ``_history``, ``_files``, ``_catalog``,
``_next_sweep``, ``_journal``, ``_bad``, ``_verified``, ``_metas``, ``_manifests``,
``_defined``, ``_merging``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from ..core.errors import UsageError
from .catalog import KEY, Catalog
from .journal import EMPTY_RELATION, claim, compact, events_sql, list_files, quote
from .merge import MIN_BYTES, MIN_FILES, Plan, list_manifests, merge, plan
from .problems import BadFile, HistoryWriteError, report_file
from .readonly import check_read_only, one_line
from .schema import DERIVED, KINDS, derived, select_list, typed
from .segment import parquet_problem, read_meta, stat_key
from .views import VIEWS


class QueryMixin:
    """Store's SQL methods (see the module docstring)."""

    # ---- SQL -----------------------------------------------------------------

    def sql(self, query: str, params: list | dict | None = None):
        """Run read-only SQL over the history's views (``docs/analytics.md`` lists them).

        Returns a pandas DataFrame of the last statement; ``params`` fill ``$1``/``$name``
        placeholders. Anything but SELECT (and EXPLAIN SELECT, DESCRIBE, SHOW,
        SUMMARIZE) raises ReadOnlyError; DuckDB errors become a one-line UsageError.
        The views scan the merged files in place; only the tail (live journals and small
        files) is kept in memory, read incrementally.
        """
        import duckdb

        with self._read_lock:
            check_read_only(self._connection(), query)
            con = self._prepare()
            run = (
                (lambda c, *_: c.execute(query, params).df())
                if params
                else (lambda c, *_: c.execute(query).df())
            )
            try:
                if _EVENTS.search(query):  # the raw revisions: read from the files themselves
                    self._refresh(con)
                    return self._over_files(con, run, view=True)
                return self._over_views(con, run)
            except duckdb.Error as err:
                raise UsageError(one_line(err)) from None

    def _read(self, tables_sql: str, files_sql: str, params: list | None = None) -> list[tuple]:
        """Rows of ``tables_sql`` over the views once the tail is loaded, else of ``files_sql``
        over the files."""
        with self._read_lock:
            con = self._prepare()
            if self._catalog is not None and self._catalog.loaded:
                return self._over_views(
                    con, lambda c: c.execute(tables_sql, params or []).fetchall()
                )
            return self._over_files(
                con,
                lambda c, events: c.execute(
                    files_sql.replace("__events__", events), params or []
                ).fetchall(),
            )

    def _prepare(self):
        """The connection, after writing this process's buffer (read your own writes) and,
        every 10 s, compacting the journals of writers that have finished (and merging small
        files in the background when enough wait). A buffer that cannot be written (disk full)
        stays buffered: reads go on over what is saved, flush() raises."""
        journal = self._journal
        if journal is not None and journal.buffer:
            try:
                journal.append(sync=False)
            except HistoryWriteError:
                pass
        con = self._connection()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + 10.0
            self._sweep()
        return con

    def _over_views(self, con, fn):
        """``fn(con)`` over the views, with the tail brought up to date first."""
        import duckdb

        self._refresh(con)
        for _ in range(10):
            files = self._listing()
            try:
                return fn(con)
            except Exception as err:
                if _users_mistake(err) or not isinstance(err, duckdb.Error):
                    raise
                if self._listing() == files and not self._named_culprit(files, err):
                    raise  # the query's own error, not a file's
                self._refresh(con)  # files changed under it (a merge committed): again
        raise UsageError("the history keeps changing under the query — try again")

    def _named_culprit(self, files: Plan, err: Exception) -> bool:
        """Leave out the one file ``err`` names, if it names one (True)."""
        text = _one_line_of(err)
        named = [p for p in (*files.files[0], *files.files[1]) if p in text]
        if len(named) != 1 or self._is_own(named[0]):
            return False
        self._leave_out(named[0], text)
        return True

    def _refresh(self, con) -> None:
        """Bring the tail up to date with the files and define the views over the plan (again
        if a journal was compacted meanwhile, so it also reads the file that replaced it)."""
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
        return self._meta(path) is not None

    def _meta(self, path: str) -> dict | None:
        """The file's footer entry (cached by identity); raises _BadFile if it cannot be read."""
        import duckdb

        key = stat_key(path)
        hit = self._metas.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            meta = read_meta(self._connection(), path)
        except (duckdb.Error, UnicodeDecodeError) as err:
            raise BadFile(path, _one_line_of(err)) from None
        self._metas[path] = (key, meta)
        return meta

    def _over_files(self, con, fn, *, view: bool = False):
        """``fn(con, events)``: ``events`` is a relation over the current files, the ``events``
        view when ``view`` (for users' SQL), else a subquery (one bind instead of two)."""

        def attempt(files):
            if not view:
                return fn(con, f"({events_sql(*files.files)})")
            if files != self._files:
                self._files = None
                con.execute(
                    f"CREATE OR REPLACE VIEW events AS {events_sql(*files.files)}"
                )  # opens them
                self._files = files
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
        """``attempt(plan)`` over the current plan (``merge.Plan``).

        Tried again when the files changed under it (each retry means another writer's
        journal was compacted, or a merge committed), and, when ``settle``, until they held
        still during a whole attempt. A file that made it fail is left out (one warning) and
        the attempt made again without it; a failure no single file explains is raised.
        """
        import duckdb

        for _ in range(100):
            files = self._listing()
            try:
                result = attempt(files)
            except BadFile as bad:
                if self._is_own(bad.path):  # this process's journal is never a stray
                    raise UsageError(
                        f"this kernel's journal {bad.path} cannot be read "
                        f"({bad.reason}) — check the drive"
                    ) from None
                self._leave_out(bad.path, bad.reason)
                continue
            except (duckdb.Error, UnicodeDecodeError) as err:  # a corrupt file's error text
                # may not even decode
                if self._listing() != files:
                    continue
                culprit = self._culprit(files, err)
                if culprit is None or self._is_own(culprit[0]):  # never a stray: the error is real
                    raise
                self._leave_out(*culprit)
                continue
            if not settle or self._listing() == files:
                return result
        raise UsageError("the history keeps changing under the query — try again")

    def _culprit(self, files: Plan, err: Exception) -> tuple[str, str] | None:
        """(path, reason) of the one file that makes reads fail with ``err``: the file the
        error names, else the first that fails when read alone (each file read fully)."""
        text = _one_line_of(err)
        live, parquet = files.files
        listed = [*live, *parquet]
        named = [p for p in listed if p in text]
        if len(named) == 1:
            return named[0], text
        con = self._connection()
        for path in listed:
            sql = events_sql(*(((path,), ()) if path in live else ((), (path,))))
            try:
                con.execute(f"SELECT {_READ_EVERY_COLUMN} FROM ({sql})").fetchall()
            except Exception as probe:  # noqa: BLE001 - whatever DuckDB makes of a broken file
                return path, _one_line_of(probe)
        return None

    def _is_own(self, path: str) -> bool:
        journal = self._journal
        return journal is not None and os.path.basename(path) == journal.path.name

    def _leave_out(self, path: str, reason: str) -> None:
        """Exclude ``path`` from every read until it changes (warned once)."""
        self._bad[path] = stat_key(path)
        self._verified.discard(path)
        report_file(self._root, path, reason)

    def _usable(self, path: str, parquet: bool) -> bool:
        """Whether a listed file is read: not left out (unless it changed since), and for a
        Parquet file, whole (its magic number at both ends: not cut short by a copy or sync).
        A footer that cannot be read is found when the file is read (``_guarded``)."""
        if path in self._bad:
            if stat_key(path) == self._bad[path]:
                return False
            del self._bad[path]  # changed: look again
        if not parquet or path in self._verified:
            return True
        reason = parquet_problem(path)
        if reason is None:
            self._verified.add(path)
            return True
        if reason != "gone" and os.path.lexists(path):
            self._leave_out(path, reason)
        return False

    def _connection(self):
        """The private in-memory DuckDB (no file, so no lock), locked down to the history folder."""
        if self._con is None or self._con_pid != os.getpid():
            import duckdb

            self._root = self._history.resolve()
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
                f"SET allowed_directories=[{quote(str(self._root) + os.sep)}]",
                "SET enable_progress_bar=false",  # long first loads must not print into the cell
                "SET enable_external_access=false",
                "SET lock_configuration=true",
            ):
                con.execute(setting)
            con.execute(f"CREATE VIEW events AS {EMPTY_RELATION}")
            self._con, self._con_pid, self._files, self._catalog = con, os.getpid(), (), None
            self._defined, self._views_made = None, False
        return self._con

    def _listing(self) -> Plan:
        """The plan of a read: usable journals and Parquet files (``_usable``), split into the
        tail and the current generation by ``merge.plan``."""
        folder = self._root / "parquet"
        live = list_files(self._root / "live", ".jsonl")
        parquet = list_files(folder, ".parquet")
        try:
            names = frozenset(os.listdir(folder))
        except OSError:
            names = frozenset()
        usable = tuple(p for p in parquet if self._usable(p, True))
        manifests = list_manifests(folder, self._manifests) if names else {}
        for number, gen in manifests.items():
            if gen is None:  # every file is then read as a small one: slower, never wrong
                report_file(
                    self._root,
                    str(folder / f"generation-{number}.json"),
                    "not a readable generation manifest; its files are read one by one",
                )
        return plan(
            tuple(p for p in live if self._usable(p, False)),
            usable,
            names,
            manifests,
            self._meta_or_none,
        )

    def _meta_or_none(self, path: str) -> dict | None:
        """The footer entry, or None if it cannot be read (the read of the file says why)."""
        try:
            return self._meta(path)
        except BadFile:
            return None

    def _sweep(self) -> None:
        me = self._journal.writer if self._journal is not None else None
        for path in list_files(self._root / "live", ".jsonl"):
            if Path(path).stem == me:
                continue
            fd = claim(Path(path))
            if fd is not None:
                try:
                    compact(Path(path), self._root)
                except Exception:
                    pass  # stays a journal; still readable
                finally:
                    os.close(fd)
        self._merge_in_background()

    def _merge_in_background(self) -> None:
        """Merge small files in a thread when enough wait (merge.py decides; one at a time)."""
        folder = self._root / "parquet"
        if self._merging is not None and self._merging.is_alive():
            return
        try:
            waiting = [
                entry.stat().st_size
                for entry in os.scandir(folder)
                if entry.name.endswith(".parquet") and not entry.name.startswith((".", "merged-"))
            ]
        except OSError:
            return
        if len(waiting) < MIN_FILES and sum(waiting) < MIN_BYTES:
            return
        self._merging = threading.Thread(
            target=_quiet_merge, args=(self._root,), daemon=True, name="jupyter-session-agent-merge"
        )
        self._merging.start()


def _quiet_merge(history: Path) -> None:
    try:
        merge(history)
    except Exception:  # noqa: BLE001 - a failed merge leaves every file as it was; reads go on
        pass


def define_views(
    con, files: Plan, shadowed: dict, *, public: bool = True, tail: bool = True
) -> None:
    """``_store.<kind>`` over this plan and the tail's tables (made by its first rows: an empty
    tail has none), then the public views over them when ``public``."""
    con.execute("CREATE SCHEMA IF NOT EXISTS _store")
    layouts = tuple(p.layout for p in files.base)
    for kind in (*KINDS, *DERIVED):
        body = _kind_sql(kind, files, shadowed, layouts, tail)
        con.execute(f"CREATE OR REPLACE VIEW _store.{kind} AS {body}")
    if public:
        for name, body in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")


def _kind_sql(kind: str, files: Plan, shadowed: dict, layouts: tuple, tail: bool) -> str:
    """``_store.<kind>``: the base files' rows of ``kind`` (sessions the tail holds left out of
    their file) and the tail's."""
    columns = select_list(kind)
    # a derived kind's rows have files of their own; the journal kinds share one per range
    where = "true" if kind in DERIVED else f"kind = '{kind}' AND deleted IS NOT TRUE"
    branches = []

    def path_of(part):
        return dict(part.derived).get(kind) if kind in DERIVED else part.path

    plain = [path_of(p) for p in files.base if p.path not in shadowed and path_of(p)]
    unify = ", union_by_name=true" if len(set(layouts)) > 1 else ""  # files of several versions
    if plain:
        listed = ", ".join(map(quote, plain))
        branches.append(f"SELECT {columns} FROM read_parquet([{listed}]{unify}) WHERE {where}")
    for part in files.base:
        keys = shadowed.get(part.path)
        if keys and path_of(part):
            left_out = ", ".join(map(quote, sorted(keys)))
            branches.append(
                f"SELECT {columns} FROM read_parquet([{quote(path_of(part))}]) "
                f"WHERE {where} AND {KEY} NOT IN ({left_out})"
            )
    if tail:
        branches.append(
            f"SELECT * FROM _tail.{kind}"
            if kind in DERIVED
            else f"SELECT {columns} FROM _tail.rows WHERE kind = '{kind}'"
        )
    if not branches:  # no file, no row yet: the columns alone
        empty = f"(SELECT * FROM ({typed(EMPTY_RELATION)}))"
        return (
            derived(kind, empty, empty, "false")
            if kind in DERIVED
            else f"SELECT {columns} FROM ({typed(EMPTY_RELATION)}) WHERE false"
        )
    return " UNION ALL BY NAME ".join(branches)


_EVENTS = re.compile(r"\bevents\b", re.IGNORECASE)
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


def _one_line_of(err: Exception) -> str:
    try:
        text = str(err)
    except Exception:  # noqa: BLE001
        text = ""
    return (text.strip().splitlines() or [type(err).__name__])[0]


def scratch_connection():
    """A private in-memory DuckDB for derived indexes (memory search): no file, no lock,
    offline settings. It lives here so that this package stays the only one importing duckdb."""
    import duckdb

    con = duckdb.connect()
    for setting in (
        "autoinstall_known_extensions",
        "autoload_known_extensions",
        "enable_progress_bar",
    ):
        con.execute(f"SET {setting}=false")
    return con
