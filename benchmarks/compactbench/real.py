"""CompactBench's column for the real OpenCode: a scenario driven through the OpenCode CLI.

Per scenario: an isolated OpenCode (``opencode_cli.Sandbox``) whose only model is served by
the same scripted server the other policies use (a hard context limit, the same rule agent and
summariser; OpenCode's title requests get a title, its summary requests the same summary ours
get, in its template). Its model declares ``limit.input = context − output``, what the server
enforces. The scenario's files are written into the project
folder (``cat logs/…`` and ``read`` really run), every turn is one prompt, a manual
compaction is ``POST /session/<id>/summarize``, and at the end one probe prompt shows what
the model would be sent next. The requests OpenCode sends are then scored as ours are:

* a **summary event** is a run of summary requests with no agent request between them.
  *before* is the context at that point: the last agent request, plus the reply to it and
  the tool results that reply produced (read from OpenCode's database by call id), or the
  refused request itself after a context-overflow error; *after* is the next agent request
  (without a new turn's user message). Cause (auto / manual / overflow) and outcome come
  from the compaction parts and summary messages OpenCode stored. LLM calls are the summary
  requests; time is from the last reply before to the next agent request;
* a **prune event** is a turn after which OpenCode's database shows newly cleared outputs;
* retention, the latest request and the constraints are read from the requests themselves
  (the first agent request after a summary; the first request of the next turn, or the
  probe, for the view at the end of a turn).

**Same room for the conversation.** OpenCode's system prompt and tool schemas are larger than
the benchmark agent's (``fixed_overhead``); its model's ``limit.context`` is the scenario's
window plus that difference, so both get the same room for the conversation itself. Its tools
are limited to the three the scenarios use (bash, read, edit; write comes with edit).
"""

from __future__ import annotations

import base64
import json
import math
import random
import shutil
import sqlite3
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_session_agent.core.budget import estimate_chat
from jupyter_session_agent.testing.scripted_server import Reply

from .harness import RunResult, _retained, bench_fixed_tokens, recoverable, view_text
from .llm import (
    BenchServer,
    RuleAgent,
    extractive_summariser,
    is_summary_request,
    is_title_request,
)
from .opencode_cli import VERSION, Sandbox, Serve, cache_dir, find_opencode
from .scenarios import Scenario, write_files

POLICY = f"opencode-{VERSION} (real)"
MAX_STEPS = 25  # agent requests per turn, as the other policies' loop (``max_steps``)
MAX_SUMMARIES = 25  # summary requests per turn before the server refuses (a loop)
PROBE = "[probe] CompactBench: the session is over; reply ok."
TOOLS = ("bash", "read", "edit")


def tokens_of(obj: Any) -> int:
    """A context's size as ours' compactor measures it (an image counts as an image)."""
    return estimate_chat(obj)


def request_tokens(body: dict) -> int:
    """A request's context size, measured as ours' compaction events measure theirs."""
    return tokens_of([*(body.get("messages") or []), *(body.get("tools") or [])])


def billed_tokens(body: dict) -> int:
    """The server's count of a request (its usage reports, its limit checks): ours' summary
    input is the usage the server reported for the summary call."""
    sent = [*(body.get("messages") or []), *(body.get("tools") or [])]
    return math.ceil(len(json.dumps(sent)) / 4)


@dataclass
class Req:
    kind: str  # main | summary | title
    body: dict
    size: int  # request_tokens
    turn: int  # scenario turn index (-1: the probe)
    arrived: float
    done: float = 0.0
    reply: Reply | None = None
    refused: bool = False  # answered with the hard limit's context_length_exceeded
    billed: int = 0  # billed_tokens


class RecordingServer(BenchServer):
    """The bench server, also recording every request (refused ones too) with its times."""

    def __init__(self, responder, context: int) -> None:
        super().__init__(responder, context)
        self.keep_requests = False
        self.log: list[Req] = []
        self.turn = 0
        self._by_n: dict[int, Req] = {}

    def _take(self, body: dict):
        kind = (
            "title" if is_title_request(body) else "summary" if is_summary_request(body) else "main"
        )
        rec = Req(
            kind,
            body,
            request_tokens(body),
            self.turn,
            time.monotonic(),
            billed=billed_tokens(body),
        )
        before = self.overflows
        n, reply = super()._take(body)
        rec.reply, rec.refused = reply, self.overflows > before
        with self._lock:
            self.log.append(rec)
            self._by_n[n] = rec
        return n, reply

    def _finished(self, n: int) -> None:
        rec = self._by_n.get(n)
        if rec is not None:
            rec.done = time.monotonic()


