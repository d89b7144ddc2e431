"""jupyter-session-agent: LLM agent sessions in notebook cells, history in DuckDB.

Importing this package is cheap: no openai, duckdb, pandas or widget imports
happen until a session runs or a query is made.
"""

from __future__ import annotations

from .core import __version__

__all__ = ["load_ipython_extension", "unload_ipython_extension", "sql", "__version__"]


def load_ipython_extension(ipython) -> None:
    from .ui.magics import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from .ui.magics import unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the built JupyterLab renderer is (for ``jupyter labextension develop .``).

    A normal or editable ``pip install`` copies it to
    ``<prefix>/share/jupyter/labextensions/jupyter-session-agent`` (wheel shared-data).
    """
    return [{"src": "labextension", "dest": "jupyter-session-agent"}]


def sql(query: str, data_dir: str | None = None, params: list | dict | None = None):
    """Run read-only SQL over the history; returns a pandas DataFrame (views: docs/analytics.md)."""
    from .core.settings import resolve_data_dir
    from .store import shared

    return shared(resolve_data_dir(data_dir)).sql(query, params)
