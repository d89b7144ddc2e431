"""The tail: what is not in the merged generation yet, deduplicated and typed in memory.

The base (the current generation's large files, ``merge.py``) is read in place by the views.
Everything else — the live journals and the small Parquet files — is "the tail", kept by
:class:`Catalog` as tables of the store's in-memory DuckDB: ``_tail.rows`` (the newest
revision of every id, typed), ``_tail.tombstone`` and the derived ``_tail.step``,
``_tail.tool_call`` and ``_tail.session_totals`` (the last summed again, for the sessions new
rows touched, only when a query reads it: :meth:`Catalog.settle_totals`). It is refreshed
incrementally (a small file once, a journal from the byte offset already read up to its last
newline), so it costs what the tail holds, not what the history holds. duckdb is never imported here: the tables live in the caller's connection.

When a tail row belongs to a session that the base also holds (a session continued in a new
kernel, a tool fixed by another), the catalog copies that session's rows from the base file in
(found by min/max statistics on the session id) and the views leave the session out of that
file: a session is read whole from one place, so revisions, tombstones and the model of a
step's message are resolved among its rows. Those sessions are :attr:`Catalog.shadowed`.

One module: the tables, the incremental refresh that fills them and the merge of each batch
into them keep one invariant together (newest revision per id, tombstones respected, derived
rows rebuilt for what changed); no part of it is used alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .problems import BadFile
from .schema import (
    COLUMN_LIST,
    DERIVED,
    DERIVED_KEY,
    EMPTY_RELATION,
    KINDS,
    RAW_TYPES,
    SESSION_KEY,
    TYPED,
    derived,
    quote,
    read_json_sql,
    typed,
)

_RAW_SPEC = json.dumps(RAW_TYPES)
_STORED = ", ".join(list(RAW_TYPES) + list(TYPED))  # the columns of _tail.rows and of every file
_KINDS = "(" + ", ".join(f"'{k}'" for k in KINDS) + ")"
_PARTS = "(FROM _tail.rows WHERE kind = 'part')"
PER_PART = tuple(k for k in DERIVED if DERIVED_KEY[k] == "id")  # derived rows kept at once
_MESSAGES = "(FROM _tail.rows WHERE kind = 'message')"


def _newer(a: str, b: str, *, strict: bool = False) -> str:
    """SQL: row ``a`` is a newer revision than row ``b`` (rev, then writer, as the events order)."""
    than = ">" if strict else ">="
    return f"({a}.rev > {b}.rev OR ({a}.rev = {b}.rev AND {a}.writer {than} {b}.writer))"


def _typed_parquet(paths, typed_files: bool, src: int, where: str = "true") -> str:
    """The stored columns of the journal kinds' rows of Parquet files (typed, or typed here)."""
    files = "[" + ", ".join(quote(p) for p in paths) + "]"
    if typed_files:
        return (
            f"SELECT {_STORED}, {src} AS src FROM read_parquet({files}, union_by_name=true) "
            f"WHERE kind IN {_KINDS} AND ({where})"
        )
    raw = (
        f"SELECT {COLUMN_LIST}::JSON AS data FROM read_parquet({files}, union_by_name=true) "
        "WHERE id IS NOT NULL"
    )
    return f"SELECT *, {src} AS src FROM ({typed(raw)}) WHERE {where}"


