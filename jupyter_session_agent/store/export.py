"""Parquet export of the history (``Store.export_parquet``) and the views over an export."""

from __future__ import annotations

import glob
import os
import re
import secrets
import shutil
import socket
from pathlib import Path

from .catalog import _DERIVED, KINDS, _Catalog, _empty_table, _table_columns
from .journal import _quote
from .views import _VIEWS


class _Export:
    """``Store.export_parquet`` (a mixin of Store; uses its ``_prepare`` and ``_listing``)."""

    def export_parquet(self, directory: str | os.PathLike, *, user: str | None = None) -> dict[str, int]:
        """Write the history as Parquet, Hive-partitioned by day, for DuckDB, Spark or Trino.

        Layout (``docs/analytics.md``): ``<directory>/<kind>/date=YYYY-MM-DD/<user>-<host>-<n>.parquet``
        for kind session, message, part and event; the rows are the catalog's (newest revision,
        typed columns, ``data`` as JSON text) plus ``user`` (default: this login) and ``host``
        (of the writing process), so many users' exports can share one directory. A new export
        by the same user and machine replaces its earlier files. ``views.sql`` recreates every
        view over the directory. Returns the rows written per kind.
        """
        import duckdb

        out = Path(directory).expanduser().absolute()
        user = user or _login()
        prefix = re.sub(r"[^A-Za-z0-9_.@-]+", "_", f"{user}-{socket.gethostname()}")
        self._prepare()
        tmp = out / f".export-{secrets.token_hex(4)}"
        tmp.mkdir(parents=True)
        con = duckdb.connect()
        try:
            con.execute("SET autoinstall_known_extensions=false")
            con.execute("SET autoload_known_extensions=false")
            con.execute("SET enable_progress_bar=false")
            catalog = _Catalog(con)
            for _ in range(10):  # as in _refresh: a journal compacted meanwhile means list again
                files = self._listing()
                try:
                    catalog.refresh(con, *files)
                except duckdb.IOException:
                    if self._listing() == files:
                        raise
                    continue
                break
            counts = {}
            for kind in KINDS:
                columns = ", ".join(f"{c}::VARCHAR AS {c}" if c == "data" else c for c in _table_columns(kind))
                counts[kind] = con.execute(f"SELECT count(*) FROM _store.{kind}").fetchone()[0]
                if not counts[kind]:
                    continue
                con.execute(
                    f"COPY (SELECT {columns}, $1 AS user, "
                    "regexp_extract(writer, '^(.*)-[0-9]+-[0-9a-f]+$', 1) AS host, "
                    f"CAST(make_timestamp(time_created * 1000) AS DATE) AS date FROM _store.{kind}) "
                    f"TO {_quote(tmp / kind)} (FORMAT parquet, PARTITION_BY (date), "
                    f"FILENAME_PATTERN {_quote(prefix + '-{i}')})", [user])
        finally:
            con.close()
        for kind in KINDS:  # replace this user's earlier files, partition by partition
            for old in (out / kind).glob(f"date=*/{glob.escape(prefix)}-*.parquet"):
                old.unlink()
            for new in (tmp / kind).glob("date=*/*.parquet"):
                target = out / kind / new.parent.name / new.name
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(new, target)
        shutil.rmtree(tmp, ignore_errors=True)
        (out / "views.sql").write_text(export_views_sql(out))
        return counts


def export_views_sql(directory: str | os.PathLike) -> str:
    """SQL that recreates the history's views over an ``export_parquet`` directory."""
    root = Path(directory).absolute()
    lines = [f"-- jupyter-session-agent views over {root} (written by export_parquet)",
             "CREATE SCHEMA IF NOT EXISTS _store;"]
    for kind in KINDS:
        files = _quote(f"{root / kind}/*/*.parquet")
        source = (f"SELECT * REPLACE (data::JSON AS data) FROM read_parquet({files}, hive_partitioning=true, "
                  "union_by_name=true)") if any((root / kind).glob("*/*.parquet")) else _empty_table(kind)
        lines.append(f"CREATE OR REPLACE VIEW _store.{kind} AS {source};")
    lines += [f"CREATE OR REPLACE VIEW _store.{name} AS {select} WHERE p.type = '{part_type}';"
              for name, (part_type, select) in _DERIVED.items()]
    lines += [f"CREATE OR REPLACE VIEW {name} AS {body};" for name, body in _VIEWS.items()]
    return "\n".join(lines) + "\n"


def open_export(directory: str | os.PathLike):
    """A DuckDB connection (yours: writable) with every view over an ``export_parquet`` directory."""
    import duckdb

    con = duckdb.connect()
    con.execute(export_views_sql(directory))
    return con


def _login() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return "unknown"
