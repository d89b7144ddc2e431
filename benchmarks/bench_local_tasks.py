"""A task suite through ``%%agent`` on each catalogue model of the embedded server.

No API key, ``local/<model>`` for each model asked (default: every installed catalogue model),
a fresh server run directory per model (so the first task's turn starts the server), and for
each task a fresh IPython shell in its own process and its own empty working directory (the
suite's SETUP defined and its files written, nothing else; code the model writes may loop in C
where no interrupt reaches it, so a task that outlives ``TURN_LIMIT`` is killed and fails), one
``%%agent`` turn in a new session (``%agent fix`` after the failing cell for fix tasks), and a
user who answers "always" when the python tool asks. Each turn is judged automatically (the
kernel's variables, the successful python outputs, the answer's last number). Prints, per
model: the success rate by kind, the first turn (server start included), the median and p90
warm turn, the server's peak RSS, and the machine's load; the server is stopped at the end.

Suites: ``notebook`` (default, ``notebooktasks.py``: realistic tasks on an analysis already in
the kernel and files on disk), ``review`` (``notebooktasks_review.py``: realistic tasks of other
shapes, written by a reviewer to check the first suite does not overstate), ``review2``
(``notebooktasks_review2.py``: a second reviewer's suite, once the first was read) and ``basic``
(``tasksuite.py``: one-line tasks).

Run: ``python benchmarks/bench_local_tasks.py [--models a,b] [--suite notebook|review|review2|basic]
[--tasks a,b] [-v]`` (needs the [local] extra; the 1.5B model needs [local-large]).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import notebooktasks  # noqa: E402
import notebooktasks_review  # noqa: E402
import notebooktasks_review2  # noqa: E402
import tasksuite  # noqa: E402

SUITES = {
    "notebook": notebooktasks,
    "review": notebooktasks_review,
    "review2": notebooktasks_review2,
    "basic": tasksuite,
}

TURN_LIMIT = 300  # seconds for one task's turn; then it is interrupted (or its process killed)
#: Added to the first task's limit: its turn starts the server (loading the model took 100-220 s
#: on the shared machine), which is not the model's time to solve the task.
START_ALLOWANCE = 300


@dataclass(frozen=True)
class Result:
    task: Any
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
    model: str = "",
    suite: str = "basic",
    protocol: str = "code",
    max_steps: int = 3,
    local_context: int = 4096,
    run_dir: str | None = None,
    verbose: bool = False,
    stop: bool = True,
) -> list[Result]:
    """Each task in its own process, all on one server in ``run_dir`` (default: a fresh one,
    so that the first task's turn starts the server) with ``local/<model>`` (``""``: the
    default). Returns one Result per task; ``run.rss`` holds the server's peak RSS in bytes."""
    from jupyter_session_agent.providers.local import stop_server

    run_dir = run_dir or tempfile.mkdtemp(prefix="jsa-run-")
    data_dir = tempfile.mkdtemp(prefix="jsa-bench-tasks-")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["JUPYTER_SESSION_AGENT_RUN_DIR"] = str(run_dir)
    results = []
    try:
        for index, task in enumerate(tasks):
            limit = TURN_LIMIT + (START_ALLOWANCE if index == 0 else 0)
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
                "--suite",
                suite,
                "--model",
                model,
                "--limit",
                str(limit),
            ]
            try:
                done = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=limit + 60
                )
                row = json.loads(done.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {
                    "passed": False,
                    "seconds": float(limit + 60),
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
        run.rss = server_rss(run_dir)  # type: ignore[attr-defined]
        if stop:
            stop_server(run_dir)
    return results


def server_rss(run_dir: str) -> int:
    """The peak resident memory (VmHWM) of the local server running under ``run_dir``."""
    from jupyter_session_agent.providers.local import running_servers

    peak = 0
    for _, state in running_servers(run_dir):
        try:
            for line in Path(f"/proc/{state.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
    return peak


def _press_stop(*_: object) -> None:
    raise KeyboardInterrupt


def one(
    name: str,
    *,
    protocol: str,
    max_steps: int,
    local_context: int,
    data_dir: str,
    suite: str = "basic",
    model: str = "",
    limit: int = TURN_LIMIT,
) -> dict:
    """One task's turn in this process's IPython shell (the child side of :func:`run`)."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_session_agent.session.approval import ScriptedApprover

    module = SUITES[suite]
    (task,) = module.by_name([name])
    os.chdir(tempfile.mkdtemp(prefix="jsa-task-"))  # the task's files, and the model's
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_session_agent")
    magics = ip.magics_manager.registry["AgentMagics"]
    magics.data_dir, magics.max_steps, magics.titles, magics.live = (
        data_dir,
        max_steps,
        False,
        False,
    )
    magics.local_context, magics.request_timeout = local_context, float(limit)
    magics.local_detect = False  # the embedded model, even if an Ollama runs here
    if model:
        magics.model = f"local/{model}"
    magics.code_actions = "auto" if protocol == "code" else "off"
    if protocol == "native":
        magics.permission = {
            "*": "deny",
            "python": "ask",
        }  # only python offered, as with code actions
    ip.run_cell(module.SETUP, silent=True)
    cell = getattr(task, "cell", "")
    if cell:  # the error %agent fix is about, raised in a numbered cell
        ip.run_cell(cell, store_history=True)
    session = magics.current(new=True)
    approver = session.approver = ScriptedApprover(["always"] * 10)
    error = ""
    signal.signal(signal.SIGALRM, _press_stop)
    signal.alarm(limit)  # code that loops in Python: the user presses ■
    t0 = time.perf_counter()
    try:
        if cell:
            before = len(session.history)
            ip.run_line_magic("agent", "fix")
            added = list(session.history[before:])
            prompt = next((p.text for p in added[0].parts if p.type == "text"), "") if added else ""
        else:
            added, prompt = list(session.prompt(task.prompt).messages), task.prompt
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - a failed turn fails the task
        error = f"{type(err).__name__}: {err}"
        added = [m for m in session.history if m.info.role == "assistant"]
        prompt = task.prompt
    finally:
        signal.alarm(0)
    seconds = time.perf_counter() - t0
    if cell and not any(m.info.role == "assistant" for m in added):
        error = error or "no turn: %agent fix did not run"
    outcome = outcome_of(ip.user_ns, added, prompt)
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


def installed_models() -> list[str]:
    """The catalogue models whose packages are installed (found without importing them)."""
    from jupyter_session_agent.providers import local

    return [name for name, m in local.CATALOGUE.items() if local._sources(m) is not None]


def table(rows: list[tuple[str, list[Result], int]], load: str) -> str:
    """The markdown table of one run: per model, success, first turn, warm median and p90,
    steps, server peak RSS."""
    lines = [
        f"| model | tasks passed | first turn (server start) | warm turn median | warm p90 | "
        f"server peak RSS |  ({load})",
        "|---|---|---|---|---|---|",
    ]
    for model, results, rss in rows:
        passed = sum(r.passed for r in results)
        warm = sorted(r.seconds for r in results[1:]) or [results[0].seconds]
        lines.append(
            f"| {model} | {passed}/{len(results)} ({passed / len(results):.0%}) | "
            f"{results[0].seconds:.1f} s | {statistics.median(warm):.1f} s | "
            f"{warm[int(0.9 * (len(warm) - 1))]:.1f} s | {rss / 1e9:.2f} GB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=("code", "native"), default="code")
    parser.add_argument("--suite", choices=tuple(SUITES), default="notebook")
    parser.add_argument("--models", default="", help="comma-separated (default: all installed)")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: one task, a JSON line
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=TURN_LIMIT, help=argparse.SUPPRESS)
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
                    suite=args.suite,
                    model=args.model,
                    limit=args.limit,
                )
            )
        )
        return
    module = SUITES[args.suite]
    tasks = module.by_name(args.tasks.split(",") if args.tasks else None)
    models = args.models.split(",") if args.models else installed_models()
    rows = []
    t0 = time.perf_counter()
    for model in models:
        load0 = os.getloadavg()[0]
        results = run(
            tasks,
            model=model,
            suite=args.suite,
            protocol=args.protocol,
            max_steps=args.max_steps,
            local_context=args.context,
            verbose=args.verbose,
        )
        rss = run.rss  # type: ignore[attr-defined]
        print(report(results, f"local/{model}, {args.suite} suite, {args.protocol} protocol"))
        print(
            f"(server peak RSS {rss / 1e9:.2f} GB; load average {load0:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after)\n",
            flush=True,
        )
        rows.append((model, results, rss))
    load = "load average " + " / ".join(f"{x:.1f}" for x in os.getloadavg()) + " at the end"
    print(table(rows, load))
    print(f"(wall time {time.perf_counter() - t0:.0f} s; {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
