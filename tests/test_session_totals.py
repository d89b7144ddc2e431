"""The session totals the store keeps (``session_totals``, what ``%agent browse`` lists) stay equal
to the aggregate over every message and part, whatever the history went through.

Random sequences (seeded, so a failure replays) of what the product writes: turns (tool calls
that run then finish, steps with usage and cost), compactions (the request, the summary, the
synthetic continue message), prunes (a tool's output cleared: a new revision of its part),
reverts (the turns after a point tombstoned), forks (``lifecycle.copy_messages``), imports of an
exported bundle as a new session (``transfer.import_bundle``), deletes (``lifecycle.delete``),
archives; interleaved with a kernel's exit (its journal becomes a Parquet file), forced merges
(sessions move into a generation's files, and a later write takes one back into the tail), and
a generation written by a version that kept no totals (its totals computed when read, then
backfilled by the next merge). After each step the browser's rows are compared with the same
rows computed from ``message`` and ``part``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
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
from jupyter_session_agent.store.merge import merge, merge_due
from jupyter_session_agent.store.schema import DERIVED

# The rows as the browser computed them before the store kept totals: every message and part of
# the listed sessions aggregated at read time.
REFERENCE = """
WITH last AS MATERIALIZED (
    SELECT session_id, max(coalesce(time_completed, time_created)) AS last_message
    FROM message GROUP BY session_id
), s AS MATERIALIZED (
    SELECT s.id, s.title, s.time_created, s.parent_id,
           greatest(s.time_updated, coalesce(last.last_message, 0)) AS time_updated
    FROM session s LEFT JOIN last ON last.session_id = s.id
    WHERE s.time_archived IS NULL
), msg AS (
    SELECT session_id, count(*) AS messages, coalesce(sum(cost), 0) AS cost,
           coalesce(sum(coalesce(total_tokens, coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
               + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0)))
               FILTER (WHERE role = 'assistant'), 0) AS tokens,
           arg_max(coalesce(total_tokens, coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
               + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0)), id)
               FILTER (WHERE role = 'assistant' AND finish IS NOT NULL) AS context,
           arg_max(provider_id || '/' || model_id, id) AS model
    FROM message WHERE session_id IN (SELECT id FROM s) GROUP BY session_id
), prompts AS MATERIALIZED (
    SELECT id FROM message WHERE role = 'user' AND session_id IN (SELECT id FROM s)
), prt AS (
    SELECT p.session_id, count(*) FILTER (WHERE p.type = 'compaction') AS compactions,
           count(DISTINCT p.message_id) FILTER (
               WHERE p.type = 'text' AND NOT coalesce(p.synthetic, false)) AS turns
    FROM part p WHERE p.message_id IN (SELECT id FROM prompts) GROUP BY p.session_id
)
SELECT s.id, s.title, coalesce(msg.model, '') AS model, coalesce(prt.turns, 0) AS turns,
       coalesce(msg.messages, 0) AS messages, coalesce(msg.tokens, 0) AS tokens,
       coalesce(msg.context, 0) AS context, coalesce(msg.cost, 0) AS cost,
       coalesce(prt.compactions, 0) AS compactions, s.time_created, s.time_updated, s.parent_id
