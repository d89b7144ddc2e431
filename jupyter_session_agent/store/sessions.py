"""Sessions and their messages read back from the history as values, decoded once per revision.

One module: sessions, their pages and their messages are read by the same two queries (the
views, or the files before the views exist) and decoded by the same cache.

Two sources answer the same questions (``Query.rows``). The views (``_store.*``: the merged
files scanned in place plus the tail) are defined by the first ``sql()`` query; until then,
reads go straight to the files, filtered to what they need (Parquet row groups of other
sessions are skipped), so a fresh store opens one session without first reading the journals
of other sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import SessionNotFoundError, UsageError
from ..core.messages import Session, ToolPart, WithParts
from .codec import decode, decoders, gc_paused, interrupted, undecodable
from .journal import writer_alive
from .problems import report_row
from .query import Query

CACHE_SESSIONS = 16  # sessions whose decoded values are kept between messages() calls


class SessionReader:
    """``session``/``sessions``/``messages`` over a :class:`~.query.Query`.

    Decoded message and part values are kept by revision for the :data:`CACHE_SESSIONS`
    sessions used last, so repeated ``messages()`` calls decode only what changed; the store
    tells it about what it writes (:meth:`remember`, :meth:`forget`).
    """

    def __init__(self, query: Query) -> None:
        self._query = query
        self._cache: dict[
            str | None, dict[str, tuple]
        ] = {}  # session → id → (rev, time_created, value)

    # ---- the cache -----------------------------------------------------------

    def remember(self, session_id: str | None, id: str, rev: int, created: int, value: Any) -> None:
        """A value just written at ``rev`` (its row's ``time_created`` is ``created``)."""
        self._session_cache(session_id)[id] = (rev, created, value)

    def forget(self, session_id: str | None, id: str) -> None:
        """An id just deleted."""
        self._cache.get(session_id, {}).pop(id, None)

    def created(self, session_id: str | None, id: str) -> int | None:
        """The creation time of an id read from the history, if it is cached."""
        hit = self._cache.get(session_id, {}).get(id)
        return hit[1] if hit else None

    # ---- reading ---------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The session with this id, or with this unique id prefix."""
        rows = (
            self._query.rows(
                "SELECT id, data::VARCHAR FROM session WHERE starts_with(id, $1) "
                "ORDER BY id = $1 DESC, id LIMIT 2",
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
        session = _session(*rows[0])
        if session is None:
            raise UsageError(
                f"session {rows[0][0]} cannot be read (a newer version or a hand "
                "edit wrote it) — open it with the version that wrote it, or start "
                "a new session"
            )
        return session

    def sessions(
        self, *, include_archived: bool = False, limit: int | None = None, offset: int = 0
    ) -> list[Session]:
        """All sessions, newest first (descending ids sort newest first); ``limit``/``offset``:
        one page of them (only that page is read and decoded)."""
        page = f" LIMIT {int(limit)} OFFSET {max(0, int(offset))}" if limit else ""
        where, files_where = _live(include_archived)
        rows = self._query.rows(
            f"SELECT id, data::VARCHAR FROM session WHERE {where} ORDER BY id{page}",
            f"{_from_files('session', 'true')} AND {files_where} ORDER BY id{page}",
        )
        return [session for row in rows if (session := _session(*row)) is not None]

    def session_count(self, *, include_archived: bool = False) -> int:
        """How many sessions :meth:`sessions` lists."""
        where, files_where = _live(include_archived)
        rows = self._query.rows(
            f"SELECT count(*) FROM session WHERE {where}",
            f"SELECT count(*) FROM ({_from_files('session', 'true')} AND {files_where})",
        )
        return int(rows[0][0]) if rows else 0

    def messages(
        self, session_id: str, gone: Callable[[str | None], bool]
    ) -> tuple[list[WithParts], list[ToolPart]]:
        """The session's messages oldest first, each with its parts in id order, and the tool
        parts among them that were pending/running when their writer died (``gone(writer)``),
        already shown as interrupted ``ToolError``\\ s: the caller writes those to the history.
        """
        # Few columns and no ORDER BY on purpose: fetching is most of DuckDB's share of the time,
        # and Python sorts the ids faster than DuckDB sorts and hands over the rows.
        cache = self._session_cache(session_id)
        rows = self._rows(session_id, cache)
        infos: dict[str, Any] = {}
        parts: dict[str, list] = {}
        unfinished: list[ToolPart] = []
        stale: Sequence[int]
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
        if not unfinished:
            return history, []
        fixed = _interrupted(unfinished, writers, gone)
        if fixed:
            history = [
                WithParts(m.info, tuple(fixed.get(p.id, p) for p in m.parts)) for m in history
            ]
        return history, list(fixed.values())

    def live_writer(self, id: str, own: str | None) -> str | None:
        """The other process that wrote the newest revision of ``id``, if it still runs
        (``own``: this process's writer)."""
        rows = self._query.rows(
            "SELECT writer FROM (SELECT writer, rev FROM _store.message WHERE id = $1 UNION ALL "
            "SELECT writer, rev FROM _store.part WHERE id = $1) ORDER BY rev DESC LIMIT 1",
            "SELECT writer FROM __events__ WHERE id = $1 ORDER BY rev DESC LIMIT 1",
            [id],
        )
        writer = rows[0][0] if rows else None
        if writer is None or writer == own or not self.running(writer):
            return None
        return writer

    def running(self, writer: str) -> bool:
        """Whether another process's ``writer`` still runs (it holds its journal's lock)."""
        return writer_alive(self._query.journal_of(writer))

    def newest(self, id: str) -> tuple | None:
        """(session_id, message_id, time_created) of the newest revision of ``id``, tombstones
        included."""
        rows = self._query.file_rows(
            "SELECT session_id, message_id, time_created FROM __events__ WHERE id = $1 "
            "ORDER BY rev DESC LIMIT 1",
            [id],
        )
        return rows[0] if rows else None

    # ---- inside --------------------------------------------------------------

    def _rows(self, session_id: str, cache: dict) -> list[tuple]:
        """The session's message and part rows (``_message_rows``), sorted by id: all of them
        with their data when nothing is cached, else the data of what changed only."""
        query = self._query
        if not cache:  # cold: everything in one query
            rows = query.rows(*_message_rows(data=True), [session_id])
        else:  # warm: the keys, then the data of what is not cached at that revision
            rows = query.rows(*_message_rows(data=False), [session_id])
            stale = {
                row[0] for row in rows if (hit := cache.get(row[0])) is None or hit[0] != row[2]
            }
            fresh = (
                {
                    row[0]: row
                    for row in query.rows(
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
        return rows

    def _session_cache(self, session_id: str | None) -> dict:
        cache = self._cache.pop(session_id, None) or {}
        self._cache[session_id] = cache  # most recently used last
        while len(self._cache) > CACHE_SESSIONS:
            del self._cache[next(iter(self._cache))]
        return cache


def _interrupted(
    unfinished: list[ToolPart], writers: dict[str, str], gone: Callable[[str | None], bool]
) -> dict[str, ToolPart]:
    """id → the interrupted form of each unfinished tool part whose writer is gone."""
    verdicts: dict[str | None, bool] = {}
    fixed = {}
    for part in unfinished:
        writer = writers.get(part.id)
        if writer not in verdicts:
            verdicts[writer] = gone(writer)
        if verdicts[writer]:
            fixed[part.id] = interrupted(part)
    return fixed


def _session(id: str, data: str) -> Session | None:
    """The session row decoded, or None (reported once) when this version cannot read it."""
    try:
        value = json.loads(data)
        return decode("session", {**value, "id": id})
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        report_row("session", id, None, f"{type(err).__name__}: {err}")
        return None


_LATEST_IN_FILES = (
    "(FROM __events__ WHERE kind = '{kind}' AND {where} QUALIFY row_number() OVER "
    "(PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) WHERE deleted IS NOT TRUE"
)


def _live(include_archived: bool) -> tuple[str, str]:
    """(views WHERE, files WHERE) of the sessions a listing shows."""
    if include_archived:
        return "true", "true"
    return "time_archived IS NULL", "TRY_CAST(data->'time'->>'archived' AS BIGINT) IS NULL"


def _from_files(kind: str, where: str, columns: str = "id, data::VARCHAR") -> str:
    """SELECT ``columns`` of the newest revision per id of ``kind`` rows matching ``where``,
    from the files."""
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
        f"SELECT {columns} FROM (FROM __events__ WHERE {where} AND kind IN ('message', 'part') "
        "QUALIFY row_number() OVER (PARTITION BY id ORDER BY rev DESC, writer DESC) = 1) "
        "WHERE deleted IS NOT TRUE"
    )
    return tables, files
