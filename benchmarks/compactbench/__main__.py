"""CompactBench: ``python3 -m benchmarks.compactbench [options]`` from the repository root.

Runs every scenario under every policy (no management, OpenCode v1.2.16, ours)
against the scripted server (offline, deterministic) and prints the table that
``docs/compaction.md`` reproduces. ``--base-url URL --model NAME`` sends every
system's summary calls (the real OpenCode's too) to a real OpenAI-compatible server
instead (``OPENAI_API_KEY`` is used if set), ``--local-model`` to the package's embedded
llama.cpp model; the scenarios and the scripted agent stay the same.

The real OpenCode (npm ``opencode-ai``, the version in ``opencode_cli.VERSION``) is a
column of its own: each scenario is driven through the CLI against the same scripted
server (``real.py``); it is installed with npm into a cache folder when missing (said on
stderr). ``--no-real`` leaves it out; ``--opencode-driver run`` sends every turn with
``opencode run --attach`` instead of ``opencode serve``'s HTTP API (the same requests,
slower).

Options: ``--scenarios a,b``, ``--extra`` (also OpenCode with its reserved bug
and ours with raw-messages summary input), ``--json FILE`` (every run, every
event), ``--check`` (exit 1 unless ours keeps the latest request and the
constraints everywhere, frees at least as much per event as OpenCode v1.2.16 on the
same histories and as the real OpenCode end to end, spends no more LLM calls per
event than the real OpenCode, and against it retains as much after every k-th summary,
keeps statuses, decisions and constraints as well, with no more summaries and summary
input: :func:`check`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from .harness import (
    CLASSES,
    EXTRA_POLICIES,
    POLICIES,
    run_scenario,
    summarise_pairs,
    summarise_runs,
)
from .llm import extractive_summariser, forwarding_summariser
from .opencode_cli import PACKAGE, VERSION, OpenCodeUnavailable, ensure_opencode
from .real import POLICY as REAL
from .real import run_opencode_scenario
from .scenarios import default_scenarios

PAIR = ("opencode-1.2.16", "ours")
ROBUSTNESS = ("loop",)  # reported on their own: their events would swamp the averages


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return (
            f"{value:.0%}"
            if value <= 1.0 and value >= 0 and not value.is_integer() or value in (0.0, 1.0)
            else f"{value:,.0f}"
        )
    return str(value)


def table(rows: dict[str, dict], keys: list[str], fmt: dict | None = None) -> str:
    fmt = fmt or {}
    policies = list(rows)
    head = "| metric | " + " | ".join(policies) + " |"
    lines = [head, "|---|" + "---:|" * len(policies)]
    for key in keys:
        cells = []
        for p in policies:
            v = rows[p].get(key)
            cells.append(fmt[key](v) if key in fmt and v is not None else _fmt(v))
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.compactbench")
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    parser.add_argument(
        "--policies", help="comma-separated policy names (default: none, opencode-1.2.16, ours)"
    )
    parser.add_argument(
        "--extra",
        action="store_true",
        help="add OpenCode with the reserved bug and ours with raw messages",
    )
    parser.add_argument(
        "--base-url",
        help="a real OpenAI-compatible server for every policy's summary calls (the real "
        "OpenCode's too); OPENAI_API_KEY is sent if set",
    )
    parser.add_argument("--model", help="the model name on --base-url")
    parser.add_argument(
        "--local-model",
        action="store_true",
        help="summaries by the package's embedded local model (llama.cpp, started on demand)",
    )
    parser.add_argument("--json", help="write every run (events, checkpoints) to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 unless ours passes the gates")
    parser.add_argument("--no-real", action="store_true", help="leave out the real OpenCode CLI")
    parser.add_argument(
        "--opencode-driver",
        choices=("serve", "run"),
        default="serve",
        help="turns through opencode serve's HTTP API (default) or opencode run --attach",
    )
    args = parser.parse_args(argv)

    scenarios = default_scenarios()
    if args.scenarios:
        wanted = args.scenarios.split(",")
        scenarios = [s for s in scenarios if s.name in wanted]
    policies = dict(POLICIES)
    if args.extra:
        policies.update(EXTRA_POLICIES)
    if args.policies:
        policies = {
            k: v for k, v in {**POLICIES, **EXTRA_POLICIES}.items() if k in args.policies.split(",")
        }

    summarise, where = extractive_summariser, "summaries by the extractive stand-in (offline)"
    if args.local_model and not args.base_url:
        try:
            args.base_url, args.model = local_summariser_url()
        except Exception as err:  # noqa: BLE001 - one line, then exit
            print(f"the embedded local model cannot start: {err}", file=sys.stderr)
            return 2
    if args.base_url:
        summarise = forwarding_summariser(args.base_url, args.model or "default")
        where = f"summaries by {args.model or 'default'} at {args.base_url}"

    binary = None
    if not args.no_real and (not args.policies or REAL in args.policies.split(",")):
        try:
            binary = ensure_opencode()
        except OpenCodeUnavailable as err:
            print(f"the real OpenCode column is left out: {err}", file=sys.stderr)
    main_policies = [p for p in policies if p not in EXTRA_POLICIES and p != "ours"]
    order = [
        *main_policies,
        *([REAL] if binary else []),
        *(["ours"] if "ours" in policies else []),
        *[p for p in policies if p in EXTRA_POLICIES],
    ]
    runs = {p: [] for p in order}
    for scn in scenarios:
        for name in order:
            if name == REAL:
                result = run_opencode_scenario(
                    scn, binary=binary, driver=args.opencode_driver, summarise=summarise
                )
            else:
                shadows = {
                    p: policies[p] for p in PAIR if p != name and name in PAIR and p in policies
                }
                result = run_scenario(
                    scn,
                    name,
                    policies[name],
                    shadows=shadows,
                    summarise=summarise,
                )
            runs[name].append(result)
            ev = [e for e in result.events if e["kind"] == "summary"]
            print(
                f"  {scn.name:<13} {name:<26} turns {result.completed}/{result.turns}  summaries {len(ev)}  "
                f"prunes {sum(1 for e in result.events if e['kind'] == 'prune')}  "
                f"{'died: ' + result.died[:90] if result.died else ''}",
                file=sys.stderr,
            )
    robust = [s.name for s in scenarios if s.name in ROBUSTNESS]
    main_runs = {p: [r for r in rs if r.scenario not in ROBUSTNESS] for p, rs in runs.items()}
    rows = {p: summarise_runs(r) for p, r in main_runs.items() if r}
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    num = lambda v: f"{v:,.0f}"  # noqa: E731
    keys = [
        "turns",
        "died",
        "LLM calls",
        "summaries",
        "prunes",
        "failed",
        "no-progress",
        "freed/event",
        "freed median",
        "TSR median",
        "headroom median",
        "LLM calls/event",
        "summary input/event",
        "summary input total",
        "ms/event",
        "overflow errors",
        "duplicates",
        "lost request",
        "latest kept",
        "constraints kept",
        *[f"final {c}" for c in CLASSES],
        "tool reachable",
        "cost $",
    ]
    fmt = {
        k: pct
        for k in [
            "TSR median",
            "headroom median",
            "latest kept",
            "constraints kept",
            "tool reachable",
            *[f"final {c}" for c in CLASSES],
        ]
    }
    fmt.update(
        {
            k: num
            for k in [
                "freed/event",
                "freed median",
                "summary input/event",
                "summary input total",
                "ms/event",
            ]
        }
    )
    fmt["LLM calls/event"] = lambda v: f"{v:.2f}"
    fmt["cost $"] = lambda v: f"{v:.3f}"
    names = [s.name for s in scenarios if s.name not in ROBUSTNESS]
    if rows:
        print(f"\nCompactBench — {len(names)} scenarios ({', '.join(names)}); {where}")
        if REAL in runs and runs[REAL]:
            print(
                f"{REAL}: {PACKAGE} {VERSION}, turns through opencode {args.opencode_driver}; its window is "
                f"the scenario's + {runs[REAL][0].extra.get('window_extra', 0):,} tokens (the difference "
                "in system prompt and tool schemas)"
            )
        print(table(rows, keys, fmt))
        ks = sorted({k for r in rows.values() for k in r["retention@k"] if k <= 12})
        if ks:
            print(
                "\nNeedles planted before the k-th summary that are in context or one read away, "
                "at the end of that turn:"
            )
            print(
                table(
                    {p: {f"k={k}": r["retention@k"].get(k) for k in ks} for p, r in rows.items()},
                    [f"k={k}" for k in ks],
                    {f"k={k}": pct for k in ks},
                )
            )
        if all(p in main_runs for p in PAIR):
            pairs = summarise_pairs(main_runs, *PAIR)
            pfmt = {
                k: pct
                for k in (
                    "succeeded",
                    "latest visible",
                    "constraints visible",
                    "needles in context",
                    "needles reachable",
                )
            }
            pfmt.update({k: num for k in ("freed/event", "after median", "summary input/event")})
            pfmt["LLM calls/point"] = lambda v: f"{v:.2f}"
            print(
                "\nPaired: both compactors on the same history, at every compaction point of either run:"
            )
            print(table(pairs, list(next(iter(pairs.values()))), pfmt))
    for name in robust:
        print(f"\nRobustness — {name}: {next(s.description for s in scenarios if s.name == name)}")
        loop = {p: summarise_runs([r for r in rs if r.scenario == name]) for p, rs in runs.items()}
        ended = {
            p: (next(r for r in rs if r.scenario == name).died or "—") for p, rs in runs.items()
        }
        for p in loop:
            loop[p]["how it ended"] = ended[p].split(": ", 1)[-1][:60].replace("|", "/")
        print(
            table(
                loop, ["turns", "LLM calls", "summaries", "no-progress", "failed", "how it ended"]
            )
            .replace("| summaries |", "| summary events |")
            .replace("| failed |", "| not ok |")
        )
    print("\nPer scenario:")
    for scn in scenarios:
        parts = []
        for p in runs:
            r = next(x for x in runs[p] if x.scenario == scn.name)
            ev = [e for e in r.events if e["kind"] == "summary" and e["outcome"] == "ok"]
            freed = sum(e["tokens_before"] - e["tokens_after"] for e in ev) / len(ev) if ev else 0
            parts.append(
                f"{p}: turns {r.completed}/{r.turns}, {len(ev)} summaries, "
                f"{sum(1 for e in r.events if e['kind'] == 'prune')} prunes, {freed:,.0f} freed/summary, "
                f"latest {r.latest_ok}/{r.latest_checks}, constraints {r.constraint_ok}/{r.constraint_checks}"
            )
        print(f"- {scn.name}: " + "; ".join(parts))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {p: [asdict(r) for r in rs] for p, rs in runs.items()}, fh, indent=1, default=str
            )
    if args.check and "ours" in runs:
        return 0 if check(runs) else 1
    return 0


def local_summariser_url() -> tuple[str, str]:
    """The embedded local model's server, its own (a run folder in the cache, so a notebook's
    server is never restarted with another window): (base URL, model name)."""
    from jupyter_session_agent.providers.local import LocalServer

    from .opencode_cli import cache_dir

    server = LocalServer(n_ctx=16_384, run_dir=cache_dir() / "compactbench-local", idle_timeout=300)
    return server.ensure(), "local"


def beats(ours: dict, other: dict, name: str) -> bool:
    """Ours against the real OpenCode end to end: needles retained after the k-th summary at
    every k both reached, final status and decision, constraints kept, at least as good; no
    more summary calls and no more summary input in total."""
    ok = True

    def fail(what: str, a, b) -> None:
        nonlocal ok
        ok = False
        print(f"FAIL {what}: ours {a} vs {name} {b}", file=sys.stderr)

    for k, value in ours["retention@k"].items():
        theirs = other["retention@k"].get(k)
        if theirs is not None and value is not None and value < theirs:
            fail(f"retained after summary {k}", f"{value:.0%}", f"{theirs:.0%}")
    for key in ("final status", "final decision", "final constraint", "constraints kept"):
        if (ours.get(key) or 0) < (other.get(key) or 0):
            fail(key, f"{ours.get(key) or 0:.0%}", f"{other.get(key) or 0:.0%}")
    if ours["summaries"] > other["summaries"]:
        fail("summary calls", ours["summaries"], other["summaries"])
    if ours["summary input total"] > other["summary input total"]:
        fail(
            "summary input total",
            f"{ours['summary input total']:,.0f}",
            f"{other['summary input total']:,.0f}",
        )
    return ok


def check(runs: dict) -> bool:
    """Ours keeps the latest request and the constraints in every scenario, never dies, frees
    at least as many tokens per summary event as OpenCode v1.2.16 (paired, over all scenarios)
    and as the real OpenCode (end to end), spends no more LLM calls per event than it, and
    against it (:func:`beats`) retains as much after every k-th summary, keeps status,
    decisions and constraints as well, with fewer summary calls and less summary input."""
    ok = True
    if REAL in runs and runs[REAL]:
        main = {
            p: summarise_runs([r for r in runs[p] if r.scenario not in ROBUSTNESS])
            for p in ("ours", REAL)
        }
        if main["ours"]["freed/event"] < main[REAL]["freed/event"]:
            print(
                f"FAIL freed/event: ours {main['ours']['freed/event']:,.0f} < {REAL} "
                f"{main[REAL]['freed/event']:,.0f}",
                file=sys.stderr,
            )
            ok = False
        if main["ours"]["LLM calls/event"] > main[REAL]["LLM calls/event"]:
            print(
                f"FAIL LLM calls/event: ours {main['ours']['LLM calls/event']:.2f} > {REAL} "
                f"{main[REAL]['LLM calls/event']:.2f}",
                file=sys.stderr,
            )
            ok = False
        ok = beats(main["ours"], main[REAL], REAL) and ok
    for r in runs["ours"]:
        if r.scenario in ROBUSTNESS:  # compaction cannot help: end with one clear error, never loop
            futile = [e for e in r.events if e["kind"] == "summary" and e["outcome"] != "ok"]
            if (
                len(futile) > 2 * max(1, r.completed + 1)
                or sum(e["llm_calls"] for e in futile) > 1
                or not r.died
            ):
                print(
                    f"FAIL ours/{r.scenario}: {len(futile)} futile compactions, "
                    f"{sum(e['llm_calls'] for e in futile)} LLM calls, died={r.died}",
                    file=sys.stderr,
                )
                ok = False
            continue
        if (
            r.died
            or r.latest_ok != r.latest_checks
            or r.constraint_ok != r.constraint_checks
            or r.lost_requests
        ):
            print(
                f"FAIL ours/{r.scenario}: died={r.died} latest {r.latest_ok}/{r.latest_checks} constraints "
                f"{r.constraint_ok}/{r.constraint_checks} lost {r.lost_requests}",
                file=sys.stderr,
            )
            ok = False
        if not all(v for k, v in r.final.items() if r.needles[k] == "constraint"):
            print(f"FAIL ours/{r.scenario}: a constraint is missing at the end", file=sys.stderr)
            ok = False
    if "opencode-1.2.16" in runs:
        pairs = summarise_pairs(
            {p: [r for r in rs if r.scenario not in ROBUSTNESS] for p, rs in runs.items()}, *PAIR
        )
        if pairs["ours"]["freed/event"] < pairs["opencode-1.2.16"]["freed/event"]:
            print(
                f"FAIL paired freed/event: ours {pairs['ours']['freed/event']:,.0f} < opencode "
                f"{pairs['opencode-1.2.16']['freed/event']:,.0f}",
                file=sys.stderr,
            )
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(main())
