"""A turn's cost as the session grows, with the live view on, in a real kernel.

A real ipykernel runs ``%%agent`` cells against the scripted server (real HTTP and SSE on
loopback) with ``AgentMagics.live = True``, so every turn renders its output in place the way
Jupyter shows it. Each turn is two steps: the model calls the ``python`` tool (run in the
kernel), then answers. Measured per turn, in the kernel process (every thread, from
``/proc/<pid>/task/*/schedstat``): CPU time of the ``%%agent`` cell; CPU time of a cell that
sends the *same request bodies* with the raw ``openai`` client to the same server, reads the
same streams and runs the same tool code ("raw"); and the size of the cell's saved output (the
last bundle of its display, as JSON: what the notebook file keeps).

The turns around turn 10 and around turn ``--turns`` (default 1,000) are measured one by one
(medians of ``--window`` turns); the turns between are run by the same session in one cell
with the live view off, to get there quickly. The model's window is small (8k, 1k of output)
so that the session compacts every few turns from the start, as any long session must: the
requests around turn 10 and around turn 1,000 are then of the same size (the raw client's cost
is the same at both), and what the comparison shows is what grows with the stored history.

``--before DIR`` runs the same measurement first with the package found in DIR (e.g. an
export of an earlier commit: ``git archive BASE | tar -x -C DIR``): before and after in the
same run, on the same machine. The load average is printed at the start and the end.

Run: ``python benchmarks/bench_live_turn.py [--turns 1000] [--window 15] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

ANSWER = ("The square is printed above; the kernel computed it exactly. " * 6).strip()
SETUP = """
%load_ext jupyter_session_agent
%config AgentMagics.model = 'openai/scripted'
%config AgentMagics.model_overrides = {'openai/scripted': {'context': 8192, 'output': 1024}}
%config AgentMagics.titles = False
%config AgentMagics.permission = {'python': 'allow'}
%config AgentMagics.live = True
import json as _json, os as _os, openai as _openai
_raw = _openai.OpenAI(base_url=_os.environ['OPENAI_BASE_URL'], api_key='sk-bench', max_retries=0)
print(_os.getpid())
"""
RAW = """
for _body, _code in _json.load(open({path!r})):
    _stream = _raw.chat.completions.create(**_body)
    _text = ''.join(c.choices[0].delta.content or '' for c in _stream if c.choices)
    if _code:
        exec(_code)
"""
FILL = """
_session = get_ipython().magics_manager.registry['AgentMagics'].current()
for _i in range({first}, {last}):
    _session.prompt(f'question {{_i}}: what is {{_i}} squared? use python')
