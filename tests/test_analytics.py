"""Analytics over the history: the views' numbers, read-only SQL, live writers, plots, Parquet export."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from jupyter_session_agent import analytics
from jupyter_session_agent import sql as package_sql
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.errors import ReadOnlyError, UsageError
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    CompactionPart,
    ModelRef,
    Session,
    StepFinishPart,
    StepStartPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    error_data,
    replace,
)
from jupyter_session_agent.loop.compaction import CompactionEvent
from jupyter_session_agent.store import Store

ROOT = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).with_name("_store_writer.py")
DAY1 = int(dt.datetime(2026, 1, 5, 10, tzinfo=dt.UTC).timestamp() * 1000)
DAY2 = int(dt.datetime(2026, 1, 6, 12, tzinfo=dt.UTC).timestamp() * 1000)


class History:
    """A small history with known numbers (see each test for the arithmetic)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = 0

    def at(self, t: int, *values) -> None:
        self.store.put(*values, time_created=t)

    def session(self, t: int, title: str, **kw) -> Session:
        info = Session(
            id=ids.descending("session"),
            directory="/w",
            title=title,
            time_created=t,
            time_updated=t,
            **kw,
        )
        self.at(t, info)
        return info

    def user(
        self,
        t: int,
        sid: str,
        text: str | None = "go",
        *,
        synthetic=None,
        model="openai/gpt-4o",
        parts=(),
    ):
        info = UserMessage(ids.ascending("message"), sid, t, ModelRef.parse(model))
        made = (
            [TextPart(ids.ascending("part"), sid, info.id, text=text, synthetic=synthetic)]
            if text
            else []
        )
        made += [make(info.id) for make in parts]
        self.at(t, info, *made)
        return info

    def step(
        self,
        t: int,
        sid: str,
        parent: str,
        model: str,
        cost: float,
        tokens: Tokens,
        *,
        tools=(),
        reason="stop",
        latency=None,
        first=None,
        attempts=1,
        summary=None,
        error=None,
        finish=True,
    ):
        provider, _, name = model.partition("/")
        info = AssistantMessage(
            ids.ascending("message"),
            sid,
            parent,
            t,
            provider,
            name,
            cost=cost,
            tokens=tokens,
            finish=reason,
            summary=summary,
            error=error,
            time_completed=t + 5,
            agent="compaction" if summary else "build",
        )
        keys = dict(session_id=sid, message_id=info.id)
        parts = [StepStartPart(ids.ascending("part"), **keys)]
        parts += [
            ToolPart(ids.ascending("part"), call_id=f"c{i}", tool=name_, state=state, **keys)
            for i, (name_, state) in enumerate(tools)
        ]
        if summary:
            parts.append(TextPart(ids.ascending("part"), text="## Goal\nsummary", **keys))
        if finish:
            metadata = {"latencyMs": latency, "firstTokenMs": first, "attempts": attempts}
            parts.append(
                StepFinishPart(
                    ids.ascending("part"),
                    reason=reason,
                    cost=cost,
                    tokens=tokens,
                    metadata=metadata,
                    **keys,
                )
            )
        self.at(t, info, *parts)
        return info


def completed(
    start: int, duration: int, output: str, compacted: int | None = None
) -> ToolCompleted:
    return ToolCompleted(
        input={"x": 1},
        output=output,
        title="t",
        metadata={},
        time_start=start,
        time_end=start + duration,
        time_compacted=compacted,
    )


