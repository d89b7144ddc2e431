"""The task suite (``tasksuite.py``) through ``%%agent`` on the embedded model, as a newcomer.

No API key, the default model (SmolLM2-135M on the embedded llama.cpp server), a fresh
server run directory (so the first turn starts the server), and for each task a fresh IPython
shell in its own process (the task's ``df`` and nothing else defined; code the model writes
may loop in C where no interrupt reaches it, so a task that outlives ``TURN_LIMIT`` is killed
and fails), one ``%%agent`` turn in a new session, and a user who answers "always" when the
python tool asks. Each turn is checked automatically (the kernel's variables, the python
outputs, the answer). Prints the success rate by kind, the first turn (server start
included), the median warm turn and the steps per turn. The server is stopped at the end.

Run: ``python benchmarks/bench_local_tasks.py [--protocol code|native] [--tasks a,b] [-v]``
(needs the [local] extra; about 2 minutes on 2 idle cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tasksuite  # noqa: E402

TURN_LIMIT = 120  # seconds for one task's turn; then it is interrupted (or its process killed)


@dataclass(frozen=True)
class Result:
    task: tasksuite.Task
    passed: bool
    seconds: float
    steps: int
    asked: int  # approval questions (the user answered "always")
    codes: tuple[str, ...] = ()
    answer: str = ""
    error: str = ""


def outcome_of(namespace, added, prompt: str = "") -> tasksuite.Outcome:
    """What the turn shows: its final text, the python calls' code and outputs, the kernel."""
    codes, outputs = [], []
    for message in added:
        for part in message.parts:
            if part.type == "tool" and part.tool == "python":
                codes.append(str((part.state.input or {}).get("code", "")))
                outputs.append(
                    str(
                        getattr(part.state, "output", None)
                        or getattr(part.state, "error", "")
                        or ""
                    )
                )
    answer = ""
    for message in reversed(added):
        texts = [p.text for p in message.parts if p.type == "text" and p.text and not p.synthetic]
        if message.info.role == "assistant" and texts:
            answer = "\n".join(texts)
            break
    return tasksuite.Outcome(answer, tuple(codes), tuple(outputs), namespace, prompt)