"""


def replies(i: int):
    from jupyter_session_agent.testing.scripted_server import Reply

    code = f"print({i} * {i})"
    return code, (
        Reply(text="", tool_calls=({"name": "python", "arguments": {"code": code}},)),
        Reply(text=f"{i} squared is {i * i}. {ANSWER}"),
    )


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return total


def measure(tree: Path, turns: int, window: int) -> dict:
    from _kernel import execute, real_kernel

    from jupyter_session_agent.testing.scripted_server import ScriptedServer
    from jupyter_session_agent.ui.display import MIME_TYPE

    with tempfile.TemporaryDirectory() as tmp, ScriptedServer() as server:
        root = Path(tmp)
        env = {"PYTHONPATH": str(tree)}
        with real_kernel(server.base_url, root / "data", root, api_key="sk-bench", **env) as kc:
            _, out = execute(kc, SETUP)
            errors = [m for m in out if m["msg_type"] == "error"]
            assert not errors, errors
            pid = int(
                next(m for m in out if m["msg_type"] == "stream")["content"]["text"].split()[-1]
            )
            done = 0

            def one_turn(i: int) -> tuple[float, float, int]:
                code, script = replies(i)
                server.enqueue(*script)
                seen = len(server.requests)
                t = cpu_ns(pid)
                _, msgs = execute(kc, f"%%agent\nquestion {i}: what is {i} squared? use python")
                ours = cpu_ns(pid) - t
                assert not [m for m in msgs if m["msg_type"] == "error"], msgs
                shown = [
                    m["content"]["data"]
                    for m in msgs
                    if m["msg_type"] in ("display_data", "update_display_data")
                    and MIME_TYPE in m["content"]["data"]
                ]
                saved = len(json.dumps(shown[-1], ensure_ascii=False).encode())
                bodies = server.requests[seen:]
                assert len(bodies) == 2, len(bodies)
                path = root / "bodies.json"
                path.write_text(json.dumps([[bodies[0], code], [bodies[1], None]]))
                server.enqueue(*script)
                t = cpu_ns(pid)
                _, msgs = execute(kc, RAW.format(path=str(path)))
                raw = cpu_ns(pid) - t
                assert not [m for m in msgs if m["msg_type"] == "error"], msgs
                return ours / 1e9, raw / 1e9, saved

            def run(first: int, last: int) -> list[tuple[float, float, int]]:
                nonlocal done
                rows = [one_turn(i) for i in range(first, last)]
                done = last
                return rows

            def fill(last: int) -> None:
                nonlocal done
                for i in range(done, last):
                    server.enqueue(*replies(i)[1])
                _, msgs = execute(kc, FILL.format(first=done, last=last), timeout=3600)
                assert not [m for m in msgs if m["msg_type"] == "error"], msgs
                done = last

            start_turn = max(1, 10 - window // 2)
            fill(start_turn - 1)
            early = run(start_turn - 1, start_turn - 1 + window)
            fill(turns - window)
            late = run(turns - window, turns)
            _, msgs = execute(
                kc,
                "_s = get_ipython().magics_manager.registry['AgentMagics'].session.budget_report()\n"
                "print(_s.turns, _s.compactions, len(_s.steps))",
            )
            stats = next(m for m in msgs if m["msg_type"] == "stream")["content"]["text"].split()

    def summary(rows: list[tuple[float, float, int]]) -> dict:
        ours = statistics.median(r[0] for r in rows)
        raw = statistics.median(r[1] for r in rows)
        return {
            "ours_ms": ours * 1000,
            "raw_ms": raw * 1000,
            "ratio": ours / raw,
            "saved_kb": statistics.median(r[2] for r in rows) / 1000,
            "saved_max_kb": max(r[2] for r in rows) / 1000,
        }

    return {
        "early": summary(early),
        "late": summary(late),
        "turns": int(stats[0]),
        "compactions": int(stats[1]),
        "steps": int(stats[2]),
    }


def report(label: str, result: dict, turns: int, window: int) -> None:
    e, late = result["early"], result["late"]
    print(
        f"{label}: session of {result['turns']} turns, {result['steps']} steps, "
        f"{result['compactions']} compactions"
    )
    for name, row in ((f"turn ~10 ({window} turns)", e), (f"turn ~{turns} ({window} turns)", late)):
        print(
            f"  {name}: kernel CPU per turn {row['ours_ms']:.1f} ms, raw openai {row['raw_ms']:.1f} ms"
            f" (×{row['ratio']:.2f}); saved output {row['saved_kb']:.1f} KB (max {row['saved_max_kb']:.1f})"
        )
    print(
        f"  turn {turns} / turn 10: ×{late['ours_ms'] / e['ours_ms']:.2f} (target ≤ 1.5); "
        f"vs raw at turn {turns}: ×{late['ratio']:.2f} (target ≤ 2); "
        f"saved output at turn {turns}: {late['saved_max_kb']:.1f} KB (target ≤ 20)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=15)
    parser.add_argument("--before", type=Path, help="a tree holding the package before the change")
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    trees = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
    for label, tree in trees:
        t = time.perf_counter()
        result = measure(tree.resolve(), args.turns, args.window)
        report(f"{label} ({time.perf_counter() - t:.0f} s)", result, args.turns, args.window)
        print(f"  load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