_FIXED: dict[str, int] = {}


def fixed_overhead(binary: Path) -> int:
    """Tokens of OpenCode's system prompt and tool schemas (bash/read/edit), measured once per
    binary (kept in the cache folder)."""
    saved = cache_dir() / "fixed-overhead.json"
    key = f"{binary}:{binary.stat().st_size}:{binary.stat().st_mtime_ns}"
    if not _FIXED and saved.exists():
        try:
            _FIXED.update(json.loads(saved.read_text()))
        except ValueError:
            pass
    if key in _FIXED:
        return _FIXED[key]
    seen: list[dict] = []

    def respond(body: dict) -> Reply:
        if not is_title_request(body):
            seen.append(body)
        return Reply(text="ok")

    root = Path(tempfile.mkdtemp(prefix="compactbench-oc-probe-"))
    server = BenchServer(respond, 1_000_000).start()
    try:
        sandbox = Sandbox(root, binary, server.base_url, 200_000, 8_000, tools=TOOLS)
        with sandbox.serve() as serve:
            serve.prompt(serve.new_session(), "hi")
        body = next(b for b in seen if b.get("tools"))
        users = [m for m in body["messages"] if m.get("role") == "user"]
        _FIXED[key] = billed_tokens(body) - billed_tokens({"messages": users})
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(_FIXED))
    except OSError:
        pass
    return _FIXED[key]


@dataclass
class _Db:
    """What the run left in OpenCode's database (read-only, after the server stopped)."""

    outputs: dict[str, str] = field(default_factory=dict)  # call id → tool output
    compactions: list[dict] = field(default_factory=list)  # compaction parts, in order
    summaries: list[dict] = field(default_factory=list)  # summary messages, in order
    cost: float = 0.0

    @classmethod
    def read(cls, path: Path) -> _Db:
        out = cls()
        if not path.exists():
            return out
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            for (data,) in con.execute("SELECT data FROM part ORDER BY time_created, id"):
                d = json.loads(data)
                if d.get("type") == "tool" and d.get("callID"):
                    state = d.get("state") or {}
                    out.outputs[d["callID"]] = state.get("output") or state.get("error") or ""
                elif d.get("type") == "compaction":
                    out.compactions.append(d)
            for (data,) in con.execute("SELECT data FROM message ORDER BY time_created, id"):
                d = json.loads(data)
                if d.get("role") == "assistant":
                    out.cost += float(d.get("cost") or 0)
                    if d.get("summary") is True or d.get("mode") == "compaction":
                        out.summaries.append(d)
        finally:
            con.close()
        return out


