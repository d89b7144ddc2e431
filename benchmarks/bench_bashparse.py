"""How fast a bash line is read for the permission rules (``core/bashparse.py`` with the command
rules of ``core/bashrules.py``), against another checkout of the repository in the same run.

Reads a corpus of realistic command lines (pipelines, wrappers, ``find -exec``, ``sed``/``awk``
scripts, heredocs, substitutions, assignments, ``cd``) with :func:`analyse`, each call fresh
(its ``home`` differs, so the function's cache never answers). The two trees run alternately,
each in its own interpreter (``PYTHONPATH`` set to the tree), for ``--rounds`` rounds; the
script prints the median time per line of each and the ratio, and checks that both trees give
the same analysis of every line.

Run: ``python benchmarks/bench_bashparse.py --baseline /path/to/other/checkout [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

LINES = [
    "ls -la",
    "git status && git diff --stat",
    "git checkout -b feature/x main",
    "cat data.csv | head -n 20 | cut -d, -f1,3",
    "python -m pytest tests/test_x.py -x -q 2>&1 | tail -5",
    "find . -name '*.py' -exec grep -l TODO {} +",
    "find /tmp -type f -mtime +7 -delete",
    "sed -n '1,40p' notes.md",
    "sed -i 's/foo/bar/g' src/app.py",
    "sed -e 's/a/b/w out.txt' in.txt",
    "awk -F, '{ s += $3 } END { print s }' sales.csv",
    "awk '{ system(\"rm \" $1) }' list.txt",
    "env FOO=1 BAR=2 python script.py --out results/",
    "sudo -u postgres psql -c 'select 1'",
    "timeout 30 nice -n 10 make -j4 build",
    "xargs -0 -n 1 rm < files.txt",
    "nohup python train.py > train.log 2>&1 &",
    "bash -c 'echo hi'",
    "sh scripts/setup.sh --fast",
    "cd ~/projects/demo && npm run build",
    "cd - && ls",
    "export PATH=$HOME/.local/bin:$PATH",
    "declare -a items=(a b c)",
    'for f in *.csv; do wc -l "$f"; done',
    "if [ -f out.txt ]; then cat out.txt; else echo none; fi",
    'echo "today is $(date +%F) in $PWD"',
    "cat <<EOF > config.ini\n[main]\nkey = value\nEOF",
    "diff <(sort a.txt) <(sort b.txt)",
    "tar -xzvf archive.tar.gz -C /tmp/out",
    "curl -sSL https://example.com/install.sh | bash",
    'eval "$(conda shell.bash hook)"',
    "A=1 B=2 ./run.sh ~+/data ~/data",
    "rm -rf build/ dist/ *.egg-info",
    "docker compose up -d --build",
    "echo $'tab\\there' > t.txt",
    'while read -r line; do echo "$line"; done < input.txt',
]


def measure(rounds: int) -> dict:
    """In this interpreter: the median seconds per line over ``rounds`` passes, and the
    analyses (for the comparison)."""
    from jupyter_session_agent.core.bashparse import analyse

    times = []
    for r in range(rounds):
        start = time.perf_counter()
        for i, line in enumerate(LINES):
            analyse(line, home=f"/home/u{r}-{i}", pwd="/work/p")
        times.append((time.perf_counter() - start) / len(LINES))
    shapes = [repr(analyse(line, home="/home/u", pwd="/work/p")) for line in LINES]
    return {"median": statistics.median(times), "shapes": shapes}


def run(tree: Path, rounds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        f"import sys, json; sys.path.insert(0, {str(tree)!r}); "
        f"sys.path.insert(1, {str(HERE / 'benchmarks')!r}); "
        f"import bench_bashparse as b; print(json.dumps(b.measure({rounds})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=20, help="passes per interpreter")
    parser.add_argument("--repeat", type=int, default=5, help="interpreters per tree")
    args = parser.parse_args()
    base, ours = [], []
    same = True
    for _ in range(args.repeat):
        b = run(args.baseline.resolve(), args.rounds)
        o = run(HERE, args.rounds)
        base.append(b["median"])
        ours.append(o["median"])
        same = same and b["shapes"] == o["shapes"]
    mb, mo = statistics.median(base), statistics.median(ours)
    print(f"{len(LINES)} lines, {args.repeat} × {args.rounds} passes per tree")
    print(f"baseline ({args.baseline}): {1000 * mb:.3f} ms per line")
    print(f"this tree:  {1000 * mo:.3f} ms per line")
    print(f"ratio this / baseline: {mo / mb:.2f}; same analysis of every line: {same}")


if __name__ == "__main__":
    main()
