"""The catalog: every file's rows, newest revision per id, typed, as ``_store.<kind>`` tables
of the in-memory DuckDB, refreshed incrementally (Parquet files once, journals from the byte
offset already read). duckdb is never imported here: the tables live in the caller's connection.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .journal import _EMPTY, _NAMES, _quote, _read_json

# --------------------------------------------------------------------------
# the catalog's tables (_store.<kind>)

KINDS = ("session", "message", "part", "event")  # journal kinds; the catalog keeps one table for each
_BASE = ("id", "session_id", "message_id", "rev", "writer", "time_created", "time_updated", "data")
_RAW_SPEC = json.dumps({"kind": "VARCHAR", "id": "VARCHAR", "session_id": "VARCHAR", "message_id": "VARCHAR",
                        "rev": "BIGINT", "writer": "VARCHAR", "deleted": "BOOLEAN", "time_created": "BIGINT",
                        "time_updated": "BIGINT", "data": "JSON"})

_I, _S, _F, _B = "BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN"
_TOKENS = {"input": _I, "output": _I, "reasoning": _I, "cache": {"read": _I, "write": _I}, "total": _I,
           "estimated": _B}
_TOKEN_COLUMNS = (("input_tokens", "j.tokens.input"), ("output_tokens", "j.tokens.output"),
                  ("reasoning_tokens", "j.tokens.reasoning"), ("cache_read_tokens", "j.tokens.cache.read"),
                  ("cache_write_tokens", "j.tokens.cache.write"), ("total_tokens", "j.tokens.total"),
                  ("tokens_estimated", "j.tokens.estimated"))

# Typed columns of each kind, computed once per row when the catalog ingests it:
# ``from_json(data, spec)`` parses the JSON once into ``j`` (a value of the wrong type reads
# as NULL), and each column is an expression over ``j`` and the row. A typed column may
# replace a base column of the same name (a session's times come from its data).
_TYPED: dict[str, tuple[dict, tuple[tuple[str, str], ...]]] = {
    "session": (
        {"projectID": _S, "workspaceID": _S, "parentID": _S, "slug": _S, "directory": _S, "title": _S,
         "version": _S, "time": {"created": _I, "updated": _I, "archived": _I},
         "titleUsage": {"model": _S, "cost": _F, "time": _I, "tokens": _TOKENS}},
        (("project_id", "j.projectID"), ("workspace_id", "j.workspaceID"), ("parent_id", "j.parentID"),
         ("slug", "j.slug"), ("directory", "j.directory"), ("title", "j.title"), ("version", "j.version"),
         ("time_created", "j.time.created"), ("time_updated", "j.time.updated"),
         ("time_archived", "j.time.archived"), ("title_model", "j.titleUsage.model"),
         ("title_cost", "j.titleUsage.cost"), ("title_time", "j.titleUsage.time"),
         *((f"title_{name}", f"j.titleUsage.{path[2:]}") for name, path in _TOKEN_COLUMNS))),
    "message": (
        {"role": _S, "parentID": _S, "agent": _S, "mode": _S, "providerID": _S, "modelID": _S,
         "model": {"providerID": _S, "modelID": _S}, "cost": _F, "finish": _S, "summary": "JSON",
         "error": {"name": _S, "data": {"message": _S}}, "time": {"completed": _I}, "tokens": _TOKENS},
        (("role", "j.role"), ("parent_id", "j.parentID"), ("agent", "j.agent"), ("mode", "j.mode"),
         ("provider_id", "coalesce(j.providerID, j.model.providerID)"),
         ("model_id", "coalesce(j.modelID, j.model.modelID)"), ("cost", "j.cost"), ("finish", "j.finish"),
         ("summary", "CASE WHEN json_type(j.summary) = 'BOOLEAN' THEN j.summary::BOOLEAN END"),
         ("error_name", "j.error.name"), ("error_message", "j.error.data.message"),
         ("time_completed", "j.time.completed"), *_TOKEN_COLUMNS)),
    "part": (
        {"type": _S, "tool": _S, "callID": _S, "text": _S, "synthetic": _B, "reason": _S, "cost": _F, "auto": _B,
         "overflow": _B,
         "attempt": _I, "time": {"start": _I, "end": _I}, "tokens": _TOKENS,
         "metadata": {"latencyMs": _F, "firstTokenMs": _F, "attempts": _I},
         "state": {"status": _S, "title": _S, "output": _S, "error": _S,
                   "time": {"start": _I, "end": _I, "compacted": _I}, "metadata": {"interrupted": _B}}},
        (("type", "j.type"), ("tool", "j.tool"), ("call_id", "j.callID"), ("status", "j.state.status"),
         ("title", "j.state.title"), ("text_length", "length(j.text)"),
         ("output_length", "length(j.state.output)"), ("time_start", "coalesce(j.state.time.start, j.time.start)"),
         ("time_end", "coalesce(j.state.time.\"end\", j.time.\"end\")"), ("compacted_at", "j.state.time.compacted"),
         ("reason", "j.reason"), ("cost", "j.cost"), *_TOKEN_COLUMNS,
         ("latency_ms", "round(j.metadata.latencyMs)::BIGINT"),
         ("first_token_ms", "round(j.metadata.firstTokenMs)::BIGINT"), ("attempts", "j.metadata.attempts"),
         ("error", "j.state.error"), ("interrupted", "coalesce(j.state.metadata.interrupted, false)"),
         ("auto", "j.auto"), ("overflow", "j.overflow"), ("attempt", "j.attempt"), ("synthetic", "j.synthetic"))),
}


# Tables derived from parts, kept with them (the rows of ids a batch touched are rebuilt): one
# row per LLM call and per tool call, with the model of their message copied in, so the `step`
# and `tool_call` views are plain table scans. (part type, SELECT over part p and message m).
_PART_AND_MESSAGE = "FROM _store.part p LEFT JOIN _store.message m ON m.id = p.message_id"
_DERIVED: dict[str, tuple[str, str]] = {
    "step": ("step-finish", f"""SELECT p.session_id, p.message_id, p.id, m.provider_id AS provider,
        m.model_id AS model, m.agent, coalesce(m.summary, false) AS summary, p.input_tokens, p.output_tokens,
        p.reasoning_tokens, p.cache_read_tokens, p.cache_write_tokens,
        p.input_tokens + p.cache_read_tokens + p.cache_write_tokens AS prompt_tokens,
        coalesce(p.total_tokens, p.input_tokens + p.output_tokens + p.cache_read_tokens + p.cache_write_tokens)
            AS context_tokens,
        p.cost, coalesce(p.tokens_estimated, false) AS estimated, p.latency_ms, p.first_token_ms, p.attempts,
        p.reason AS finish_reason, make_timestamp(p.time_created * 1000) AS time {_PART_AND_MESSAGE}"""),
    "tool_call": ("tool", f"""SELECT p.session_id, p.message_id, p.id, p.call_id, p.tool,
        CASE WHEN p.interrupted THEN 'interrupted' ELSE p.status END AS status, p.error,
        p.time_end - p.time_start AS duration_ms, p.output_length, p.compacted_at IS NOT NULL AS pruned,
        make_timestamp(p.compacted_at * 1000) AS pruned_at, m.provider_id AS provider, m.model_id AS model,
        make_timestamp(coalesce(p.time_start, p.time_created) * 1000) AS time {_PART_AND_MESSAGE}"""),
}


def _table_columns(kind: str) -> list[str]:
    typed = [name for name, _ in _TYPED.get(kind, ({}, ()))[1]]
    return [c for c in _BASE if c not in typed] + typed


# --------------------------------------------------------------------------
# the catalog: every file's rows, newest revision per id, typed, in DuckDB tables


def _newer(a: str, b: str, *, strict: bool = False) -> str:
    """SQL: row ``a`` is a newer revision than row ``b`` (rev, then writer, as the events order)."""
    return f"({a}.rev > {b}.rev OR ({a}.rev = {b}.rev AND {a}.writer {'>' if strict else '>='} {b}.writer))"


class _Catalog:
    """The deduplicated, typed rows of the history as ``_store.<kind>`` tables in one DuckDB.

    ``refresh()`` brings them up to date incrementally, so the public views are plain table
    scans: a Parquet file is read once (they are written whole and never change); a journal
    is read from the byte offset reached last time up to its last newline (a torn or
    half-written tail waits for the rest of its line). Each batch is deduplicated (newest
    ``rev``, then ``writer``), then replaces older revisions of the same ids. Tombstones are
    kept in ``_store.tombstone`` so that an older revision arriving later (another writer's
    late flush, a journal compacted to Parquet) cannot bring a deleted id back. A file that
    vanishes without a Parquet successor means the history was deleted or rewritten: the
    next refresh rebuilds everything.
    """

    WHOLE_FILE = 1 << 20  # a journal first seen this large is parsed by read_json, not line by line

    def __init__(self, con) -> None:
        self.parquet: dict[str, tuple] = {}  # path → (inode, size, mtime) ingested
        self.journals: dict[str, tuple[int, int]] = {}  # path → (inode, byte offset ingested)
        self.loaded = False  # refreshed at least once (until then the tables are empty)
        self._create(con)

    def _create(self, con) -> None:
        """Empty tables (the views bind to them), and no file read yet."""
        con.execute("CREATE SCHEMA IF NOT EXISTS _store")
        con.execute("DROP VIEW IF EXISTS _store.batch")
        for scratch in ("rows", "loser", "hit", "touched"):
            con.execute(f"DROP TABLE IF EXISTS _store.{scratch}")
        for kind in KINDS:
            con.execute(f"CREATE OR REPLACE TABLE _store.{kind} AS {_empty_table(kind)}")
        con.execute("CREATE OR REPLACE TABLE _store.tombstone (id VARCHAR, rev BIGINT, writer VARCHAR)")
        for name, (_, select) in _DERIVED.items():
            con.execute(f"CREATE OR REPLACE TABLE _store.{name} AS {select} WHERE false")
        self.parquet, self.journals, self.loaded, self.empty = {}, {}, False, True

    def refresh(self, con, live: tuple[str, ...], parquet: tuple[str, ...]) -> bool:
        """Ingest what changed since the last refresh; True if anything was read."""
        stems, listed = {Path(p).stem for p in parquet}, {*live, *parquet}
        if any(p not in listed for p in self.parquet) or any(
                p not in listed and Path(p).stem not in stems for p in self.journals):
            self._create(con)  # files vanished without a successor: start again
        self.loaded = True
        new_parquet: dict[str, tuple] = {}
        for path in parquet:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # rewritten meanwhile; the caller lists again
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.parquet.get(path) != key:
                new_parquet[path] = key
        whole, chunks, offsets = [], [], {}
        for path in live:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # compacted meanwhile: its Parquet file is in the next listing
            try:
                st = os.fstat(fd)
                inode, offset = self.journals.get(path, (st.st_ino, 0))
                if inode != st.st_ino:
                    offset = 0
                if st.st_size <= offset:
                    offsets[path] = (st.st_ino, offset)
                elif offset == 0 and st.st_size >= self.WHOLE_FILE:
                    whole.append(path)  # read_json may see more lines; they are read again later, harmlessly
                    offsets[path] = (st.st_ino, _last_line_end(fd, st.st_size))
                else:
                    data = os.pread(fd, st.st_size - offset, offset)
                    end = data.rfind(b"\n") + 1
                    if end:
                        chunks.append(data[:end])
                    offsets[path] = (st.st_ino, offset + end)
            finally:
                os.close(fd)
        if not (new_parquet or whole or chunks):
            self.journals.update(offsets)
            return False
        sources, params = [], []
        if new_parquet:
            files = ", ".join(_quote(p) for p in new_parquet)
            sources.append(f"SELECT {_NAMES}::JSON AS data, 1 AS src FROM read_parquet([{files}], union_by_name=true)")
        if whole:
            sources.append(f"SELECT {_NAMES}, 0 AS src FROM {_read_json(whole)}")
        if chunks:
            params.append(b"".join(chunks).decode("utf-8", "replace"))
            sources.append(f"SELECT unnest(TRY(from_json(line, {_quote(_RAW_SPEC)}))), 0 AS src "
                           "FROM unnest(string_split($1, chr(10))) t(line) WHERE line <> ''")
        con.execute("BEGIN")
        try:
            con.execute(f"CREATE TABLE _store.rows AS SELECT * FROM ({' UNION ALL '.join(sources)}) "
                        "WHERE id IS NOT NULL", params)
            # several rows of an id in one batch (most batches have none): all but the newest lose; a
            # Parquet file beats the journal it was compacted from (its unfinished tools are settled)
            con.execute("CREATE TABLE _store.loser AS SELECT rowid AS row FROM _store.rows WHERE id IN "
                        "(SELECT id FROM _store.rows GROUP BY id HAVING count(*) > 1) QUALIFY row_number() OVER "
                        "(PARTITION BY id ORDER BY rev DESC, writer DESC, src DESC) > 1")
            lost = con.execute("SELECT count(*) FROM _store.loser").fetchone()[0]
            con.execute("CREATE VIEW _store.batch AS SELECT * FROM _store.rows"
                        + (" WHERE rowid NOT IN (SELECT row FROM _store.loser)" if lost else ""))
            self._apply(con, first=self.empty)
            for scratch in ("VIEW _store.batch", "TABLE _store.rows", "TABLE _store.loser"):
                con.execute(f"DROP {scratch}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.parquet.update(new_parquet)
        self.journals.update(offsets)
        self.empty = False
        return True

    @staticmethod
    def _apply(con, first: bool) -> None:
        """Merge ``_store.batch`` (one newest row per id) into the tables.

        Joins go from the small batch to the big tables (hash tables are built on the
        batch side); the first load, into empty tables, skips them.
        """
        kinds = {kind for (kind,) in con.execute("SELECT DISTINCT kind FROM _store.batch").fetchall()}
        if con.execute("SELECT count(*) FROM _store.batch WHERE deleted").fetchone()[0]:
            con.execute(f"DELETE FROM _store.tombstone t USING _store.batch b "
                        f"WHERE b.deleted AND t.id = b.id AND {_newer('b', 't')}")
            con.execute("INSERT INTO _store.tombstone SELECT id, rev, writer FROM _store.batch b WHERE b.deleted "
                        "AND NOT EXISTS (SELECT 1 FROM _store.tombstone t WHERE t.id = b.id)")
        buried = "false"
        if con.execute("SELECT count(*) FROM _store.tombstone").fetchone()[0]:
            buried = f"EXISTS (SELECT 1 FROM _store.tombstone t WHERE t.id = b.id AND {_newer('t', 'b', strict=True)})"
        for kind in KINDS:
            if kind not in kinds:
                continue
            table = f"_store.{kind}"
            spec = _TYPED.get(kind, ({}, ()))[0]
            parsed = f", from_json(b.data, {_quote(json.dumps(spec))}) j" if spec else ""
            rows = f"SELECT b.*{parsed} FROM _store.batch b WHERE b.kind = '{kind}' AND b.deleted IS NOT TRUE"
            if first:
                con.execute(f"INSERT INTO {table} SELECT {_ingest_columns(kind)} FROM ({rows} AND NOT {buried}) b")
                continue
            # ids the table has already: replace the older revisions, keep the newer ones
            con.execute(f"CREATE OR REPLACE TABLE _store.hit AS SELECT t.id, {_newer('b', 't')} AS newer "
                        f"FROM _store.batch b JOIN {table} t ON t.id = b.id WHERE b.kind = '{kind}'")
            con.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM _store.hit WHERE newer)")
            con.execute(f"INSERT INTO {table} SELECT {_ingest_columns(kind)} FROM ({rows} AND NOT {buried} "
                        "AND b.id NOT IN (SELECT id FROM _store.hit WHERE NOT newer)) b")
        con.execute("DROP TABLE IF EXISTS _store.hit")
        if first:
            for name, (part_type, select) in _DERIVED.items():
                con.execute(f"INSERT INTO _store.{name} {select} WHERE p.type = '{part_type}'")
        elif kinds & {"part", "message"}:  # rebuild the rows of the batch's parts and its messages' parts
            types = ", ".join(f"'{t}'" for t, _ in _DERIVED.values())
            con.execute("CREATE TABLE _store.touched AS SELECT id FROM _store.batch WHERE kind = 'part' "
                        "UNION SELECT p.id FROM _store.part p WHERE p.message_id IN "
                        f"(SELECT id FROM _store.batch WHERE kind = 'message') AND p.type IN ({types})")
            for name, (part_type, select) in _DERIVED.items():
                con.execute(f"DELETE FROM _store.{name} WHERE id IN (SELECT id FROM _store.touched)")
                con.execute(f"INSERT INTO _store.{name} {select} WHERE p.type = '{part_type}' "
                            "AND p.id IN (SELECT id FROM _store.touched)")
            con.execute("DROP TABLE _store.touched")


def _empty_table(kind: str) -> str:
    """A query for no rows, with the columns (and types) of ``_store.<kind>``."""
    spec = _TYPED.get(kind, ({}, ()))[0]
    probe = f"SELECT *, from_json(data, {_quote(json.dumps(spec))}) j FROM ({_EMPTY})" if spec else _EMPTY
    return f"SELECT {_ingest_columns(kind)} FROM ({probe}) b"


def _ingest_columns(kind: str) -> str:
    """The SELECT list that turns batch rows ``b`` (with ``j`` parsed) into a table's columns."""
    typed = dict(_TYPED.get(kind, ({}, ()))[1])
    return ", ".join(f"{typed[c]} AS {c}" if c in typed else f"b.{c}" for c in _table_columns(kind))


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
