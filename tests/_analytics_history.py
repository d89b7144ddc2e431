"""A history for the export tests (tests/test_spark.py, tests/test_analytics_export.py), and the
analytics questions of docs/analytics.md they ask."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    StepFinishPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
)
from jupyter_session_agent.loop.compaction import CompactionEvent
from jupyter_session_agent.store import Store

DAY0 = int(dt.datetime(2026, 3, 2, 9, tzinfo=dt.UTC).timestamp() * 1000)
HOUR = 3_600_000
MODELS = ("openai/gpt-4o", "openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5")


def questions() -> dict[str, str]:
    """The questions of docs/analytics.md ("Questions, as queries"), by their comment."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "analytics.md").read_text()
    block = text.split("## Questions, as queries", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    found, label = {}, None
    for line in block.strip().splitlines():
        if line.startswith("--"):
            label = line[2:].strip()
            found[label] = ""
        elif label:
            found[label] += line + "\n"
    return {k: v.strip().rstrip(";") for k, v in found.items()}


def build(store: Store, tag: str, sessions: int, seed: int) -> None:
    """Sessions over three days: three models, tool calls that fail, subagents, title calls,
    prunes and summaries, cache reads; every number distinct enough to compare."""
    prev = None
    for k in range(sessions):
        t = DAY0 + (k % 3) * 24 * HOUR + k * 60_000
        title_usage = (
            {
                "model": "openai/gpt-4o-mini",
                "cost": 0.0001 * (k + 1),
                "time": t,
                "tokens": {"input": 20 + k, "output": 3},
            }
            if k % 2 == 0
            else None
        )
        info = Session(
            id=ids.descending("session"),
            directory="/w",
            title=f"{tag} {k}",
            time_created=t,
            time_updated=t,
            title_usage=title_usage,
            parent_id=prev if k % 4 == 3 else None,
        )  # every 4th: a subagent
        store.put(info, time_created=t)
        prev = info.id
        for turn in range(1 + (k + seed) % 3):
            now = t + turn * 1000
            user = UserMessage(ids.ascending("message"), info.id, now, ModelRef("openai", "gpt-4o"))
            text = TextPart(ids.ascending("part"), info.id, user.id, text=f"question {turn}")
            store.put(user, text, time_created=now)
            for step in range(1 + (k + turn) % 2):
                provider, _, model = MODELS[(k + turn + step + seed) % 3].partition("/")
                tokens = Tokens(
                    input=100 * (k + 1) + turn, output=10 + step, cache_read=7 * k * (turn + 1)
                )
                cost = round(0.001 * (k + 1) + 0.0001 * (turn + step), 6)
                reply = AssistantMessage(
                    ids.ascending("message"),
                    info.id,
                    user.id,
                    now + 10,
                    provider,
                    model,
                    cost=cost,
                    tokens=tokens,
                    time_completed=now + 20,
                )
                keys = dict(session_id=info.id, message_id=reply.id)
                tool = ("bash", "read", "grep")[(k + step) % 3]
                state = (
                    ToolError(input={}, error="exit 1", time_start=now, time_end=now + 5 + k)
                    if (k + turn + step) % 4 == 0
                    else ToolCompleted(
                        input={},
                        output="ok",
                        title=tool,
                        metadata={},
                        time_start=now,
                        time_end=now + 30 + k,
                    )
                )
                metadata = {
                    "latencyMs": 300 + 17 * k + step,
                    "firstTokenMs": 50 + 3 * k,
                    "attempts": 1,
                }
                store.put(
                    reply,
                    ToolPart(
                        ids.ascending("part"), call_id=f"c{step}", tool=tool, state=state, **keys
                    ),
                    StepFinishPart(
                        ids.ascending("part"),
                        reason="stop",
                        cost=cost,
                        tokens=tokens,
                        metadata=metadata,
                        **keys,
                    ),
                    time_created=now + 20,
                )
        if k % 3 == 1:
            event = CompactionEvent(
                id=ids.ascending("event"),
                session_id=info.id,
                kind="summary" if k % 2 else "prune",
                cause="auto",
                outcome="ok",
                time_created=t + 5000,
                tokens_before=1000 + k,
                tokens_after=300,
                cost=0.0005 * k,
            )
            store.put(event, time_created=t + 5000)
    store.flush()
