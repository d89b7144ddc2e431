"""The browser's rows (``session_totals``) against an aggregate computed apart — in Python over
``Store.messages`` (not SQL) — while other kernels write the same sessions as real processes:
one that exits cleanly, one that exits without closing its journal (a crash before the journal
becomes a Parquet file), one killed (SIGKILL) in the middle of its writes (a torn last line).
Interleaved with very long sessions, sessions without a message, steps without usage or cost,
user messages of only synthetic text, prunes, reverts, imports, deletes, archives, merges and
kernel restarts; pages of the browser (``limit``) stay prefixes of the whole ordered listing."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from _bundles import fresh_ids

from jupyter_session_agent.analytics.sessions import session_rows
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    CompactionPart,
    ModelRef,
    Session,
    StepFinishPart,
    StepStartPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    ToolRunning,
    UserMessage,
    now_ms,
)
from jupyter_session_agent.exchange import transfer
from jupyter_session_agent.session import lifecycle
from jupyter_session_agent.store import Store
from jupyter_session_agent.store.merge import merge

MODELS = [("openai", "gpt-4.1"), ("local", "qwen3"), ("vllm", "llama-3.1-8b")]


def write_turns(store: Store, sid: str, rng: random.Random, n: int, long: bool = False) -> None:
    """``n`` turns of 0-4 steps; ``long``: flushed rarely (a very long session's batches)."""
    for _ in range(n):
        now = now_ms()
        provider, model = rng.choice(MODELS)
        user = UserMessage(ids.ascending("message"), sid, now, ModelRef(provider, model))
        parts = [TextPart(ids.ascending("part"), sid, user.id, text="q")]
        if rng.random() < 0.2:  # an attachment's text beside the prompt
            parts.append(TextPart(ids.ascending("part"), sid, user.id, text="ctx", synthetic=True))
        if rng.random() < 0.1:  # only synthetic text: not a turn
            parts = [TextPart(ids.ascending("part"), sid, user.id, text="Go on", synthetic=True)]
        if rng.random() < 0.08:
            parts.append(CompactionPart(ids.ascending("part"), sid, user.id, auto=True))
        store.put(user, *parts)
        for step in range(rng.randint(0, 4)):
            reply = AssistantMessage(
                ids.ascending("message"), sid, user.id, now + step, provider, model
            )
            store.put(reply)  # the step's message before its usage is known
            tokens = rng.choice(
                [
                    Tokens(),  # no usage reported
                    Tokens(
                        input=rng.randint(0, 10**6),
                        output=rng.randint(0, 9999),
                        cache_read=rng.randint(0, 999),
                        cache_write=rng.randint(0, 99),
                    ),
                    Tokens(input=5, output=7, total=rng.randint(0, 10**7)),
                ]
            )
            cost = rng.choice([0.0, rng.random(), 1e-9, 123.456])
            parts = [StepStartPart(ids.ascending("part"), sid, reply.id)]
            if rng.random() < 0.5:
                tool = ToolPart(
                    ids.ascending("part"),
                    sid,
                    reply.id,
                    call_id="c",
                    tool="bash",
                    state=ToolRunning(input={"command": "ls"}, time_start=now),
                )
                store.put(tool)
                if rng.random() < 0.5:
                    store.flush()
                done = ToolCompleted(
                    {"command": "ls"}, "x" * rng.randint(0, 3000), "ls", {}, now, now
                )
                parts.append(replace(tool, state=done))
            parts.append(
                StepFinishPart(ids.ascending("part"), sid, reply.id, cost=cost, tokens=tokens)
            )
            finished = rng.choice(["stop", "tool-calls", None, "length"])
            completed = now + 5 if rng.random() < 0.8 else None
            store.put(
                *parts,
                replace(reply, cost=cost, tokens=tokens, finish=finished, time_completed=completed),
            )
        if not long or rng.random() < 0.05:
            store.flush()
    store.flush()


def new_session(store: Store, title: str) -> str:
    now = now_ms()
    info = Session(ids.descending("session"), "/w", title, now, now)
    store.put(info)
    store.flush()
    return info.id


KERNEL = """
import os, random, sys
sys.path.insert(0, {tests!r})
from test_session_totals_kernels import write_turns
from jupyter_session_agent.store import Store
store, rng = Store({data!r}), random.Random({seed})
write_turns(store, {sid!r}, rng, rng.randint(1, 4))
if {how!r} == "close":
    store.close()
elif {how!r} == "exit":
    os._exit(0)  # no close: the journal stays live, never converted by this process
else:
    print("ready", flush=True)
    write_turns(store, {sid!r}, rng, 400, long=True)  # killed somewhere in here
"""


def other_kernel(data: Path, sid: str, seed: int, how: str) -> None:
    code = KERNEL.format(
        tests=str(Path(__file__).parent), data=str(data), sid=sid, seed=seed, how=how
    )
    if how != "kill":
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        return
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(random.Random(seed).random() * 0.3)
    proc.kill()
    proc.wait()


def expected(store: Store) -> dict:
    """Each listed session's row, from its messages and parts as Python values."""

    def tokens(t: Tokens) -> int:  # what the browser shows: the total, else the sum of the kinds
        return t.total if t.total is not None else t.input + t.output + t.cache_read + t.cache_write

    def model(m) -> str:
        ref = m if m.role == "assistant" else m.model
        return f"{ref.provider_id}/{ref.model_id}"

    # the last time of a message: the times the rows were written (as the views hold them)
    last = dict(
        store.sql(
            "SELECT session_id, max(coalesce(time_completed, time_created)) FROM message "
            "GROUP BY session_id"
        ).itertuples(index=False, name=None)
    )
    out = {}
    live = store.sql("SELECT id, time_updated FROM session WHERE time_archived IS NULL")
    for sid, updated in live.itertuples(index=False, name=None):
        history = store.messages(sid)
        infos = [m.info for m in history]
        replies = [m for m in infos if m.role == "assistant"]
        finished = [m for m in replies if m.finish is not None]
        user = [m for m in history if m.info.role == "user"]
        out[sid] = {
            "model": model(max(infos, key=lambda m: m.id)) if infos else "",
            "turns": sum(any(p.type == "text" and not p.synthetic for p in m.parts) for m in user),
            "messages": len(infos),
            "tokens": sum(tokens(m.tokens) for m in replies),
            "context": tokens(max(finished, key=lambda m: m.id).tokens) if finished else 0,
            "cost": sum(m.cost or 0.0 for m in replies),
            "compactions": sum(p.type == "compaction" for m in user for p in m.parts),
            "time_updated": max(int(updated), int(last.get(sid) or 0)),
        }
    return out


def check(store: Store, log: list) -> None:
    rows = session_rows(store)
    got, want = {r.id: r for r in rows}, expected(store)
    assert got.keys() == want.keys(), (set(got) ^ set(want), log[-6:])
    for sid, fields in want.items():
        for name, value in fields.items():
            have = getattr(got[sid], name)
            same = (
                math.isclose(have, value, rel_tol=1e-9, abs_tol=1e-9)
                if name == "cost"
                else (have == value)
            )
            assert same, (sid, name, have, value, log[-6:])
    order = [r.id for r in rows]
    for n in (1, 3, 7):  # the browser's page: the newest n of the whole listing
        assert [r.id for r in session_rows(store, limit=n)] == order[:n], n


@pytest.mark.parametrize("seed", [101, 202])
def test_totals_with_other_kernels_crashes_and_kills(tmp_path, seed):
    rng, data = random.Random(seed), tmp_path / "data"
    store, live, log = Store(data), [], []
    weights = {
        "new": 3.0, "empty": 0.5, "turns": 4.0, "kernel": 1.2, "crash": 1.0, "kill": 1.0,
        "prune": 1.0, "revert": 1.0, "import": 0.7, "delete": 0.5, "archive": 0.5,
        "restart": 0.7, "merge": 0.6, "long": 0.3,
    }  # fmt: skip
    try:
        for n in range(18):
            ops = weights if live else {"new": 1.0}
            op = rng.choices(list(ops), list(ops.values()))[0]
            sid = rng.choice(live) if live else ""
            log.append((op, sid))
            if op in ("new", "empty"):
                live.append(new_session(store, f"{op}{n}"))
                if op == "new":
                    write_turns(store, live[-1], rng, rng.randint(0, 3))
            elif op == "turns":
                write_turns(store, sid, rng, rng.randint(1, 3))
            elif op in ("kernel", "crash", "kill"):
                how = {"kernel": "close", "crash": "exit", "kill": "kill"}[op]
                other_kernel(data, sid, rng.randrange(10**6), how)
            elif op == "prune":
                for part in (p for m in store.messages(sid) for p in m.parts):
                    if part.type == "tool" and part.state.status == "completed":
                        store.put(replace(part, state=replace(part.state, time_compacted=1)))
                store.flush()
            elif op == "revert":
                history = store.messages(sid)
                for item in history[rng.randrange(len(history) + 1) :]:
                    for part in item.parts:
                        store.delete("part", part.id)
                    store.delete("message", item.info.id)
                store.flush()
            elif op == "import":
                bundle = fresh_ids(json.loads(json.dumps(transfer.bundle(store, sid))))
                transfer.import_bundle(store, bundle, directory=data)
                live.append(bundle["info"]["id"])
            elif op == "delete":
                lifecycle.delete(store, sid)
                live.remove(sid)
            elif op == "archive":
                lifecycle.archive(sid, store=store, undo=rng.random() < 0.5)
            elif op in ("restart", "merge"):
                store.close()
                if op == "merge":
                    merge(data / "history", force=True)
                store = Store(data)
            elif op == "long":
                write_turns(store, sid, rng, 300, long=True)
            check(store, log)
        store.close()
        merge(data / "history", force=True)
        store = Store(data)
        check(store, log)
        assert {"kill", "crash", "kernel"} & {op for op, _ in log}, log
    finally:
        store.close()
