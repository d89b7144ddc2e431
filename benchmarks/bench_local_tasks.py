"""The task suite (``tasksuite.py``) through ``%%agent`` on the embedded model, as a newcomer.

No API key, the default model (SmolLM2-135M on the embedded llama.cpp server), a fresh
server state directory (so the first turn starts the server), a new session per task and a
user who answers "always" when the python tool asks. Each task's turn is checked
automatically (the kernel's variables, the python outputs, the answer). Prints the success
rate by kind, the first turn (server start included) and the median warm turn, and a
Markdown table for ``docs/benchmarks.md``. The server is stopped at the end.

Run: ``python benchmarks/bench_local_tasks.py [--protocol code|native] [--tasks a,b] [-v]``
(needs the [local] extra; about 1–3 minutes on 2 idle cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tasksuite  # noqa: E402


@dataclass(frozen=True)
class Result:
    task: tasksuite.Task
    passed: bool
    seconds: float
    steps: int
    asked: int
    outcome: tasksuite.Outcome
    error: str = ""


def outcome_of(session, namespace, added, prompt: str = "") -> tasksuite.Outcome:
    """What the turn shows: its final text, the python calls' code and outputs, the kernel."""
    codes, outputs = [], []
    for message in added:
        for part in message.parts:
            if part.type == "tool" and part.tool == "python":
                codes.append(str((part.state.input or {}).get("code", "")))
                outputs.append(str(getattr(part.state, "output", None) or getattr(part.state, "error", "") or ""))
    answer = ""
    for message in reversed(added):
        texts = [p.text for p in message.parts if p.type == "text" and p.text and not p.synthetic]
        if message.info.role == "assistant" and texts:
            answer = "\n".join(texts)
            break
    return tasksuite.Outcome(answer, tuple(codes), tuple(outputs), namespace, prompt)


def run(tasks, *, protocol: str = "code", max_steps: int = 3, local_context: int = 4096,
        verbose: bool = False, stop: bool = True) -> list[Result]:
    """Run ``tasks`` in this process's IPython shell, in a fresh run directory (the first turn
    starts the server) and data directory, with no API key. Returns one Result each."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_session_agent.local import stop_server

    run_dir = os.environ.setdefault("JUPYTER_SESSION_AGENT_RUN_DIR", tempfile.mkdtemp(prefix="jsa-run-"))
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ.pop("OPENAI_BASE_URL", None)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_session_agent")
    magics = ip.magics_manager.registry["AgentMagics"]
    magics.data_dir = tempfile.mkdtemp(prefix="jsa-bench-tasks-")
    magics.max_steps, magics.titles, magics.live = max_steps, False, False
    magics.local_context = local_context
    magics.request_timeout = 300.0
    magics.code_actions = "auto" if protocol == "code" else "off"
    if protocol == "native":
        magics.permission = {"*": "deny", "python": "ask"}  # only python offered, as with code actions
    try:
        return run_tasks(ip, magics, tasks, verbose=verbose)
    finally:
        ip.run_line_magic("unload_ext", "jupyter_session_agent")
        if stop:
            stop_server(run_dir)


def run_tasks(ip, magics, tasks, *, verbose: bool = False) -> list[Result]:
    """Each task in a new session of ``magics``, from the same kernel state (``SETUP``), with
    a user who answers "always" when a tool asks."""
    from jupyter_session_agent.approval import ScriptedApprover

    results = []
    ip.run_cell(tasksuite.SETUP, silent=True)
    baseline = set(ip.user_ns)
    for task in tasks:
        for name in set(ip.user_ns) - baseline:  # each task starts from the same kernel
            del ip.user_ns[name]
        ip.run_cell(tasksuite.SETUP, silent=True)  # a task may have changed df
        session = magics.current(new=True)
        approver = session.approver = ScriptedApprover(["always"] * 10)
        before = len(session.history)
        error = ""
        t0 = time.perf_counter()
        try:
            added = list(session.prompt(task.prompt).messages)
        except Exception as err:  # noqa: BLE001 - a failed turn is a failed task, reported
            error = f"{type(err).__name__}: {err}"
            added = session.history[before + 1:]
        seconds = time.perf_counter() - t0
        outcome = outcome_of(session, ip.user_ns, added, task.prompt)
        steps = sum(1 for m in added if m.info.role == "assistant")
        passed = not error and task.passed(outcome)
        results.append(Result(task, passed, seconds, steps, len(approver.asked), outcome, error))
        if verbose:
            mark = "ok  " if passed else "FAIL"
            print(f"{mark} {task.name:9s} {seconds:5.1f}s {steps} step(s) codes={list(outcome.codes)!r} "
                  f"answer={outcome.answer[:80]!r} {error}", flush=True)
    return results


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
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    tasks = tasksuite.by_name(args.tasks.split(",") if args.tasks else None)
    t0 = time.perf_counter()
    results = run(tasks, protocol=args.protocol, max_steps=args.max_steps, verbose=args.verbose)
    print(report(results, f"{args.protocol} protocol"))
    print(f"(wall time {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
