"""Run a scenario under a compaction policy and measure what the model keeps.

The session runs through the package's real loop (``agent.run_turn`` with a
``compaction.Compactor``), its real store, over real HTTP to the scripted
server; only the two models are rules (``llm.py``). With ``base_url`` the
summary calls go to a real OpenAI-compatible server instead (the agent stays
scripted, since the planted facts must be acted on deterministically).

What "the model sees" is the request the loop would send next:
``Compactor.chat(history)`` (system prompt, ``filterCompacted`` view, tool
results as sent, pruned ones as placeholders with their file).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.budget import ModelInfo, Prices, estimate
from jupyter_session_agent.core.errors import ProviderError
from jupyter_session_agent.core.messages import (
    FilePart,
    ModelRef,
    TextPart,
    UserMessage,
    WithParts,
    now_ms,
)
from jupyter_session_agent.loop.compaction import CompactionConfig, Compactor
from jupyter_session_agent.loop.history import Calibration
from jupyter_session_agent.loop.step import StepSetup
from jupyter_session_agent.loop.turn import ContextLimitError, TurnSetup, run_turn, system_prompt
from jupyter_session_agent.providers.openai_provider import ChatRequest, OpenAIProvider
from jupyter_session_agent.store import Store
from jupyter_session_agent.tools import ToolContext, ToolResult, run_tool

from .baseline import OPENCODE, OpenCodeReservedBug, Policy, RawMessagesInput
from .llm import (
    BenchServer,
    RuleAgent,
    extractive_summariser,
    forwarding_summariser,
    is_summary_request,
)
from .scenarios import Scenario, write_files

POLICIES: dict[str, Policy] = {
    "none": Policy(CompactionConfig(auto=False, prune=False)),
    "opencode-1.2.16": OPENCODE,
    "ours": Policy(),
}
EXTRA_POLICIES: dict[str, Policy] = {
    "opencode (reserved bug)": Policy(OPENCODE.config, OpenCodeReservedBug()),
    "ours, raw-messages input": Policy(CompactionConfig(), RawMessagesInput()),
}
# a path the view shows: absolute, or relative with a folder and an extension
VISIBLE_PATH = re.compile(r"(?<![\w/.-])(/[\w.+-]+(?:/[\w.+-]+)+|[\w.-]+(?:/[\w.-]+)+\.\w+)")


class BenchTool:
    """A tool whose outputs come from the scenario (by step id in the arguments)."""

    def __init__(self, name: str, outputs: dict[str, str]):
        self.name = name
        self.description = f"{name} (benchmark stand-in)"
        self.parameters = {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "filePath": {"type": "string"},
                "oldString": {"type": "string"},
                "newString": {"type": "string"},
            },
        }
        self.outputs = outputs

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        key = args.get("filePath") or args.get("command", "")
        return ToolResult(output=self.outputs.get(key, f"no such file: {key}"), title=key)


@dataclass
class RunResult:
    scenario: str
    policy: str
    turns: int
    completed: int
    died: str | None
    events: list[dict]
    checkpoints: list[
        dict
    ]  # after each turn with a new summary: retention of needles planted before
    final: dict  # retention at the end, per needle id
    recoverable: dict
    latest_checks: int
    latest_ok: int
    constraint_checks: int
    constraint_ok: int
    duplicates: int
    lost_requests: int
    overflow_errors: int
    main_calls: int
    summary_calls: int
    cost: float
    seconds: float
    usable: int
    needles: dict = field(default_factory=dict)  # id → class
    paired: list = field(default_factory=list)  # per compaction point: {policy: _measure(...)}
    extra: dict = field(
        default_factory=dict
    )  # policy-specific notes (the real OpenCode's window …)


TOOL_NAMES = ("bash", "read", "edit")


def bench_schemas(tools: dict) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools.values()
    ]


def bench_fixed_tokens(scn: Scenario) -> int:
    """Tokens of the benchmark agent's own system prompt and tool schemas (without the
    scenario's project instructions), as the scripted server counts them."""
    import math

    schemas = bench_schemas({name: BenchTool(name, {}) for name in TOOL_NAMES})
    prompt = system_prompt(tempfile.gettempdir(), list(TOOL_NAMES))
    return math.ceil(len(json.dumps([{"role": "system", "content": prompt}, *schemas])) / 4)