def run(
    tasks,
    *,
    protocol: str = "code",
    max_steps: int = 3,
    local_context: int = 4096,
    run_dir: str | None = None,
    verbose: bool = False,
    stop: bool = True,
) -> list[Result]:
    """Each task in its own process, all on one server in ``run_dir`` (default: a fresh one,
    so that the first task's turn starts the server). Returns one Result per task."""
    from jupyter_session_agent.providers.local import stop_server

    run_dir = run_dir or tempfile.mkdtemp(prefix="jsa-run-")
    data_dir = tempfile.mkdtemp(prefix="jsa-bench-tasks-")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["JUPYTER_SESSION_AGENT_RUN_DIR"] = str(run_dir)
    results = []
    try:
        for task in tasks:
            command = [
                sys.executable,
                __file__,
                "--one",
                task.name,
                "--protocol",
                protocol,
                "--max-steps",
                str(max_steps),
                "--context",
                str(local_context),
                "--data",
                data_dir,
            ]
            try:
                done = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=TURN_LIMIT + 60
                )
                row = json.loads(done.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {
                    "passed": False,
                    "seconds": float(TURN_LIMIT + 60),
                    "steps": 0,
                    "asked": 0,
                    "error": "killed: the turn outlived the time limit",
                }
            except (ValueError, IndexError):
                row = {
                    "passed": False,
                    "seconds": 0.0,
                    "steps": 0,
                    "asked": 0,
                    "error": "no result: " + (done.stderr.strip().splitlines() or ["?"])[-1],
                }
            result = Result(
                task,
                row["passed"],
                row["seconds"],
                row["steps"],
                row["asked"],
                tuple(row.get("codes", ())),
                row.get("answer", ""),
                row.get("error", ""),
            )
            results.append(result)
            if verbose:
                mark = "ok  " if result.passed else "FAIL"
                print(
                    f"{mark} {task.name:9s} {result.seconds:5.1f}s {result.steps} step(s) "
                    f"codes={list(result.codes)!r} answer={result.answer[:80]!r} {result.error}",
                    flush=True,
                )
    finally:
        if stop:
            stop_server(run_dir)
    return results


def _press_stop(*_: object) -> None:
    raise KeyboardInterrupt


def one(name: str, *, protocol: str, max_steps: int, local_context: int, data_dir: str) -> dict:
    """One task's turn in this process's IPython shell (the child side of :func:`run`)."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_session_agent.session.approval import ScriptedApprover

    (task,) = tasksuite.by_name([name])
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_session_agent")
    magics = ip.magics_manager.registry["AgentMagics"]
    magics.data_dir, magics.max_steps, magics.titles, magics.live = (
        data_dir,
        max_steps,
        False,
        False,
    )
    magics.local_context, magics.request_timeout = local_context, float(TURN_LIMIT)
    magics.code_actions = "auto" if protocol == "code" else "off"
    if protocol == "native":
        magics.permission = {
            "*": "deny",
            "python": "ask",
        }  # only python offered, as with code actions
    ip.run_cell(tasksuite.SETUP, silent=True)
    session = magics.current(new=True)
    approver = session.approver = ScriptedApprover(["always"] * 10)
    error = ""
    signal.signal(signal.SIGALRM, _press_stop)
    signal.alarm(TURN_LIMIT)  # code that loops in Python: the user presses ■
    t0 = time.perf_counter()
    try:
        added = list(session.prompt(task.prompt).messages)
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - a failed turn fails the task
        error = f"{type(err).__name__}: {err}"
        added = [m for m in session.history if m.info.role == "assistant"]
    finally:
        signal.alarm(0)
    seconds = time.perf_counter() - t0
    outcome = outcome_of(ip.user_ns, added, task.prompt)
    return {
        "passed": not error and task.passed(outcome),
        "seconds": seconds,
        "steps": sum(1 for m in added if m.info.role == "assistant"),
        "asked": len(approver.asked),
        "codes": list(outcome.codes),
        "answer": outcome.answer,
        "error": error,
    }


def report(results: list[Result], label: str) -> str:
    passed = sum(r.passed for r in results)
    first, warm = results[0].seconds, [r.seconds for r in results[1:]] or [results[0].seconds]
    kinds: dict[str, list[bool]] = {}
    for r in results:
        kinds.setdefault(r.task.kind, []).append(r.passed)
    lines = [
        f"{label}: {passed}/{len(results)} tasks = {passed / len(results):.0%}; first turn (server start "
        f"included) {first:.1f} s; warm turn median {statistics.median(warm):.2f} s "
        f"(p90 {sorted(warm)[int(0.9 * (len(warm) - 1))]:.2f} s); "
        f"steps per turn median {statistics.median(r.steps for r in results):.0f}",
        "",
        "| kind | tasks | passed |",
        "|---|---|---|",
    ]
    for kind, marks in kinds.items():
        lines.append(f"| {kind} | {len(marks)} | {sum(marks)} ({sum(marks) / len(marks):.0%}) |")
    lines.append(f"| **all** | {len(results)} | **{passed} ({passed / len(results):.0%})** |")
    failed = [r.task.name for r in results if not r.passed]
    lines += ["", "failed: " + (", ".join(failed) or "none")]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=("code", "native"), default="code")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: one task, a JSON line
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(
                one(
                    args.one,
                    protocol=args.protocol,
                    max_steps=args.max_steps,
                    local_context=args.context,
                    data_dir=args.data,
                )
            )
        )
        return
    tasks = tasksuite.by_name(args.tasks.split(",") if args.tasks else None)
    t0 = time.perf_counter()
    results = run(
        tasks,
        protocol=args.protocol,
        max_steps=args.max_steps,
        local_context=args.context,
        verbose=args.verbose,
    )
    print(report(results, f"{args.protocol} protocol"))
    print(f"(wall time {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