FROM s LEFT JOIN msg ON msg.session_id = s.id LEFT JOIN prt ON prt.session_id = s.id
"""

MODELS = [("openai", "gpt-4o-mini"), ("anthropic", "claude-haiku"), ("local", "smollm2")]


class History:
    """One history and the random writes made to it, through the product's own functions."""

    def __init__(self, data_dir: Path, rng: random.Random) -> None:
        self.data_dir = data_dir
        self.rng = rng
        self.store = Store(data_dir)
        self.sessions: list[str] = []
        self.log: list[str] = []

    # ---- writes ------------------------------------------------------------

    def new_session(self) -> None:
        now = now_ms()
        info = Session(
            id=ids.descending("session"),
            directory="/w",
            title=f"s{len(self.sessions)}",
            time_created=now,
            time_updated=now,
        )
        self.store.put(info)
        self.store.flush()
        self.sessions.append(info.id)
        for _ in range(self.rng.randint(0, 3)):
            self.turn(info.id)

    def turn(self, sid: str) -> None:
        rng, store, now = self.rng, self.store, now_ms()
        provider, model = rng.choice(MODELS)
        user = UserMessage(ids.ascending("message"), sid, now, ModelRef(provider, model))
        text = TextPart(ids.ascending("part"), sid, user.id, text="question " * rng.randint(1, 5))
        store.put(user, text)
        for step in range(rng.randint(1, 3)):
            reply = AssistantMessage(
                ids.ascending("message"), sid, user.id, now + step, provider, model
            )
            store.put(reply, StepStartPart(ids.ascending("part"), sid, reply.id))
            parts = []
            if rng.random() < 0.6:  # a tool call: running, stored, then completed
                tool = ToolPart(
                    ids.ascending("part"),
                    sid,
                    reply.id,
                    call_id=f"c{rng.random()}",
                    tool="python",
                    state=ToolRunning(input={"code": "1"}, time_start=now),
                )
                store.put(tool)
                if rng.random() < 0.5:
                    store.flush()  # the running revision reaches the journal
                parts.append(
                    replace(tool, state=ToolCompleted({"code": "1"}, "1", "py", {}, now, now + 5))
                )
            tokens = Tokens(
                input=rng.randint(0, 5000),
                output=rng.randint(0, 500),
                cache_read=rng.choice([0, rng.randint(0, 900)]),
            )
            cost = rng.choice([0.0, rng.random() / 100, 0.1 + rng.random()])
            finished = rng.random() < 0.9  # else the step failed (no finish)
            parts.append(
                StepFinishPart(ids.ascending("part"), sid, reply.id, cost=cost, tokens=tokens)
            )
            if rng.random() < 0.5:
                parts.append(TextPart(ids.ascending("part"), sid, reply.id, text="answer"))
            reply = replace(
                reply,
                cost=cost,
                tokens=tokens,
                time_completed=now + 10 + step,
                finish=("stop" if finished else None),
            )
            store.put(*parts, reply)
        if rng.random() < 0.2:
            self.compaction(sid)
        store.flush()

    def compaction(self, sid: str) -> None:
        """A compaction request, its summary, and the synthetic continue message."""
        store, now = self.store, now_ms()
        provider, model = self.rng.choice(MODELS)
        ask = UserMessage(ids.ascending("message"), sid, now, ModelRef(provider, model))
        store.put(ask, CompactionPart(ids.ascending("part"), sid, ask.id, auto=True))
        summary = AssistantMessage(
            ids.ascending("message"),
            sid,
            ask.id,
            now,
            provider,
            model,
            summary=True,
            cost=0.001,
            tokens=Tokens(input=900, output=80),
            finish="stop",
            time_completed=now + 3,
        )
        store.put(summary, TextPart(ids.ascending("part"), sid, summary.id, text="summary"))
        go = UserMessage(ids.ascending("message"), sid, now + 4, ModelRef(provider, model))
        store.put(go, TextPart(ids.ascending("part"), sid, go.id, text="Continue", synthetic=True))
        store.flush()

    def prune(self, sid: str) -> None:
        """Clear the output of a completed tool call (a new revision of its part)."""
        for item in self.store.messages(sid):
            for part in item.parts:
                if isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted):
                    self.store.put(
                        replace(part, state=replace(part.state, time_compacted=now_ms()))
                    )
        self.store.flush()

    def revert(self, sid: str) -> None:
        """Drop the turns after a random message (what a revert's cleanup tombstones)."""
        history = self.store.messages(sid)
        if not history:
            return
        cut = self.rng.randrange(len(history))
        for item in history[cut:]:
            for part in item.parts:
                self.store.delete("part", part.id)
            self.store.delete("message", item.info.id)
        self.store.flush()

    def drop_part(self, sid: str) -> None:
        parts = [p for m in self.store.messages(sid) for p in m.parts]
        if parts:
            self.store.delete("part", self.rng.choice(parts).id)
            self.store.flush()

    def fork(self, sid: str) -> None:
        source = self.store.session(sid)
        history = self.store.messages(sid)
        cut = self.rng.randint(0, len(history))
        now = now_ms()
        info = Session(
            id=ids.descending("session"),
            directory="/w",
            title=lifecycle.forked_title(source.title),
            time_created=now,
            time_updated=now,
        )
        self.store.put(info)
        for item in lifecycle.copy_messages(history[:cut], info.id):
            self.store.put(item.info, *item.parts)
        self.store.flush()
        self.sessions.append(info.id)

    def import_copy(self, sid: str) -> None:
        data = fresh_ids(json.loads(json.dumps(transfer.bundle(self.store, sid))))
        transfer.import_bundle(self.store, data, directory=self.data_dir)
        self.sessions.append(data["info"]["id"])

    def delete(self, sid: str) -> None:
        lifecycle.delete(self.store, sid)
        self.sessions.remove(sid)

    def archive(self, sid: str) -> None:
        lifecycle.archive(sid, store=self.store, undo=self.rng.random() < 0.3)

    # ---- the files ---------------------------------------------------------

    def exit_kernel(self) -> None:
        """This kernel's journal becomes a Parquet file (and may be merged); a new one starts."""
        self.store.close()
        self.store = Store(self.data_dir)

    def merge_now(self) -> None:
        self.store.close()
        merge(self.data_dir / "history", force=True)
        self.store = Store(self.data_dir)

    def older_generation(self) -> None:
        """Make the current generation look written by a version that kept no totals."""
        self.merge_now()
        folder = self.data_dir / "history" / "parquet"
        for manifest in folder.glob("generation-*.json"):
            data = json.loads(manifest.read_text())
            for entry in data["files"]:
                name = entry["derived"].pop("session_totals", None)
                if name:
                    (folder / name).unlink()
            manifest.write_text(json.dumps(data))
        self.store.close()
        self.store = Store(self.data_dir)

    # ---- one random step -----------------------------------------------------

    def step(self) -> None:
        rng = self.rng
        live = self.sessions
        weights = {
            "new_session": 3 if len(live) < 8 else 0.5,
            "turn": 6,
            "compaction": 1,
            "prune": 1,
            "revert": 1.5,
            "drop_part": 0.5,
            "fork": 1,
            "import_copy": 1,
            "delete": 0.7,
            "archive": 0.5,
            "exit_kernel": 0.8,
            "merge_now": 0.5,
            "older_generation": 0.3,
        }
        if not live:
            weights = {"new_session": 1}
        name = rng.choices(list(weights), list(weights.values()))[0]
        self.log.append(name)
        fn = getattr(self, name)
        if name in ("new_session", "exit_kernel", "merge_now", "older_generation"):
            fn()
        else:
            fn(rng.choice(live))