def view_text(chat: list[dict]) -> str:
    out = []
    for m in chat:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(content or "")
        for call in m.get("tool_calls") or ():
            out.append(call["function"]["arguments"])
    return "\n".join(out)


def recoverable(text: str, answer: str, root: Path | None = None) -> bool:
    """The answer is one read away: in a file whose path the view shows — any path, absolute
    or relative to the project folder ``root`` (ours' saved outputs and archive, OpenCode's
    project files alike) — that exists and contains it. The same rule for every policy."""
    for path in set(VISIBLE_PATH.findall(text)):
        target = Path(path) if path.startswith("/") else (root / path if root else None)
        if target is None:
            continue
        try:
            if target.is_file() and answer in target.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def _measure(event, chat: list[dict], planted: list, turn, root: Path | None = None) -> dict:
    text = view_text(chat)
    said = "\n".join(view_text([m]) for m in chat if m.get("role") in ("user", "assistant"))
    kept = [_retained(x, text) for x in planted]
    reach = [
        k or (x.cls == "tool" and recoverable(text, x.answer, root)) for x, k in zip(planted, kept)
    ]
    constraints = [k for x, k in zip(planted, kept) if x.cls == "constraint"]
    return {
        "ok": event.outcome == "ok",
        "outcome": event.outcome,
        "before": event.tokens_before,
        "after": event.tokens_after,
        "freed": event.tokens_before - event.tokens_after,
        "summary_input": event.summary_input_tokens,
        "calls": event.llm_calls,
        "in_context": _ratio(sum(kept), len(kept)),
        "reachable": _ratio(sum(reach), len(reach)),
        "latest": turn.marker in said,
        "constraints": all(constraints),
    }