class Catalog:
    """The tail's rows (see the module docstring).

    ``refresh()`` brings the tables up to date: each batch is deduplicated (newest ``rev``, then
    ``writer``), then replaces older revisions of the same ids. Tombstones are kept in
    ``_tail.tombstone`` so that an older revision arriving later (another writer's late flush,
    a journal compacted to Parquet) cannot bring a deleted id back. A file that vanishes
    without a successor (merged into a new generation, or the history deleted), or a new
    generation, starts the tables again: the tail is small.
    """

    WHOLE_FILE = 1 << 20  # a journal first seen this large is parsed by read_json, not line by line

    def __init__(self, con) -> None:
        self.loaded = False  # refreshed at least once
        self.created = False  # the tables exist (made by the first rows: an empty tail has none)
        self._reset()

    def _reset(self) -> None:
        self.parquet: dict[str, tuple] = {}  # small file → (inode, size, mtime) ingested
        self.journals: dict[str, tuple[int, int]] = {}  # path → (inode, byte offset ingested)
        self.base: tuple = ()  # the partitions the tail was built against
        self.probed: set[str] = set()  # session keys looked up in the base
        self.shadowed: dict[str, frozenset] = {}  # base file → its sessions the tail holds
        self.empty = True
        self.unsettled: set[str] = set()  # sessions whose totals wait for settle_totals()

    def _create(self, con) -> None:
        """Empty tables, and no file read yet."""
        self._tables(con)
        self._reset()

    def _tables(self, con) -> None:
        con.execute("CREATE SCHEMA IF NOT EXISTS _tail")
        for scratch in ("batch", "hit", "touched", "sessions"):
            con.execute(f"DROP TABLE IF EXISTS _tail.{scratch}")
        con.execute(f"CREATE OR REPLACE TABLE _tail.rows AS {typed(EMPTY_RELATION)}")
        con.execute(
            "CREATE OR REPLACE TABLE _tail.tombstone "
            "(id VARCHAR, rev BIGINT, writer VARCHAR, session_id VARCHAR)"
        )
        for kind in DERIVED:
            none = derived(kind, _PARTS, _MESSAGES, "false")
            con.execute(f"CREATE OR REPLACE TABLE _tail.{kind} AS {none}")
        self.created = True

    def refresh(self, con, plan, typed_file) -> bool:
        """Ingest what changed since the last refresh; True if anything was read.
        ``typed_file(path)``: whether a small file has the typed columns."""
        stems = {Path(p).stem for p in plan.small}
        if (
            (plan.base != self.base and not (self.empty and not self.probed))
            or any(p not in plan.small for p in self.parquet)
            or any(p not in plan.live and Path(p).stem not in stems for p in self.journals)
        ):
            self._create(con) if self.created else self._reset()  # a new generation, or files
            # vanished without a successor: start again
        self.base = plan.base
        self.loaded = True
        new_parquet: dict[str, tuple] = {}
        for path in plan.small:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # rewritten meanwhile; the caller lists again
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.parquet.get(path) != key:
                new_parquet[path] = key
        whole, chunks, offsets = self._read_journals(plan.live)
        sources, params = [], []
        typed_new = [p for p in new_parquet if typed_file(p)]
        legacy = [p for p in new_parquet if p not in typed_new]
        if typed_new:
            sources.append(_typed_parquet(typed_new, True, 1))
        if legacy:
            sources.append(_typed_parquet(legacy, False, 1))
        if whole:
            raw = f"SELECT {COLUMN_LIST} FROM {read_json_sql(whole)}"
            sources.append(f"SELECT *, 0 AS src FROM ({typed(raw)})")
        if chunks:
            params.append(b"".join(chunks).decode("utf-8", "replace"))
            raw = (
                f"SELECT unnest(TRY(from_json(line, {quote(_RAW_SPEC)}))) "
                "FROM unnest(string_split($1, chr(10))) t(line) WHERE line <> ''"
            )
            sources.append(f"SELECT *, 0 AS src FROM ({typed(raw)})")
        read = bool(sources)
        if sources:
            self._ingest(con, " UNION ALL BY NAME ".join(sources), params)
        self.parquet.update(new_parquet)
        self.journals.update(offsets)
        if plan.base and self.created:
            read |= self._probe(con, plan)
        return read

    def _read_journals(self, live):
        """(whole files, new complete lines, new offsets) of the journals."""
        whole, chunks, offsets = [], [], {}
        for path in live:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                continue  # compacted meanwhile: its Parquet file is in the next listing
            except OSError as err:
                raise BadFile(path, os.strerror(err.errno or 0)) from None
            try:
                st = os.fstat(fd)
                inode, offset = self.journals.get(path, (st.st_ino, 0))
                if inode != st.st_ino:
                    offset = 0
                if st.st_size <= offset:
                    offsets[path] = (st.st_ino, offset)
                elif offset == 0 and st.st_size >= self.WHOLE_FILE:
                    whole.append(path)  # read_json may see more lines: read again later, harmlessly
                    offsets[path] = (st.st_ino, _last_line_end(fd, st.st_size))
                else:
                    data = os.pread(fd, st.st_size - offset, offset)
                    end = data.rfind(b"\n") + 1
                    if end:
                        chunks.append(data[:end])
                    offsets[path] = (st.st_ino, offset + end)
            except OSError as err:  # e.g. EIO, or a folder renamed into its place meanwhile
                raise BadFile(path, os.strerror(err.errno or 0)) from None
            finally:
                os.close(fd)
        return whole, chunks, offsets

    def _probe(self, con, plan) -> bool:
        """Copy in the base rows of sessions the tail touches that the base also holds."""
        keys = {
            k
            for (k,) in con.execute(
                f"SELECT DISTINCT {SESSION_KEY} FROM _tail.rows UNION "
                f"SELECT DISTINCT {SESSION_KEY} FROM _tail.tombstone"
            ).fetchall()
        }
        new = keys - self.probed
        if not new:
            return False
        by_file: dict[str, list[str]] = {}
        for key in sorted(new):
            part = plan.partition(key)
            if part is not None:
                by_file.setdefault(part.path, []).append(key)
        self.probed |= new
        found = False
        for path, wanted in by_file.items():
            named = [k for k in wanted if k]
            where = " OR ".join(
                filter(
                    None,
                    [
                        f"session_id IN ({', '.join(quote(k) for k in named)})" if named else "",
                        "session_id IS NULL" if "" in wanted else "",
                    ],
                )
            )
            hits = {
                k
                for (k,) in con.execute(
                    f"SELECT DISTINCT {SESSION_KEY} FROM read_parquet([{quote(path)}]) WHERE {where}"
                ).fetchall()
            }
            if not hits:
                continue
            self._ingest(con, _typed_parquet([path], True, -1, where), [])
            self.shadowed[path] = self.shadowed.get(path, frozenset()) | frozenset(hits)
            found = True
        return found

    def _ingest(self, con, source: str, params: list) -> None:
        if not self.created:
            self._tables(con)
        con.execute("BEGIN")
        try:
            # several rows of an id in one batch: all but the newest lose; a Parquet file beats
            # the journal it was compacted from (its unfinished tools are settled)
            con.execute(
                f"CREATE TABLE _tail.batch AS SELECT * EXCLUDE (src) FROM ({source}) "
                "WHERE id IS NOT NULL QUALIFY row_number() OVER "
                "(PARTITION BY id ORDER BY rev DESC, writer DESC, src DESC) = 1",
                params,
            )
            # the sessions whose totals change (a tombstone's too): summed again when read
            self.unsettled.update(
                k
                for (k,) in con.execute(
                    "SELECT DISTINCT session_id FROM _tail.batch "
                    "WHERE kind IN ('message', 'part') AND session_id IS NOT NULL"
                ).fetchall()
            )
            self._apply(con, first=self.empty)
            con.execute("DROP TABLE _tail.batch")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.empty = False

    def settle_totals(self, con) -> None:
        """Sum again the totals (``_tail.session_totals``) of the sessions new rows touched since
        the last time: done when a query reads them, so a turn's writes and reads never pay
        for it."""
        if not self.unsettled or not self.created:
            return
        con.execute("BEGIN")
        try:
            con.execute("CREATE TABLE _tail.sessions (id VARCHAR)")
            con.execute(
                "INSERT INTO _tail.sessions SELECT unnest($1::VARCHAR[])", [sorted(self.unsettled)]
            )
            con.execute(
                "DELETE FROM _tail.session_totals WHERE session_id IN (SELECT id FROM _tail.sessions)"
            )
            touched = "session_id IN (SELECT id FROM _tail.sessions)"
            totals = derived("session_totals", _PARTS, _MESSAGES, touched)
            con.execute(f"INSERT INTO _tail.session_totals {totals}")
            con.execute("DROP TABLE _tail.sessions")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.unsettled.clear()

    @staticmethod
    def _apply(con, first: bool) -> None:
        """Merge ``_tail.batch`` (one newest row per id) into the tables.

        Joins go from the small batch to the bigger tables (hash tables are built on the
        batch side); the first load, into empty tables, skips them.
        """
        deleted, buried = con.execute(
            "SELECT count(*) FILTER (WHERE deleted), (SELECT count(*) FROM _tail.tombstone) "
            "FROM _tail.batch"
        ).fetchone()
        if deleted:
            con.execute(
                f"DELETE FROM _tail.tombstone t USING _tail.batch b "
                f"WHERE b.deleted AND t.id = b.id AND {_newer('b', 't')}"
            )
            con.execute(
                "INSERT INTO _tail.tombstone SELECT id, rev, writer, session_id "
                "FROM _tail.batch b WHERE b.deleted "
                "AND NOT EXISTS (SELECT 1 FROM _tail.tombstone t WHERE t.id = b.id)"
            )
        newer = _newer("t", "b", strict=True)
        buried = (
            "false"
            if not (deleted or buried)
            else (f"EXISTS (SELECT 1 FROM _tail.tombstone t WHERE t.id = b.id AND {newer})")
        )
        rows = f"SELECT * FROM _tail.batch b WHERE b.deleted IS NOT TRUE AND NOT {buried}"
        if first:
            con.execute(f"INSERT INTO _tail.rows BY NAME {rows}")
        else:
            # ids the table has already: replace the older revisions, keep the newer ones
            con.execute(
                f"CREATE OR REPLACE TABLE _tail.hit AS SELECT t.id, {_newer('b', 't')} "
                "AS newer FROM _tail.batch b JOIN _tail.rows t ON t.id = b.id"
            )
            con.execute("DELETE FROM _tail.rows WHERE id IN (SELECT id FROM _tail.hit WHERE newer)")
            con.execute(
                f"INSERT INTO _tail.rows BY NAME {rows} "
                "AND b.id NOT IN (SELECT id FROM _tail.hit WHERE NOT newer)"
            )
            con.execute("DROP TABLE _tail.hit")
        if first:
            for kind in PER_PART:
                con.execute(f"INSERT INTO _tail.{kind} {derived(kind, _PARTS, _MESSAGES)}")
        else:  # rebuild the rows of the batch's parts and its messages' parts
            types = ", ".join(f"'{t}'" for t in ("step-finish", "tool"))
            con.execute(
                "CREATE TABLE _tail.touched AS SELECT id FROM _tail.batch "
                "WHERE kind = 'part' UNION SELECT p.id FROM _tail.rows p WHERE "
                "p.kind = 'part' AND p.message_id IN (SELECT id FROM _tail.batch "
                f"WHERE kind = 'message') AND p.type IN ({types})"
            )
            for kind in PER_PART:
                con.execute(f"DELETE FROM _tail.{kind} WHERE id IN (SELECT id FROM _tail.touched)")
                touched = "p.id IN (SELECT id FROM _tail.touched)"
                con.execute(f"INSERT INTO _tail.{kind} {derived(kind, _PARTS, _MESSAGES, touched)}")
            con.execute("DROP TABLE _tail.touched")


def _last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline before ``size`` (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        at = block.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0