@pytest.fixture
def history(tmp_path):
    """Session A (root, two days, title call, compaction, a child B), session C (day 1)."""
    store = Store(tmp_path / "data")
    h = History(store)
    a = h.session(
        DAY1,
        "analysis",
        title_usage={
            "model": "openai/gpt-4o-mini",
            "cost": 0.001,
            "time": DAY1,
            "tokens": {"input": 30, "output": 5},
        },
    )
    u1 = h.user(DAY1 + 1000, a.id, "load the data")
    h.step(
        DAY1 + 2000,
        a.id,
        u1.id,
        "openai/gpt-4o",
        0.01,
        Tokens(input=100, output=20, reasoning=5, cache_read=50, cache_write=10),
        tools=[("bash", completed(DAY1 + 2000, 30, "x" * 100))],
        reason="tool-calls",
        latency=900,
        first=120,
    )
    h.step(
        DAY1 + 3000,
        a.id,
        u1.id,
        "openai/gpt-4o",
        0.02,
        Tokens(input=300, output=40, cache_read=200, total=540, estimated=True),
        latency=1500,
        first=300,
        attempts=2,
    )
    u2 = h.user(DAY2 + 1000, a.id, "and now the plot")
    h.step(
        DAY2 + 2000,
        a.id,
        u2.id,
        "anthropic/claude-x",
        0.005,
        Tokens(input=400, output=10),
        reason="tool-calls",
        tools=[
            (
                "read",
                ToolError(
                    input={}, error="no such file", time_start=DAY2 + 2000, time_end=DAY2 + 2005
                ),
            ),
            (
                "bash",
                ToolError(
                    input={},
                    error="Tool execution was interrupted",
                    time_start=DAY2 + 2000,
                    time_end=DAY2 + 2100,
                    metadata={"interrupted": True},
                ),
            ),
            ("grep", completed(DAY2 + 2000, 7, "y" * 50, compacted=DAY2 + 5000)),
        ],
    )
    h.step(
        DAY2 + 3000,
        a.id,
        u2.id,
        "anthropic/claude-x",
        0.0,
        Tokens(),
        finish=False,
        error=error_data("APIError", "overloaded", statusCode=529),
    )
    h.at(
        DAY2 + 4000,
        CompactionEvent(
            id=ids.ascending("event"),
            session_id=a.id,
            kind="prune",
            cause="auto",
            outcome="ok",
            time_created=DAY2 + 4000,
            tokens_before=900,
            tokens_after=600,
        ),
    )
    u3 = h.user(
        DAY2 + 5000,
        a.id,
        None,
        parts=[lambda mid: CompactionPart(ids.ascending("part"), a.id, mid, auto=True)],
    )
    h.step(
        DAY2 + 6000, a.id, u3.id, "openai/gpt-4o", 0.003, Tokens(input=500, output=60), summary=True
    )
    h.at(
        DAY2 + 7000,
        CompactionEvent(
            id=ids.ascending("event"),
            session_id=a.id,
            kind="summary",
            cause="auto",
            outcome="ok",
            time_created=DAY2 + 7000,
            tokens_before=1000,
            tokens_after=300,
            llm_calls=1,
            cost=0.003,
        ),
    )
    h.user(DAY2 + 8000, a.id, "Continue", synthetic=True)
    b = h.session(DAY2 + 9000, "child", parent_id=a.id)
    ub = h.user(DAY2 + 9000, b.id, "subtask")
    h.step(DAY2 + 9500, b.id, ub.id, "openai/gpt-4o", 0.03, Tokens(input=50, output=5))
    c = h.session(DAY1 + 50_000, "other")
    uc = h.user(DAY1 + 50_000, c.id, "hi")
    h.step(
        DAY1 + 51_000,
        c.id,
        uc.id,
        "openai/gpt-4o",
        0.5,
        Tokens(input=1000, output=100, cache_read=1000),
    )
    store.flush()
    h.ids = {"a": a.id, "b": b.id, "c": c.id}
    yield h
    store.close()


def rows(frame) -> list[dict]:
    return frame.to_dict("records")


# --------------------------------------------------------------------------
# the views


def test_step_view(history):
    store, a = history.store, history.ids["a"]
    steps = store.sql("SELECT * FROM step WHERE session_id = $1 ORDER BY id", [a])
    assert list(steps.model) == ["gpt-4o", "gpt-4o", "claude-x", "gpt-4o"]
    assert list(steps.provider) == ["openai", "openai", "anthropic", "openai"]
    assert list(steps.summary) == [False, False, False, True]
    first, second = rows(steps)[:2]
    assert (
        first["input_tokens"],
        first["output_tokens"],
        first["reasoning_tokens"],
        first["cache_read_tokens"],
        first["cache_write_tokens"],
    ) == (100, 20, 5, 50, 10)
    assert (
        first["prompt_tokens"] == 160 and first["context_tokens"] == 180
    )  # no total reported: the sum
    assert second["context_tokens"] == 540 and second["prompt_tokens"] == 500  # the reported total
    assert (first["latency_ms"], first["first_token_ms"], first["attempts"]) == (900, 120, 1)
    assert (second["latency_ms"], second["first_token_ms"], second["attempts"]) == (1500, 300, 2)
    assert list(steps.estimated) == [False, True, False, False]
    assert list(steps.finish_reason) == ["tool-calls", "stop", "tool-calls", "stop"]
    assert list(steps.cost) == pytest.approx([0.01, 0.02, 0.005, 0.003])
    assert steps.time[0] == dt.datetime(2026, 1, 5, 10, 0, 2)  # UTC, the step's end
    assert (
        len(store.sql("SELECT * FROM step")) == 6
    )  # + child B + session C; the failed call has no step


