"""Exports of the history: Hive-partitioned Parquet for a team's engines (Spark, Trino, DuckDB),
a DuckDB database file for one person's tools; both incremental on re-run.

Both read the history as ``sql()`` does (the views over the current files, ``query.py``), in a
private connection of their own that may write outside the history folder.

One module: the two exports share that connection's making and their incremental bookkeeping
(fingerprints of what was written), and ``export_views_sql`` is the reading side of the
Parquet export's layout.
"""

from __future__ import annotations

import getpass
import glob
import json
import os
import re
import secrets
import shutil
import socket
from pathlib import Path

from ..core.errors import UsageError
from .merge import MEMORY_LIMIT
from .problems import one_line
from .query import Query
from .schema import (
    DERIVED,
    DERIVED_COLUMNS,
    DERIVED_KEY,
    EMPTY_RELATION,
    KINDS,
    SESSION_KEY,
    derived,
    quote,
    select_list,
    table_columns,
    typed,
)
from .segment import connect
from .views import VIEWS

# What export_parquet writes: the journal kinds' rows (typed), the derived rows, and the views
# the analytics questions of docs/analytics.md read, each partitioned by this UTC day.
_DAY = "CAST(make_timestamp({} * 1000) AS DATE)"
EXPORTED = {
    "session": ("_store.session", _DAY.format("time_created")),
    "message": ("_store.message", _DAY.format("time_created")),
    "part": ("_store.part", _DAY.format("time_created")),
    "event": ("_store.event", _DAY.format("time_created")),
    "step": ("step", "CAST(time AS DATE)"),
    "tool_call": ("tool_call", "CAST(time AS DATE)"),
    "compaction_event": ("compaction_event", _DAY.format("time_created")),
    "session_summary": ("session_summary", "CAST(time_created AS DATE)"),
    "daily_cost": ("daily_cost", "day"),
}
_HOST = "regexp_extract(writer, '^(.*)-[0-9]+-[0-9a-f]+$', 1)"  # the writing process's machine
_SPARK_TYPES = {
    "JSON": "VARCHAR",
    "UBIGINT": "BIGINT",
    "UINTEGER": "BIGINT",
    "USMALLINT": "INTEGER",
    "UTINYINT": "SMALLINT",
    "HUGEINT": "BIGINT",
    "UHUGEINT": "BIGINT",
    "UUID": "VARCHAR",
}


