"""A distributed engine reads the Parquet export: Apache Spark (local mode) answers the analytics
questions of docs/analytics.md with the same numbers as ``sql()``, from files written by
``%agent export-parquet`` (two users sharing one folder), with no schema hints."""

from __future__ import annotations

import datetime as dt
import math
import shutil
import sys
from pathlib import Path

import pytest

from jupyter_session_agent.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from _analytics_history import build, questions  # noqa: E402

if shutil.which("java") is None:
    pytest.skip("no Java runtime — apt-get install default-jre-headless", allow_module_level=True)
pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed — pip install pyspark")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

SPARK_TYPES = {"string", "bigint", "int", "double", "boolean", "date", "timestamp", "timestamp_ntz"}


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("jupyter-session-agent-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def rows_of(records) -> list[tuple]:
    """Rows as sorted tuples with floats rounded (engines sum in different orders)."""

    def norm(value):
        if isinstance(value, float):
            return None if math.isnan(value) else round(value, 9)
        if isinstance(value, (dt.date, dt.datetime)):
            return str(value)[:10]
        return value

    return sorted((tuple(norm(v) for v in row) for row in records), key=repr)


def test_spark_answers_the_analytics_questions_like_sql(ip, magics, store, tmp_path, spark):
    build(store, "alice", 14, seed=0)
    shared = tmp_path / "shared"
    ip.run_line_magic("agent", f"export-parquet {shared} --user alice")  # the public path
    bob = Store(tmp_path / "bob")
    build(bob, "bob", 9, seed=1)
    bob.export_parquet(shared, user="bob")

    for table in (
        "session",
        "message",
        "part",
        "event",
        "step",
        "tool_call",
        "compaction_event",
        "session_summary",
        "daily_cost",
    ):
        frame = spark.read.parquet(str(shared / table))  # no schema given: Spark reads it as is
        odd = {
            f.name: f.dataType.simpleString()
            for f in frame.schema.fields
            if f.dataType.simpleString() not in SPARK_TYPES
        }
        assert not odd, (table, odd)
        frame.createOrReplaceTempView(table)
    users = spark.sql("SELECT `user`, count(*) n FROM session GROUP BY `user`").collect()
    assert sorted((r["user"], r["n"]) for r in users) == [("alice", 14), ("bob", 9)]

    asked = questions()
    assert len(asked) >= 6
    for label, query in asked.items():
        spark_sql = query.replace("quantile_cont(", "percentile(")
        for who, history in (("alice", store), ("bob", bob)):
            ours = rows_of(history.sql(query).itertuples(index=False, name=None))
            scoped = spark_sql
            for table in ("daily_cost", "session_summary", "compaction_event", "tool_call", "step"):
                scoped = scoped.replace(
                    f"FROM {table}", f"FROM (SELECT * FROM {table} WHERE `user` = '{who}')"
                )
            theirs = rows_of(tuple(r) for r in spark.sql(scoped).collect())
            assert theirs == ours, (label, who)
            assert ours, (label, who)  # every question has an answer in this history
    bob.close()