def test_tool_call_view(history):
    calls = history.store.sql("SELECT * FROM tool_call ORDER BY time, tool")
    got = {(r["tool"], r["status"]): r for r in rows(calls)}
    assert set(got) == {
        ("bash", "completed"),
        ("read", "error"),
        ("bash", "interrupted"),
        ("grep", "completed"),
    }
    assert (
        got["bash", "completed"]["duration_ms"] == 30
        and got["bash", "completed"]["output_length"] == 100
    )
    assert not got["bash", "completed"]["pruned"] and got["grep", "completed"]["pruned"]
    assert got["grep", "completed"]["pruned_at"] == dt.datetime(2026, 1, 6, 12, 0, 5)
    assert (
        got["read", "error"]["error"] == "no such file" and got["read", "error"]["duration_ms"] == 5
    )
    assert got["bash", "interrupted"]["model"] == "claude-x"


def test_session_summary_rolls_up_titles_summaries_and_subagents(history):
    summary = {r["session_id"]: r for r in rows(history.store.sql("SELECT * FROM session_summary"))}
    a, b, c = (summary[history.ids[k]] for k in "abc")
    assert (a["title"], a["turns"], a["steps"], a["tool_calls"], a["tool_errors"], a["errors"]) == (
        "analysis",
        2,
        4,
        4,
        2,
        1,
    )  # the compaction request and the synthetic "Continue" are not turns
    assert (a["compactions"], a["prunes"], a["subagents"]) == (1, 1, 1)
    assert (
        a["input_tokens"],
        a["output_tokens"],
        a["reasoning_tokens"],
        a["cache_read_tokens"],
        a["cache_write_tokens"],
        a["max_context_tokens"],
    ) == (1300, 130, 5, 250, 10, 560)
    assert a["cost"] == pytest.approx(0.035) and a["summary_cost"] == pytest.approx(0.003)
    assert a["title_cost"] == pytest.approx(0.001) and a["subagent_cost"] == pytest.approx(0.03)
    assert a["total_cost"] == pytest.approx(0.035 + 0.003 + 0.001 + 0.03)
    assert a["model"] == "gpt-4o" and a["time_created"] == dt.datetime(2026, 1, 5, 10)
    assert b["parent_id"] == history.ids["a"] and b["total_cost"] == pytest.approx(0.03)
    assert c["total_cost"] == pytest.approx(0.5) and c["turns"] == 1


def test_daily_cost_counts_every_call(history):
    frame = history.store.sql("SELECT * FROM daily_cost ORDER BY day, provider, model")
    got = {(str(r["day"])[:10], r["provider"], r["model"]): r for r in rows(frame)}
    assert set(got) == {
        ("2026-01-05", "openai", "gpt-4o"),
        ("2026-01-05", "openai", "gpt-4o-mini"),
        ("2026-01-06", "anthropic", "claude-x"),
        ("2026-01-06", "openai", "gpt-4o"),
    }
    day1 = got["2026-01-05", "openai", "gpt-4o"]
    assert (day1["calls"], day1["sessions"], day1["input_tokens"], day1["cache_read_tokens"]) == (
        3,
        2,
        1400,
        1250,
    )
    assert day1["cost"] == pytest.approx(0.53)
    title = got["2026-01-05", "openai", "gpt-4o-mini"]
    assert (title["calls"], title["title_calls"], title["input_tokens"], title["cost"]) == (
        1,
        1,
        30,
        0.001,
    )
    assert got["2026-01-06", "openai", "gpt-4o"]["cost"] == pytest.approx(
        0.033
    )  # summary + subagent
    total = history.store.sql(
        "SELECT sum(total_cost) FROM session_summary WHERE parent_id IS NULL"
    ).iloc[0, 0]
    assert frame.cost.sum() == pytest.approx(total)  # every cent is in both


