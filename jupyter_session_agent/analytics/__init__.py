"""Ready-made reports and plots over the history (``docs/analytics.md``).

The reports are :mod:`.reports`, the plots :mod:`.plots` (each draws one report's
DataFrame); this package re-exports both and the exports.

Reports return pandas DataFrames; plots return matplotlib figures (they
render as PNG in a notebook, with or without ``%matplotlib inline``). Nothing
here displays anything: the ``%agent plot …`` magics do that. Every function
takes ``store``: a :class:`~jupyter_session_agent.store.Store`, a data
directory, or None for the default one (``$JUPYTER_SESSION_AGENT_DIR``).

All of it is SQL over the views ``step``, ``tool_call``, ``compaction_event``,
``session_summary`` and ``daily_cost``, so each report is also a query you can
copy and change.
"""

from __future__ import annotations

import os
from typing import Any

from ..store import open_export as open_store_export
from .plots import plot_cache, plot_context, plot_cost, plot_tools
from .reports import (
    cache_hit_ratio,
    compactions,
    context_per_step,
    cost_per_day,
    steps,
    store_of,
    tool_failure_rates,
)

__all__ = [
    "steps",
    "context_per_step",
    "compactions",
    "cost_per_day",
    "cache_hit_ratio",
    "tool_failure_rates",
    "plot_context",
    "plot_cost",
    "plot_cache",
    "plot_tools",
    "export_parquet",
    "export_duckdb",
    "open_export",
]


# --------------------------------------------------------------------------
# export


def export_parquet(
    directory: str | os.PathLike, store: Any = None, *, user: str | None = None
) -> dict[str, int]:
    """Write the history as Hive-partitioned Parquet (see :meth:`Store.export_parquet`)."""
    return store_of(store).export_parquet(directory, user=user)


def export_duckdb(path: str | os.PathLike, store: Any = None) -> dict[str, int]:
    """Write the history and its views into a DuckDB database file (see :meth:`Store.export_duckdb`)."""
    return store_of(store).export_duckdb(path)


def open_export(directory: str | os.PathLike):
    """A DuckDB connection with every view defined over an export directory (all users' files)."""
    return open_store_export(directory)
