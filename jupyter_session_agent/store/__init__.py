"""The history: per-process JSONL journals, queried through an in-memory DuckDB.

Layout (storage.md §4, scheme (c))::

    <data_dir>/history/live/<writer>.jsonl      # one per writing process, O_APPEND
    <data_dir>/history/parquet/<writer>.parquet # a finished journal, compacted

Every line is one snapshot ``{"kind", "id", "session_id", "message_id", "rev",
"writer", "deleted", "time_created", "time_updated", "data"}`` where ``data``
is OpenCode's stored JSON (the value's ``to_data()`` minus its keys). Readers
keep the newest ``rev`` per id and drop tombstones. A writer holds
``flock(LOCK_EX)`` on its journal for as long as it lives, so a journal that
can be locked belongs to a dead process: its running tools were interrupted
and the file is compacted to Parquet (by its owner at close(), otherwise by
the next reader). Nothing ever holds a DuckDB file lock: DuckDB only reads,
from a private in-memory database.

SQL goes through the catalog (:class:`_Catalog`): the rows of every file,
newest revision per id and typed, as tables ``_store.<kind>`` of that
in-memory database, brought up to date incrementally before each query
(Parquet files once, journals from the byte offset already read), so the
views (``_VIEWS``, docs/analytics.md) are plain table scans.

This is the only package that imports duckdb (and pandas), always lazily.

Modules, by responsibility:

- ``journal``: the per-process JSONL journal, its flock, liveness, compaction to Parquet
- ``codec``: values ↔ journal rows (kind, redacted line, decoding)
- ``problems``: what the history cannot use (stray files, bad rows, failed writes), reported once
- ``catalog``: the ``_store.<kind>`` tables materialised from the files, refreshed incrementally
- ``views``: the public views' SQL
- ``readonly``: the read-only SQL guard of ``sql()``
- ``query``: the private DuckDB connection, catalog refresh and ``sql()`` (a mixin of Store)
- ``export``: Parquet export and the views over an export
- ``watch``: what other processes write to one session (``Store.foreign``), without DuckDB
- ``store``: the :class:`Store` and :func:`shared`
"""

from __future__ import annotations

from .export import export_views_sql, open_export
from .journal import COLUMNS, Kind, _compact
from .merge import merge
from .problems import HistoryWarning, HistoryWriteError
from .query import scratch_connection
from .schema import KINDS
from .store import Store, shared

# What the rest of the package, the tests, benchmarks and notebooks import from here.
__all__ = ["COLUMNS", "KINDS", "HistoryWarning", "HistoryWriteError", "Kind", "Store", "_compact",
           "export_views_sql", "merge", "open_export", "scratch_connection", "shared"]
