"""``%agent sessions`` and ``%agent browse`` over a large history, before and after, same run.

The history is ``bench_scale.py``'s (sessions of 20 turns, three models, tool failures; 2.4M
parts is about 19,750 sessions), generated once as the store's own files (``--keep DIR`` keeps
and reuses it). Each measurement is a fresh process with IPython loaded and the extension's
magics on that history: ``%agent sessions`` (its first page) and the rows ``%agent browse``
lists (``analytics.sessions.session_rows`` with the browser's limit), each timed after a first
``sql()`` has opened the store (what any earlier ``%agent`` call in the kernel has done), then
once more. ``--before DIR`` runs the same in a tree holding the earlier package.

Run: ``python benchmarks/bench_browse.py --keep /tmp/history [--parts 2400000] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "jupyter_session_agent")
magics = ip.magics_manager.registry["AgentMagics"]
magics.data_dir = sys.argv[1]
store = magics.store()
store.sql("SELECT 1")  # the store is open, as after any earlier %agent call
from jupyter_session_agent.analytics.sessions import session_rows
out = {}
for label in ("first", "again"):
    t = time.perf_counter()
    with capture_output():
        shown = ip.run_line_magic("agent", "sessions")
    out[f"sessions_{label}"] = time.perf_counter() - t
    t = time.perf_counter()
    rows = session_rows(store, 500)  # what the browser lists (SessionBrowser's limit)
    out[f"browse_{label}"] = time.perf_counter() - t
out["rows"] = len(rows)
out["sessions_chars"] = len(getattr(shown, "text", "") or "")
print(json.dumps(out))
"""


def child(tree: Path, data: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(data)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=str(tree),  # `python -c` puts the working folder first on the path: the tree's
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", type=int, default=2_400_000)
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the generated history here")
    parser.add_argument("--before", type=Path, help="a tree holding the package before the change")
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.keep or Path(tmp)
        if not (data / "history" / "parquet").is_dir():
            sys.path.insert(0, str(ROOT / "benchmarks"))
            import bench_scale

            made = bench_scale.generate(data, args.parts)
            print(f"generated {made['turns']:,} turns in {made['generated_s']:.0f} s")
        trees = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
        for label, tree in trees:
            r = child(tree.resolve(), data)
            print(
                f"{label}: %agent sessions {r['sessions_first']:.3f} s (again "
                f"{r['sessions_again']:.3f} s, {r['sessions_chars']:,} characters shown); "
                f"browse rows {r['browse_first']:.3f} s (again {r['browse_again']:.3f} s, "
                f"{r['rows']} rows)",
                flush=True,
            )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