class Exporter:
    """The history's exports, read through a :class:`~.query.Query`."""

    def __init__(self, query: Query) -> None:
        self._query = query

    def _reader(self, spill: Path):
        """A private connection (not locked down: it writes the export) with the views, in at
        most ``MEMORY_LIMIT`` of memory (spilling to ``spill``: the export streams the files)."""
        con = connect(MEMORY_LIMIT, spill)
        try:
            self._query.define_views_in(con)
        except BaseException:
            con.close()
            raise
        return con

    def to_parquet(
        self, directory: str | os.PathLike, *, user: str | None = None
    ) -> dict[str, int]:
        """Write the history as Parquet, Hive-partitioned by day, for Spark, Trino or DuckDB.

        Layout (``docs/analytics.md``):
        ``<directory>/<table>/date=YYYY-MM-DD/<user>-<host>-0.parquet``
        for the tables of :data:`EXPORTED`, with ``user`` (default: this login) and ``host``
        columns, so many people's exports can share one folder. Incremental: only the days
        whose rows changed since this user's last export from this machine are written again
        (fingerprints in ``<directory>/.state/<user>-<host>.json``); each file is replaced
        atomically. Only plain Parquet types (no JSON, unsigned or 128-bit integers), so any
        engine reads them without hints. ``views.sql`` recreates every view over the folder.
        Returns the rows of each table in the days written.
        """
        out = Path(directory).expanduser().absolute()
        user = user or _login()
        host = socket.gethostname()
        prefix = re.sub(r"[^A-Za-z0-9_.@-]+", "_", f"{user}-{host}")
        state_path = out / ".state" / f"{prefix}.json"
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            state = {}
        tmp = out / f".export-{secrets.token_hex(4)}"
        tmp.mkdir(parents=True)
        con = None
        counts: dict[str, int] = {}
        try:
            con = self._reader(tmp / "spill")
            new_state: dict[str, dict] = {}
            for table, (source, day) in EXPORTED.items():
                columns = _spark_columns(con, source)
                extra = f"{_HOST} AS host" if "writer" in columns else f"{quote(host)} AS host"
                rows = (
                    f"SELECT {', '.join(columns.values())}, $1 AS user, {extra}, {day} AS date "
                    f"FROM {source}"
                )
                fingerprints = {
                    str(d): [n, str(f)]
                    for d, n, f in con.execute(
                        f"SELECT date, count(*), bit_xor(hash({_fingerprint(con, source)})) "
                        f"FROM ({rows}) GROUP BY date",
                        [user],
                    ).fetchall()
                }
                new_state[table] = fingerprints
                old = state.get(table, {})
                changed = [
                    d
                    for d, f in fingerprints.items()
                    if old.get(d) != f
                    or not (out / table / f"date={d}" / f"{prefix}-0.parquet").exists()
                ]
                gone = [d for d in old if d not in fingerprints]
                counts[table] = 0
                if changed:
                    days = ", ".join(f"DATE {quote(d)}" for d in changed)
                    pattern = quote(prefix + "-{i}")
                    counts[table] = con.execute(
                        f"COPY (SELECT * FROM ({rows}) WHERE date IN ({days})) TO "
                        f"{quote(tmp / table)} (FORMAT parquet, PARTITION_BY (date), "
                        f"FILENAME_PATTERN {pattern})",
                        [user],
                    ).fetchone()[0]
                for d in changed + gone:  # replace this user's files, partition by partition
                    partition = out / table / f"date={d}"
                    new = sorted((tmp / table / f"date={d}").glob("*.parquet"))
                    partition.mkdir(parents=True, exist_ok=True)
                    for file in new:
                        os.replace(file, partition / file.name)
                    for stale in partition.glob(f"{glob.escape(prefix)}-*.parquet"):
                        if stale.name not in {f.name for f in new}:
                            stale.unlink()
            state_path.parent.mkdir(exist_ok=True)
            part = state_path.with_name(f".{state_path.name}.tmp")
            part.write_text(json.dumps(new_state))
            os.replace(part, state_path)
        finally:
            if con is not None:
                con.close()
            shutil.rmtree(tmp, ignore_errors=True)
        (out / "views.sql").write_text(export_views_sql(out))
        return counts

    def to_duckdb(self, path: str | os.PathLike) -> dict[str, int]:
        """Write the history and its views into a DuckDB database file (``duckdb FILE`` opens
        it; so does any DuckDB client). Tables ``_store.<kind>`` hold the rows, the views of
        ``docs/analytics.md`` read them. Incremental: a session whose rows did not change since
        the last export to this file is not copied again. Returns the rows copied per table.
        """
        import duckdb

        target = Path(path).expanduser().absolute()
        if target.is_dir():
            raise UsageError(
                f"{target} is a folder — give a file name, e.g. {target / 'history.duckdb'}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        spill = target.parent / f".{target.name}.spill-{secrets.token_hex(4)}"
        con = self._reader(spill)
        try:
            try:
                # a new file in the oldest storage format our tables need: DuckDB 1.0 and later
                # (the CLI, DBeaver's driver) open it; a newer DuckDB's default would lock older
                # ones out. An existing file keeps its own format.
                new = not target.exists() or target.stat().st_size == 0
                version = " (STORAGE_VERSION 'v1.0.0')" if new else ""
                con.execute(f"ATTACH {quote(target)} AS out{version}")
            except duckdb.Error as err:
                text = one_line(err)
                if "lock" in text.lower():
                    raise UsageError(
                        f"{target} is open in another program (DuckDB allows one "
                        "writer) — close it there and export again"
                    ) from None
                raise UsageError(
                    f"cannot open {target} as a DuckDB database ({text}) — give another file name"
                ) from None
            return _sync_duckdb(con)
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)