def _rows(store, sql: str | None = None) -> dict:
    if sql is None:
        found = session_rows(store)
    else:
        from jupyter_session_agent.analytics.sessions import SessionRow

        frame = store.sql(sql)
        found = [
            SessionRow(**{k: (None if v != v else v) for k, v in rec.items()})
            for rec in frame.to_dict("records")
        ]
    return {
        r.id: (
            r.title,
            r.model,
            int(r.turns),
            int(r.messages),
            int(r.tokens),
            int(r.context),
            float(r.cost),
            int(r.compactions),
            int(r.time_created),
            int(r.time_updated),
        )
        for r in found
    }


def _check(history: History) -> None:
    kept, computed = _rows(history.store), _rows(history.store, REFERENCE)
    assert kept.keys() == computed.keys(), history.log
    for sid, row in kept.items():
        want = computed[sid]
        # a sum of doubles may differ in its last bits with the order it is added in
        assert row[:6] == want[:6] and row[7:] == want[7:], (sid, row, want, history.log)
        assert math.isclose(row[6], want[6], rel_tol=1e-12, abs_tol=1e-15), (row, want)


@pytest.mark.parametrize("seed", range(4))
def test_totals_equal_the_aggregate_after_random_histories(tmp_path, seed):
    rng = random.Random(seed)
    history = History(tmp_path / "data", rng)
    try:
        for n in range(40):
            history.step()
            if n % 4 == 3:
                _check(history)
        history.merge_now()  # everything in a generation, then more writes into the tail
        _check(history)
        for _ in range(8):
            history.step()
        _check(history)
        assert {"turn", "fork", "import_copy", "revert", "exit_kernel"} <= set(history.log)
    finally:
        history.store.close()


