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
and the file is turned into Parquet (by its owner at close(), otherwise by
the next reader). Small files are merged into generations (``merge``) at a
kernel's exit or in the background. Nothing ever holds a DuckDB file lock:
DuckDB only reads, from a private in-memory database.

SQL runs over views (``VIEWS``, docs/analytics.md) that scan the current
generation's files in place and the tail (live journals, small files) that
:class:`~.catalog.Catalog` keeps deduplicated and typed in memory, refreshed
incrementally before each query: a query's memory follows the query.

This is the only package that imports duckdb (and pandas), always lazily.

Modules, by responsibility (each imports only those above it):

- ``schema``: the raw, typed and derived columns (SQL text)
- ``problems``: what the history cannot use (stray files, bad rows, failed writes), reported once
- ``segment``: the Parquet files the store writes (typed, sorted, self-describing), a finished
  journal turned into one (``journal_to_parquet``)
- ``codec``: values ↔ journal rows (kind, redacted line, decoding)
- ``journal``: the per-process JSONL journal (``Writer``), its flock, liveness
- ``generation``: generations of merged files as readers see them, the plan of a read
- ``merge``: the crash-safe merge of small files into a new generation
- ``files``: the history folder as reads see it (usable files, files left out)
- ``upkeep``: finished journals turned into Parquet, background merges, by whoever reads
- ``catalog``: the tail, deduplicated and typed in memory, refreshed incrementally
- ``views``: ``_store.<kind>`` over a plan, and the public views' SQL
- ``readonly``: the read-only SQL guard of ``sql()``
- ``query``: the private DuckDB connection, the views over the plan, ``sql()`` (``Query``)
- ``sessions``: sessions and messages as values, decoded once per revision (``SessionReader``)
- ``export``: Parquet export (incremental, by day), DuckDB database export, views over an export
- ``watch``: what other processes write to one session (``Store.foreign``), without DuckDB
- ``store``: the :class:`Store` (composed of the parts above) and :func:`shared`
- ``tree``: a session's child sessions and their cost
"""

from __future__ import annotations

from .export import export_views_sql, open_export
from .merge import merge
from .problems import HistoryWarning, HistoryWriteError
from .schema import COLUMNS, KINDS, Kind
from .segment import journal_to_parquet
from .store import Store, shared

# What the rest of the package, the tests, benchmarks and notebooks import from here.
__all__ = [
    "COLUMNS",
    "KINDS",
    "HistoryWarning",
    "HistoryWriteError",
    "Kind",
    "Store",
    "export_views_sql",
    "journal_to_parquet",
    "merge",
    "open_export",
    "shared",
]
