"""Views: the MIME bundle (JSON + Markdown + text), the budget report, the live
view's display-id updates during a real turn, ``%agent show/budget/browse`` and
the ipywidgets browser — over a synthetic session with every part type, every
tool status, a pruned output, a compaction request + summary, and a retry."""

from __future__ import annotations

import dataclasses
import json

import pytest
from _synthetic import BIG_OUTPUT, PRUNED_OUTPUT, synthetic_session
from IPython.utils.capture import capture_output

from jupyter_session_agent.analytics.sessions import session_rows
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.budget import ModelInfo, Prices, budget
from jupyter_session_agent.core.errors import SessionNotFoundError, UsageError
from jupyter_session_agent.core.messages import (
    PART_TYPES,
    AssistantMessage,
    FilePart,
    ModelRef,
    StepFinishPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    part_from_data,
    tool_status,
)
from jupyter_session_agent.loop.budget_report import BudgetReport, budget_report
from jupyter_session_agent.loop.compaction import CompactionConfig, plan_prune
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui import display as D
from jupyter_session_agent.ui.display import (
    MIME_TYPE,
    BudgetView,
    TranscriptView,
    part_data,
)
from jupyter_session_agent.ui.live import LiveView

MODEL = ModelInfo("openai", "scripted", context=100_000, output=4_096, prices=Prices(1.0, 2.0))
BIG = ModelInfo(
    "openai", "big", context=1_000_000, output=32_000
)  # prune limits not capped by the window


@pytest.fixture
def synthetic():
    return synthetic_session()


def bundle_of(obj) -> dict:
    bundle = obj._repr_mimebundle_()
    json.dumps(bundle)  # everything in it is JSON
    return bundle


def all_parts(data: dict) -> list[dict]:
    return [p for m in data["messages"] for p in m["parts"]]


# --------------------------------------------------------------------------
# the bundle


