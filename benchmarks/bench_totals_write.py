"""What keeping the session totals costs a turn: before and after, same run.

The store keeps ``session_totals`` up to date in the tail (the rows not merged yet) whenever a
read brings the tail up to date: the sessions the new rows touch are summed again. So the cost
lands on a turn that writes its rows and then reads through the views (after any ``sql()``, every
``messages()`` does). Each side is a fresh process (``--before DIR``: a tree holding the earlier
package) that grows one session in its journal, turn by turn: a prompt, two steps with a tool
call, usage and cost, flushed, then ``messages()`` read back through the views; the CPU time of
each turn (``time.process_time``, this process only) is kept, and medians of the turns around
turn 10 and around the last turn are printed with their ratio after / before (``--repeat`` pairs
of runs, alternated: the machine's load changes between runs; medians over every run's turns).

Run: ``python benchmarks/bench_totals_write.py --before DIR [--turns 500] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
from dataclasses import replace
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage, ModelRef, Session, StepFinishPart, StepStartPart, TextPart, Tokens,
    ToolCompleted, ToolPart, UserMessage, now_ms)
from jupyter_session_agent.store import Store

turns, window = int(sys.argv[1]), int(sys.argv[2])
store = Store(tempfile.mkdtemp())
now = now_ms()
info = Session(id=ids.descending("session"), directory="/w", title="t", time_created=now,
               time_updated=now)
store.put(info)
store.flush()
store.sql("SELECT 1")  # the views are in use: reads go through the tail from now on
sid, times = info.id, []
for n in range(turns):
    t = time.process_time()
    user = UserMessage(ids.ascending("message"), sid, now_ms(), ModelRef("openai", "m"))
    store.put(user, TextPart(ids.ascending("part"), sid, user.id, text=f"question {n}"))
    for step in range(2):
        reply = AssistantMessage(ids.ascending("message"), sid, user.id, now_ms(), "openai", "m")
        tokens = Tokens(input=1000 + n, output=50)
        parts = [StepStartPart(ids.ascending("part"), sid, reply.id)]
        if step == 0:
            parts.append(ToolPart(ids.ascending("part"), sid, reply.id, call_id=f"c{n}",
                tool="python", state=ToolCompleted({"code": "1+1"}, "2", "py", {}, 1, 2)))
        else:
            parts.append(TextPart(ids.ascending("part"), sid, reply.id, text="answer " * 20))
        parts.append(StepFinishPart(ids.ascending("part"), sid, reply.id, cost=0.001,
                                    tokens=tokens))
        done = replace(reply, cost=0.001, tokens=tokens, finish="stop", time_completed=now_ms())
        store.put(*parts, done)
        store.flush()
        store.messages(sid)  # read back through the views: the tail (and its totals) refreshed
    times.append(time.process_time() - t)
print(json.dumps({"early": times[10 - window // 2: 10 + window // 2], "late": times[-window:]}))
"""


def child(tree: Path, turns: int, window: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(turns), str(window)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=str(tree),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="before/after pairs, alternated")
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    runs: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for _ in range(args.repeat):  # alternated, so that a change of load hits both sides
        for label, tree in (("before", args.before), ("after", ROOT)):
            r = child(tree.resolve(), args.turns, args.window)
            for k, v in r.items():
                runs[label].setdefault(k, []).extend(v)
            print(
                f"{label}: CPU per turn (write, flush, read back) turn ~10 "
                f"{statistics.median(r['early']) * 1000:.1f} ms, turn ~{args.turns} "
                f"{statistics.median(r['late']) * 1000:.1f} ms",
                flush=True,
            )
    got = {
        label: {k: statistics.median(v) * 1000 for k, v in r.items()} for label, r in runs.items()
    }
    for k, name in (("early", "turn ~10"), ("late", f"turn ~{args.turns}")):
        print(f"after / before at {name}: ×{got['after'][k] / got['before'][k]:.2f}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