def run_scenario(
    scn: Scenario,
    policy: str,
    run_policy: Policy,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    max_steps: int = 25,
    shadows: dict[str, Policy] | None = None,
    summarise: Callable[[dict], Any] | None = None,
) -> RunResult:
    """Run ``scn`` under ``run_policy``. ``shadows``: at every compaction point, also run these
    policies' compactors on a copy of the same history (scratch store) and record both
    results side by side (``RunResult.paired``). ``summarise``: answers the summary requests
    (default: the extractive stand-in; ``base_url``/``model``: forwarded to a real model), as
    for the real OpenCode's."""
    if summarise is None:
        summarise = (
            forwarding_summariser(base_url, model or "default", api_key)
            if base_url
            else extractive_summariser
        )
    config, strategy = run_policy.config, run_policy.strategy
    workdir = Path(tempfile.mkdtemp(prefix="compactbench-"))
    paired: list[dict] = []
    shadowing = {"on": False}
    agent = RuleAgent()
    outputs = {
        (s.args.get("filePath") or s.args.get("command", "")): s.output
        for t in scn.turns
        for s in t.steps
    }
    counts = {"main": 0, "summary": 0}
    latest = {"checks": 0, "ok": 0, "pending": False}

    def respond(body: dict):
        if shadowing["on"]:
            return summarise(body)
        if is_summary_request(body):
            counts["summary"] += 1
            latest["pending"] = True
            return summarise(body)
        counts["main"] += 1
        if latest["pending"]:  # the first agent request after a compaction
            latest["pending"] = False
            latest["checks"] += 1
            said = "\n".join(
                view_text([m])
                for m in body.get("messages", [])
                if m.get("role") in ("user", "assistant")
            )
            latest["ok"] += agent.turn is not None and agent.turn.marker in said
        return agent.reply(body)

    write_files(scn, workdir)  # what the tool calls read, on disk as for the real OpenCode
    server = BenchServer(respond, scn.context).start()
    server.keep_requests = False
    store = Store(workdir / "data")
    started = time.perf_counter()
    try:
        # images=True: the pasted image is sent as an image (as to the real OpenCode, whose model
        # declares image input), so the media scenario overflows as it should
        info = ModelInfo(
            "bench",
            "agent",
            context=scn.context,
            output=scn.output,
            prices=Prices(1.0, 4.0),
            source="override",
            images=True,
        )
        provider = OpenAIProvider(
            provider_id="openai", base_url=server.base_url, api_key="sk-bench", timeout=900
        )
        tools = {name: BenchTool(name, outputs) for name in TOOL_NAMES}
        schemas = bench_schemas(tools)
        prompt = system_prompt(str(workdir), list(tools)) + (
            "\n\n" + scn.extra["system"] if scn.extra.get("system") else ""
        )
        session_id = ids.descending("session")
        data_dir = workdir / "data"

        # the summary calls go through the same server, which hands them to ``summarise``
        summary_provider, summary_info, summary_model_id = provider, info, "agent"

        def request_factory(chat: list[dict], last_step: bool) -> ChatRequest:
            return ChatRequest(
                model="agent", messages=chat, tools=schemas, max_tokens=info.max_output_tokens
            )

        def summary_request(chat: list[dict], max_tokens: int | None) -> ChatRequest:
            return ChatRequest(
                model=summary_model_id,
                messages=chat,
                max_tokens=max_tokens or info.max_output_tokens,
            )

        def call_tool(tool: Any, args: dict, call: Any) -> ToolResult:
            ctx = ToolContext(
                session_id=session_id,
                message_id="",
                call_id=call.call_id,
                directory=workdir,
                data_dir=data_dir,
                shell=None,
            )
            return run_tool(tool, args, ctx)

        class Recording(Compactor):
            """The policy's compactor; first runs the shadows on a copy of the same history."""

            def compact(self, history, **kw):
                turn = agent.turn
                planted = [x for x in scn.needles if x.turn < turn.index]
                record = {
                    "scenario": scn.name,
                    "owner": policy,
                    "turn": turn.index,
                    "cause": kw.get("cause"),
                    "results": {},
                }
                for name, other in (shadows or {}).items():
                    scratch = Path(tempfile.mkdtemp(dir=workdir, prefix="shadow-"))
                    sstore = Store(scratch / "data")
                    copy = list(history)
                    shadow = Compactor(
                        config=other.config,
                        store=sstore,
                        model=self.model,
                        data_dir=scratch / "data",
                        system_prompt=self.system_prompt,
                        tools_tokens=self.tools_tokens,
                        summary_provider=self.summary_provider,
                        summary_model=self.summary_model,
                        summary_request=self.summary_request,
                        max_retries=0,
                        cwd=self.cwd,
                        sleep=self.sleep,
                        calibration=Calibration(self.ratio),
                        strategy=other.strategy,
                    )
                    overflows = server.overflows
                    shadowing["on"] = True
                    try:
                        result = shadow.compact(copy, **kw)
                    finally:
                        shadowing["on"] = False
                        server.overflows = overflows
                    record["results"][name] = _measure(
                        result.event, shadow.chat(copy), planted, turn, workdir
                    )
                    sstore.close()
                result = super().compact(history, **kw)
                record["results"][policy] = _measure(
                    result.event, self.chat(history), planted, turn, workdir
                )
                paired.append(record)
                return result

        calibration = Calibration()
        history: list[WithParts] = []
        died = None
        completed = 0
        checkpoints = []
        summaries_seen = 0
        needles = {n.id: n for n in scn.needles}
        for turn in scn.turns:
            agent.turn = turn
            user = UserMessage(
                id=ids.ascending("message"),
                session_id=session_id,
                time_created=now_ms(),
                model=ModelRef("bench", "agent"),
            )
            parts = [TextPart(ids.ascending("part"), session_id, user.id, text=turn.request)]
            if turn.attachment:
                parts.append(
                    FilePart(ids.ascending("part"), session_id, user.id, **turn.attachment)
                )
            store.put(user, *parts)
            history.append(WithParts(user, tuple(parts)))
            compactor = Recording(
                config=config,
                store=store,
                model=info,
                data_dir=data_dir,
                system_prompt=prompt,
                tools_tokens=estimate(json.dumps(schemas)),
                summary_provider=summary_provider,
                summary_model=summary_info,
                summary_request=summary_request,
                max_retries=0,
                cwd=str(workdir),
                sleep=lambda s: None,
                calibration=calibration,
                strategy=strategy,
            )
            setup = TurnSetup(
                step=StepSetup(
                    store=store,
                    model=info,
                    tools=tools,
                    run_tool=call_tool,
                    max_retries=0,
                    auto_compact=config.auto,
                    reserved=config.reserved,
                ),
                provider=provider,
                request_factory=request_factory,
                system_prompt=prompt,
                max_steps=max_steps,
                cwd=str(workdir),
                compactor=compactor,
            )
            try:
                run_turn(setup, history)
                if turn.index in scn.extra.get("manual", ()) and (config.auto or config.prune):
                    compactor.prune(history, cause="manual")  # as AgentSession.compact()
                    compactor.compact(history, cause="manual", auto=False)
                completed += 1
            except (ContextLimitError, ProviderError) as err:
                died = f"turn {turn.index}: {type(err).__name__}: {err}"
                break
            n = sum(
                1
                for m in history
                if getattr(m.info, "summary", None) and m.info.finish and not m.info.error
            )
            if n > summaries_seen:
                summaries_seen = n
                text = view_text(compactor.chat(history))
                planted = [x for x in scn.needles if x.turn < turn.index]
                checkpoints.append(
                    {
                        "turn": turn.index,
                        "summaries": n,
                        "retained": {x.id: _retained(x, text) for x in planted},
                        "recoverable": {
                            x.id: recoverable(text, x.answer, workdir)
                            for x in planted
                            if x.cls == "tool"
                        },
                    }
                )
        text = view_text(
            Compactor(
                config=config,
                store=store,
                model=info,
                data_dir=data_dir,
                system_prompt=prompt,
                strategy=strategy,
            ).chat(history)
        )
        upto = completed if died is None else completed
        final = {x.id: _retained(x, text) for x in scn.needles if x.turn < upto}
        recov = {
            x.id: recoverable(text, x.answer, workdir)
            for x in scn.needles
            if x.turn < upto and x.cls == "tool"
        }
        constraint_checks = sum(
            1 for c in checkpoints for k in c["retained"] if needles[k].cls == "constraint"
        )
        constraint_ok = sum(
            v
            for c in checkpoints
            for k, v in c["retained"].items()
            if needles[k].cls == "constraint"
        )
        frame = store.sql("SELECT * FROM compaction_event ORDER BY id")
        events = frame.drop(columns=["data"]).to_dict("records")
        cost = float(store.sql("SELECT coalesce(sum(cost), 0) c FROM message")["c"][0])
        return RunResult(
            scenario=scn.name,
            policy=policy,
            turns=len(scn.turns),
            completed=completed,
            died=died,
            events=events,
            checkpoints=checkpoints,
            final=final,
            recoverable=recov,
            latest_checks=latest["checks"],
            latest_ok=latest["ok"],
            constraint_checks=constraint_checks,
            constraint_ok=constraint_ok,
            duplicates=agent.duplicates,
            lost_requests=agent.lost,
            overflow_errors=server.overflows,
            main_calls=counts["main"],
            summary_calls=counts["summary"],
            cost=cost,
            seconds=time.perf_counter() - started,
            usable=strategy.budget(config, info).usable,
            needles={x.id: x.cls for x in scn.needles},
            paired=paired,
        )
    finally:
        server.stop()
        store.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _retained(needle, text: str) -> bool:
    if needle.cls == "update":  # the new value is there, and the old one is not the last word
        new, old = text.rfind(needle.answer), text.rfind(needle.stale or "\0")
        return new >= 0 and new > old
    return needle.answer in text


