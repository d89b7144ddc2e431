"""A turn costs what the turn holds, not what the session before it holds.

The budget is kept by a tally that folds each message once (and again only when the message is
replaced, as a prune replaces what it clears); the bundle's cleaned forms of a message are made
once per message value; a bundle carries the newest step points only, so a saved cell stays
small however long the session. Checked here against the from-scratch computation, through the
real shell against the scripted server, with secrets learned between renders.
"""

from __future__ import annotations

import json

import pytest
from _synthetic import synthetic_session

from jupyter_session_agent.core.budget import ModelInfo, Prices
from jupyter_session_agent.core.messages import ToolCompleted, ToolPart, WithParts, replace
from jupyter_session_agent.loop.budget_report import BudgetTally, budget_report
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.display import BUDGET_STEPS, MIME_TYPE, TranscriptView
from jupyter_session_agent.ui.display import budget_markdown as display_budget

MODEL = ModelInfo("openai", "scripted", context=100_000, output=4_096, prices=Prices(1.0, 2.0))


def _long_history(copies: int) -> list[WithParts]:
    """The synthetic session (every part type, a compaction, a pruned output) ``copies`` times."""
    history: list[WithParts] = []
    for _ in range(copies):
        history += synthetic_session()[1]
    return history


def _pruned(item: WithParts) -> WithParts:
    parts = tuple(
        replace(p, state=replace(p.state, time_compacted=1))
        if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
        else p
        for p in item.parts
    )
    return WithParts(item.info, parts)


def test_the_tally_matches_the_report_computed_from_scratch_as_a_history_changes():
    history = _long_history(6)
    tally = BudgetTally()
    compaction = {"reserved": 8_000}
    assert tally.report(history, MODEL, compaction) == budget_report(history, MODEL, compaction)
    grown = history + _long_history(1)  # a turn appended
    assert tally.report(grown, MODEL, compaction) == budget_report(grown, MODEL, compaction)
    # a prune replaces messages in the middle: they are folded again, from there on
    middle = next(
        i
        for i, item in enumerate(grown)
        if i > len(grown) // 3 and any(isinstance(p, ToolPart) for p in item.parts)
    )
    pruned = [*grown[:middle], _pruned(grown[middle]), *grown[middle + 1 :]]
    report = tally.report(pruned, MODEL, compaction)
    assert report == budget_report(pruned, MODEL, compaction)
    assert report.pruned_parts > budget_report(grown, MODEL, compaction).pruned_parts
    # a revert drops the newest messages; another session's history shares nothing
    assert tally.report(pruned[:40], MODEL) == budget_report(pruned[:40], MODEL)
    other = _long_history(2)
    assert tally.report(other, MODEL) == budget_report(other, MODEL)
    assert tally.report([], MODEL) == budget_report([], MODEL)


def test_the_tally_folds_only_the_messages_new_since_its_last_report(monkeypatch):
    history = _long_history(20)
    tally = BudgetTally()
    folded = []
    fold = BudgetTally._fold
    monkeypatch.setattr(
        BudgetTally, "_fold", lambda self, run, item: folded.append(item) or fold(self, run, item)
    )
    tally.report(history, MODEL)
    assert len(folded) == len(history)
    folded.clear()
    turn = synthetic_session()[1]
    tally.report([*history, *turn], MODEL)  # a new list with the same messages, then the turn
    assert folded == turn


def test_a_bundle_carries_the_newest_step_points_and_counts_the_rest():
    session, _ = synthetic_session()
    history = _long_history(60)
    report = budget_report(history, MODEL)
    assert len(report.steps) > 4 * BUDGET_STEPS
    data = TranscriptView(history[-6:], session=session, report=report)._repr_mimebundle_()
    budget = data[MIME_TYPE]["budget"]
    assert [s["part_id"] for s in budget["steps"]] == [
        s.part_id for s in report.steps[-BUDGET_STEPS:]
    ]
    assert budget["steps_omitted"] == len(report.steps) - BUDGET_STEPS
    assert budget["cost"] == report.cost and budget["turns"] == report.turns