def test_compaction_event_and_reports(history):
    store, a = history.store, history.ids["a"]
    events = analytics.compactions(store, a)
    assert list(events.kind) == ["prune", "summary"] and list(events.after_step) == [3, 4]
    context = analytics.context_per_step(store, a)
    assert list(context.step) == [1, 2, 3, 4] and list(context.context_tokens) == [
        180,
        540,
        410,
        560,
    ]
    assert list(context.compaction.fillna("")) == [
        "",
        "",
        "",
        "prune",
    ]  # the summary came after the last call
    cache = analytics.cache_hit_ratio(store).set_index("model")
    assert cache.cache_hit_ratio["gpt-4o"] == pytest.approx(1250 / 3210)
    assert cache.cache_hit_ratio["claude-x"] == 0
    tools = analytics.tool_failure_rates(store).set_index("tool")
    assert tools.loc["bash", ["calls", "completed", "interrupted"]].tolist() == [2, 1, 1]
    assert (
        tools.failure_rate["bash"] == 0.5
        and tools.failure_rate["read"] == 1
        and tools.failure_rate["grep"] == 0
    )
    assert list(analytics.cost_per_day(store).cost) == pytest.approx([0.53, 0.001, 0.005, 0.033])


# --------------------------------------------------------------------------
# read-only


WRITES = [
    "INSERT INTO _store.part SELECT * FROM _store.part",
    "DELETE FROM _store.part",
    "DROP TABLE _store.part",
    "UPDATE _store.message SET cost = 0",
    "DROP VIEW step",
    "CREATE OR REPLACE VIEW step AS SELECT 1",
    "CREATE TABLE t AS SELECT * FROM step",
    "TRUNCATE _store.session",
    "ALTER TABLE _store.part ADD COLUMN x INT",
    "ATTACH 'other.duckdb' AS other",
    "COPY (SELECT * FROM step) TO 'steps.csv'",
    "EXPORT DATABASE 'dump'",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "INSTALL sqlite",
    "LOAD parquet",
    "CHECKPOINT",
    "SELECT 1; DELETE FROM _store.tombstone",
    "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
    "EXPLAIN ANALYZE DELETE FROM _store.part",
    "CALL enable_logging()",
    "BEGIN TRANSACTION",
    "VACUUM",
]


def test_write_attempts_are_refused_and_change_nothing(history, tmp_path):
    store = history.store
    files = {p: p.stat().st_size for p in store.data_dir.rglob("*") if p.is_file()}
    views = ("step", "tool_call", "daily_cost", "session_summary", "part", "compaction_event")

    def snapshot():
        return {
            view: store.sql(f"SELECT * FROM {view} ORDER BY ALL").to_json(
                orient="records", date_format="iso"
            )
            for view in views
        }

    before = snapshot()
    os.chdir(tmp_path)
    for query in WRITES:
        with pytest.raises(ReadOnlyError) as err:
            store.sql(query)
        assert "read-only" in str(err.value) and "\n" not in str(err.value), query
    with pytest.raises(ReadOnlyError):
        package_sql("DROP TABLE _store.part", data_dir=str(store.data_dir))
    with pytest.raises(UsageError):  # reading outside the history is an error too, not a write
        store.sql("SELECT * FROM read_text('/etc/hostname')")
    assert snapshot() == before
    assert {p: p.stat().st_size for p in store.data_dir.rglob("*") if p.is_file()} == files
    assert not {"other.duckdb", "steps.csv", "dump"} & {p.name for p in tmp_path.iterdir()}


def test_magics_refuse_writes_with_one_line(ip, magics, store):
    store.put(
        Session(id="ses_x", directory="/", title="kept", time_created=DAY1, time_updated=DAY1)
    )
    store.flush()
    for run in (
        lambda q: ip.run_line_magic("agent", f"sql {q}"),
        lambda q: ip.run_cell_magic("agent_sql", "", q),
    ):
        with pytest.raises(ReadOnlyError, match="read-only"):
            run("DELETE FROM _store.session")
        with pytest.raises(ReadOnlyError, match="read-only"):
            run("ATTACH 'x.duckdb'")
    ip.run_cell_magic("agent_sql", "frame <<", "SELECT title FROM session_summary")
    assert list(ip.user_ns.pop("frame").title) == ["kept"]
    assert list(package_sql("SELECT title FROM session").title) == [
        "kept"
    ]  # same history via the env var


