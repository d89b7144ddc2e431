"""Analytics subcommands: ``plot context|cost|cache|tools``, ``report``, ``export-parquet DIR``.

The work is in :mod:`jupyter_session_agent.analytics` (DataFrames and figures,
no display); these handlers only parse arguments and return what to show.
"""

from __future__ import annotations

from ..errors import UsageError
from . import subcommand

PLOTS = ("context", "cost", "cache", "tools")
PLOT_USAGE = "plot context|cost|cache|tools [ARG]"


@subcommand("plot", PLOT_USAGE, "context per step [ID], cost per day [DAYS], cache hit ratio "
                                "[model|day|session], tool failure rates")
def plot(magics, args, raw):
    from .. import analytics

    if not args or args[0] not in PLOTS:
        raise UsageError(f"usage: %agent {PLOT_USAGE} — e.g. %agent plot cost, %agent plot context SESSION_ID")
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


@subcommand("report", "report cost|cache|tools|sessions|steps|compactions",
            "a ready-made table (DataFrame) over the history")
def report(magics, args, raw):
    from .. import analytics

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


@subcommand("export-parquet", "export-parquet DIR [--user NAME]",
            "write the history as date-partitioned Parquet (for DuckDB, Spark, Trino)")
def export_parquet(magics, args, raw):
    from .. import analytics

    user = None
    if "--user" in args:
        at = args.index("--user")
        if at + 1 >= len(args):
            raise UsageError("usage: %agent export-parquet DIR [--user NAME]")
        user = args[at + 1]
        args = args[:at] + args[at + 2:]
    if len(args) != 1:
        raise UsageError("usage: %agent export-parquet DIR [--user NAME] — e.g. %agent export-parquet /shared/agent")
    counts = analytics.export_parquet(args[0], magics.store(), user=user)
    rows = ", ".join(f"{n:,} {kind}" for kind, n in counts.items())
    print(f"exported {rows} to {args[0]} (views: {args[0]}/views.sql)")
