"""What the OS sandbox costs per bash call, and how many questions it saves.

1. Per call: the ``bash`` tool running the same command unconfined and inside the sandbox
   (``tools/sandbox.py``), interleaved in the same run; medians and their ratio. Measured
   in an empty folder and in one with 2,000 files (the sandbox walks the session folder
   for ``.env`` files and keys before each call).
2. Questions: a typical data session (22 tool calls: looking at a CSV, a script written,
   edited and run, counts, a plot, git) checked by the permission gate under the default
   rules without and with the sandbox; the user answers each question "once" (every
   question is counted) or "always" (a repeated kind is not asked again).

    python benchmarks/bench_sandbox.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_session_agent.core import permission as P
from jupyter_session_agent.tools.base import ToolContext
from jupyter_session_agent.tools.sandbox import Confinement, status
from jupyter_session_agent.tools.shell import BashTool

SESSION = [
    ("bash", {"command": "ls -la"}),
    ("bash", {"command": "head -5 sales.csv"}),
    ("bash", {"command": "wc -l sales.csv"}),
    ("read", {"filePath": "sales.csv"}),
    ("python", {"code": "import pandas as pd\ndf = pd.read_csv('sales.csv')\ndf.describe()"}),
    ("bash", {"command": "cut -d, -f2 sales.csv | sort | uniq -c | sort -rn | head"}),
    ("write", {"filePath": "analyze.py", "content": "import csv\n"}),
    ("bash", {"command": "python3 analyze.py"}),
    ("edit", {"filePath": "analyze.py", "oldString": "import csv", "newString": "import csv, sys"}),
    ("bash", {"command": "python3 analyze.py > out/report.txt"}),
    ("bash", {"command": "mkdir -p out && python3 analyze.py --plot out/plot.png"}),
    ("bash", {"command": "grep -c , sales.csv"}),
    ("bash", {"command": "du -sh ."}),
    ("bash", {"command": "pip list 2>/dev/null | grep -i pandas"}),
    ("bash", {"command": "git status --short"}),
    ("bash", {"command": "git diff --stat"}),
    ("python", {"code": "df.groupby('region').sales.sum()"}),
    ("bash", {"command": "find . -name '*.csv' | xargs wc -l"}),
    ("bash", {"command": "ls ~/datasets"}),
    ("bash", {"command": 'for f in *.csv; do head -1 "$f"; done'}),
    ("bash", {"command": "sort -t, -k3 -n sales.csv > out/sorted.csv"}),
    ("bash", {"command": "tar -czf out/results.tgz out/report.txt"}),
]


def _cpu() -> float:
    """CPU seconds of this process and its finished children (stable under load)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def per_call(directory: Path, repeat: int) -> tuple[float, float, float, float]:
    tool = BashTool()
    plain = ToolContext("s", "m", "c", directory, directory / ".data")
    boxed = ToolContext("s", "m", "c", directory, directory / ".data", sandbox=Confinement(True))
    command = {"command": "echo hi > /dev/null; cat /etc/hostname > /dev/null"}
    unconfined, confined, cpu_plain, cpu_boxed = [], [], [], []
    for _ in range(3):  # warm both paths (page cache, the probe)
        tool.run(command, plain)
        tool.run(command, boxed)
    for _ in range(repeat):
        for ctx, times, cpu in ((plain, unconfined, cpu_plain), (boxed, confined, cpu_boxed)):
            started, cpu_started = time.perf_counter(), _cpu()
            tool.run(command, ctx)
            times.append(time.perf_counter() - started)
            cpu.append(_cpu() - cpu_started)
    return (
        statistics.median(unconfined),
        statistics.median(confined),
        statistics.median(cpu_plain),
        statistics.median(cpu_boxed),
    )


def questions(directory: Path, sandboxed: bool, answer: str) -> int:
    asked = []
    approved: list[P.Rule] = []

    def approver(request):
        asked.append(request)
        return answer, None

    gate = P.Gate(
        session_id="s",
        directory=str(directory),
        ruleset=lambda: [*P.defaults(sandboxed=sandboxed), *approved],
        approver=approver,
        on_always=approved.extend,
        contained=("bash",) if sandboxed else (),
    )
    for tool, args in SESSION:
        gate(tool, args)
    return len(asked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    found = status()
    print(f"sandbox: {'available' if found.available else found.reason}")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        root = Path(tmp)
        empty = root / "empty"
        empty.mkdir()
        many = root / "many"
        for d in range(20):
            sub = many / f"d{d:02d}"
            sub.mkdir(parents=True)
            for f in range(100):
                (sub / f"f{f:03d}.csv").write_text("a,b\n")
        if found.available:
            for name, folder in (("empty folder", empty), ("2,000 files", many)):
                plain, boxed, cpu_plain, cpu_boxed = per_call(folder, args.repeat)
                print(
                    f"per call, {name}: wall unconfined {plain * 1000:.1f} ms, sandboxed "
                    f"{boxed * 1000:.1f} ms, ratio {boxed / plain:.2f}x, "
                    f"+{(boxed - plain) * 1000:.1f} ms; CPU {cpu_plain * 1000:.1f} ms vs "
                    f"{cpu_boxed * 1000:.1f} ms, +{(cpu_boxed - cpu_plain) * 1000:.1f} ms"
                )
        data = root / "data"
        (data / "out").mkdir(parents=True)
        (data / "sales.csv").write_text("date,region,sales\n2024-01-01,north,10\n")
        (data / "analyze.py").write_text("import csv\n")
        for answer in ("once", "always"):
            before = questions(data, False, answer)
            after = questions(data, True, answer)
            print(
                f"questions in a {len(SESSION)}-call data session, answering '{answer}': "
                f"without the sandbox {before}, with it {after}"
            )


if __name__ == "__main__":
    main()
