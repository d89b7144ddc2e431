"""The Store: writing (this process's journal) and reading (sessions, messages) the history.

Its SQL side is :class:`~.query._Query`, its Parquet export :class:`~.export._Export`.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from ..core.errors import SessionNotFoundError, UsageError
from ..core.messages import Session, ToolPart, WithParts, now_ms
from .catalog import Catalog
from .codec import decode, decoders, encode, gc_paused, interrupted, kind_of, undecodable
from .export import ExportMixin
from .journal import Journal, Kind, next_rev, quote, writer_alive
from .merge import merge
from .problems import report_row
from .query import QueryMixin
from .watch import Watch

# --------------------------------------------------------------------------
# the store


class Store(QueryMixin, ExportMixin):
    """The history of every session, shared by all processes using ``data_dir``.

    Writing (``put``/``delete``/``flush``) touches only this process's journal
    and never opens DuckDB. Reading sees every row any process has flushed,
    newest revision per id; a read first writes this process's buffer (without
    fsync) so it sees its own puts. Thread-safe; cheap to construct (no I/O
    until used).
    """

    CACHE_SESSIONS = 16  # sessions whose decoded values are kept between messages() calls

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self._history = self.data_dir / "history"
        self._journal: Journal | None = None
        self._finalizer: weakref.finalize | None = None
        self._write_lock = threading.Lock()
        self._known: dict[
            str, tuple
        ] = {}  # id → (session, message, time_created) of ids this process wrote
        self._cache: dict[str, dict[str, tuple]] = {}  # session → id → (rev, time_created, value)
        self._read_lock = threading.RLock()
        self._con = None
        self._con_pid = 0
        self._root = self._history  # resolved when DuckDB first reads
        self._files: tuple | None = None
        self._catalog: Catalog | None = None  # created by the first sql() query
        self._next_sweep = 0.0
        self._bad: dict[str, tuple | None] = {}  # files left out of reads → their stat then
        self._verified: set[str] = set()  # Parquet files found whole
        self._watches: dict[str, Watch] = {}  # session → what other writers wrote (foreign())
        self._metas: dict[str, tuple] = {}  # Parquet file → (its stat, its footer entry)
        self._manifests: dict[str, tuple] = {}  # generation manifest → (its stat, its contents)
        self._defined = None  # the plan the _store.* views were defined for
        self._views_made = False
        self._merging = None  # the background merge thread, if any

    # ---- writing -----------------------------------------------------------

    def put(self, *values: Any, time_created: int | None = None) -> None:
        """Buffer a snapshot of each value; the last put of an id before flush() wins.

        ``time_created`` (ms) is the rows' creation time for ids this process has not
        written before (imports keep their source's times); default: now.
        """
        now = now_ms()
        for value in values:
            kind = kind_of(value)
            data = value.to_data()
            data.pop("id", None)
            session_id = value.id if kind == "session" else data.pop("sessionID", None)
            message_id = data.pop("messageID", None) if kind == "part" else None
            rev, created = self._buffer(
                kind, value.id, session_id, message_id, data, False, now, time_created
            )
            if kind in ("message", "part"):
                self._session_cache(session_id)[value.id] = (rev, created, value)

    def delete(self, kind: Kind, id: str) -> None:
        """Buffer a tombstone: the id disappears from every view and from messages()."""
        if kind not in ("session", "message", "part"):
            raise UsageError(f"cannot delete a {kind!r} — kind is 'session', 'message' or 'part'")
        known = self._known.get(id) or self._lookup(id)
        session_id, message_id = known[:2] if known else (id if kind == "session" else None, None)
        self._buffer(kind, id, session_id, message_id, {}, True, now_ms())
        self._cache.get(session_id, {}).pop(id, None)

    def flush(self, *, sync: bool = True) -> None:
        """Append everything buffered in one write; fsync when ``sync``.

        Raises a one-line ``HistoryWriteError`` when the journal cannot be written (disk full):
        the rows stay buffered (see :meth:`unsaved`) and the next successful flush writes them."""
        self._writer().append(sync)

    def unsaved(self) -> frozenset[str]:
        """Ids whose latest put could not be written yet (the last write failed), else empty."""
        journal = self._journal
        if journal is None or journal.error is None:
            return frozenset()
        with journal.lock:
            return frozenset(journal.buffer)

    def _buffer(
        self, kind, id, session_id, message_id, data, deleted, now, created=None
    ) -> tuple[int, int]:
        known = self._known.get(id)
        if known is None:  # first sight in this process: keep a creation time read from the history
            hit = self._cache.get(session_id, {}).get(id)
            known = (session_id, message_id, created or (hit[1] if hit else now))
            self._known[id] = known
        journal = self._writer()
        rev = next_rev()
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
        line = encode(row)
        with journal.lock:
            journal.buffer[id] = line
        return rev, known[2]

    def _writer(self) -> Journal:
        """This process's journal; a new one after close() or in a forked child."""
        with self._write_lock:
            if self._journal is None or self._journal.pid != os.getpid():
                if self._journal is not None:
                    self._journal.close()  # in a child: only drops the inherited fd
                self._journal = Journal(self._history)
                self._finalizer = weakref.finalize(self, self._journal.close)
            return self._journal

    def close(self) -> None:
        """Flush, compact this process's journal, release its lock and the connection; then
        merge the small files if enough wait (``merge.py``; never raises)."""
        with self._write_lock:
            finalizer, self._journal, self._finalizer = self._finalizer, None, None
        if finalizer is not None:
            finalizer()
            try:
                merge(self._history)
            except Exception:  # noqa: BLE001 - a failed merge leaves every file as it was
                pass
        with self._read_lock:
            if self._con is not None and self._con_pid == os.getpid():
                self._con.close()
            self._con, self._files, self._catalog = None, None, None

    # ---- reading -----------------------------------------------------------
    #
    # Two sources answer the same questions. The views (``_store.*``: the merged files
    # scanned in place plus the tail kept current by ``_Catalog.refresh``) are defined by the
    # first sql() query; until then, reads go straight to the files (``_events_sql``),
    # filtered to what they need (Parquet row groups of other sessions are skipped), so a
    # fresh store opens one session without first reading the journals of other sessions.

    def session(self, session_id: str) -> Session:
        """The session with this id, or with this unique id prefix."""
        rows = (
            self._read(
                "SELECT id, data::VARCHAR FROM session WHERE starts_with(id, $1) ORDER BY id = $1 DESC, id LIMIT 2",
                _from_files("session", "starts_with(id, $1)")
                + " ORDER BY id = $1 DESC, id LIMIT 2",
                [session_id],
            )
            if session_id
            else []
        )
        if not rows:
            raise SessionNotFoundError(f"no session {session_id!r} — `%agent sessions` lists them")
        if len(rows) > 1 and rows[0][0] != session_id:
            raise UsageError(f"{session_id!r} matches several sessions — give more of the id")
        session = self._session(*rows[0])
        if session is None:
            raise UsageError(
                f"session {rows[0][0]} cannot be read (a newer version or a hand "
                "edit wrote it) — open it with the version that wrote it, or start "
                "a new session"
            )
        return session

    def sessions(self, *, include_archived: bool = False) -> list[Session]:
        """All sessions, newest first (descending ids sort newest first)."""
        where = "true" if include_archived else "time_archived IS NULL"
        files_where = (
            "true" if include_archived else "TRY_CAST(data->'time'->>'archived' AS BIGINT) IS NULL"
        )
        rows = self._read(
            f"SELECT id, data::VARCHAR FROM session WHERE {where} ORDER BY id",
            f"{_from_files('session', 'true')} AND {files_where} ORDER BY id",
        )
        return [session for row in rows if (session := self._session(*row)) is not None]

    @staticmethod
    def _session(id: str, data: str) -> Session | None:
        """The session row decoded, or None (reported once) when this version cannot read it."""
        try:
            value = json.loads(data)
            return decode("session", {**value, "id": id})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            report_row("session", id, None, f"{type(err).__name__}: {err}")
            return None

    def messages(self, session_id: str) -> list[WithParts]:
        """The session's messages oldest first, each with its parts in id order.

        A pending/running tool whose writer has died comes back as an
        interrupted ``ToolError``, and that fix is written to the history.
        Decoded values are cached by revision, so repeated calls parse only
        what changed.
        """
        # Few columns and no ORDER BY on purpose: fetching is most of DuckDB's share of the time,
        # and Python sorts the ids faster than DuckDB sorts and hands over the rows.
        cache = self._session_cache(session_id)
        if not cache:  # cold: everything in one query
            rows = self._read(*_message_rows(data=True), [session_id])
        else:  # warm: the keys, then the data of what is not cached at that revision
            rows = self._read(*_message_rows(data=False), [session_id])
            stale = {
                row[0] for row in rows if (hit := cache.get(row[0])) is None or hit[0] != row[2]
            }
            fresh = (
                {
                    row[0]: row
                    for row in self._read(
                        *_message_rows(data=True, ids=True), [session_id, list(stale)]
                    )
                }
                if stale
                else {}
            )
            rows = [
                fresh.get(row[0], row) for row in rows if row[0] in fresh or row[0] not in stale
            ]
        rows.sort()
        infos: dict[str, Any] = {}
        parts: dict[str, list] = {}
        unfinished: list[ToolPart] = []
        with gc_paused():  # tens of thousands of acyclic objects: collection passes are pure cost
            if cache:
                values = [
                    hit[2] if (hit := cache.get(row[0])) is not None and hit[0] == row[2] else None
                    for row in rows
                ]
                stale = [i for i, value in enumerate(values) if value is None]
            else:
                values, stale = [None] * len(rows), range(len(rows))
            if stale:  # one json.loads for all of them is ~30% cheaper than one per row
                decoded = json.loads("[" + ",".join([rows[i][5] for i in stale]) + "]")
                user, assistant, part = decoders()
                for i, data in zip(stale, decoded):
                    row = rows[i]
                    id = row[0]
                    try:
                        data["id"] = id
                        data["sessionID"] = session_id
                        if row[1] is None:
                            value = (user if data.get("role") == "user" else assistant)(data)
                        else:
                            data["messageID"] = row[1]
                            value = part[data["type"]](data)
                    except Exception as err:  # noqa: BLE001 - one bad row must not hide the session
                        value = undecodable(row, data, session_id, err)  # UnknownPart / None
                    values[i] = value
                    if value is not None:  # a row left out is read (and left out) again next time
                        cache[id] = (row[2], row[3], value)
                del decoded  # freed now, before the collector sees it
            writers = {}
            for row, value in zip(rows, values):
                if value is None:
                    continue
                if row[1] is None:
                    infos[row[0]] = value
                else:
                    bucket = parts.get(row[1])
                    if bucket is None:
                        parts[row[1]] = [value]
                    else:
                        bucket.append(value)
                    if type(value) is ToolPart and value.state.status in ("pending", "running"):
                        unfinished.append(value)
                        writers[row[0]] = row[4]
            del rows, values
            unfinished = [p for p in unfinished if p.message_id in infos]  # orphans drop out
            empty = ()
            history = [WithParts(info, tuple(parts.get(id, empty))) for id, info in infos.items()]
        fixed = self._interrupt(unfinished, writers) if unfinished else None
        if fixed:
            history = [
                WithParts(m.info, tuple(fixed.get(p.id, p) for p in m.parts)) for m in history
            ]
        return history

    def _interrupt(
        self, unfinished: list[ToolPart], writers: dict[str, str]
    ) -> dict[str, ToolPart]:
        """Fix (and persist) tool parts left pending/running by writers that are gone."""
        me = self._journal.writer if self._journal is not None else None
        alive: dict[str, bool] = {}
        fixed = {}
        for part in unfinished:
            writer = writers.get(part.id)
            if writer not in alive:
                alive[writer] = (
                    writer == me or writer is None or writer_alive(self._journal_path(writer))
                )
            if not alive[writer]:
                fixed[part.id] = interrupted(part)
        if fixed:
            self.put(*fixed.values())
            self.flush()
        return fixed

    # ---- other writers of a session (two kernels continuing it) ---------------

    def foreign(self, session_id: str) -> tuple:
        """A mark that moves whenever another process writes or deletes a row of the session.

        A kernel continuing the session compares it before each turn and reloads the history
        when it moved (``AgentSession``). Cheap: other writers' journals are read only where
        they grew, by text search, and DuckDB only counts Parquet files new since the first
        call (``watch.py``); this process's own journal is never read.
        """
        with self._read_lock:
            watch = self._watches.pop(session_id, None) or Watch(session_id)
            self._watches[session_id] = watch  # most recently used last
            while len(self._watches) > self.CACHE_SESSIONS:
                del self._watches[next(iter(self._watches))]
            own = self._journal.writer if self._journal is not None else None
            return watch.mark(
                *self._listing().files, own, lambda path: self._rows_in(path, session_id)
            )

    def _rows_in(self, path: str, session_id: str) -> int:
        """The session's rows in one Parquet file (0 if it cannot be read: reads leave it out)."""
        import duckdb

        con = self._prepare()
        try:
            return con.execute(
                f"SELECT count(*) FROM read_parquet([{quote(path)}]) WHERE session_id = $1",
                [session_id],
            ).fetchone()[0]
        except duckdb.Error:
            return 0

    def live_writer(self, id: str) -> str | None:
        """The other process that wrote the newest revision of ``id``, if it still runs."""
        rows = self._read(
            "SELECT writer FROM (SELECT writer, rev FROM _store.message WHERE id = $1 UNION ALL "
            "SELECT writer, rev FROM _store.part WHERE id = $1) ORDER BY rev DESC LIMIT 1",
            "SELECT writer FROM __events__ WHERE id = $1 ORDER BY rev DESC LIMIT 1",
            [id],
        )
        writer = rows[0][0] if rows else None
        me = self._journal.writer if self._journal is not None else None
        if writer is None or writer == me or not writer_alive(self._journal_path(writer)):
            return None
        return writer

    def _journal_path(self, writer: str) -> Path:
        """The live journal of ``writer`` (a name read from a row: never a path of its own)."""
        return self._root / "live" / f"{os.path.basename(writer) or '_'}.jsonl"

    def _session_cache(self, session_id: str) -> dict:
        cache = self._cache.pop(session_id, None) or {}
        self._cache[session_id] = cache  # most recently used last
        while len(self._cache) > self.CACHE_SESSIONS:
            del self._cache[next(iter(self._cache))]
        return cache

    def _lookup(self, id: str):
        """(session_id, message_id, time_created) of the newest revision of ``id``, tombstones included."""
        with self._read_lock:
            rows = self._over_files(
                self._prepare(),
                lambda con, events: con.execute(
                    f"SELECT session_id, message_id, time_created FROM {events} WHERE id = $1 ORDER BY rev DESC LIMIT 1",
                    [id],
                ).fetchall(),
            )
        return rows[0] if rows else None


_LATEST_IN_FILES = (
    "(FROM __events__ WHERE kind = '{kind}' AND {where} QUALIFY row_number() OVER "
    "(PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE"
)


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


def _from_files(kind: str, where: str, columns: str = "id, data::VARCHAR") -> str:
    """SELECT ``columns`` of the newest revision per id of ``kind`` rows matching ``where``, from the files."""
    return f"SELECT {columns} FROM {_LATEST_IN_FILES.format(kind=kind, where=where)}"


def _message_rows(data: bool, ids: bool = False) -> tuple[str, str]:
    """(views SQL, files SQL) for a session's messages and parts ($1): ``id, message_id,
    rev, time_created, writer`` [``, data``], only the ids in list $2 when ``ids``."""
    columns = "id, message_id, rev, time_created, writer" + (
        ", coalesce(data::VARCHAR, '{}')" if data else ""
    )
    where = "session_id = $1" + (" AND list_contains($2, id)" if ids else "")
    tables = (
        f"SELECT {columns} FROM _store.message WHERE {where} "
        f"UNION ALL SELECT {columns} FROM _store.part WHERE {where}"
    )
    files = (
        f"SELECT {columns} FROM (FROM __events__ WHERE {where} AND kind IN ('message', 'part') QUALIFY "
        "row_number() OVER (PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE"
    )
    return tables, files
