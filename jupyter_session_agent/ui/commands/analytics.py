"""Analytics subcommands: ``plot context|cost|cache|tools``, ``report``, ``export-parquet DIR``,
``export-duckdb FILE``.

The work is in :mod:`jupyter_session_agent.analytics` (DataFrames and figures,
no display); these handlers only parse arguments and return what to show.
"""

from __future__ import annotations

from ... import analytics
from ...core.errors import UsageError
from . import parse, subcommand

PLOTS = ("context", "cost", "cache", "tools")
PLOT_USAGE = "plot context|cost|cache|tools [ARG]"


@subcommand(
    "plot",
    PLOT_USAGE,
    "context per step [ID], cost per day [DAYS], cache hit ratio "
    "[model|day|session], tool failure rates",
)
def plot(magics, args, raw):
    if not args or args[0] not in PLOTS:
        raise UsageError(
            f"usage: %agent {PLOT_USAGE} — e.g. %agent plot cost, %agent plot context SESSION_ID"
        )
    what, rest = args[0], args[1:]
    if len(rest) > 1:
        raise UsageError(f"usage: %agent {PLOT_USAGE} — one argument at most")
    store = magics.store()
    if what == "context":
        current = magics.session.info.id if magics.session is not None else None
        return analytics.plot_context(store, rest[0] if rest else current)
    if what == "cost":
        if rest and not rest[0].isdigit():
            raise UsageError("usage: %agent plot cost [DAYS] — e.g. %agent plot cost 30")
        return analytics.plot_cost(store, int(rest[0]) if rest else None)
    if what == "cache":
        return analytics.plot_cache(store, rest[0] if rest else "model")
    if rest:
        raise UsageError("usage: %agent plot tools")
    return analytics.plot_tools(store)


REPORTS = ("cost", "cache", "tools", "sessions", "steps", "compactions")


@subcommand(
    "report",
    "report cost|cache|tools|sessions|steps|compactions",
    "a ready-made table (DataFrame) over the history",
)
def report(magics, args, raw):
    if len(args) != 1 or args[0] not in REPORTS:
        raise UsageError(f"usage: %agent report {'|'.join(REPORTS)}")
    store = magics.store()
    what = args[0]
    if what == "cost":
        return analytics.cost_per_day(store)
    if what == "cache":
        return analytics.cache_hit_ratio(store)
    if what == "tools":
        return analytics.tool_failure_rates(store)
    if what == "sessions":
        return store.sql("SELECT * FROM session_summary ORDER BY time_updated DESC")
    if what == "steps":
        current = magics.session.info.id if magics.session is not None else None
        return analytics.steps(store, current)
    return analytics.compactions(store)


@subcommand(
    "export-parquet",
    "export-parquet DIR [--user NAME]",
    "write the history as date-partitioned Parquet (for DuckDB, Spark, Trino)",
)
def export_parquet(magics, args, raw):
    ns = parse(
        "export-parquet DIR [--user NAME]",
        args,
        (("directory",), {"metavar": "DIR"}),
        (("--user",), {}),
    )
    if not ns.directory.strip():
        raise UsageError("export-parquet needs a folder — e.g. %agent export-parquet /shared/agent")
    counts = analytics.export_parquet(ns.directory, magics.store(), user=ns.user)
    rows = (
        ", ".join(f"{n:,} {kind}" for kind, n in counts.items() if n)
        or "nothing new (no day changed)"
    )
    print(f"exported {rows} to {ns.directory} (views: {ns.directory}/views.sql)")


@subcommand(
    "export-duckdb",
    "export-duckdb FILE",
    "write the history and its views into a DuckDB database file (duckdb FILE, DBeaver)",
)
def export_duckdb(magics, args, raw):
    ns = parse("export-duckdb FILE", args, (("file",), {"metavar": "FILE"}))
    if not ns.file.strip():
        raise UsageError("export-duckdb needs a file — e.g. %agent export-duckdb history.duckdb")
    counts = analytics.export_duckdb(ns.file, magics.store())
    print(describe_duckdb_export(ns.file, counts))


def describe_duckdb_export(path: str, counts: dict[str, int]) -> str:
    """The line both the magic and the command line print after an export to a DuckDB file."""
    rows = ", ".join(
        f"{n:,} {kind}" for kind, n in counts.items() if kind in ("session", "message", "part")
    )
    return (
        f"exported {rows} (changed sessions only) to {path} — open it with: duckdb {path}, "
        "then SELECT * FROM session_summary"
    )