# --------------------------------------------------------------------------
# live writers, the catalog's bookkeeping


def spawn(data_dir: Path, *args: str, pause: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "JSA_WRITER_PAUSE": str(pause)}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_queries_run_while_another_process_writes(tmp_path):
    reader = Store(tmp_path)
    reader.sql(
        "SELECT count(*) FROM session_summary"
    )  # its first query's setup, before the writer runs
    writer = spawn(tmp_path, "turns", "80", "w", pause=0.03)  # >= 2.4 s of writing
    seen = []
    while writer.poll() is None:
        frame = reader.sql(
            "SELECT count(*) sessions, sum(tool_calls) tools, sum(turns) turns FROM session_summary"
        )
        seen.append(tuple(int(x) for x in frame.fillna(0).iloc[0]))
        time.sleep(0.005)
    assert writer.wait() == 0
    writer.stdout.close()
    final = (
        reader.sql("SELECT count(*), sum(tool_calls), sum(turns) FROM session_summary")
        .iloc[0]
        .tolist()
    )
    assert final == [80, 80, 80]
    assert seen == sorted(seen) and all(
        s == t == n for s, t, n in seen
    )  # whole turns, never half a one
    assert len(set(seen)) > 2  # it really ran while the writer wrote
    for view in ("session", "message", "part"):
        assert reader.sql(f"SELECT count(*) - count(DISTINCT id) FROM {view}").iloc[0, 0] == 0
    fresh = Store(tmp_path)
    some = fresh.sessions()[0].id
    assert fresh.messages(some) == reader.messages(some)  # files path == catalog path


def journal_of(store: Store) -> Path:
    return store.journal_path


def test_catalog_newest_revision_tombstones_and_late_writes(tmp_path):
    a, b, reader = Store(tmp_path), Store(tmp_path), Store(tmp_path)
    h = History(a)
    s = h.session(DAY1, "s")
    u = h.user(DAY1, s.id, "first")
    a.flush()
    assert reader.sql("SELECT count(*) FROM part").iloc[0, 0] == 1  # the catalog is loaded now
    text = reader.messages(s.id)[0].parts[0]
    a.put(replace(text, text="second"))
    a.flush()
    assert reader.sql("SELECT text_length FROM part").iloc[0, 0] == len("second")
    late = replace(text, text="late")
    a.put(late)  # rev r1, not yet flushed …
    b.delete("part", text.id)  # … the tombstone is newer (r2 > r1)
    b.flush()
    assert reader.sql("SELECT count(*) FROM part").iloc[0, 0] == 0
    a.flush()  # the older revision arrives after the tombstone: it stays deleted
    assert reader.sql("SELECT count(*) FROM part").iloc[0, 0] == 0
    assert (
        reader.messages(s.id)
        == Store(tmp_path).messages(s.id)
        == [type(reader.messages(s.id)[0])(u, ())]
    )
    a.put(replace(text, text="revived"))  # a newer revision than the tombstone brings it back
    a.flush()
    assert reader.messages(s.id)[0].parts[0].text == "revived"


def test_catalog_waits_for_a_torn_line_and_survives_compaction(tmp_path):
    writer, reader = Store(tmp_path), Store(tmp_path)
    h = History(writer)
    s = h.session(DAY1, "s")
    h.user(DAY1, s.id, "one")
    writer.flush()
    assert reader.sql("SELECT count(*) FROM message").iloc[0, 0] == 1
    journal = journal_of(writer)
    user = UserMessage(ids.ascending("message"), s.id, DAY1, ModelRef("openai", "m"))
    line = json.dumps(
        {
            "kind": "message",
            "id": user.id,
            "session_id": s.id,
            "message_id": None,
            "rev": 1,
            "writer": journal.stem,
            "deleted": False,
            "time_created": DAY1,
            "time_updated": DAY1,
            "data": {k: v for k, v in user.to_data().items() if k not in ("id", "sessionID")},
        }
    )
    with open(journal, "a") as f:  # half a line, as a writer in the middle of write() leaves it
        f.write(line[:40])
    assert reader.sql("SELECT count(*) FROM message").iloc[0, 0] == 1
    with open(journal, "a") as f:
        f.write(line[40:] + "\n")
    assert reader.sql("SELECT count(*) FROM message").iloc[0, 0] == 2
    h.user(DAY1, s.id, "three")
    writer.close()  # journal → Parquet: the same rows, from another file
    assert not journal.exists()
    assert reader.sql("SELECT count(*), count(DISTINCT id) FROM message").iloc[0].tolist() == [3, 3]
    assert len(reader.messages(s.id)) == 3
    shutil.rmtree(tmp_path / "history")  # the history is gone: the catalog starts again
    assert reader.sql("SELECT count(*) FROM message").iloc[0, 0] == 0