def pruned_outputs(db: Path) -> dict[str, int]:
    """Tool parts OpenCode has cleared (``state.time.compacted``) → their output's tokens."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT id, json_extract(data, '$.state.output') FROM part WHERE "
            "json_extract(data, '$.type') = 'tool' AND "
            "json_extract(data, '$.state.time.compacted') IS NOT NULL"
        ).fetchall()
    except sqlite3.Error:
        return {}
    finally:
        con.close()
    return {pid: math.ceil(len(out or "") / 4) for pid, out in rows}


def run_opencode_scenario(
    scn: Scenario,
    *,
    binary: Path | None = None,
    driver: str = "serve",
    normalise: bool = True,
    keep: Path | None = None,
    summarise: Callable[[dict], Reply] | None = None,
) -> RunResult:
    """Run ``scn`` through the real OpenCode; ``driver``: ``serve`` (HTTP API of ``opencode
    serve``) or ``run`` (one ``opencode run --attach`` per turn). ``keep``: copy the sandbox
    (database, requests) there. ``summarise``: answers its summary requests (default: the
    extractive stand-in), as for ours."""
    summarise = summarise or extractive_summariser
    binary = binary or find_opencode()
    if binary is None:
        raise RuntimeError("opencode is not installed (opencode_cli.ensure_opencode installs it)")
    extra = max(0, fixed_overhead(binary) - bench_fixed_tokens(scn)) if normalise else 0
    context = scn.context + extra
    root = Path(tempfile.mkdtemp(prefix="compactbench-oc-"))
    agent = RuleAgent()
    state = {"probe": False, "main": 0, "summaries": 0}

    def respond(body: dict) -> Reply:
        if is_title_request(body):
            return Reply(text="CompactBench session")
        if is_summary_request(body):
            state["summaries"] += 1
            if state["summaries"] > MAX_SUMMARIES:
                return _refuse(f"{MAX_SUMMARIES} compactions in one turn")
            return summarise(body)
        if state["probe"]:
            return Reply(text="ok")
        state["main"] += 1
        if state["main"] > MAX_STEPS:
            return _refuse(f"more than {MAX_STEPS} steps in one turn")
        return agent.reply(body)

    server = RecordingServer(respond, context).start()
    try:
        return _drive(scn, root, binary, server, agent, state, context, extra, driver, keep)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _drive(scn, root, binary, server, agent, state, context, extra, driver, keep) -> RunResult:
    """Run the turns, then the probe, and score what the server saw (see the module docstring)."""
    started = time.perf_counter()
    sandbox = Sandbox(
        root,
        binary,
        server.base_url,
        context,
        scn.output,
        tools=TOOLS,
        instructions=scn.extra.get("system"),
    )
    write_files(scn, sandbox.project)
    died, completed, manual_at = None, 0, set(scn.extra.get("manual", ()))
    prunes: list[dict] = []
    turn_starts: dict[int, float] = {}
    manual_calls: list[tuple[float, float]] = []  # (start, end) of each summarize call
    probe_start: int | None = None  # where the probe's requests begin in the log
    seen_pruned: dict[str, int] = {}
    serve: Serve | None = None
    try:
        serve = sandbox.serve()
        session = serve.new_session()
        for turn in scn.turns:
            agent.turn, server.turn = turn, turn.index
            state["main"] = state["summaries"] = 0
            turn_starts[turn.index] = time.monotonic()
            err = _prompt(serve, sandbox, session, turn, driver)
            if err:
                died = f"turn {turn.index}: {err}"
                break
            if turn.index in manual_at:
                started_at = time.monotonic()
                serve.summarize(session)
                manual_calls.append((started_at, time.monotonic()))
            completed += 1
            now = pruned_outputs(sandbox.db)
            fresh = {k: v for k, v in now.items() if k not in seen_pruned}
            if fresh:
                prunes.append(_prune_event(turn.index, fresh))
                seen_pruned.update(fresh)
        agent.turn, server.turn, state["probe"] = None, -1, True
        probe_start = len(server.log)
        try:
            serve.prompt(session, PROBE)
        except RuntimeError:
            pass
    finally:
        if serve is not None:
            serve.stop()
        server.stop()
    db = _Db.read(sandbox.db)
    result = _score(
        scn,
        server.log,
        len(server.log) if probe_start is None else probe_start,
        turn_starts,
        manual_calls,
        db,
        agent,
        context,
        completed,
        died,
        prunes,
        sandbox.project,
    )
    result.cost, result.seconds = db.cost, time.perf_counter() - started
    result.extra["window_extra"] = extra
    if keep is not None:
        shutil.copytree(root, keep, dirs_exist_ok=True)
        (keep / "requests.jsonl").write_text(
            "".join(
                json.dumps({"kind": r.kind, "turn": r.turn, "refused": r.refused, "body": r.body})
                + "\n"
                for r in server.log
            )
        )
    return result


def _prune_event(turn: int, cleared: dict[str, int]) -> dict:
    """A turn after which OpenCode's database shows newly cleared outputs."""
    return {
        "kind": "prune",
        "cause": "auto",
        "outcome": "ok",
        "turn": turn,
        "parts_pruned": len(cleared),
        "tokens_pruned": sum(cleared.values()),
        "tokens_before": 0,
        "tokens_after": 0,
        "usable": 0,
        "trigger": 0,
        "llm_calls": 0,
        "summary_input_tokens": 0,
        "duration_ms": 0,
    }


def _refuse(why: str) -> Reply:
    return Reply(
        status=400,
        error_body={
            "error": {
                "message": f"CompactBench: {why}",
                "type": "invalid_request_error",
                "param": None,
                "code": "compactbench_cap",
            }
        },
    )


def noise_png(chars: int, seed: int = 0) -> bytes:
    """A valid PNG of random pixels whose base64 form has about ``chars`` characters (OpenCode
    decodes an attached image; the scenarios' stand-in blob is not one)."""
    side = max(1, int(math.sqrt(chars * 3 / 4 / 3)))
    rng = random.Random(seed)
    raw = b"".join(b"\x00" + rng.randbytes(side * 3) for _ in range(side))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