def _sync_duckdb(con) -> dict[str, int]:
    """Copy into ``out`` the rows of the sessions that changed, then (re)create the views."""
    tables = (*KINDS, *DERIVED)
    con.execute("CREATE SCHEMA IF NOT EXISTS out._store")
    existing = {
        (s, t): [
            c
            for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = 'out' AND schema_name = $1 "
                "AND table_name = $2 ORDER BY column_index",
                [s, t],
            ).fetchall()
        ]
        for s, t in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'out'"
        ).fetchall()
    }
    wanted = {t: table_columns(t) if t in KINDS else list(DERIVED_COLUMNS[t]) for t in tables}
    fresh = ("_store", "exported") not in existing or any(
        existing.get(("_store", t)) != columns for t, columns in wanted.items()
    )
    sessions = " UNION ALL ".join(
        f"SELECT {SESSION_KEY} k, hash({DERIVED_KEY.get(k, 'id')}, {'rev' if k in KINDS else 0}, "
        f"'{k}') h FROM _store.{k}"
        for k in tables
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE now AS SELECT k, count(*) n, bit_xor(h) f "
        f"FROM ({sessions}) GROUP BY k"
    )
    if fresh:  # first export to this file, or one by another version: start again
        for t in tables:
            con.execute(
                f"CREATE OR REPLACE TABLE out._store.{t} AS SELECT * FROM _store.{t} WHERE false"
            )
        con.execute("CREATE OR REPLACE TABLE out._store.exported (k VARCHAR, n BIGINT, f UBIGINT)")
    # sessions whose rows changed (or are gone) since the last export
    con.execute(
        "CREATE OR REPLACE TEMP TABLE changed AS (SELECT k FROM now EXCEPT "
        "SELECT k FROM now JOIN out._store.exported e USING (k, n, f)) "
        "UNION SELECT k FROM out._store.exported WHERE k NOT IN (SELECT k FROM now)"
    )
    con.execute("BEGIN")
    try:
        counts = {}
        for t in tables:
            con.execute(
                f"DELETE FROM out._store.{t} WHERE {SESSION_KEY} IN (SELECT k FROM changed)"
            )
            counts[t] = con.execute(
                f"INSERT INTO out._store.{t} SELECT * FROM _store.{t} "
                f"WHERE {SESSION_KEY} IN (SELECT k FROM changed)"
            ).fetchone()[0]
        con.execute("DELETE FROM out._store.exported")
        con.execute("INSERT INTO out._store.exported SELECT * FROM now")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("USE out")
    try:
        for name, body in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW main.{name} AS {body}")
    finally:
        con.execute("USE memory")
    con.execute("CHECKPOINT out")
    return counts


def _fingerprint(con, source: str) -> str:
    """What identifies a row's content: its columns but ``data`` (its ``rev`` tells), doubles
    rounded (a sum over the same rows can differ in its last bit from one run to the next)."""
    terms = []
    for name, typ, *_ in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall():
        if name != "data":
            terms.append(f"round({name}, 9)" if typ in ("DOUBLE", "FLOAT") else name)
    return ", ".join(terms)


def _spark_columns(con, source: str) -> dict[str, str]:
    """column → its select expression, with a type any Parquet reader knows (JSON → text)."""
    columns = {}
    for name, typ, *_ in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall():
        cast = _SPARK_TYPES.get(typ)
        columns[name] = f"{name}::{cast} AS {name}" if cast else name
    return columns


def export_views_sql(directory: str | os.PathLike) -> str:
    """SQL that recreates the history's views over an ``export_parquet`` directory (every
    user's files): ``duckdb -init DIR/views.sql``."""
    root = Path(directory).absolute()
    lines = [
        f"-- jupyter-session-agent views over {root} (written by export_parquet)",
        "CREATE SCHEMA IF NOT EXISTS _store;",
    ]
    for kind in (*KINDS, *DERIVED):
        files = quote(f"{root / kind}/*/*.parquet")
        if any((root / kind).glob("*/*.parquet")):
            data = " REPLACE (data::JSON AS data)" if kind in KINDS else ""
            source = (
                f"SELECT *{data} FROM read_parquet({files}, hive_partitioning=true, "
                "union_by_name=true)"
            )
        elif kind in KINDS:
            source = f"SELECT {select_list(kind)} FROM ({typed(EMPTY_RELATION)})"
        elif kind not in EXPORTED:  # not exported (the session totals): computed from the rows
            source = derived(kind, "(FROM _store.part)", "(FROM _store.message)")
        else:
            empty = f"(SELECT * FROM ({typed(EMPTY_RELATION)}))"
            source = derived(kind, empty, empty, "false")
        lines.append(f"CREATE OR REPLACE VIEW _store.{kind} AS {source};")
    lines += [f"CREATE OR REPLACE VIEW {name} AS {body};" for name, body in VIEWS.items()]
    return "\n".join(lines) + "\n"


def open_export(directory: str | os.PathLike):
    """A DuckDB connection (yours: writable) with every view over an export_parquet folder."""
    con = connect()
    con.execute(export_views_sql(directory))
    return con


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"
