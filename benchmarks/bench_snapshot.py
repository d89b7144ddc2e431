"""Per-step snapshot cost (docs/lifecycle.md): what a step pays for revert support.

A step takes a snapshot at its start and one at its end and compares them
(``track`` + ``track`` + ``changed``). Measured on three folders:

* ``200mb``: one 200 MB data file (over the 50 MB cap, so never hashed) and a script;
* ``5000``: 5,000 small files in 50 folders;
* ``both``: the two together.

For each: the first snapshot (hashes every tracked file once per session),
a step where nothing changed, and a step whose tool edited one file.

    python benchmarks/bench_snapshot.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_session_agent.session.snapshot import Snapshot


def make(root: Path, kind: str) -> Path:
    work = root / kind
    work.mkdir()
    (work / "analysis.py").write_text("print('hello')\n")
    if kind in ("200mb", "both"):
        with open(work / "data.parquet", "wb") as fh:
            block = os.urandom(1 << 20)
            for _ in range(200):
                fh.write(block)
    if kind in ("5000", "both"):
        for d in range(50):
            sub = work / f"pkg{d:02d}"
            sub.mkdir()
            for f in range(100):
                (sub / f"mod{f:03d}.py").write_text(
                    f"# module {d}/{f}\nVALUE = {d * 100 + f}\n" * 20
                )
    return work


def step(snap: Snapshot, edit: Path | None) -> float:
    t0 = time.perf_counter()
    before = snap.track()
    if edit is not None:
        edit.write_text(edit.read_text() + "# edited\n")
    after = snap.track()
    snap.changed(before, after)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            f"{'folder':8} {'first snapshot':>15} {'step, no change':>16} {'step, 1 file edited':>20}"
        )
        for kind in ("200mb", "5000", "both"):
            work = make(root, kind)
            snap = Snapshot(root / "data" / "snapshot" / kind, work)
            t0 = time.perf_counter()
            snap.track()
            first = time.perf_counter() - t0
            idle = statistics.median(step(snap, None) for _ in range(args.repeat))
            edited = statistics.median(step(snap, work / "analysis.py") for _ in range(args.repeat))
            print(
                f"{kind:8} {first * 1000:13.0f} ms {idle * 1000:14.1f} ms {edited * 1000:18.1f} ms"
                f"   (large files skipped: {list(snap.large_files)})"
            )


if __name__ == "__main__":
    main()