def test_bundle_has_three_forms_and_every_part(synthetic):
    session, history = synthetic
    report = budget_report(history, MODEL, {})
    bundle = bundle_of(TranscriptView(history, session=session, report=report))
    assert set(bundle) == {MIME_TYPE, "text/markdown", "text/plain"}
    data = bundle[MIME_TYPE]
    assert data["version"] == D.SCHEMA_VERSION == 1
    assert data["view"] == "transcript" and data["live"] is False and data["omitted"] == 0
    assert data["session"]["id"] == session.id and data["session"]["title"] == session.title
    # messages are OpenCode's WithParts JSON, in order
    assert [m["info"]["id"] for m in data["messages"]] == [m.info.id for m in history]
    assert [m["info"]["role"] for m in data["messages"]] == [m.info.role for m in history]
    parts = all_parts(data)
    assert {p["type"] for p in parts} == set(PART_TYPES) and len(PART_TYPES) == 12
    # every tool status, interrupted included (a ToolError with metadata.interrupted)
    statuses = [tool_status(p) for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert sorted(set(statuses)) == ["completed", "error", "interrupted", "pending", "running"]
    raw = {p["state"]["status"] for p in parts if p["type"] == "tool"}
    assert raw == {"pending", "running", "completed", "error"}
    interrupted = [
        p
        for p in parts
        if p["type"] == "tool" and p["state"].get("metadata", {}).get("interrupted")
    ]
    assert len(interrupted) == 1 and interrupted[0]["state"]["error"] == "Tool execution aborted"
    # the summary message and the compaction request are marked as OpenCode marks them
    assert [
        m["info"].get("summary") for m in data["messages"] if m["info"]["role"] == "assistant"
    ] == [None, None, True, None]
    request = [m for m in data["messages"] if any(p["type"] == "compaction" for p in m["parts"])]
    assert len(request) == 1 and request[0]["info"]["role"] == "user"
    assert request[0]["parts"][0]["auto"] is True
    # the budget rides along
    assert data["budget"]["used"] == 2_160 and data["budget"]["usable"] == report.usable


def test_parts_round_trip_and_long_outputs_are_cut_with_a_flag(synthetic):
    _, history = synthetic
    parts = [p for m in history for p in m.parts]
    for part in parts:
        data = part_data(part)
        if "truncated" not in data:
            assert part_from_data(data) == part  # untouched parts are exact OpenCode JSON
    big = next(p for p in parts if isinstance(p, ToolPart) and p.tool == "python")
    data = part_data(big)
    assert len(big.state.output) > D.MAX_FIELD_CHARS
    assert data["truncated"] == {"state.output": len(BIG_OUTPUT)}
    assert data["state"]["output"] == BIG_OUTPUT[: D.MAX_FIELD_CHARS]
    # text gets a larger allowance; urls (data: URLs of images) are cut too
    text = TextPart("prt_x", "ses_x", "msg_x", text="y" * (D.MAX_TEXT_CHARS + 5))
    assert part_data(text)["truncated"] == {"text": D.MAX_TEXT_CHARS + 5}
    image = FilePart(
        "prt_y", "ses_x", "msg_x", mime="image/png", url="data:image/png;base64," + "A" * 50_000
    )
    assert part_data(image)["truncated"] == {"url": len(image.url)}
    # the whole bundle stays bounded
    assert len(json.dumps(TranscriptView(history).data)) < 100_000


def test_pruned_output_is_marked_and_still_viewable(synthetic):
    session, history = synthetic
    bundle = bundle_of(
        TranscriptView(history, session=session, report=budget_report(history, MODEL))
    )
    pruned = [
        p
        for p in all_parts(bundle[MIME_TYPE])
        if p["type"] == "tool" and p["state"].get("time", {}).get("compacted")
    ]
    assert (
        len(pruned) == 1 and pruned[0]["state"]["output"] == PRUNED_OUTPUT
    )  # the original is kept
    md = bundle["text/markdown"]
    assert "output pruned at" in md and "[Old tool result content cleared]" in md
    assert "<details><summary>original output" in md and "line 199: old listing" in md
    assert "(pruned)" in bundle["text/plain"]


def test_markdown_and_text_show_every_kind_of_part(synthetic):
    session, history = synthetic
    view = TranscriptView(history, session=session, report=budget_report(history, MODEL))
    md, text = view.markdown, view.text
    for needle in (
        "#### You",
        "data.csv",
        "@explore",
        "💭 reasoning",
        "**python** `completed`",
        "**read** `error`",
        "**glob** `pending`",
        "**grep** `running`",
        "**bash** `interrupted`",
        "retry 1 (HTTP 429): Rate limit reached",
        "🧩 **subtask**",
        "📝 files changed",
        "snapshot `9d1c2a7e5f`",
        "#### 🗜 Compaction request",
        "**🗜 compaction requested** (automatic)",
        "#### 📋 Summary",
        "## Goal",
        "<sub>*(synthetic)*</sub>",
        "▪ step · 1,380 tokens",
        "$0.0016",
        "tool-calls",
        "all 500 lines",
        "📊 Context 2,160 / 91,808 usable",
    ):
        assert needle in md, needle
    for needle in (
        "Session: Synthetic session",
        "compaction request: [compaction]",
        "summary: ## Goal",
        "[bash interrupted]",
        "[retry 1]",
        "[glob pending]",
        "Context 2,160",
    ):
        assert needle in text, needle
    assert len(text) <= 4_100
    assert "msg_" not in text and "prt_" not in text  # plain text is stable across runs


def test_long_sessions_are_capped(synthetic):
    session, history = synthetic
    view = TranscriptView(history, session=session, max_messages=3)
    assert view.data["omitted"] == len(history) - 3 and len(view.data["messages"]) == 3
    assert f"{len(history) - 3:,} earlier messages not shown" in view.markdown


# --------------------------------------------------------------------------
# the budget report


def test_budget_report_numbers(synthetic):
    _, history = synthetic
    report = budget_report(history, MODEL, {"reserved": 8_000})
    limits = budget(MODEL, 8_000)
    assert isinstance(report, BudgetReport)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.used = 1  # type: ignore[misc]
    assert (report.context, report.max_output, report.reserved, report.usable) == (
        100_000,
        limits.max_output,
        8_000,
        limits.usable,
    )
    assert report.used == 2_160 and report.headroom == limits.usable - 2_160 and not report.overflow
    assert [s.tokens for s in report.steps] == [1_380, 47_090, 47_400, 2_160]
    assert [s.summary for s in report.steps] == [False, False, True, False]
    assert [s.after_compaction for s in report.steps] == [False, False, False, True]  # the drop
    assert (report.compactions, report.summaries, report.turns, report.messages) == (1, 1, 1, 7)
    assert report.cost == pytest.approx(0.00156 + 0.0462 + 0.0478 + 0.00222)
    assert report.pruned_parts == 1 and report.pruned_tokens == round(len(PRUNED_OUTPUT) / 4)
    # prune limits as the compaction engine applies them: capped for a 100k window
    config = CompactionConfig.from_settings({"reserved": 8_000})
    assert (report.prune_protect, report.prune_minimum) == config.prune_limits(MODEL)
    assert report.prune_trigger == sum(config.prune_limits(MODEL)) < 60_000
    assert report.compaction_at == report.usable == config.trigger(MODEL)
    big = budget_report(history, BIG, {})
    assert (big.prune_protect, big.prune_minimum, big.prune_trigger) == (40_000, 20_000, 60_000)
    early = budget_report(history, MODEL, {"threshold": 0.5})
    assert (
        early.compaction_at == early.usable // 2 and early.headroom == early.compaction_at - 2_160
    )
    assert "|" in report.sparkline()
    data = report.to_data()
    json.dumps(data)
    assert (
        data["prune_trigger"] == report.prune_trigger
        and len(data["steps"]) == 4
        and data["steps_omitted"] == 0
    )
    assert report.to_data(max_steps=2)["steps_omitted"] == 2


def _turn(sid: str, output_tokens_each: list[int]) -> list[WithParts]:
    user = UserMessage(ids.ascending("message"), sid, 1, ModelRef("openai", "scripted"))
    items = [WithParts(user, (TextPart(ids.ascending("part"), sid, user.id, text="go"),))]
    msg = AssistantMessage(
        ids.ascending("message"), sid, user.id, 2, "openai", "scripted", finish="stop"
    )
    parts = tuple(
        ToolPart(
            ids.ascending("part"),
            sid,
            msg.id,
            call_id=f"c{i}",
            tool="bash",
            state=ToolCompleted({}, "z" * (n * 4), "t", {}, 1, 2),
        )
        for i, n in enumerate(output_tokens_each)
    )
    return items + [
        WithParts(
            msg,
            parts
            + (
                StepFinishPart(
                    ids.ascending("part"), sid, msg.id, tokens=Tokens(input=10, output=1)
                ),
            ),
        )
    ]


def test_prune_numbers_follow_opencode_walk():
    sid = "ses_prune"
    # four turns, 30k estimated tokens of tool output each; the walk skips the newest two turns' replies
    history = (
        _turn(sid, [30_000])
        + _turn(sid, [30_000])
        + _turn(sid, [15_000, 15_000])
        + _turn(sid, [30_000])
    )
    report = budget_report(history, BIG, {})
    # counted: turn 2 (30k) and turn 1 (30k) = 60k; beyond the newest 40k: turn 1's 30k prunable
    assert report.tool_output_tokens == 60_000
    assert report.prunable_tokens == 30_000 and report.prune_due  # 30k > PRUNE_MINIMUM 20k
    assert not budget_report(history, BIG, {"prune": False}).prune_due
    quiet = budget_report(history, BIG, {"prune_minimum": 50_000})
    assert quiet.prunable_tokens == 30_000 and not quiet.prune_due
    # the same walk as the engine's own prune plan
    parts, tokens = plan_prune(history, protect=40_000, minimum=20_000)
    assert tokens == report.prunable_tokens and len(parts) == 1
    protected = budget_report(history, BIG, {"protected_tools": ["bash"]})
    assert protected.tool_output_tokens == 0


def test_overflow_follows_is_overflow(synthetic):
    _, history = synthetic
    small = dataclasses.replace(MODEL, context=3_000, output=500)  # usable 2,000 < 2,160
    assert budget_report(history, small, {}).overflow
    assert not budget_report(history, small, {"auto": False}).overflow
    unknown = budget_report(history, ModelInfo("x", "y"), {})
    assert (
        unknown.usable == 0
        and unknown.fraction == 0.0
        and "window unknown" in D.budget_lines(unknown)[0]
    )
    empty = budget_report([], MODEL, {})
    assert empty.used == 0 and empty.steps == () and empty.sparkline() == ""


# --------------------------------------------------------------------------
# the live view during a real turn


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def test_live_view_updates_one_display_with_the_same_bundle(ip, server, magics):
    server.enqueue(
        Reply(status=429, headers={"retry-after": "0"}),
        Reply(
            text="Let me compute that.",
            chunk_chars=3,
            delay=0.01,
            tool_calls=({"name": "python", "arguments": {"code": "print(6 * 7)"}},),
        ),
        Reply(text="The answer is 42, computed in the kernel.", chunk_chars=4, delay=0.03),
    )
    session = magics.current(new=True)
    view = LiveView(live=True, session=session)
    with capture_output() as out:
        session.prompt("compute 6*7", observer=view)
        view.finish()
    bundles = [o.data for o in out.outputs]
    assert len(bundles) > 5
    assert all(set(b) == {MIME_TYPE, "text/markdown", "text/plain"} for b in bundles)
    live = [b[MIME_TYPE] for b in bundles]
    assert all(d["live"] for d in live[:-1]) and live[-1]["live"] is False
    # the turn from its prompt: user, two steps; what streamed and how the tool moved
    final = live[-1]
    assert [m["info"]["role"] for m in final["messages"]] == ["user", "assistant", "assistant"]
    assert final["messages"][0]["parts"][0]["text"] == "compute 6*7"
    seen = [tuple(p["state"]["status"] for p in all_parts(d) if p["type"] == "tool") for d in live]
    assert ("running",) in seen and ("completed",) in seen
    assert seen.index(("running",)) < seen.index(("completed",))
    texts = [
        p["text"]
        for d in live
        for p in all_parts(d)
        if p["type"] == "text" and p["text"].startswith("The answer")
    ]
    assert any(t != texts[-1] for t in texts), "the text streamed in several updates"
    assert any(p["type"] == "retry" for p in all_parts(final))
    # the budget is the session's: the last step's tokens, the model's limits
    report = session.budget_report()
    assert final["budget"] == report.to_data()
    assert final["budget"]["used"] == session.history[-1].info.tokens.count > 0
    assert "The answer is 42" in bundles[-1]["text/markdown"]


def test_agent_cell_shows_the_bundle_once_outside_a_kernel(ip, server, magics):
    server.enqueue(Reply(text="Hello there."))
    with capture_output() as out:
        run(ip, "say hello")
    assert len(out.outputs) == 1
    data = out.outputs[0].data
    assert data[MIME_TYPE]["messages"][-1]["parts"][1]["text"] == "Hello there."
    assert "Hello there." in data["text/markdown"] and "Hello there." in data["text/plain"]


# --------------------------------------------------------------------------
# %agent show / budget / browse


def _store_synthetic(store):
    session, history = synthetic_session()
    store.put(session, *[m.info for m in history], *[p for m in history for p in m.parts])
    store.flush()
    return session, history


def test_show_and_budget_subcommands(ip, server, store, magics):
    with pytest.raises(UsageError, match="no current session"):
        ip.run_line_magic("agent", "budget")
    session, history = _store_synthetic(store)
    shown = ip.run_line_magic("agent", f"show {session.id}")
    assert isinstance(shown, TranscriptView)
    data = bundle_of(shown)[MIME_TYPE]
    assert len(data["messages"]) == len(history) and data["budget"]["compactions"] == 1
    report = ip.run_line_magic("agent", f"budget {session.id}")
    assert isinstance(report, BudgetView)
    bundle = bundle_of(report)
    assert bundle[MIME_TYPE]["view"] == "budget" and bundle[MIME_TYPE]["messages"] == []
    assert bundle[MIME_TYPE]["budget"]["used"] == 2_160
    assert (
        bundle[MIME_TYPE]["budget"]["usable"] == budget(MODEL).usable
    )  # the conftest override's limits
    assert "Context 2,160" in bundle["text/plain"]
    with pytest.raises(UsageError, match="one session id"):
        ip.run_line_magic("agent", "budget a b")
    with pytest.raises(SessionNotFoundError):
        ip.run_line_magic("agent", "show ses_nope")
    # the current session: the in-memory history and AgentSession.budget_report()
    server.enqueue(
        Reply(text="hi", usage={"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320})
    )
    with capture_output():
        run(ip, "hello", "--new")
    current = ip.run_line_magic("agent", "budget")
    assert current.report == magics.session.budget_report() and current.report.used == 320
    assert ip.run_line_magic("agent", "show").data["session"]["id"] == magics.session.info.id
    with capture_output() as out:
        ip.run_line_magic("agent", "help")
    assert "budget [ID]" in out.stdout and "browse" in out.stdout


def test_session_rows_from_sql(ip, server, store, magics):
    session, history = _store_synthetic(store)
    server.enqueue(
        Reply(text="hi", usage={"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320})
    )
    with capture_output():
        run(ip, "hello", "--new")
    rows = {r.id: r for r in session_rows(store)}
    row = rows[session.id]
    assert (row.title, row.model, row.turns, row.messages, row.compactions) == (
        session.title,
        "openai/scripted",
        1,
        7,
        1,
    )
    assert row.cost == pytest.approx(
        sum(m.info.cost for m in history if m.info.role == "assistant")
    )
    assert row.tokens == sum(m.info.tokens.count for m in history if m.info.role == "assistant")
    assert row.context == 2_160
    other = rows[magics.session.info.id]
    assert (other.turns, other.messages, other.tokens, other.compactions) == (1, 2, 320, 0)
    assert list(rows)[0] == magics.session.info.id  # newest first


def test_browser_widget_lists_and_opens_sessions(ip, server, store, magics):
    import ipywidgets

    from jupyter_session_agent.ui.widgets import COLUMNS, SessionBrowser, row_cells, table

    session, history = _store_synthetic(store)
    server.enqueue(Reply(text="hi"))
    with capture_output():
        run(ip, "hello", "--new")
    browser = ip.run_line_magic("agent", "browse")
    assert isinstance(browser, SessionBrowser) and isinstance(browser, ipywidgets.VBox)
    assert [value for _, value in browser.select.options] == [magics.session.info.id, session.id]
    assert (
        browser.select.value == magics.session.info.id == browser.selected
    )  # the current one, opened
    label = dict((v, k) for k, v in browser.select.options)[session.id]
    assert session.title[:35] in label and "openai/scripted" in label
    # the header's columns start where every row's columns start (one monospace font)
    head, lines = table(browser.rows)
    assert head in browser.header.value and [k for k, _ in browser.select.options] == lines
    names = [name for name, _ in COLUMNS]
    cells = [row_cells(r) for r in browser.rows]
    widths = [max(len(c[i]) for c in [names, *cells]) for i in range(len(names))]
    for line, values in zip([head, *lines], [names, *cells]):
        at = 0
        for value, width in zip(values, widths):
            assert line[at : at + width].strip() == value, (line, value)
            at += width + 2
    # picking a row (what a click does) opens it: the transcript bundle, its budget once
    browser.select.value = session.id
    assert browser.selected == session.id
    assert browser.report.used == 2_160 and browser.report.usable == budget(MODEL).usable
    assert not any(isinstance(w, ipywidgets.FloatProgress) for w in _descendants(browser))
    assert len(browser.output.outputs) == 1
    shown = browser.output.outputs[0]
    assert shown["output_type"] == "display_data"
    assert len(shown["data"][MIME_TYPE]["messages"]) == len(history)
    assert shown["data"][MIME_TYPE]["budget"]["used"] == 2_160
    assert "text/markdown" in shown["data"]
    # the filter narrows the list; refresh re-reads the history
    browser.filter.value = "synthetic"
    assert [v for _, v in browser.select.options] == [session.id]
    assert browser.count.value == "1 of 2 sessions"
    browser.filter.value = ""
    browser.refresh()
    assert len(browser.select.options) == 2
    assert repr(browser).startswith(
        "Session browser: 2 sessions"
    )  # a saved notebook without widget state
    assert browser._repr_mimebundle_()["text/plain"] == repr(browser)
    with pytest.raises(UsageError):
        ip.run_line_magic("agent", "browse extra")


def _descendants(widget):
    for child in getattr(widget, "children", ()):
        yield child
        yield from _descendants(child)


def test_gauge_colours():
    from jupyter_session_agent.ui.widgets import BudgetGauge

    _, history = synthetic_session()
    nearly = dataclasses.replace(MODEL, context=7_500, output=1_000)  # usable 5,500: 2,160 is 39%
    assert BudgetGauge(budget_report(history, nearly)).bar.bar_style == "success"
    tight = dataclasses.replace(MODEL, context=5_000, output=1_000)  # usable 3,000: 72%
    assert BudgetGauge(budget_report(history, tight)).bar.bar_style == "warning"
    full = dataclasses.replace(MODEL, context=3_000, output=500)
    assert BudgetGauge(budget_report(history, full)).bar.bar_style == "danger"
    assert BudgetGauge(budget_report(history, ModelInfo("a", "b"))).bar.bar_style == "info"


def test_live_view_through_an_automatic_compaction(ip, server, data_dir):
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.session.agent_session import AgentSession

    settings = Settings(
        model="openai/scripted",
        data_dir=data_dir,
        titles=False,
        permission={"python": "allow"},
        model_overrides={"openai/scripted": {"context": 20_000, "output": 2_000}},
    )
    session = AgentSession.create(settings, shell=ip)
    server.enqueue(
        Reply(
            tool_calls=({"name": "python", "arguments": {"code": "print('x' * 2000)"}},),
            usage={"prompt_tokens": 17_000, "completion_tokens": 20, "total_tokens": 17_020},
        ),  # ≥ usable 16,000
        Reply(
            text="## Goal\nPrint x.\n\n## Accomplished\nPrinted.",
            usage={"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930},
        ),
        Reply(
            text="Done: printed 2000 x.",
            usage={"prompt_tokens": 1_200, "completion_tokens": 10, "total_tokens": 1_210},
        ),
    )
    view = LiveView(live=True, session=session)
    with capture_output() as out:
        session.prompt("print many x", observer=view)
        view.finish()
    data = [o.data[MIME_TYPE] for o in out.outputs]
    final = data[-1]
    kinds = [
        (
            m["info"]["role"],
            bool(m["info"].get("summary")),
            any(p["type"] == "compaction" for p in m["parts"]),
        )
        for m in final["messages"]
    ]
    assert kinds[0] == ("user", False, False)  # the prompt leads the turn
    assert ("user", False, True) in kinds and (
        "assistant",
        True,
        False,
    ) in kinds  # request, then summary
    assert kinds.index(("user", False, True)) < kinds.index(("assistant", True, False))
    # the compaction request appeared while the turn was running, before the summary finished
    first_request = next(
        i
        for i, d in enumerate(data)
        if any(p["type"] == "compaction" for m in d["messages"] for p in m["parts"])
    )
    assert first_request < len(data) - 1
    budget_data = final["budget"]
    assert budget_data["compactions"] == 1 and budget_data["summaries"] == 1
    steps = budget_data["steps"]
    assert (
        steps[0]["tokens"] == 17_020
        and steps[-1]["tokens"] == 1_210
        and steps[-1]["after_compaction"]
    )
    assert "#### 🗜 Compaction request" in out.outputs[-1].data["text/markdown"]
