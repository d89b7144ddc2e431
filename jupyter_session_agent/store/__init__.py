"""The history: per-process JSONL journals and Parquet files, queried by DuckDB in place.

Layout::

    <data_dir>/history/live/<writer>.jsonl        # one per writing process, O_APPEND
    <data_dir>/history/parquet/<writer>.parquet   # a finished journal, compacted (typed)
    <data_dir>/history/parquet/merged-<g>-….parquet  # generation g: small files merged
    <data_dir>/history/parquet/generation-<g>.json   # its manifest (the commit point)

Every line is one snapshot ``{"kind", "id", "session_id", "message_id", "rev",
"writer", "deleted", "time_created", "time_updated", "data"}`` where ``data``
is OpenCode's stored JSON (the value's ``to_data()`` minus its keys). Readers
keep the newest ``rev`` per id and drop tombstones. A writer holds
``flock(LOCK_EX)`` on its journal for as long as it lives, so a journal that
can be locked belongs to a dead process: its running tools were interrupted
and the file is compacted to Parquet (by its owner at close(), otherwise by
the next reader). Small files are merged into generations (``merge``) at a
kernel's exit or in the background. Nothing ever holds a DuckDB file lock:
DuckDB only reads, from a private in-memory database.

SQL runs over views (``VIEWS``, docs/analytics.md) that scan the current
generation's files in place and the tail (live journals, small files) that
:class:`_Catalog` keeps deduplicated and typed in memory, refreshed
incrementally before each query: a query's memory follows the query.

This is the only package that imports duckdb (and pandas), always lazily.

Modules, by responsibility:

- ``schema``: the raw, typed and derived columns (SQL text)
- ``segment``: the Parquet files the store writes (typed, sorted, self-describing); compaction
- ``journal``: the per-process JSONL journal, its flock, liveness
- ``merge``: generations of merged files, the crash-safe merge protocol, the read plan
- ``codec``: values ↔ journal rows (kind, redacted line, decoding)
- ``problems``: what the history cannot use (stray files, bad rows, failed writes), reported once
- ``catalog``: the tail, deduplicated and typed in memory, refreshed incrementally
- ``views``: the public views' SQL
- ``readonly``: the read-only SQL guard of ``sql()``
- ``query``: the private DuckDB connection, the views over the plan, ``sql()`` (a mixin of Store)
- ``export``: Parquet export (incremental, by day), DuckDB database export, views over an export
- ``watch``: what other processes write to one session (``Store.foreign``), without DuckDB
- ``store``: the :class:`Store` and :func:`shared`
"""

from __future__ import annotations

from .export import export_views_sql, open_export
from .journal import COLUMNS, Kind, compact
from .merge import merge
from .problems import HistoryWarning, HistoryWriteError
from .query import scratch_connection
from .schema import KINDS
from .store import Store, shared

# What the rest of the package, the tests, benchmarks and notebooks import from here.
__all__ = [
    "COLUMNS",
    "KINDS",
    "HistoryWarning",
    "HistoryWriteError",
    "Kind",
    "Store",
    "compact",
    "export_views_sql",
    "merge",
    "open_export",
    "scratch_connection",
    "shared",
]