def test_a_secret_learned_after_a_render_is_redacted_in_the_next_one():
    """The cleaned forms are remembered per message value, and forgotten when a new secret
    becomes known: what was clean before may hold it."""
    from jupyter_session_agent.core import redact

    secret = "zq7Vt3nonstandardTokenXk52Lm9Pq4Rs8"
    session, history = synthetic_session()
    first = history[0]
    text = next(p for p in first.parts if p.type == "text")
    history[0] = WithParts(
        first.info,
        tuple(replace(p, text=f"use {secret} here") if p is text else p for p in first.parts),
    )
    view = TranscriptView(history, session=session, report=budget_report(history, MODEL))
    assert secret in json.dumps(view._repr_mimebundle_())  # not known as a secret yet
    redact.remember(secret, "LATE_TOKEN")
    again = json.dumps(view._repr_mimebundle_(), ensure_ascii=False)
    assert secret not in again and "[REDACTED:LATE_TOKEN]" in again


def test_a_long_compact_turn_makes_again_only_the_message_that_changed(monkeypatch):
    """The compact Markdown (the default view) is made per message value, as the JSON is: a
    render of a long turn after one message changed (a text streaming in) makes that message
    only, and gives exactly what a render from scratch gives (no stale form)."""
    from jupyter_session_agent.core.redact import clean
    from jupyter_session_agent.render import compact

    history = _long_history(12)
    report = budget_report(history, MODEL)
    assert TranscriptView(history, report=report, detail="compact").markdown
    made: list[str] = []
    real = compact.message_markdown

    def counted(item, unsaved=frozenset()):
        made.append(item.info.id)
        return real(item, unsaved)

    monkeypatch.setattr(compact, "message_markdown", counted)
    last = history[-1]
    text = next(p for p in last.parts if p.type == "text")
    history[-1] = WithParts(
        last.info,
        tuple(replace(p, text=p.text + " and more") if p is text else p for p in last.parts),
    )
    shown = TranscriptView(history, report=report, detail="compact").markdown
    # a message counting a retry down is drawn each time (its words change with the clock)
    ticking = [m.info.id for m in history[:-1] if any(p.type == "retry" for p in m.parts)]
    assert made == [*ticking, last.info.id]
    fresh = compact.turn(
        history, report, budget=clean(display_budget(report)), render=real, clean=clean
    )
    assert shown == clean(fresh) and "and more" in shown


def test_a_secret_learned_after_a_compact_render_is_redacted_in_the_next_one():
    from jupyter_session_agent.core import redact

    secret = "Wp4Lk8nonstandardCompactTokenQ7r2"
    session, history = synthetic_session()
    first = history[0]
    text = next(p for p in first.parts if p.type == "text")
    history[0] = WithParts(
        first.info,
        tuple(replace(p, text=f"use {secret} here") if p is text else p for p in first.parts),
    )
    view = TranscriptView(history, session=session, detail="compact")
    assert secret in view.markdown  # not known as a secret yet
    redact.remember(secret, "LATE_COMPACT_TOKEN")
    assert secret not in view.markdown and "[REDACTED:LATE_COMPACT_TOKEN]" in view.markdown


# --------------------------------------------------------------------------
# through the shell


@pytest.fixture
def turns(ip, server, magics):
    def run(n: int) -> None:
        for i in range(n):
            server.enqueue(
                Reply(tool_calls=({"name": "python", "arguments": {"code": f"print({i} * {i})"}},)),
                Reply(text=f"{i} squared is {i * i}."),
            )
            ip.run_cell_magic("agent", "", f"what is {i} squared?")

    return run


def test_the_budget_of_a_session_is_its_tally_and_matches_a_fresh_report(ip, magics, turns):
    turns(12)
    session = magics.session
    report = session.budget_report()
    assert report == budget_report(
        session.history, session.model_info(None), session.settings.compaction
    )
    assert report.turns == 12 and len(report.steps) == 24
    assert ip.run_line_magic("agent", "budget").report == report
