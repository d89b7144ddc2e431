"""Load time and per-turn CPU of the session and the loop, before and after a change.

For each tree (``--before DIR``: the package as it was, e.g. ``git archive BASE | tar -x -C
DIR``; and this tree), in fresh interpreters, alternating the trees run by run so both see the
same machine noise:

(a) ``import jupyter_session_agent`` (what the kernel pays at ``%load_ext``) and
    ``%load_ext jupyter_session_agent`` in an IPython shell that is already loaded, wall
    time, median of ``--runs``;
(b) importing the session API (``jupyter_session_agent.session.agent_session``: the session,
    the loop, compaction and what they import), median of ``--runs``;
(b') the first ``%%agent`` turn of a kernel: importing the session API, creating a session and
    its first two-step turn (below), wall time in a fresh interpreter, median of ``--runs``:
    what moving imports to the top of a module moves, not adds;
(c) one turn (``AgentSession.prompt``: the user message stored, a two-step turn — a ``python``
    tool call run in an IPython shell, then the answer — against the scripted server, store writes with fsync),
    CPU time of the process (every thread) per turn, median of ``--turns`` after a warm-up.

Ratios are after / before. Run:
``python benchmarks/bench_session_load.py --before DIR [--runs 7] [--turns 20]``.
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

IMPORT = """
import time
t = time.perf_counter()
import jupyter_session_agent
print(time.perf_counter() - t)
"""

LOAD_EXT = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter()
ip.run_line_magic("load_ext", "jupyter_session_agent")
print(time.perf_counter() - t)
"""

SESSION = """
import time
import jupyter_session_agent
t = time.perf_counter()
import jupyter_session_agent.session.agent_session
print(time.perf_counter() - t)
"""

FIRST_TURN = """
import os, tempfile, time
from IPython.core.interactiveshell import InteractiveShell
import jupyter_session_agent
shell = InteractiveShell.instance()
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer
with ScriptedServer() as server, tempfile.TemporaryDirectory() as tmp:
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    server.enqueue(Reply(tool_calls=[{"name": "python", "arguments": {"code": "print(2 * 2)"}}]))
    server.enqueue(Reply(text="The answer is 4."))
    t = time.perf_counter()
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.session.agent_session import AgentSession
    settings = Settings(
        model="openai/scripted",
        data_dir=tmp,
        model_overrides={"openai/scripted": {"context": 128_000, "output": 4096}},
        subagents=False,
        permission={"python": "allow"},
    )
    session = AgentSession.create(settings, directory=tmp, shell=shell)
    session.prompt("what is 2 squared?")
    print(time.perf_counter() - t)
"""

TURNS = """
import json, os, statistics, sys, tempfile, time
from IPython.core.interactiveshell import InteractiveShell
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

turns = int(sys.argv[1])
with ScriptedServer() as server, tempfile.TemporaryDirectory() as tmp:
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    settings = Settings(
        model="openai/scripted",
        data_dir=tmp,
        model_overrides={"openai/scripted": {"context": 128_000, "output": 4096}},
        subagents=False,
        permission={"python": "allow"},
    )
    shell = InteractiveShell.instance()
    session = AgentSession.create(settings, directory=tmp, shell=shell)
    cpu = []
    for i in range(turns + 2):  # the first two pay one-time costs (catalogue, tool schemas)
        server.enqueue(Reply(tool_calls=[{"name": "python", "arguments": {"code": f"print({i} * {i})"}}]))
        server.enqueue(Reply(text=f"The answer is {i * i}. " * 20))
        t = time.process_time()
        session.prompt(f"what is {i} squared?")
        cpu.append(time.process_time() - t)
    print(json.dumps(cpu[2:]))
"""


def run(tree: Path, code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tree,
    )
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="the package before")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label, code in (
        ("(a) import jupyter_session_agent", IMPORT),
        ("(a) %load_ext jupyter_session_agent", LOAD_EXT),
        ("(b) import session.agent_session", SESSION),
        ("(b') import, create and first turn", FIRST_TURN),
    ):
        times: dict[str, list[float]] = {k: [] for k in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                times[name].append(float(run(tree, code)))
        b, a = (statistics.median(times[k]) for k in ("before", "after"))
        print(f"{label}: before {b * 1000:.1f} ms, after {a * 1000:.1f} ms, ratio {a / b:.2f}")
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(2):  # two processes per tree, alternating
        for name, tree in trees.items():
            cpu[name] += json.loads(run(tree, TURNS, str(args.turns)))
    b, a = (statistics.median(cpu[k]) for k in ("before", "after"))
    print(
        f"(c) CPU per two-step turn (median of {len(cpu['after'])}): before {b * 1000:.1f} ms, "
        f"after {a * 1000:.1f} ms, ratio {a / b:.2f}"
    )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
