"""Framework cost: import + %load_ext, and per-turn overhead against the raw openai client.

(a) ``import jupyter_session_agent`` + ``%load_ext`` in a fresh interpreter that has
    IPython loaded already (as a kernel has), median of several runs; the baseline is
    loading IPython's own ``autoreload`` extension the same way. Target: under 0.15 s.
(b) One ``%%agent``-equivalent turn (``AgentSession.prompt``: store writes with fsync,
    parts, usage, cost, history → request) against the scripted server, versus the raw
    ``openai`` client sending the *same request body* to the same server and reading the
    same stream. Turns alternate so both see the same machine noise. Target: ratio ≤ 1.2.

Run: ``python benchmarks/bench_overhead.py [--turns 30]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPLY_TEXT = ("The quick brown fox jumps over the lazy dog. " * 45)[:2000]

IMPORT_PROBE = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter()
{body}
print(time.perf_counter() - t)
"""


def import_time(body: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE.format(body=body)],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def turn_overhead(turns: int, delay: float) -> tuple[float, float]:
    import openai

    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.session.agent_session import AgentSession
    from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

    with ScriptedServer() as server, tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        settings = Settings(
            model="openai/scripted",
            data_dir=tmp,
            model_overrides={"openai/scripted": {"context": 128_000, "output": 4096}},
        )
        session = AgentSession.create(settings, directory=tmp)
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
        reply = Reply(text=REPLY_TEXT, delay=delay)
        ours, raw = [], []
        session.prompt("warm up")  # first turn pays one-time costs (catalogue, tool schemas)
        for i in range(turns):
            server.enqueue(reply)
            t = time.perf_counter()
            session.prompt(f"question {i}")
            ours.append(time.perf_counter() - t)
            body = dict(server.requests[-1])
            server.enqueue(reply)
            t = time.perf_counter()
            stream = client.chat.completions.create(**body)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            raw.append(time.perf_counter() - t)
            assert text == REPLY_TEXT
        return statistics.median(ours), statistics.median(raw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--import-runs", type=int, default=7)
    args = parser.parse_args()

    ext = import_time("ip.run_line_magic('load_ext', 'jupyter_session_agent')", args.import_runs)
    base = import_time("ip.run_line_magic('load_ext', 'autoreload')", args.import_runs)
    print(
        f"(a) import + %load_ext jupyter_session_agent: {ext * 1000:.1f} ms "
        f"(baseline %load_ext autoreload: {base * 1000:.1f} ms; ratio {ext / base:.2f}; target < 150 ms)"
    )

    for delay, label in (
        (0.0, "server with no delay (worst case for the ratio)"),
        (0.002, "server streaming 2 ms per chunk (250 chunks)"),
    ):
        ours, raw = turn_overhead(args.turns, delay)
        print(
            f"(b) per turn, {label}: ours {ours * 1000:.1f} ms, raw openai {raw * 1000:.1f} ms, "
            f"ratio {ours / raw:.2f} (target ≤ 1.2)"
        )


if __name__ == "__main__":
    main()