# --------------------------------------------------------------------------
# aggregation


CLASSES = ("constraint", "tool", "update", "status", "decision", "file")


def summarise_runs(runs: list[RunResult]) -> dict[str, Any]:
    """One row of the table: a policy over all scenarios."""
    summary_events = [e for r in runs for e in r.events if e["kind"] == "summary"]
    ok_events = [e for e in summary_events if e["outcome"] == "ok"]
    prune_events = [e for r in runs for e in r.events if e["kind"] == "prune"]
    freed = [e["tokens_before"] - e["tokens_after"] for e in ok_events]
    headroom = [1 - e["tokens_after"] / e["usable"] for e in ok_events if e["usable"]]
    tsr = [1 - e["tokens_after"] / e["tokens_before"] for e in ok_events if e["tokens_before"]]
    row: dict[str, Any] = {
        "turns": f"{sum(r.completed for r in runs)}/{sum(r.turns for r in runs)}",
        "died": sum(1 for r in runs if r.died),
        "summaries": len(summary_events),
        "prunes": len(prune_events),
        "failed": sum(1 for e in summary_events if e["outcome"] != "ok"),
        "no-progress": sum(
            1 for e in summary_events if e["trigger"] and e["tokens_after"] >= e["trigger"]
        ),
        "LLM calls": sum(r.main_calls + r.summary_calls for r in runs),
        "freed/event": statistics.mean(freed) if freed else 0,
        "freed median": statistics.median(freed) if freed else 0,
        "TSR median": statistics.median(tsr) if tsr else 0,
        "headroom median": statistics.median(headroom) if headroom else 0,
        "LLM calls/event": (sum(e["llm_calls"] for e in summary_events) / len(summary_events))
        if summary_events
        else 0,
        "summary input/event": (
            statistics.mean(e["summary_input_tokens"] for e in summary_events)
            if summary_events
            else 0
        ),
        "summary input total": sum(e["summary_input_tokens"] for e in summary_events),
        "ms/event": statistics.mean(e["duration_ms"] for e in summary_events)
        if summary_events
        else 0,
        "overflow errors": sum(r.overflow_errors for r in runs),
        "duplicates": sum(r.duplicates for r in runs),
        "lost request": sum(r.lost_requests for r in runs),
        "latest kept": _ratio(sum(r.latest_ok for r in runs), sum(r.latest_checks for r in runs)),
        "constraints kept": _ratio(
            sum(r.constraint_ok for r in runs), sum(r.constraint_checks for r in runs)
        ),
        "cost $": sum(r.cost for r in runs),
        "seconds": sum(r.seconds for r in runs),
    }
    for cls in CLASSES:
        hits = [v for r in runs for k, v in r.final.items() if r.needles[k] == cls]
        row[f"final {cls}"] = _ratio(sum(hits), len(hits))
    tool_ids = [(r, k) for r in runs for k in r.final if r.needles[k] == "tool"]
    row["tool reachable"] = _ratio(
        sum(1 for r, k in tool_ids if r.final[k] or r.recoverable.get(k)), len(tool_ids)
    )
    per_k: dict[int, list[bool]] = {}
    for r in runs:  # in context, or (tool facts) one read of a visible saved file away
        for c in r.checkpoints:
            per_k.setdefault(c["summaries"], []).extend(
                v or c["recoverable"].get(k, False) for k, v in c["retained"].items()
            )
    row["retention@k"] = {k: _ratio(sum(v), len(v)) for k, v in sorted(per_k.items())}
    return row


