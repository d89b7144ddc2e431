"""Analytics at scale: the questions of docs/analytics.md over 1M (or 10M) parts, each in a fresh
process, through ``sql()`` and through plain DuckDB reading the same files — first-query time
and peak RSS side by side, in the same run.

Run: ``python3 benchmarks/bench_scale.py`` (1M parts, about 5 minutes on 2 shared cores),
``python3 benchmarks/bench_scale.py --parts 10000000`` (10M parts: about 30 minutes, 1.3 GB of
disk; opt-in). ``--keep DIR`` keeps (and reuses) the generated history.

The history is generated directly as the store's own files, not through ``Store.put`` (10M
parts that way would take hours): the same rows ``bench_analytics.py`` writes (one session of
10,000 messages, then sessions of 20 turns, three models, a tool failure every 7th call, 30
days), as journal rows in SQL, typed into small Parquet files the way a finished kernel's
journal is compacted, then merged into a generation by ``store.merge`` (timed: what the
history's upkeep costs at this size).

"Baseline" is DuckDB with no store at all: a fresh ``duckdb.connect()`` whose views are
``read_parquet`` over the same files (the generation's files; they are deduplicated and
typed, so that is all a direct reader needs), with the same view definitions on top. "Ours"
is a fresh process calling ``Store(dir).sql(question)``. Peak RSS is the process's
``ru_maxrss`` (Python, DuckDB and pandas included in both); time is the first query's wall
time (the Store's listing, planning and view definition included).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAY = 86_400_000
BIG_TURNS = 5_000  # the 10,000-message session


def questions() -> dict[str, str]:
    """The questions of docs/analytics.md ("Questions, as queries"), by their comment."""
    text = (ROOT / "docs" / "analytics.md").read_text()
    block = text.split("## Questions, as queries", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    found, label = {}, None
    for line in block.strip().splitlines():
        if line.startswith("--"):
            label = line[2:].strip()
            found[label] = ""
        elif label:
            found[label] += line + "\n"
    return {k: v.strip().rstrip(";") for k, v in found.items()}


EXTRA = {  # the issue's own example: the first group-by over part
    "part: group by session": "SELECT session_id, count(*) parts, sum(cost) cost, "
    "sum(output_tokens) output, "
    "count(*) FILTER (WHERE type = 'tool') tools "
    "FROM part GROUP BY session_id ORDER BY cost DESC",
}


def raw_rows(turns: int, parts: int, t0: int, first: int, last: int) -> str:
    """SQL: the journal rows of turns [first, last) (2 messages and 6 parts each), as
    ``bench_analytics.turn`` writes them, plus each session's row."""
    big = BIG_TURNS

    def ident(prefix: str, value: str, seed: str = "n") -> str:  # an id as ids.py makes them
        return (
            f"'{prefix}_' || lpad(lower(hex({value})), 12, '0') || left(md5({seed}::VARCHAR), 14)"
        )

    part = {k: ident("prt", f"5000000000000 + n * 8 + {k}") for k in range(8)}
    tokens = (
        "json_object('input', inp, 'output', 120, 'reasoning', 0, "
        "'cache', json_object('read', cr, 'write', 0))"
    )
    tool = "json_object('type', 'tool', 'callID', 'call_1', 'tool', tool, 'state', {state})"
    failed = (
        "json_object('status', 'error', 'input', json_object('command', 'ls -la'), "
        "'error', 'exit 2', 'time', json_object('start', t, 'end', t + 30))"
    )
    done = (
        "json_object('status', 'completed', 'input', json_object('command', 'ls -la'), "
        "'output', repeat('file.txt' || chr(10), 30), 'title', 'ls -la', "
        "'metadata', json_object('exit', 0), 'time', json_object('start', t, 'end', t + 30))"
    )
    return f"""
WITH t AS (
  SELECT n, CASE WHEN n < {big} THEN 0 ELSE 1 + (n - {big}) // 20 END AS s,
         {t0} + (n * 6 * 30 * {DAY}) // {parts} AS t,
         ['openai','openai','anthropic'][n % 3 + 1] AS provider,
         ['gpt-4o','gpt-4o-mini','claude-sonnet-4-5'][n % 3 + 1] AS model,
         900 + n % 500 AS inp, 400 * (n % 2) AS cr, ['bash','read','grep'][n % 3 + 1] AS tool
  FROM range({first}, {last}) r(n)),
ids AS (SELECT *, {ident("ses", "(~(7000000000000 + s)) & 281474976710655", "s")} AS sid,
         {ident("msg", "5000000000000 + n * 8")} AS um,
         {ident("msg", "5000000000000 + n * 8 + 2")} AS am
       FROM t),
rows AS (
  SELECT 'session' kind, sid id, sid session_id, NULL::VARCHAR message_id, t, 0 k, n,
    json_object('directory', '/w', 'title', 's' || n,
                'time', json_object('created', t, 'updated', t),
                'slug', '', 'projectID', 'global', 'version', '') data
  FROM ids WHERE n = 0 OR (n >= {big} AND (n - {big}) % 20 = 0)
  UNION ALL SELECT 'message', um, sid, NULL, t, 1, n,
    json_object('role', 'user', 'time', json_object('created', t),
                'model', json_object('providerID', provider, 'modelID', model), 'agent', 'build')
  FROM ids
  UNION ALL SELECT 'part', {part[1]}, sid, um, t, 2, n,
    json_object('type', 'text', 'text', repeat('please list the files ', 5)) FROM ids
  UNION ALL SELECT 'message', am, sid, NULL, t, 3, n,
    json_object('role', 'assistant', 'parentID', um,
                'time', json_object('created', t, 'completed', t + 900),
                'providerID', provider, 'modelID', model, 'agent', 'build', 'mode', 'build',
                'path', json_object('cwd', '/w', 'root', '/w'), 'cost', 0.0012, 'tokens', {tokens},
                'finish', 'tool-calls')
  FROM ids
  UNION ALL SELECT 'part', {part[3]}, sid, am, t, 4, n, json_object('type', 'step-start') FROM ids
  UNION ALL SELECT 'part', {part[4]}, sid, am, t, 5, n,
    json_object('type', 'reasoning', 'text', repeat('I should run ls. ', 8),
                'time', json_object('start', t))
  FROM ids
  UNION ALL SELECT 'part', {part[5]}, sid, am, t, 6, n,
    CASE WHEN n % 7 = 0 THEN {tool.format(state=failed)} ELSE {tool.format(state=done)} END FROM ids
  UNION ALL SELECT 'part', {part[6]}, sid, am, t, 7, n,
    json_object('type', 'text', 'text', 'Here are the files.',
                'time', json_object('start', t, 'end', t + 5))
  FROM ids
  UNION ALL SELECT 'part', {part[7]}, sid, am, t, 8, n,
    json_object('type', 'step-finish', 'reason', 'tool-calls', 'cost', 0.0012, 'tokens', {tokens},
                'metadata', json_object('latencyMs', 400 + n % 900, 'firstTokenMs', 100 + n % 200,
                                        'attempts', 1))
  FROM ids)
SELECT kind, id, session_id, message_id, 1700000000000000000 + n * 16 + k AS rev,
       'bench-1-00000000' AS writer, false AS deleted, t AS time_created, t AS time_updated,
       data::JSON AS data FROM rows"""