def test_catalog_settles_a_dead_writers_tool_once(tmp_path):
    dead = tmp_path / "history" / "live" / "host-1-dead.jsonl"
    live = Store(tmp_path)
    h = History(live)
    s = h.session(DAY1, "s")
    u = h.user(DAY1, s.id, "go")
    live.flush()
    reader = Store(tmp_path)
    assert reader.sql("SELECT count(*) FROM part").iloc[0, 0] == 1
    running = ToolPart(
        ids.ascending("part"),
        s.id,
        u.id,
        call_id="c",
        tool="bash",
        state=ToolCompleted(input={}, output="", title="", metadata={}, time_start=1, time_end=2),
    )
    row = {
        "kind": "part",
        "id": running.id,
        "session_id": s.id,
        "message_id": u.id,
        "rev": 5,
        "writer": dead.stem,
        "deleted": False,
        "time_created": DAY1,
        "time_updated": DAY1,
        "data": {
            **{
                k: v
                for k, v in running.to_data().items()
                if k not in ("id", "sessionID", "messageID")
            },
            "state": {"status": "running", "input": {}, "time": {"start": 1}},
        },
    }
    with open(dead, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # alive while we hold it
        f.write(json.dumps(row) + "\n")
        f.flush()
        assert reader.sql("SELECT status FROM tool_call").status.tolist() == ["running"]
    reader.tidy()  # its writer is gone: tidying compacts it, and the next read settles the tool
    assert reader.sql("SELECT status, error FROM tool_call").iloc[0].tolist() == [
        "interrupted",
        "Tool execution was interrupted",
    ]
    assert reader.messages(s.id)[0].parts[-1].state.interrupted


# --------------------------------------------------------------------------
# plots and magics


def test_plots_are_figures_that_render(history):
    store = history.store
    for figure in (
        analytics.plot_context(store, history.ids["a"]),
        analytics.plot_cost(store),
        analytics.plot_cache(store),
        analytics.plot_tools(store),
        analytics.plot_cache(store, "day"),
    ):
        png = figure._repr_png_()
        assert png.startswith(b"\x89PNG") and len(png) > 5_000
    assert analytics.plot_context(store).axes  # default: the most recently updated root session
    empty = Store(history.store.data_dir.parent / "empty")
    assert analytics.plot_tools(empty)._repr_png_().startswith(b"\x89PNG")
    with pytest.raises(UsageError):
        analytics.cache_hit_ratio(store, by="week")


def test_plot_and_report_magics(ip, magics, data_dir):
    store = magics.store()
    h = History(store)
    s = h.session(DAY1, "s")
    u = h.user(DAY1, s.id, "go")
    h.step(
        DAY1 + 10,
        s.id,
        u.id,
        "openai/scripted",
        0.25,
        Tokens(input=10, output=2),
        tools=[("bash", completed(DAY1, 3, "out"))],
    )
    store.flush()
    for line in (
        "plot cost",
        "plot cache",
        "plot tools",
        f"plot context {s.id[:12]}",
        "plot cost 10000",
        "plot cache day",
    ):
        assert ip.run_line_magic("agent", line)._repr_png_().startswith(b"\x89PNG"), line
    assert ip.run_line_magic("agent", "report cost").cost.tolist() == [0.25]
    assert ip.run_line_magic("agent", "report sessions").session_id.tolist() == [s.id]
    for bad in (
        "plot",
        "plot pie",
        "plot cost soon",
        "report",
        "export-parquet",
        "export-parquet a b",
    ):
        with pytest.raises(UsageError, match="usage"):
            ip.run_line_magic("agent", bad)


# --------------------------------------------------------------------------
# Parquet export


def test_export_parquet_layout_and_round_trip(history, tmp_path, capsys):
    store = history.store
    out = tmp_path / "shared"
    counts = analytics.export_parquet(out, store, user="alice")
    assert counts == {
        "session": 3,
        "message": 13,
        "part": 24,
        "event": 2,
        "step": 6,
        "tool_call": 4,
        "compaction_event": 2,
        "session_summary": 3,
        "daily_cost": 4,
    }
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
    assert f"part/date=2026-01-05/alice-{socket.gethostname()}-0.parquet" in files
    assert {f.split("/")[1] for f in files} == {"date=2026-01-05", "date=2026-01-06"}
    con = duckdb.connect()
    part = con.execute(
        f'SELECT count(*), count(DISTINCT id), any_value("user"), any_value(host), '
        f"count(DISTINCT date) FROM read_parquet('{out}/part/*/*.parquet', hive_partitioning=true)"
    ).fetchone()
    assert part == (24, 24, "alice", history.store.journal_path.stem.rsplit("-", 2)[0], 2)
    again = analytics.export_parquet(
        out, store, user="alice"
    )  # again: nothing changed, nothing written
    assert set(again.values()) == {0}
    bob = Store(tmp_path / "bob")  # another user's history, exported to the same place
    h = History(bob)
    s = h.session(DAY2, "bob's")
    h.step(DAY2, s.id, h.user(DAY2, s.id, "hi").id, "openai/gpt-4o", 1.0, Tokens(input=7, output=1))
    bob.flush()
    analytics.export_parquet(out, bob, user="bob")
    exported = analytics.open_export(out)
    assert exported.execute(
        'SELECT count(*), count(DISTINCT "user") FROM _store.part'
    ).fetchone() == (27, 2)
    ours = store.sql("SELECT * FROM daily_cost ORDER BY day, provider, model")
    theirs = exported.execute(
        "SELECT * FROM daily_cost WHERE NOT (day = '2026-01-06' AND model = 'gpt-4o') "
        "OR cost > 1 ORDER BY day, provider, model"
    ).df()
    assert list(theirs.cost) == pytest.approx([0.53, 0.001, 0.005, 1.033])
    assert theirs.cost.sum() == pytest.approx(ours.cost.sum() + 1.0)
    bob.close()
    assert (out / "views.sql").read_text().count("CREATE OR REPLACE VIEW") >= 9
    assert not list(out.glob(".export-*"))  # no temporary directory left behind


def test_catalog_prefers_the_parquet_file_of_a_journal_read_in_the_same_batch(tmp_path):
    """Between a compaction's rename and its unlink both files hold the same rows (same rev, same
    writer): the Parquet file's settled tool wins, and nothing is counted twice."""
    from jupyter_session_agent.store import journal_to_parquet

    live = tmp_path / "history" / "live"
    live.mkdir(parents=True)
    journal = live / "host-7-dead.jsonl"
    s = Session(
        id=ids.descending("session"),
        directory="/w",
        title="s",
        time_created=DAY1,
        time_updated=DAY1,
    )
    u = UserMessage(ids.ascending("message"), s.id, DAY1, ModelRef("openai", "m"))
    tool = {
        "type": "tool",
        "callID": "c",
        "tool": "bash",
        "state": {"status": "running", "input": {}, "time": {"start": 1}},
    }
    keys = dict(writer=journal.stem, deleted=False, time_created=DAY1, time_updated=DAY1)
    rows = [
        dict(
            kind="session",
            id=s.id,
            session_id=s.id,
            message_id=None,
            rev=1,
            data={"title": "s"},
            **keys,
        ),
        dict(
            kind="message",
            id=u.id,
            session_id=s.id,
            message_id=None,
            rev=2,
            data={k: v for k, v in u.to_data().items() if k not in ("id", "sessionID")},
            **keys,
        ),
        dict(
            kind="part",
            id=ids.ascending("part"),
            session_id=s.id,
            message_id=u.id,
            rev=3,
            data=tool,
            **keys,
        ),
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    journal.write_text(text)
    journal_to_parquet(
        journal, tmp_path / "history"
    )  # host-7-dead.parquet, its tool settled; the journal removed …
    journal.write_text(text)  # … as if the unlink had not happened yet
    with open(journal) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # "alive", so no reader compacts it again
        reader = Store(tmp_path)
        assert reader.sql("SELECT count(*) FROM part").iloc[0, 0] == 1
        assert reader.sql("SELECT status FROM tool_call").status.tolist() == ["interrupted"]
        assert reader.messages(s.id)[0].parts[0].state.interrupted
