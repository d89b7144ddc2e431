"""Analytics benchmark: 1M parts, our views vs the same queries on plain DuckDB tables,
and a 10,000-message session loaded by a fresh Store.

Run: ``python3 benchmarks/bench_analytics.py [--parts N]`` (about 3 minutes on 2 cores for
1M parts, most of it writing the history through ``Store.put``). Prints medians (and
minimums) of several runs; nothing is asserted. Targets (docs/benchmarks.md): view/table ratio at
most 1.5; a fresh 10k-message load under 0.5 s.

The history: one session of 10,000 messages (30,000 parts) plus sessions of 20 turns
until N parts, three models, a tool failure every 7th call, rows spread over 30 days,
written by one process, compacted to Parquet and merged at close (the state of every finished
kernel). "Plain tables" are ``CREATE TABLE … AS`` copies of what a view returns, in a
separate in-memory DuckDB: the best case for that query (our views scan the Parquet files).
``benchmarks/bench_scale.py`` compares first queries in fresh processes with DuckDB reading the
same files directly, at 1M and 10M parts.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_session_agent.core import ids  # noqa: E402
from jupyter_session_agent.core.messages import (  # noqa: E402
    AssistantMessage,
    ModelRef,
    ReasoningPart,
    Session,
    StepFinishPart,
    StepStartPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
)
from jupyter_session_agent.store import Store  # noqa: E402

DAY = 86_400_000
MODELS = (("openai", "gpt-4o"), ("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5"))

QUERIES = {
    # the store benchmark's group-by: the plain part view
    "part: group by session": (
        "part",
        "SELECT session_id, count(*) parts, sum(cost) cost, sum(output_tokens) output, "
        "count(*) FILTER (WHERE type = 'tool') tools FROM part GROUP BY session_id ORDER BY cost DESC",
    ),
    "part: tool status by tool": (
        "part",
        "SELECT tool, status, count(*) n FROM part WHERE type = 'tool' GROUP BY ALL ORDER BY n DESC",
    ),
    "step: cost per day by model": (
        "step",
        "SELECT CAST(time AS DATE) AS date, model, sum(cost) cost, sum(input_tokens) input, count(*) calls "
        "FROM step GROUP BY ALL ORDER BY date, model",
    ),
    "step: cache ratio, latency p50/p95 by model": (
        "step",
        "SELECT model, sum(cache_read_tokens) / sum(prompt_tokens) cache_ratio, "
        "quantile_cont(latency_ms, [0.5, 0.95]) latency FROM step GROUP BY model",
    ),
    "tool_call: failure rate by tool": (
        "tool_call",
        "SELECT tool, count(*) FILTER (WHERE status IN ('error', 'interrupted')) / count(*) rate, "
        "count(*) calls FROM tool_call GROUP BY tool ORDER BY rate DESC",
    ),
}


def turn(session_id: str, t: int, n: int) -> list:
    """One user message + one assistant step: 2 messages, 6 parts."""
    provider, model = MODELS[n % 3]
    user = UserMessage(
        id=ids.ascending("message"),
        session_id=session_id,
        time_created=t,
        model=ModelRef(provider, model),
    )
    tokens = Tokens(input=900 + n % 500, output=120, cache_read=400 * (n % 2))
    reply = AssistantMessage(
        id=ids.ascending("message"),
        session_id=session_id,
        parent_id=user.id,
        time_created=t,
        provider_id=provider,
        model_id=model,
        path={"cwd": "/w", "root": "/w"},
        cost=0.0012,
        finish="tool-calls",
        tokens=tokens,
        time_completed=t + 900,
    )
    keys = dict(session_id=session_id, message_id=reply.id)
    state = (
        ToolError(input={"command": "ls -la"}, error="exit 2", time_start=t, time_end=t + 30)
        if n % 7 == 0
        else ToolCompleted(
            input={"command": "ls -la"},
            output="file.txt\n" * 30,
            title="ls -la",
            metadata={"exit": 0},
            time_start=t,
            time_end=t + 30,
        )
    )
    return [
        user,
        TextPart(
            id=ids.ascending("part"),
            session_id=session_id,
            message_id=user.id,
            text="please list the files " * 5,
        ),
        reply,
        StepStartPart(id=ids.ascending("part"), **keys),
        ReasoningPart(id=ids.ascending("part"), text="I should run ls. " * 8, time_start=t, **keys),
        ToolPart(
            id=ids.ascending("part"),
            call_id="call_1",
            tool=("bash", "read", "grep")[n % 3],
            state=state,
            **keys,
        ),
        TextPart(
            id=ids.ascending("part"),
            text="Here are the files.",
            time_start=t,
            time_end=t + 5,
            **keys,
        ),
        StepFinishPart(
            id=ids.ascending("part"),
            reason="tool-calls",
            cost=0.0012,
            tokens=tokens,
            metadata={"latencyMs": 400 + n % 900, "firstTokenMs": 100 + n % 200, "attempts": 1},
            **keys,
        ),
    ]


def build(data_dir: Path, parts: int) -> str:
    """Write the history; returns the big session's id."""
    store = Store(data_dir)
    start = time.perf_counter()
    t0 = int(time.time() * 1000) - 30 * DAY
    n = 0

    def session(turns: int) -> str:
        nonlocal n
        t = t0 + (n * 6 * 30 * DAY) // parts  # spread over 30 days, in write order
        info = Session(
            id=ids.descending("session"),
            directory="/w",
            title=f"s{n}",
            time_created=t,
            time_updated=t,
        )
        store.put(info, time_created=t)
        for i in range(turns):
            t = t0 + (n * 6 * 30 * DAY) // parts
            store.put(*turn(info.id, t, n), time_created=t)
            n += 1
            if n % 100 == 0:
                store.flush(sync=False)
        return info.id

    big = session(5_000)  # 10,000 messages, 30,000 parts
    while n * 6 < parts:
        session(20)
    store.flush()
    wrote = time.perf_counter() - start
    start = time.perf_counter()
    store.close()  # compacts the journal into Parquet (and merges it), as every finished kernel does
    print(
        f"history: {n * 6:,} parts, {n * 2:,} messages in {n // 20:,} sessions; "
        f"written in {wrote:.0f} s, compacted and merged in {time.perf_counter() - start:.1f} s"
    )
    return big