def _mean(values: list) -> float | None:
    return statistics.mean(values) if values else None


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def summarise_pairs(runs_by_policy: dict[str, list[RunResult]], a: str, b: str) -> dict[str, dict]:
    """Compaction points where both ``a`` and ``b`` compacted the same history (either trajectory).

    Success rates count every such point; sizes and retention count the points where both
    succeeded (a refused futile compaction frees nothing by design, a failed one nothing by accident).
    """
    pairs = [
        rec["results"]
        for runs in runs_by_policy.values()
        for r in runs
        for rec in r.paired
        if a in rec["results"] and b in rec["results"]
    ]
    both = [p for p in pairs if p[a]["ok"] and p[b]["ok"]]
    out = {}
    for name in (a, b):
        every = [p[name] for p in pairs]
        rows = [p[name] for p in both]
        out[name] = {
            "compaction points": len(every),
            "succeeded": _ratio(sum(x["ok"] for x in every), len(every)),
            "LLM calls/point": _mean([x["calls"] for x in every]) or 0,
            "both succeeded": len(rows),
            "freed/event": _mean([x["freed"] for x in rows]) or 0,
            "after median": statistics.median(x["after"] for x in rows) if rows else 0,
            "summary input/event": _mean([x["summary_input"] for x in rows]) or 0,
            "latest visible": _ratio(sum(x["latest"] for x in rows), len(rows)),
            "constraints visible": _ratio(sum(x["constraints"] for x in rows), len(rows)),
            "needles in context": _mean(
                [x["in_context"] for x in rows if x["in_context"] is not None]
            ),
            "needles reachable": _mean(
                [x["reachable"] for x in rows if x["reachable"] is not None]
            ),
        }
    return out