def generate(data_dir: Path, parts: int) -> dict:
    """The history's files: small files (as finished kernels leave them, at least 8, about
    100,000 turns each), merged."""
    from jupyter_session_agent.store import merge
    from jupyter_session_agent.store.schema import typed
    from jupyter_session_agent.store.segment import ORDER, connect, copy

    turns = parts // 6
    files = max(8, turns // 100_000)
    t0 = int(time.time() * 1000) - 30 * DAY
    folder = data_dir / "history" / "parquet"
    folder.mkdir(parents=True, exist_ok=True)
    con = connect("3GB", data_dir / "spill")
    start = time.perf_counter()
    bounds = [BIG_TURNS] + [
        BIG_TURNS + (turns - BIG_TURNS) * (i + 1) // files for i in range(files)
    ]
    bounds[-1] = turns
    for i, (first, last) in enumerate(zip([0] + bounds[:-1], bounds)):  # the big session first
        copy(
            con,
            f"{typed(raw_rows(turns, parts, t0, first, last))} ORDER BY {ORDER}",
            folder / f"bench-{i}-0000000{i}.parquet",
            {"level": 0},
        )
    con.close()
    generated = time.perf_counter() - start
    start = time.perf_counter()
    merged = merge(data_dir / "history", force=True)
    took = time.perf_counter() - start
    shutil.rmtree(data_dir / "spill", ignore_errors=True)
    size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    return {
        "turns": turns,
        "generated_s": generated,
        "merge_s": took,
        "merge": merged,
        "bytes": size,
    }


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
mode, data, query = sys.argv[1], sys.argv[2], sys.argv[3]
import duckdb, pandas  # both sides pay for these before the clock starts
if mode == "ours":
    from jupyter_session_agent.store import Store
    t, cpu = time.perf_counter(), time.process_time()
    frame = Store(data).sql(query)
elif mode == "load":
    from jupyter_session_agent.store import Store
    t, cpu = time.perf_counter(), time.process_time()
    history = Store(data).messages(query)
    frame = [None] * len(history)
else:
    import duckdb
    from jupyter_session_agent.store.generation import list_manifests, current_generation
    from jupyter_session_agent.store.schema import DERIVED, KINDS, select_list
    from jupyter_session_agent.store.views import VIEWS
    from pathlib import Path
    folder = Path(data) / "history" / "parquet"
    t, cpu = time.perf_counter(), time.process_time()
    gen = current_generation(list_manifests(folder, {{}}), frozenset(p.name for p in folder.iterdir()))
    con = duckdb.connect()
    con.execute("CREATE SCHEMA _store")
    for kind in (*KINDS, *DERIVED):  # the generation's files, as they are
        names = [f["derived"][kind] if kind in DERIVED else f["name"] for f in gen.files]
        files = ", ".join(repr(str(folder / name)) for name in names)
        where = "" if kind in DERIVED else f" WHERE kind = '{{kind}}' AND deleted IS NOT TRUE"
        con.execute(f"CREATE VIEW _store.{{kind}} AS SELECT {{select_list(kind)}} "
                    f"FROM read_parquet([{{files}}]){{where}}")
    for name, body in VIEWS.items():
        con.execute(f"CREATE VIEW {{name}} AS {{body}}")
    frame = con.execute(query).df()
took, cpu = time.perf_counter() - t, time.process_time() - cpu
# VmHWM: this process's peak resident set (ru_maxrss would include the parent's, across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({{"s": took, "cpu": cpu, "rss_mb": peak / 1024, "rows": len(frame)}}))
"""


def child(mode: str, data_dir: Path, query: str) -> dict:
    code = CHILD.format(root=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code, mode, str(data_dir), query],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per question and side")
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    args = parser.parse_args()
    tmp = None
    if args.keep is not None and (args.keep / "history").exists():
        data_dir = args.keep
        print(f"reusing {data_dir}")
    else:
        data_dir = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
        tmp = None if args.keep else data_dir
        info = generate(data_dir, args.parts)
        print(
            f"history: {info['turns'] * 6:,} parts, {info['turns'] * 2:,} messages; generated as "
            f"small files in {info['generated_s']:.0f} s, merged in {info['merge_s']:.0f} s "
            f"({info['merge']['files']} files, {info['bytes'] / 1e6:.0f} MB)"
        )
    try:
        from jupyter_session_agent.store import Store

        big = (
            Store(data_dir)
            .sql("SELECT session_id FROM session_summary ORDER BY steps DESC LIMIT 1")
            .session_id[0]
        )
        print("first query in a fresh process, median of fresh processes: wall s (CPU s), peak RSS")
        print(
            f"{'question':<46} {'ours':>13} {'baseline':>13} {'ratio':>11} {'ours MB':>8} "
            f"{'base MB':>8} {'ratio':>6}"
        )
        ratios = []
        for label, query in {**EXTRA, **questions()}.items():
            ours, base = [], []
            for _ in range(args.runs):  # interleaved, so both sides see the same load
                ours.append(child("ours", data_dir, query))
                base.append(child("baseline", data_dir, query))
            assert ours[0]["rows"] == base[0]["rows"], (label, ours[0], base[0])
            (o_s, o_c, o_m), (b_s, b_c, b_m) = (
                tuple(statistics.median(r[k] for r in x) for k in ("s", "cpu", "rss_mb"))
                for x in (ours, base)
            )
            ratios.append((o_s / b_s, o_c / b_c, o_m / b_m))
            print(
                f"{label[:46]:<46} {o_s:>6.3f} ({o_c:.2f}) {b_s:>6.3f} ({b_c:.2f}) "
                f"{o_s / b_s:>4.2f}x ({o_c / b_c:.2f}) {o_m:>8.0f} {b_m:>8.0f} "
                f"{o_m / b_m:>5.2f}x"
            )
        for i, what in enumerate(("wall time", "CPU time", "peak RSS")):
            print(
                f"{what} ratio: median {statistics.median(r[i] for r in ratios):.2f}x, "
                f"worst {max(r[i] for r in ratios):.2f}x"
            )
        print("targets: time <= 1.5x, memory <= 2x")
        loads = [child("load", data_dir, big) for _ in range(args.runs)]
        wall, cpu, peak = (statistics.median(r[k] for r in loads) for k in ("s", "cpu", "rss_mb"))
        print(
            f"messages() of the 10,000-message session, fresh process: median {wall:.3f} s "
            f"(CPU {cpu:.3f} s), peak RSS {peak:.0f} MB"
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
