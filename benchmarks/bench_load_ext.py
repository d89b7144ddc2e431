"""Load cost of this tree against another checkout of the package, in the same run.

Each probe is a fresh interpreter with IPython loaded (as a kernel has): (a) ``%load_ext
jupyter_session_agent``; (b) that, then a first ``%agent`` command: ``%agent sessions`` (only
its own subcommand module loads) and ``%agent help`` (every subcommand module loads); (c) importing every module of the package below
``ui/`` (what a session's first turn loads). Runs alternate between the two trees so both see
the same machine noise; medians, and their ratio this / before.

Run: ``python benchmarks/bench_load_ext.py --before DIR [--runs 15]`` where ``DIR`` holds the
other checkout's ``jupyter_session_agent`` (e.g. ``git worktree add DIR main``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

PROBE = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter()
{body}
print(time.perf_counter() - t)
"""

LOAD_EXT = "ip.run_line_magic('load_ext', 'jupyter_session_agent')"
FIRST_COMMAND = LOAD_EXT + "\nip.run_line_magic('agent', 'help')"
FIRST_SESSIONS = LOAD_EXT + "\nip.run_line_magic('agent', 'sessions')"
ALL_BELOW_UI = """
import importlib, pkgutil, jupyter_session_agent as p
for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'):
    if not m.name.startswith(('jupyter_session_agent.ui', 'jupyter_session_agent.labextension')):
        if not m.name.endswith(('llama_handler', 'nbval_json', '__main__')):
            importlib.import_module(m.name)
"""


def probe(tree: Path, body: str) -> float:
    data = tempfile.mkdtemp(prefix="jsa-load-")  # an empty history for %agent sessions
    env = {**os.environ, "PYTHONPATH": str(tree), "JUPYTER_SESSION_AGENT_DIR": data}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tree,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    probes = (
        ("%load_ext", LOAD_EXT),
        ("%load_ext, then the first %agent command (sessions)", FIRST_SESSIONS),
        ("%load_ext, then the first %agent command (help)", FIRST_COMMAND),
        ("all modules below ui/", ALL_BELOW_UI),
    )
    for label, body in probes:
        this: list[float] = []
        before: list[float] = []
        for _ in range(args.runs):
            before.append(probe(args.before, body))
            this.append(probe(HERE, body))
        a, b = statistics.median(this), statistics.median(before)
        print(
            f"{label}: this {a * 1000:.1f} ms, before {b * 1000:.1f} ms, ratio {a / b:.2f} "
            f"(medians of {args.runs}, alternating)"
        )


if __name__ == "__main__":
    main()