def _prompt(serve: Serve, sandbox: Sandbox, session: str, turn, driver: str) -> str | None:
    """One turn; returns a one-line error when the turn ended in one."""
    files = ()
    if turn.attachment:
        size = len(turn.attachment["url"].split(",", 1)[-1])
        url = "data:image/png;base64," + base64.b64encode(noise_png(size, turn.index)).decode()
        files = ({"mime": "image/png", "filename": turn.attachment["filename"], "url": url},)
    if driver == "run" and not files:
        done = sandbox.run(turn.request, session=session, attach=serve.url)
        if done.returncode != 0:
            return f"opencode run exited with {done.returncode}: {done.stderr.strip()[-160:]}"
        # its JSON events also report errors it recovered from (an overflow before a compaction):
        # the turn's outcome is its last assistant message, as with the HTTP driver
        messages = serve.call("GET", f"/session/{session}/message") or []
        reply = next(
            (m for m in reversed(messages) if m.get("info", {}).get("role") == "assistant"), None
        )
    else:
        try:
            reply = serve.prompt(session, turn.request, files)
        except RuntimeError as err:  # the server refused the prompt itself (one line)
            return str(err)[:200]
        except OSError as err:  # no answer in time (a slow summary model): the run ends here
            return f"opencode serve did not answer: {err}"[:200]
    error = (reply or {}).get("info", {}).get("error")
    if error:
        data = error.get("data") or {}
        return f"{error.get('name')}: {str(data.get('message') or data)[:160]}"
    return None


def _said(body: dict) -> str:
    return "\n".join(
        view_text([m]) for m in body.get("messages", []) if m.get("role") in ("user", "assistant")
    )


def _view(body: dict) -> list[dict]:
    """What a request shows of the history: its messages without a trailing new user message."""
    msgs = list(body.get("messages") or [])
    if msgs and msgs[-1].get("role") == "user":
        msgs = msgs[:-1]
    return msgs


def _reply_tokens(rec: Req, outputs: dict[str, str]) -> int:
    """What the reply to ``rec`` adds to the context: the assistant message and its tool results."""
    reply = rec.reply
    if reply is None or rec.refused or reply.status is not None:
        return 0
    calls = [
        {
            "id": c.get("id"),
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
        }
        for c in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if calls:
        message["tool_calls"] = calls
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": outputs.get(c["id"], "")}
        for c in calls
    ]
    return tokens_of([message, *results]) - 1 if results else tokens_of([message]) - 1