CPU: list[float] = []  # process CPU time of the last timed() runs (DuckDB's threads included)


def timed(fn, runs: int) -> list[float]:
    """Wall times of ``runs`` calls; their CPU times go to CPU (the machine may be shared)."""
    times = []
    CPU.clear()
    for _ in range(runs):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - start)
        CPU.append(time.process_time() - cpu)
        del result  # freeing the result is not part of the load
    return times


def fmt(times: list[float], unit: float = 1.0, suffix: str = "s", digits: int = 3) -> str:
    return (
        f"median {statistics.median(times) * unit:.{digits}f} {suffix} (min {min(times) * unit:.{digits}f}, "
        f"CPU median {statistics.median(CPU) * unit:.{digits}f}, n={len(times)})"
    )


def bench_views(data_dir: Path, runs: int) -> None:
    import duckdb

    store = Store(data_dir)
    load = timed(lambda: store.sql("SELECT count(*) FROM part"), 1)
    print(f"first query of a fresh store: {load[0]:.2f} s (CPU {CPU[0]:.2f} s)")
    plain = duckdb.connect()
    for name in ("part", "step", "tool_call"):
        frame = store.sql(f"SELECT * FROM {name}")  # noqa: F841 - read by the next statement
        plain.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        del frame
    print(f"{'query':<46} {'our view':>10} {'plain table':>12} {'ratio':>7} {'CPU ratio':>10}")
    ratios, cpu_ratios = [], []
    for label, (_, query) in QUERIES.items():
        store.sql(query), plain.execute(query).df()  # warm both
        ours = statistics.median(timed(lambda: store.sql(query), runs))
        ours_cpu = statistics.median(CPU)
        theirs = statistics.median(timed(lambda: plain.execute(query).df(), runs))
        theirs_cpu = statistics.median(CPU)
        ratios.append(ours / theirs)
        cpu_ratios.append(ours_cpu / theirs_cpu)
        print(
            f"{label:<46} {ours * 1e3:>8.1f}ms {theirs * 1e3:>10.1f}ms {ours / theirs:>6.2f}x "
            f"{ours_cpu / theirs_cpu:>9.2f}x"
        )
    print(
        f"ratio: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x (target <= 1.5x); "
        f"CPU: median {statistics.median(cpu_ratios):.2f}x, worst {max(cpu_ratios):.2f}x"
    )

    # what a query costs when another process appended since the last one
    writer = Store(data_dir)
    session = Session(
        id=ids.descending("session"), directory="/w", title="new", time_created=0, time_updated=0
    )
    refresh, cpu = [], []
    for i in range(5):
        writer.put(session, *turn(session.id, int(time.time() * 1000), i))
        writer.flush()
        start, cpu_start = time.perf_counter(), time.process_time()
        store.sql(QUERIES["part: group by session"][1])
        refresh.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    CPU[:] = cpu
    print(
        f"group-by right after another process appended a step (reads it first): {fmt(refresh, 1e3, 'ms', 1)}"
    )
    writer.close()


def bench_load(data_dir: Path, big: str, runs: int) -> None:
    def fresh():
        return Store(data_dir).messages(big)

    history = fresh()
    assert len(history) == 10_000 and sum(len(m.parts) for m in history) == 30_000
    del history
    print("session of 10,000 messages / 30,000 parts, in a history of the size above:")
    print(f"  messages(), fresh store (reads the Parquet files): {fmt(timed(fresh, runs))}")
    times, cpu = [], []
    for _ in range(runs):
        store = Store(data_dir)
        store.sql("SELECT 1 FROM part LIMIT 1")  # defines the views (and loads the tail, if any)
        times += timed(lambda: store.messages(big), 1)
        cpu += CPU
    CPU[:] = cpu
    print(f"  messages(), views defined, nothing decoded yet:    {fmt(times)}")
    print(
        f"  messages(), same store again (values cached):       {fmt(timed(lambda: store.messages(big), runs))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        big = build(data_dir, args.parts)
        bench_load(data_dir, big, args.runs)
        bench_views(data_dir, args.runs)


if __name__ == "__main__":
    main()
