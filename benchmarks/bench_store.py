"""Store benchmark: load a 10,000-message session, flush cost per step, view vs table (live
journal, compacted file, merged file).

Run: ``python3 benchmarks/bench_store.py`` (about 30 s on 2 cores). Prints
medians of a few runs; nothing is asserted.
"""

from __future__ import annotations

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
    ToolPart,
    UserMessage,
    now_ms,
)
from jupyter_session_agent.store import Store, merge  # noqa: E402

GROUP_BY = (
    "SELECT session_id, count(*) parts, sum(cost) cost, sum(output_tokens) output, "
    "count(*) FILTER (WHERE type = 'tool') tools FROM part GROUP BY session_id ORDER BY cost DESC"
)


def turn(session_id: str, text: str = "please list the files " * 5) -> list:
    """One user message + one assistant step: 2 messages, 6 parts (3 per message)."""
    now = now_ms()
    user = UserMessage(
        id=ids.ascending("message"),
        session_id=session_id,
        time_created=now,
        model=ModelRef("openai", "gpt-4o"),
    )
    reply = AssistantMessage(
        id=ids.ascending("message"),
        session_id=session_id,
        parent_id=user.id,
        time_created=now,
        provider_id="openai",
        model_id="gpt-4o",
        path={"cwd": "/w", "root": "/w"},
        cost=0.0012,
        finish="tool-calls",
        tokens=Tokens(input=900, output=120, cache_read=400),
        time_completed=now + 900,
    )
    part = dict(session_id=session_id, message_id=reply.id)
    return [
        user,
        TextPart(id=ids.ascending("part"), session_id=session_id, message_id=user.id, text=text),
        reply,
        StepStartPart(id=ids.ascending("part"), **part),
        ReasoningPart(
            id=ids.ascending("part"), text="I should run ls. " * 8, time_start=now, **part
        ),
        ToolPart(
            id=ids.ascending("part"),
            call_id="call_1",
            tool="bash",
            **part,
            state=ToolCompleted(
                input={"command": "ls -la"},
                output="file.txt\n" * 30,
                title="ls -la",
                metadata={"exit": 0},
                time_start=now,
                time_end=now + 30,
            ),
        ),
        TextPart(
            id=ids.ascending("part"),
            text="Here are the files.",
            time_start=now,
            time_end=now + 5,
            **part,
        ),
        StepFinishPart(
            id=ids.ascending("part"),
            reason="tool-calls",
            cost=0.0012,
            tokens=Tokens(input=900, output=120, cache_read=400),
            **part,
        ),
    ]


def new_session(directory: str) -> Session:
    now = now_ms()
    return Session(
        id=ids.descending("session"),
        directory=directory,
        title="bench",
        time_created=now,
        time_updated=now,
    )


def timed(fn, runs: int = 3) -> float:
    """Median wall time of ``runs`` calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def load_times(label: str, fn, runs: int = 5) -> None:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    print(f"messages(), {label}: median {statistics.median(times):.3f} s, min {min(times):.3f} s")


def bench_flush(data_dir: Path) -> None:
    store = Store(data_dir / "flush")
    session = new_session(str(data_dir))
    store.put(session)
    for sync in (True, False):
        puts, flushes = [], []
        for _ in range(300):
            values = turn(session.id)
            start = time.perf_counter()
            store.put(*values)
            middle = time.perf_counter()
            store.flush(sync=sync)
            puts.append(middle - start)
            flushes.append(time.perf_counter() - middle)
        p95 = sorted(flushes)[int(len(flushes) * 0.95)]
        print(
            f"step of {len(values)} values, sync={sync}: put {statistics.median(puts) * 1e3:.2f} ms, "
            f"flush median {statistics.median(flushes) * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms"
        )
    store.close()


def bench_load(data_dir: Path) -> None:
    writer = Store(data_dir / "load")
    big = new_session(str(data_dir))
    writer.put(big)
    start = time.perf_counter()
    for i in range(5_000):  # 10,000 messages, 30,000 parts
        writer.put(*turn(big.id))
        if i % 50 == 49:
            writer.flush(sync=False)
    for _ in range(300):  # 300 more sessions for the group-by
        other = new_session(str(data_dir))
        writer.put(other)
        for _ in range(10):
            writer.put(*turn(other.id))
    writer.flush()
    print(f"wrote {5_000 * 8 + 300 * 81:,} values in {time.perf_counter() - start:.1f} s")

    history = writer.messages(big.id)
    assert len(history) == 10_000 and sum(len(m.parts) for m in history) == 30_000
    print("session of 10,000 messages / 30,000 parts:")
    load_times("the writer's own store (values cached by put)", lambda: writer.messages(big.id))
    load_times(
        "fresh store, live JSONL journal (cold)", lambda: Store(writer.data_dir).messages(big.id)
    )
    reader = Store(writer.data_dir)
    reader.messages(big.id)
    load_times("same reader again (decoded values cached)", lambda: reader.messages(big.id))
    group_by("live JSONL", reader)

    writer.close()  # compacts the journal into Parquet (a small file: read into the tail)
    load_times(
        "fresh store, compacted Parquet (cold)", lambda: Store(writer.data_dir).messages(big.id)
    )
    group_by("compacted Parquet (the tail)", Store(writer.data_dir))
    merge(writer.data_dir / "history", force=True)  # merged: the views scan the file
    load_times(
        "fresh store, merged Parquet (cold)", lambda: Store(writer.data_dir).messages(big.id)
    )
    group_by("merged Parquet (scanned)", Store(writer.data_dir))


def group_by(label: str, store: Store) -> None:
    import duckdb

    table = duckdb.connect()
    frame = store.sql("SELECT * FROM part")  # noqa: F841 - read by the next statement
    table.execute("CREATE TABLE part AS SELECT * FROM frame")
    through_view = timed(lambda: store.sql(GROUP_BY), runs=5)
    plain = timed(lambda: table.execute(GROUP_BY).df(), runs=5)
    print(
        f"group-by over {len(frame):,} parts, {label}: view {through_view * 1e3:.1f} ms, plain table "
        f"{plain * 1e3:.1f} ms, ratio {through_view / plain:.1f}x"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_flush(Path(tmp))
        bench_load(Path(tmp))


if __name__ == "__main__":
    main()
