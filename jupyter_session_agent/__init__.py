"""jupyter-session-agent: LLM agent sessions in notebook cells, history in DuckDB.

Importing this package is cheap: no openai, duckdb, pandas or widget imports
happen until a session runs or a query is made.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["load_ipython_extension", "unload_ipython_extension", "sql", "__version__"]


def load_ipython_extension(ipython) -> None:
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from .magics import unload

    unload(ipython)


def sql(query: str, data_dir: str | None = None):
    """Run read-only SQL over the history; returns a pandas DataFrame."""
    from .settings import resolve_data_dir
    from .store import Store

    return Store(resolve_data_dir(data_dir)).sql(query)