def test_a_history_without_totals_is_read_then_backfilled_once(tmp_path):
    """An existing history (files of a version that kept no totals): the same rows, computed when
    read; the next merge writes the missing files without rewriting any other, once."""
    rng = random.Random(99)
    history = History(tmp_path / "data", rng)
    for _ in range(6):
        history.new_session()
    history.older_generation()
    folder = tmp_path / "data" / "history" / "parquet"
    before = {p.name for p in folder.glob("*.parquet")}
    assert not any("session_totals" in name for name in before)
    assert merge_due(tmp_path / "data" / "history")  # a reader's upkeep starts the backfill
    lock = os.open(folder / ".merge.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # held: no merge (nor backfill) meanwhile
    try:
        _check(history)  # computed from the generation's files
        history.store.close()
    finally:
        os.close(lock)
    done = merge(tmp_path / "data" / "history")
    assert done and done["backfilled"] >= 1
    after = {p.name for p in folder.glob("*.parquet")}
    assert before < after and all("session_totals" in name for name in after - before)
    manifest = json.loads(next(folder.glob("generation-*.json")).read_text())
    assert all(set(DERIVED) <= set(e["derived"]) for e in manifest["files"])
    assert not merge_due(tmp_path / "data" / "history")
    assert merge(tmp_path / "data" / "history") is None  # nothing more to do
    history.store = Store(tmp_path / "data")
    _check(history)
    for _ in range(5):  # and it stays equal as the history goes on
        history.turn(rng.choice(history.sessions))
    history.revert(history.sessions[0])
    _check(history)
    history.store.close()


def test_a_revert_in_another_kernel_updates_the_totals(tmp_path):
    """Totals of a merged session change when another store (kernel) tombstones its turns."""
    history = History(tmp_path / "data", random.Random(5))
    history.new_session()
    sid = history.sessions[0]
    for _ in range(3):
        history.turn(sid)
    history.merge_now()
    reader = history.store
    first = _rows(reader)[sid]
    other = History(tmp_path / "data", random.Random(6))
    other.sessions = [sid]
    other.revert(sid)
    other.store.close()
    _check(history)
    assert _rows(reader)[sid] != first
    reader.close()


def test_browse_reads_only_the_totals():
    """The browser's query names no ``message`` or ``part``: one row per session."""
    from jupyter_session_agent.analytics.sessions import SESSION_ROWS_SQL

    words = set(SESSION_ROWS_SQL.replace(".", " ").split())
    assert "session_totals" in words and not {"message", "part"} & words


def test_tombstones_alone_update_the_totals(tmp_path):
    """A revert or a deleted part whose batch holds nothing but tombstones (the session's rows
    were read before) still changes the totals, in the tail and after a merge."""
    history = History(tmp_path / "data", random.Random(8))
    history.new_session()
    sid = history.sessions[0]
    for _ in range(4):
        history.turn(sid)
    first = _rows(history.store)[sid]  # summed once: nothing left to settle
    history.revert(sid)
    _check(history)
    assert _rows(history.store)[sid] != first
    history.drop_part(sid)
    _check(history)
    history.merge_now()
    history.turn(sid)
    _rows(history.store)
    history.revert(sid)
    _check(history)
    history.store.close()