def _score(
    scn,
    log: list[Req],
    probe_start: int,
    turn_starts: dict,
    manual_calls: list,
    db: _Db,
    agent: RuleAgent,
    context: int,
    completed: int,
    died: str | None,
    prunes: list[dict],
    root: Path | None = None,
) -> RunResult:
    usable = max(0, context - min(scn.output, 32_000))  # OpenCode: context − max output
    reqs = [r for r in log if r.kind != "title"]
    probe_idx = [i for i, r in enumerate(reqs) if log.index(r) >= probe_start]
    first_probe = probe_idx[0] if probe_idx else len(reqs)
    events: list[dict] = []
    i = 0
    latest_checks = latest_ok = 0
    summary_turns: list[int] = []
    calibration: list[float] = []
    for j in range(1, first_probe):
        a, b = reqs[j - 1], reqs[j]
        if (
            a.kind == b.kind == "main"
            and a.turn == b.turn
            and not a.refused
            and a.reply
            and a.reply.tool_calls
        ):
            predicted = a.size + _reply_tokens(a, db.outputs)
            calibration.append(abs(predicted - b.size) / max(1, b.size))
    while i < first_probe:
        if reqs[i].kind != "summary":
            i += 1
            continue
        j = i
        while j < len(reqs) and reqs[j].kind == "summary":
            j += 1
        group = reqs[i:j]
        prev = next((r for r in reversed(reqs[:i]) if r.kind == "main"), None)
        nxt = reqs[j] if j < len(reqs) and reqs[j].kind == "main" else None
        before = 0
        if prev is not None:
            before = prev.size if prev.refused else prev.size + _reply_tokens(prev, db.outputs)
            if prev.turn != group[0].turn:  # compacted when the next turn began: its request counts
                before += (
                    tokens_of([{"role": "user", "content": _turn_text(scn, group[0].turn)}]) - 1
                )
        after = 0
        if nxt is not None:
            after = nxt.size
            if nxt.turn != group[0].turn:  # the next turn's request: without its new message
                after -= _new_user_tokens(nxt)
            if nxt.turn >= 0:  # as the other policies: the first agent request after a summary
                latest_checks += 1
                latest_ok += scn.turns[nxt.turn].marker in _said(nxt.body)
        part = db.compactions[len(events)] if len(events) < len(db.compactions) else {}
        message = db.summaries[len(events)] if len(events) < len(db.summaries) else {}
        cause = (
            "overflow" if part.get("overflow") else "auto" if part.get("auto", True) else "manual"
        )
        ok = (
            bool(message)
            and not message.get("error")
            and not any(r.refused for r in group)
            and nxt is not None
        )
        # time: from the reply before (or the summarize call, or the turn's start) to the next
        # agent request of the same turn (or the summarize call's end)
        call = next(((a, b) for a, b in manual_calls if a <= group[0].arrived <= b), None)
        start = group[0].arrived if call is None else call[0]
        if call is None and prev is not None and prev.done:
            start = max(prev.done, turn_starts.get(group[0].turn, prev.done))
        end = call[1] if call is not None else nxt.arrived if nxt is not None else group[-1].done
        events.append(
            {
                "kind": "summary",
                "cause": cause,
                "outcome": "ok" if ok else "failed",
                "turn": group[0].turn,
                "tokens_before": before,
                "tokens_after": after,
                "usable": usable,
                "trigger": usable,
                "llm_calls": len(group),
                "summary_input_tokens": sum(r.billed for r in group),
                "summary_output_tokens": sum(
                    math.ceil(len(r.reply.text) / 4) for r in group if r.reply
                ),
                "duration_ms": int(max(0.0, end - start) * 1000),
                "tail_start_id": part.get("tail_start_id"),
            }
        )
        summary_turns.append(group[0].turn)
        i = j
    # the view at the end of each turn: the next turn's first agent request (or the probe)
    firsts: dict[int, Req] = {}
    for r in reqs:
        if r.kind == "main" and r.turn not in firsts:
            firsts[r.turn] = r
    order = sorted(t for t in firsts if t >= 0) + ([-1] if -1 in firsts else [])

    def view_after(t: int) -> str | None:
        later = [x for x in order if x > t] + ([-1] if -1 in firsts else [])
        return view_text(_view(firsts[later[0]].body)) if later else None

    checkpoints = []
    n = 0
    for t in sorted(set(summary_turns)):
        n += summary_turns.count(t)
        text = view_after(t)
        if text is None:
            continue
        planted = [x for x in scn.needles if x.turn < t]
        checkpoints.append(
            {
                "turn": t,
                "summaries": n,
                "retained": {x.id: _retained(x, text) for x in planted},
                "recoverable": {
                    x.id: recoverable(text, x.answer, root) for x in planted if x.cls == "tool"
                },
            }
        )
    final_text = view_text(_view(firsts[-1].body)) if -1 in firsts else ""
    upto = completed
    final = {x.id: _retained(x, final_text) for x in scn.needles if x.turn < upto}
    recov = {
        x.id: recoverable(final_text, x.answer, root)
        for x in scn.needles
        if x.turn < upto and x.cls == "tool"
    }
    needles = {x.id: x for x in scn.needles}
    constraint_checks = sum(
        1 for c in checkpoints for k in c["retained"] if needles[k].cls == "constraint"
    )
    constraint_ok = sum(
        v for c in checkpoints for k, v in c["retained"].items() if needles[k].cls == "constraint"
    )
    main_calls = sum(1 for r in reqs[:first_probe] if r.kind == "main")
    summary_calls = sum(1 for r in reqs[:first_probe] if r.kind == "summary")
    result = RunResult(
        scenario=scn.name,
        policy=POLICY,
        turns=len(scn.turns),
        completed=completed,
        died=died,
        events=[*events, *prunes],
        checkpoints=checkpoints,
        final=final,
        recoverable=recov,
        latest_checks=latest_checks,
        latest_ok=latest_ok,
        constraint_checks=constraint_checks,
        constraint_ok=constraint_ok,
        duplicates=agent.duplicates,
        lost_requests=agent.lost,
        overflow_errors=sum(1 for r in reqs[:first_probe] if r.refused),
        main_calls=main_calls,
        summary_calls=summary_calls,
        cost=0.0,
        seconds=0.0,
        usable=usable,
        needles={x.id: x.cls for x in scn.needles},
        paired=[],
    )
    result.extra = {
        "context": context,
        "titles": sum(1 for r in log if r.kind == "title"),
        "before_error_median": sorted(calibration)[len(calibration) // 2] if calibration else None,
    }
    return result


def _turn_text(scn: Scenario, index: int) -> str:
    return scn.turns[index].request if 0 <= index < len(scn.turns) else PROBE


def _new_user_tokens(req: Req) -> int:
    msgs = req.body.get("messages") or []
    return tokens_of([msgs[-1]]) - 1 if msgs and msgs[-1].get("role") == "user" else 0
