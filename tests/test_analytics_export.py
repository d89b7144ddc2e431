"""Exports of the history: a DuckDB database file the DuckDB CLI opens (incremental on re-run),
and Hive-partitioned Parquet that a cron job syncs (only the days that changed are written)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.core.messages import Session, replace
from jupyter_session_agent.store import Store
from jupyter_session_agent.ui.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from _analytics_history import build, questions  # noqa: E402
from _merge_worker import session_values  # noqa: E402

DAY = 86_400_000


def duckdb_cli() -> str:
    """The DuckDB command line (the ``duckdb-cli`` package of the test extra)."""
    found = shutil.which("duckdb") or str(Path(sys.executable).with_name("duckdb"))
    if not os.access(found, os.X_OK):
        pytest.skip("no DuckDB CLI — pip install duckdb-cli")
    return found


def cli_rows(path: Path, query: str) -> list[dict]:
    done = subprocess.run(
        [duckdb_cli(), "-readonly", "-json", str(path), "-c", query],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout or "[]")


def same(ours, theirs) -> bool:
    def norm(v):
        if isinstance(v, float):
            return round(v, 9)
        if hasattr(v, "isoformat"):
            return str(v)[:10]
        return v

    return sorted(json.dumps([norm(v) for v in r], default=str) for r in ours) == sorted(
        json.dumps([norm(v) for v in r], default=str) for r in theirs
    )


# --------------------------------------------------------------------------
# DuckDB database file


def test_export_duckdb_opens_in_the_duckdb_cli_and_reruns_incrementally(ip, store, tmp_path):
    build(store, "alice", 12, seed=0)
    target = tmp_path / "out" / "history.duckdb"
    ip.run_line_magic("agent", f"export-duckdb {target}")
    with pytest.raises(UsageError, match="usage"):
        ip.run_line_magic("agent", "export-duckdb")
    for label, query in questions().items():  # the DuckDB CLI (another process, DuckDB 1.x)
        theirs = [list(r.values()) for r in cli_rows(target, query)]
        ours = store.sql(query).values.tolist()
        assert same(ours, theirs), label
    assert (
        cli_rows(target, "SELECT count(*) AS n FROM part")[0]["n"]
        == store.sql("SELECT count(*) FROM part").iloc[0, 0]
    )

    first = store.sessions()[0]
    store.put(replace(first, title="renamed"))  # one session changed, one new
    store.put(*session_values("late", 1))
    store.flush()
    counts = store.export_duckdb(target)
    assert counts["session"] == 2  # only the changed and the new session are copied again
    assert (
        counts["part"]
        == store.sql(
            f"SELECT count(*) FROM part WHERE session_id IN "
            f"('{first.id}', '{store.sessions()[0].id}')"
        ).iloc[0, 0]
    )
    assert store.export_duckdb(target) == dict.fromkeys(counts, 0)  # nothing changed since
    titles = {r["title"] for r in cli_rows(target, "SELECT title FROM session_summary")}
    assert "renamed" in titles and "late 1" in titles and first.title not in titles
    store.delete("session", first.id)
    store.flush()
    store.export_duckdb(target)
    listed = cli_rows(target, "SELECT session_id FROM session_summary")
    assert first.id not in {r["session_id"] for r in listed}
    summary = cli_rows(target, "SELECT sum(total_cost) AS c, count(*) AS n FROM session_summary")[0]
    ours = store.sql("SELECT sum(total_cost) AS c, count(*) AS n FROM session_summary").iloc[0]
    assert summary["n"] == ours.n and summary["c"] == pytest.approx(ours.c)


def test_export_duckdb_refuses_a_file_held_by_another_program_in_one_line(store, tmp_path):
    store.put(*session_values("x", 0))
    store.flush()
    target = tmp_path / "held.duckdb"
    code = (
        f"import duckdb, time; c = duckdb.connect({str(target)!r}); "
        "print('open', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(UsageError) as err:
            store.export_duckdb(target)
        assert "open in another program" in str(err.value) and "\n" not in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    assert store.export_duckdb(target)["session"] == 1  # closed there: it works
    with pytest.raises(UsageError, match="is a folder"):
        store.export_duckdb(tmp_path)


# --------------------------------------------------------------------------
# Parquet for a team, synced by cron


def parquet_files(out: Path) -> dict[str, tuple]:
    return {
        str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in out.rglob("*.parquet")
    }


def test_export_parquet_writes_only_the_days_that_changed(store, tmp_path):
    base = int(dt.datetime(2026, 5, 4, 12, tzinfo=dt.UTC).timestamp() * 1000)
    day1 = [
        replace(v, time_created=base) if isinstance(v, Session) else v
        for v in session_values("d1", 0)
    ]
    store.put(*day1, time_created=base)
    store.flush()
    out = tmp_path / "shared"
    first = store.export_parquet(out, user="carol")
    assert first["session"] == 1 and first["part"] == 6
    before = parquet_files(out)
    assert any("date=2026-05-04" in name for name in before)

    later = base + 2 * DAY  # a new day: only its partitions are written
    day3 = [
        replace(v, time_created=later) if isinstance(v, Session) else v
        for v in session_values("d3", 0)
    ]
    store.put(*day3, time_created=later)
    store.flush()
    second = store.export_parquet(out, user="carol")
    assert second["session"] == 1 and second["part"] == 6
    after = parquet_files(out)
    day1_files = {k: v for k, v in before.items() if "date=2026-05-04" in k}
    assert day1_files and {k: v for k, v in after.items() if k in day1_files} == day1_files
    assert any("date=2026-05-06" in name for name in after)

    store.put(replace(day1[0], title="renamed"))  # an old day changes: that day is written again
    store.flush()
    third = store.export_parquet(out, user="carol")
    assert third["session"] == 1 and third["part"] == 0
    old_session_file = next(k for k in before if k.startswith("session/"))
    assert parquet_files(out)[old_session_file] != before[old_session_file]  # rewritten
    con = duckdb.connect()
    sessions = f"read_parquet('{out}/session/*/*.parquet')"
    titles = con.execute(f"SELECT title FROM {sessions} ORDER BY 1").fetchall()
    assert titles == [("d3 0",), ("renamed",)]

    store.delete("session", day3[0].id)  # a day with no rows left: its file goes
    store.flush()
    store.export_parquet(out, user="carol")
    assert not list((out / "session" / "date=2026-05-06").glob("*.parquet"))
    assert con.execute(f"SELECT count(*) FROM {sessions}").fetchone() == (1,)


def test_cron_commands_export_from_the_command_line(data_dir, tmp_path, capsys):
    store = Store(data_dir)
    store.put(*session_values("cli", 0))
    store.close()
    out = tmp_path / "team"
    assert main(["export-parquet", str(out), "--user", "dave"]) == 0
    assert "exported" in capsys.readouterr().out
    assert list((out / "part").glob("date=*/dave-*.parquet"))
    assert main(["export-parquet", str(out), "--user", "dave"]) == 0
    assert "nothing new" in capsys.readouterr().out
    target = tmp_path / "mine.duckdb"
    assert main(["export-duckdb", str(target)]) == 0
    assert "duckdb " in capsys.readouterr().out
    assert duckdb.connect(str(target), read_only=True).execute(
        "SELECT count(*) FROM session_summary"
    ).fetchone() == (1,)
    assert main(["export-duckdb", str(tmp_path)]) == 1  # a folder: one line, exit 1
    assert "is a folder" in capsys.readouterr().err
