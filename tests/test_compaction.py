"""Compaction (the compaction package): OpenCode's own test cases for isOverflow, Token.estimate
and prune; the tail view; each fallback and guard; events in the history. Summary
calls go over real HTTP to the scripted server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.compactbench.baseline import OPENCODE, OpenCodeReservedBug
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.budget import ModelInfo, Prices, estimate
from jupyter_session_agent.core.chat import (
    COMPACTION_QUESTION,
    PRUNED_OUTPUT,
    filter_compacted,
    to_chat_messages,
    without_failed_compactions,
)
from jupyter_session_agent.core.errors import ConfigError
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    ModelRef,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    error_data,
)
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.loop.compaction import (
    CONTINUE_TEXT,
    PRUNE_MINIMUM,
    PRUNE_PROTECT,
    SUMMARY_SYSTEM,
    CompactionConfig,
    CompactionEvent,
    Compactor,
    ProductStrategy,
    plan_prune,
    select_tail,
    transcript,
    water_fill,
)
from jupyter_session_agent.loop.step import StepSetup
from jupyter_session_agent.loop.turn import TurnSetup, run_turn
from jupyter_session_agent.providers.openai_provider import ChatRequest, OpenAIProvider
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

S = "ses_test"
K = 1_000
OVERFLOW_400 = {
    "status": 400,
    "error_body": {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    },
}


# -- builders ---------------------------------------------------------------------------------


def user(text: str = "do it", *extra, synthetic=False) -> WithParts:
    info = UserMessage(ids.ascending("message"), S, 1, ModelRef("openai", "scripted"))
    parts = [TextPart(ids.ascending("part"), S, info.id, text=text, synthetic=synthetic or None)]
    parts += [p(info.id) for p in extra]
    return WithParts(info, tuple(parts))


def assistant(
    *makers, summary=None, finish="tool-calls", error=None, parent="msg_u", tokens=None
) -> WithParts:
    info = AssistantMessage(
        ids.ascending("message"),
        S,
        parent,
        1,
        "openai",
        "scripted",
        finish=finish,
        summary=summary,
        error=error,
        tokens=tokens or Tokens(),
    )
    return WithParts(info, tuple(m(info.id) for m in makers))


def out(output: str, tool: str = "bash", compacted=None, **metadata):
    def make(mid):
        state = ToolCompleted(
            {"command": "x"}, output, tool, dict(metadata), 1, 2, time_compacted=compacted
        )
        return ToolPart(
            ids.ascending("part"), S, mid, call_id=ids.ascending("tool"), tool=tool, state=state
        )

    return make


def said(body: str):
    return lambda mid: TextPart(ids.ascending("part"), S, mid, text=body)


def request(auto=True, tail_start_id=None) -> WithParts:
    info = UserMessage(ids.ascending("message"), S, 1, ModelRef("openai", "scripted"))
    return WithParts(
        info,
        (
            CompactionPart(
                ids.ascending("part"), S, info.id, auto=auto, tail_start_id=tail_start_id
            ),
        ),
    )


def tokens_text(n: int) -> str:
    return "x" * (4 * n)  # estimate() == n


def ids_of(items):
    return [m.info.id for m in items]


# -- isOverflow with threshold and v1.2.16's reserved bug, Token.estimate --------------------


def model(context, output, input_limit=0, **extra):
    return ModelInfo("p", "m", context=context, output=output, input=input_limit, extra=extra)


def test_overflow_uses_the_fixed_budget_by_default_and_v1216_optionally(tmp_path):
    m = model(200 * K, 32 * K)
    fixed = CompactionConfig()
    bug = OpenCodeReservedBug()  # CompactBench's strategy with v1.2.16's isOverflow
    assert (
        fixed.budget(m).usable == 148 * K and bug.budget(fixed, m).usable == 168 * K
    )  # v1.2.16 vs the upstream fix

    def legacy(model_info):
        return Compactor(fixed, None, model_info, tmp_path, "", strategy=bug)

    assert fixed.is_overflow(Tokens(total=171 * K), m) and legacy(m).is_overflow(
        Tokens(total=171 * K)
    )
    assert fixed.is_overflow(Tokens(total=150 * K), m) and not legacy(m).is_overflow(
        Tokens(total=150 * K)
    )
    # with an input limit both subtract reserved (OpenCode's asymmetry test)
    mi = model(200 * K, 32 * K, 200 * K)
    assert fixed.budget(mi).usable == bug.budget(fixed, mi).usable == legacy(mi).usable == 180 * K
    assert not CompactionConfig(auto=False).is_overflow(Tokens(total=10**9), m)
    assert not fixed.is_overflow(Tokens(total=10**9), model(0, 0))


def test_threshold_and_per_model_override():
    m = model(100 * K, 10 * K)  # usable = 100k - 10k - 10k = 80k
    assert CompactionConfig.from_settings({"threshold": 0.5}, m).trigger(m) == 40 * K
    per_model = model(100 * K, 10 * K, compaction_threshold=0.25)
    assert (
        CompactionConfig.from_settings({"threshold": 0.5}, per_model).trigger(per_model) == 20 * K
    )
    assert CompactionConfig.from_settings({"threshold": 0.5}, m).is_overflow(
        Tokens(total=40 * K), m
    )
    for bad in (
        {"threshold": 0},
        {"threshold": 1.5},
        {"prune_protect": -1},
        {"auto": "yes"},
        {"model": "no-slash"},
        {"protected_tools": "skill"},
        {"bogus": 1},
    ):
        with pytest.raises(ConfigError):
            CompactionConfig.from_settings(bad)
    with pytest.raises(ConfigError, match="threshold"):
        Settings(compaction={"threshold": 2})


def test_model_override_key_compaction_threshold():
    from jupyter_session_agent.providers import prices

    info = prices.model_info(
        "openai", "scripted", {"openai/scripted": {"context": 9000, "compaction_threshold": 0.8}}
    )
    assert info.extra["compaction_threshold"] == 0.8
    with pytest.raises(ConfigError, match="compaction_threshold"):
        prices.model_info("openai", "scripted", {"openai/scripted": {"compaction_threshold": 0}})


def test_token_estimate():
    assert estimate("x" * 4000) == 1000 and estimate("x" * 20_000) == 5000 and estimate("") == 0


# -- prune (compaction.ts prune) -----------------------------------------------------------


def test_prune_keeps_the_protect_window_and_clears_older_outputs():
    old = [assistant(out(tokens_text(10 * K))) for _ in range(6)]  # 60k of old output
    history = [
        user("t1"),
        *old,
        user("t2"),
        assistant(out(tokens_text(5 * K))),
        user("t3"),
        assistant(out(tokens_text(5 * K))),
    ]
    parts, pruned = plan_prune(history)
    # the last two user turns are skipped; 40k of the older output is kept, 20k is more than… not >20k
    assert pruned == 0 and parts == []
    history.insert(1, assistant(out(tokens_text(1 * K))))  # 61k: 21k beyond the window
    parts, pruned = plan_prune(history)
    assert pruned == 21 * K and len(parts) == 3
    assert {p.id for p in parts} == {
        history[1].parts[0].id,
        history[2].parts[0].id,
        history[3].parts[0].id,
    }


def test_prune_minimum_protected_tools_stop_at_summary_and_at_pruned_output():
    big = tokens_text(25 * K)
    base = [user("t1"), assistant(out(big)), assistant(out(big)), assistant(out(big))]
    tail = [user("t2"), assistant(out("x")), user("t3")]
    # 25k kept; the part that crosses the 40k window goes too (counted before the check): 50k
    assert plan_prune([*base, *tail])[1] == 50 * K
    assert plan_prune([*base, *tail], minimum=50 * K) == ([], 0)  # not *more* than the minimum
    skill = [
        user("t1"),
        assistant(out(big, tool="skill")),
        assistant(out(big)),
        assistant(out(big)),
        assistant(out(big)),
    ]
    parts, _ = plan_prune([*skill, *tail], protected_tools=("skill",))
    assert all(p.tool == "bash" for p in parts) and len(parts) == 2
    # nothing older than the last summary is looked at
    summary = assistant(said("summary"), summary=True, finish="stop")
    assert plan_prune([*base, summary, user("t1b"), assistant(out(big)), *tail]) == ([], 0)
    # an output already pruned ends the walk
    pruned = [
        user("t1"),
        assistant(out(big)),
        assistant(out(big)),
        assistant(out(big, compacted=5)),
    ]
    twenty = [assistant(out(tokens_text(20 * K))), assistant(out(tokens_text(20 * K)))]
    assert plan_prune([*pruned, *twenty, *tail]) == ([], 0)
    assert plan_prune([*pruned[:-1], *twenty, *tail])[1] == 50 * K  # without the marker it goes on


def test_prune_never_touches_the_current_turn():
    history = [user("only turn"), *[assistant(out(tokens_text(30 * K))) for _ in range(4)]]
    assert plan_prune(history, protect=0, minimum=0) == ([], 0)
    assert PRUNE_PROTECT == 40_000 and PRUNE_MINIMUM == 20_000


def test_prune_marks_saves_and_points_at_the_output(tmp_path):
    store = Store(tmp_path / "data")
    big = "PORT=48213 " + tokens_text(3_000)
    history = [
        user("t1"),
        assistant(out(big)),
        assistant(out(big)),
        user("t2"),
        assistant(out("y")),
        user("t3"),
        assistant(said("ok"), finish="stop"),
    ]
    store.put(*[m.info for m in history], *[p for m in history for p in m.parts])
    compactor = _compactor(
        store, tmp_path, CompactionConfig(prune_protect=1_000, prune_minimum=500), context=100_000
    )
    event = compactor.prune(history)
    assert (
        event.kind == "prune"
        and event.parts_pruned == 2
        and event.tokens_pruned == 2 * estimate(big)
    )
    assert event.tokens_after < event.tokens_before
    first = history[1].parts[0]
    assert first.state.time_compacted and first.state.output == big  # the stored output is kept
    path = Path(first.state.metadata["outputPath"])
    assert (
        path.name == first.id and path.read_text() == big
    )  # …and saved where the model can read it
    tool_msgs = [m for m in to_chat_messages(history) if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == f"{PRUNED_OUTPUT} — full output: {path}"
    stored = store.messages(S)[1].parts[0]
    assert stored.state.time_compacted == first.state.time_compacted
    row = store.sql("select kind, parts_pruned, tokens_freed from compaction_event").iloc[0]
    assert row["kind"] == "prune" and row["parts_pruned"] == 2 and row["tokens_freed"] > 0
    # a truncated output is not saved twice: its full text already has a path
    trunc = [
        user("a"),
        assistant(out(big, truncated=True, outputPath=str(tmp_path / "full"))),
        assistant(out(big)),
        user("b"),
        user("c"),
    ]
    compactor.prune(trunc)
    assert trunc[1].parts[0].state.metadata["outputPath"] == str(tmp_path / "full")
    store.close()


# -- the tail view ----------------------------------------------------------------------


def test_filter_compacted_with_a_tail_orders_request_summary_tail_newer():
    head = [user("old"), assistant(said("old answer"), finish="stop")]
    tail = [user("recent"), assistant(out("recent output"))]
    req = request(tail_start_id=tail[0].info.id)
    summary = assistant(said("the summary"), summary=True, finish="stop", parent=req.info.id)
    cont = user(CONTINUE_TEXT, synthetic=True)
    history = [*head, *tail, req, summary, cont]
    assert ids_of(filter_compacted(history)) == ids_of([req, summary, *tail, cont])
    chat = to_chat_messages(filter_compacted(history))
    assert [m["role"] for m in chat][:3] == ["user", "assistant", "user"]
    assert chat[0]["content"] == COMPACTION_QUESTION and chat[1]["content"] == "the summary"
    # a second compaction whose tail reaches into the first one's hides the earlier pair
    newer = [user("newest"), assistant(said("fine"), finish="stop")]
    req2 = request(tail_start_id=tail[0].info.id)
    summary2 = assistant(said("summary 2"), summary=True, finish="stop", parent=req2.info.id)
    view = filter_compacted([*history, *newer, req2, summary2])
    assert ids_of(view) == ids_of([req2, summary2, *tail, cont, *newer])
    # a failed summary leaves the previous view, and the failed attempt is hidden from the model
    failed = assistant(
        said("x"),
        summary=True,
        error=error_data("ContextOverflowError", "big"),
        parent=req2.info.id,
    )
    view = filter_compacted([*history, *newer, req2, failed])
    assert req2.info.id in ids_of(view)
    assert ids_of(without_failed_compactions(view)) == ids_of([req, summary, *tail, cont, *newer])


def test_select_tail_whole_turns_then_a_split():
    size = lambda items: sum(estimate(json.dumps(to_chat_messages([m]))) for m in items)  # noqa: E731
    items = [
        user("t1"),
        assistant(out(tokens_text(500))),
        user("t2"),
        assistant(out(tokens_text(500))),
        assistant(out(tokens_text(50))),
    ]
    assert select_tail(items, turns=2, budget=10_000, size=size) == 0
    assert select_tail(items, turns=1, budget=10_000, size=size) == 2
    assert select_tail(items, turns=0, budget=10_000, size=size) == len(items)
    # the newest turn does not fit: start at its latest message that does
    assert select_tail(items, turns=2, budget=200, size=size) == 4


def test_transcript_lines_and_water_fill():
    items = [
        user("please fix"),
        assistant(said("looking"), out("a" * 3000)),
        assistant(out("secret", compacted=1)),
    ]
    text = transcript(items)
    assert text.startswith(
        "[User]: please fix\n\n[Assistant]: looking\n\n[Assistant tool call]: bash("
    )
    assert "[Tool result]: " + "a" * 2000 + "\n[truncated]" in text
    assert "[Tool result]: secret" in text  # ours: the summariser reads a pruned output once
    assert f"[Tool result]: {PRUNED_OUTPUT}" in transcript(items, originals=False)
    assert water_fill(["a" * 10, "b" * 1000, "c" * 1000], 500) == [
        "a" * 10,
        "b" * 245 + " […]",
        "c" * 245 + " […]",
    ]


# -- summary compaction through the scripted server ----------------------------------------


def _compactor(
    store,
    tmp_path,
    config,
    *,
    context=20_000,
    output=2_000,
    server=None,
    summary_context=None,
    strategy=None,
):
    info = ModelInfo("openai", "scripted", context=context, output=output, prices=Prices(1.0, 2.0))
    summary_info = (
        info
        if summary_context is None
        else ModelInfo(
            "openai", "small", context=summary_context, output=output, prices=Prices(1.0, 2.0)
        )
    )
    provider = OpenAIProvider(
        provider_id="openai",
        base_url=server.base_url if server else "http://127.0.0.1:9/v1",
        api_key="sk-test",
    )

    def summary_request(chat, max_tokens):
        return ChatRequest(model=summary_info.model_id, messages=chat, max_tokens=max_tokens)

    return Compactor(
        config=config,
        store=store,
        model=info,
        data_dir=tmp_path / "data",
        system_prompt="You help.",
        summary_provider=provider,
        summary_model=summary_info,
        summary_request=summary_request,
        max_retries=0,
        sleep=lambda s: None,
        strategy=strategy or ProductStrategy(),
    )


def _session(turns=4, size=1_500):
    history = [user("Constraint: never modify files under legacy/. Start with the loader.")]
    for i in range(turns):
        history += [
            assistant(out(f"FACT{i}=v{i} " + tokens_text(size))),
            assistant(said(f"turn {i} done"), finish="stop"),
            user(f"turn {i + 1}: continue with step {i + 1}"),
        ]
    history.append(assistant(out("latest " + tokens_text(200))))
    return history


def _summary_requests(server):
    return [r for r in server.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM]


def test_summary_compaction_keeps_tail_pins_rules_and_records_cost(server, tmp_path):
    store = Store(tmp_path / "data")
    history = _session()
    server.enqueue(
        Reply(
            text="## Goal\nfinish the loader",
            usage={"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
        )
    )
    compactor = _compactor(store, tmp_path, CompactionConfig(), server=server)
    result = compactor.compact(history, cause="auto", auto=True, step_tokens=9_000)
    assert result.ok, result.message
    event = result.event
    assert event.kind == "summary" and event.llm_calls == 1 and event.tail_messages >= 1
    assert event.tokens_after < event.tokens_before and event.summary_input_tokens == 900
    assert event.cost == pytest.approx((900 * 1.0 + 40 * 2.0) / 1e6)
    sent = _summary_requests(server)[0]["messages"]
    assert (
        len(sent) == 2
        and "<transcript>" in sent[1]["content"]
        and "## Relevant files / directories" in sent[1]["content"]
    )
    summary = next(m for m in history if m.info.summary)
    assert (
        summary.info.agent == "compaction" and summary.info.cost == event.cost
    )  # counts in session cost
    pinned = summary.parts[-1]
    assert pinned.synthetic and "never modify files under legacy/" in pinned.text
    assert (
        "FACT0=v0" in Path(pinned.text.split("in full: ")[1].split(" (grep")[0]).read_text()
    )  # archive
    view = filter_compacted(history)
    req = view[0]
    assert req.parts[0].tail_start_id == view[2].info.id and view[1].info.id == summary.info.id
    chat = to_chat_messages(view)
    assert "FACT0=v0" not in json.dumps(chat)  # the head is gone from the model's view
    assert chat[-1]["content"].startswith(CONTINUE_TEXT)
    assert "turn 4: continue with step 4" in json.dumps(
        chat
    )  # the latest request: in the tail or restated
    row = store.sql("select * from compaction_event where kind = 'summary'").iloc[0]
    assert row["outcome"] == "ok" and row["llm_calls"] == 1 and row["summary_id"] == summary.info.id
    store.close()


def test_summary_request_overflow_falls_back_to_less_input(server, tmp_path):
    store = Store(tmp_path / "data")
    history = _session()
    server.enqueue(Reply(**OVERFLOW_400), Reply(text="## Goal\nshorter input worked"))
    result = _compactor(store, tmp_path, CompactionConfig(), server=server).compact(
        history, cause="auto", auto=True
    )
    assert result.ok and result.event.llm_calls == 2
    assert [a["outcome"] for a in result.event.attempts] == ["overflow", "ok"]
    first, second = _summary_requests(server)
    assert len(json.dumps(second)) < len(json.dumps(first))  # tool outputs cut to 300 characters
    store.close()


def test_summary_that_never_fits_fails_in_one_line_and_leaves_the_view(server, tmp_path):
    store = Store(tmp_path / "data")
    history = _session()
    before = ids_of(filter_compacted(history))
    server.enqueue(*[Reply(**OVERFLOW_400) for _ in range(6)])
    result = _compactor(store, tmp_path, CompactionConfig(), server=server).compact(
        history, cause="auto", auto=True
    )
    assert (
        result.event.outcome == "failed"
        and "\n" not in result.message
        and "context" in result.message
    )
    assert result.event.llm_calls >= 3  # tried less and less before giving up
    assert ids_of(without_failed_compactions(filter_compacted(history))) == before
    # OpenCode v1.2.16: no fallback, one call, then stop
    server.enqueue(Reply(**OVERFLOW_400))
    opencode = _compactor(
        store, tmp_path, OPENCODE.config, server=server, strategy=OPENCODE.strategy
    )
    assert opencode.compact(_session(), cause="auto", auto=True).event.llm_calls == 1
    store.close()


def test_summary_request_larger_than_the_compaction_model_is_shrunk_before_sending(
    server, tmp_path
):
    store = Store(tmp_path / "data")
    server.enqueue(Reply(text="## Goal\nsmall model summary"))
    compactor = _compactor(
        store, tmp_path, CompactionConfig(), server=server, context=200_000, summary_context=6_000
    )
    # auto: its tail is the current turn, so the head is large (a manual one keeps more turns)
    result = compactor.compact(_session(turns=6, size=2_500), cause="auto", auto=True)
    assert result.ok and result.event.llm_calls == 1 and result.event.model == "openai/small"
    assert [a["outcome"] for a in result.event.attempts][
        0
    ] == "skipped"  # estimated too big: not sent
    store.close()


def test_rejects_a_summary_larger_than_what_it_replaces(server, tmp_path):
    store = Store(tmp_path / "data")
    history = [
        user("hi"),
        assistant(said("hello"), finish="stop"),
        user("and?"),
        assistant(out("ok")),
    ]
    server.enqueue(Reply(text="## Goal\n" + "blah " * 2000))
    result = _compactor(store, tmp_path, CompactionConfig(tail_turns=0), server=server).compact(
        history, cause="manual", auto=False
    )
    assert result.event.outcome == "rejected"
    summary = next(m for m in history if m.info.summary)
    assert summary.info.error["name"] == "CompactionRejectedError"
    assert not any(m.info.summary for m in without_failed_compactions(filter_compacted(history)))
    store.close()


def test_loop_guards_stop_auto_compaction_without_llm_calls(server, tmp_path):
    store = Store(tmp_path / "data")
    # the system prompt alone fills the window: nothing to gain, nothing sent
    compactor = _compactor(
        store, tmp_path, CompactionConfig(), server=server, context=4_000, output=500
    )
    compactor.system_prompt = tokens_text(3_500)
    result = compactor.compact(_session(), cause="auto", auto=True)
    assert (
        result.event.outcome == "no-gain"
        and result.event.llm_calls == 0
        and "system prompt" in result.message
    )
    # a third auto compaction in a turn without a step in between is refused
    compactor = _compactor(store, tmp_path, CompactionConfig(), server=server)
    compactor.consecutive = 2
    result = compactor.compact(_session(), cause="auto", auto=True)
    assert result.event.outcome == "no-gain" and result.event.llm_calls == 0
    assert not _summary_requests(server)
    # after a compaction that frees nothing, the loop stops auto compacting for the turn
    compactor.disabled = True
    assert not compactor.is_overflow(Tokens(total=10**9))
    store.close()


def test_overflow_error_replays_the_request_with_media_stripped(server, tmp_path):
    store = Store(tmp_path / "data")
    image = lambda mid: FilePart(
        ids.ascending("part"),
        S,
        mid,
        mime="image/png",
        url="data:image/png;base64,AAAA",  # noqa: E731
        filename="shot.png",
    )
    history = [
        user("first"),
        assistant(out("x" * 400)),
        assistant(said("done"), finish="stop"),
        user("look at this", image),
        assistant(error=error_data("ContextOverflowError", "too big"), finish=None),
    ]
    server.enqueue(Reply(text="## Goal\nsummary before the image"))
    result = _compactor(store, tmp_path, CompactionConfig(), server=server).compact(
        history, cause="overflow", auto=True
    )
    assert result.ok
    replayed = history[-1]
    assert isinstance(replayed.info, UserMessage) and replayed.info.id != history[3].info.id
    assert [p.text for p in replayed.parts] == ["look at this", "[Attached image/png: shot.png]"]
    view = to_chat_messages(filter_compacted(history))
    assert view[-1][
        "content"
    ] == "look at this\n\n[Attached image/png: shot.png]" and "base64" not in json.dumps(view)
    assert (
        "look at this" not in _summary_requests(server)[0]["messages"][1]["content"]
    )  # only what came before
    store.close()


def test_events_round_trip_and_store_kind():
    event = CompactionEvent(
        id=ids.ascending("event"),
        session_id=S,
        kind="summary",
        cause="manual",
        outcome="ok",
        time_created=5,
        tokens_before=100,
        tokens_after=10,
        attempts=({"level": 0},),
    )
    assert CompactionEvent.from_data(event.to_data()) == event and event.tokens_freed == 90
    assert event.to_data()["type"] == "compaction" and event.to_data()["sessionID"] == S


# -- through the loop --------------------------------------------------------------------------


def _setup(server, store, tmp_path, compaction, context=12_000, strategy=None):
    info = ModelInfo("openai", "scripted", context=context, output=1_000)
    provider = OpenAIProvider(provider_id="openai", base_url=server.base_url, api_key="sk-test")
    compactor = _compactor(
        store, tmp_path, compaction, server=server, context=context, output=1_000, strategy=strategy
    )

    def factory(chat, last):
        return ChatRequest(model="scripted", messages=chat, max_tokens=1_000)

    return TurnSetup(
        step=StepSetup(store=store, model=info, tools={}, run_tool=_no_tool, max_retries=0),
        provider=provider,
        request_factory=factory,
        system_prompt="You help.",
        max_steps=5,
        compactor=compactor,
    )


def _no_tool(tool, args, call):
    raise AssertionError("no tool is offered")


def test_auto_false_makes_a_provider_overflow_a_one_line_error(server, tmp_path):
    from jupyter_session_agent.loop.turn import ContextLimitError

    store = Store(tmp_path / "data")
    server.enqueue(Reply(**OVERFLOW_400))
    with pytest.raises(ContextLimitError) as info:
        run_turn(_setup(server, store, tmp_path, CompactionConfig(auto=False)), [user("too long")])
    assert "compaction.auto is off" in str(info.value) and "\n" not in str(info.value)
    assert len(server.requests) == 1  # no compaction attempt (OpenCode #16882)
    store.close()


def test_turn_end_overflow_compacts_without_an_extra_call(server, tmp_path):
    store = Store(tmp_path / "data")
    history = _session(turns=3, size=800)[:-1]
    history.append(user("wrap up"))
    server.enqueue(
        Reply(
            text="all wrapped up",
            usage={"prompt_tokens": 10_200, "completion_tokens": 10, "total_tokens": 10_210},
        ),
        Reply(text="## Goal\nwrap up"),
    )
    run_turn(_setup(server, store, tmp_path, CompactionConfig()), history)
    assert (
        len(server.requests) == 2
    )  # the answer, the summary; no "continue" call (OpenCode makes one)
    assert history[-1].info.summary and history[-1].info.finish == "stop"
    opencode_history = _session(turns=3, size=800)[:-1] + [user("wrap up")]
    server.enqueue(
        Reply(
            text="all wrapped up",
            usage={"prompt_tokens": 10_200, "completion_tokens": 10, "total_tokens": 10_210},
        ),
        Reply(text="## Goal\nwrap up"),
        Reply(text="nothing left to do"),
    )
    opencode = _setup(server, store, tmp_path, OPENCODE.config, strategy=OPENCODE.strategy)
    run_turn(opencode, opencode_history)
    assert len(server.requests) == 5  # + the synthetic "continue" and the model's reply to it
    assert [p.text for p in opencode_history[-1].parts if p.type == "text"] == [
        "nothing left to do"
    ]
    store.close()


# -- end to end through %%agent -------------------------------------------------------------


def _usage(prompt: int, completion: int = 20) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _bash(fact: str) -> dict:
    return {
        "name": "bash",
        "arguments": {"command": f"python3 -c \"print('{fact} ' + 'log line ' * 400)\""},
    }


def test_end_to_end_prune_then_summary_through_the_magic(ip, server, magics, store):
    """A small window (8k context, 1k output: 6k usable): three turns of ~1k-token outputs, the
    prune at the end of the third loop, then a step that crosses the limit → summary compaction."""
    magics.titles = False
    magics.model_overrides = {
        "openai/scripted": {
            "context": 8_000,
            "output": 1_000,
            "price_input": 1.0,
            "price_output": 2.0,
        }
    }
    magics.compaction = {"prune_protect": 500, "prune_minimum": 200}
    for i in (1, 2, 3):
        server.enqueue(
            Reply(tool_calls=(_bash(f"FACT{i}=v{i}"),), usage=_usage(1_200 * i)),
            Reply(text=f"turn {i} done", usage=_usage(1_300 * i)),
        )
        ip.run_cell_magic("agent", "", f"Turn {i}: run the check. Never touch legacy/.")
    sid = magics.session.info.id
    pruned = [
        p
        for m in store.messages(sid)
        for p in m.parts
        if p.type == "tool" and p.state.time_compacted
    ]
    assert len(pruned) == 1 and "FACT1=v1" in pruned[0].state.output  # stored output kept

    server.enqueue(
        Reply(
            tool_calls=({"name": "bash", "arguments": {"command": "echo step"}},),
            usage=_usage(6_100),
        ),
        Reply(text="## Goal\nRun the checks; FACT1..3 seen.\n\n## Accomplished\nturns 1-3"),
        Reply(text="final answer 4", usage=_usage(1_500)),
    )
    ip.run_cell_magic("agent", "-o answer", "Turn 4: one more check, then report.")
    assert ip.user_ns["answer"] == "final answer 4"

    sent = server.requests
    summary_at = next(
        i for i, r in enumerate(sent) if r["messages"][0]["content"] == SUMMARY_SYSTEM
    )
    before = json.dumps(
        sent[summary_at - 1]["messages"], ensure_ascii=False
    )  # turn 4's first request: after the prune
    assert f"{PRUNED_OUTPUT} — full output: " in before and "FACT1=v1 log line" not in before
    assert "FACT2=v2 log line" in before  # not pruned: within the protect window
    summary_input = sent[summary_at]["messages"][1]["content"]
    assert (
        "<transcript>" in summary_input and "FACT1=v1" in summary_input
    )  # the summariser reads it once
    after = json.dumps(sent[summary_at + 1]["messages"], ensure_ascii=False)
    assert "Run the checks; FACT1..3 seen." in after and "Never touch legacy/" in after
    assert "log line log line" not in after  # no pruned or summarised output is sent again
    assert estimate(after) < 6_000  # under the limit again

    server.enqueue(Reply(text="turn 5 ok", usage=_usage(1_600)))
    ip.run_cell_magic("agent", "", "Turn 5: anything else?")
    last = json.dumps(server.requests[-1]["messages"], ensure_ascii=False)
    assert "Run the checks; FACT1..3 seen." in last and "log line log line" not in last

    events = ip.run_line_magic(
        "agent",
        "sql select kind, cause, outcome, parts_pruned, llm_calls, tokens_before, "
        "tokens_after from compaction_event order by id",
    )
    assert list(events["kind"])[:2] == ["prune", "summary"]
    summary_row = events[events["kind"] == "summary"].iloc[0]
    assert summary_row["outcome"] == "ok" and summary_row["llm_calls"] == 1
    assert summary_row["tokens_after"] < summary_row["tokens_before"]
    summary_msg = store.sql(
        f"select cost, output_tokens from message where session_id = '{sid}' and summary"
    )
    assert (
        len(summary_msg) == 1 and summary_msg.iloc[0]["output_tokens"] > 0
    )  # usage recorded on the summary
    assert summary_msg.iloc[0]["cost"] > 0
    assert magics.session.cost == pytest.approx(
        float(store.sql(f"select sum(cost) c from message where session_id = '{sid}'").iloc[0]["c"])
    )  # summary included


def test_manual_compact_command_and_errors(ip, server, magics, store):
    from jupyter_session_agent.core.errors import UsageError

    magics.titles = False
    with pytest.raises(UsageError, match="no current session"):
        ip.run_line_magic("agent", "compact")
    server.enqueue(Reply(tool_calls=(_bash("VALUE=1"),)), Reply(text="done"))
    ip.run_cell_magic("agent", "", "Look at the log. Always use httpie.")
    server.enqueue(Reply(text="done 2"))
    ip.run_cell_magic("agent", "", "And now?")
    server.enqueue(Reply(text="## Goal\nlook at logs"))
    shown = ip.run_line_magic("agent", 'compact --instructions "keep the VALUE names"')
    assert "compacted" in shown.text
    request = [r for r in server.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM][-1]
    assert "keep the VALUE names" in request["messages"][1]["content"]
    row = store.sql("select cause, outcome from compaction_event where kind = 'summary'").iloc[0]
    assert row["cause"] == "manual" and row["outcome"] == "ok"
    history = store.messages(magics.session.info.id)
    assert history[-1].info.summary and not any(
        isinstance(p, TextPart)
        and p.synthetic
        and p.metadata
        and p.metadata.get("compaction_continue")
        for m in history
        for p in m.parts
    )  # manual: no continue
    with pytest.raises(UsageError, match="usage"):
        ip.run_line_magic("agent", "compact --bogus")


def test_the_pinned_section_keeps_what_was_said_once_whatever_its_wording(server, tmp_path):
    """No word list: rules stated once in the user's words (none with never / always / must /
    keep / use …), and the assistant's statuses and decisions, are pinned verbatim; routine
    requests that recur in every turn are not, but for the newest of them."""
    from benchmarks.compactbench.scenarios import PHRASINGS, TOPICS

    rules = [r for r in PHRASINGS if not any(w in r.lower() for w in ("never", "keep", "use "))]
    history = []
    for i in range(8):
        topic = TOPICS[i % len(TOPICS)]
        text = f"[T{i:02d}] Please look into {topic} and report what you find."
        if i in (0, 3):
            text += f" {rules[i]}."
        if i == 5:  # a rule inside the routine sentence itself
            text = f"[T05] Please look into {topic} and, from here on, quote every amount in euros."
        history += [
            user(text),
            assistant(out(f"value_{i}=ok " + tokens_text(1_500))),
            assistant(
                said(
                    f"[T{i:02d}] Finished looking into {topic}."
                    + (
                        " We settled on weekly buckets since daily ones are noisy."
                        if i == 2
                        else ""
                    )
                ),
                finish="stop",
            ),
        ]
    history.append(user("[T08] Please look into the CSV loader and report what you find."))
    history.append(assistant(out("latest " + tokens_text(200))))
    server.enqueue(Reply(text="## Goal\nlook into things"))
    store = Store(tmp_path / "data")
    compactor = _compactor(store, tmp_path, CompactionConfig(), context=60_000, server=server)
    result = compactor.compact(history, cause="auto", auto=True)
    assert result.ok, result.message
    pinned = next(m for m in history if m.info.summary).parts[-1].text
    for rule in (rules[0], rules[3], "from here on, quote every amount in euros"):
        assert rule in pinned, rule
    assert "We settled on weekly buckets since daily ones are noisy." in pinned
    assert "[T01] Please look into" not in pinned and "Finished looking into" not in pinned
    store.close()


def _pinned_after(history, server, tmp_path, context=60_000):
    server.enqueue(Reply(text="## Goal\nclean the sales export"))
    store = Store(tmp_path / "data")
    compactor = _compactor(store, tmp_path, CompactionConfig(), context=context, server=server)
    result = compactor.compact(history, cause="auto", auto=True)
    store.close()
    assert result.ok, result.message
    return next(m for m in history if m.info.summary).parts[-1].text


def test_a_data_cleaning_session_keeps_rules_in_any_form_and_their_revocation(server, tmp_path):
    """A scenario outside the benchmark's phrasings: a question, a negation, a conditional, a
    list, German, a rule the assistant proposed and the user confirmed with "yes", and a rule
    later revoked. Each stays verbatim; the revocation is pinned after the rule it revokes, and
    the confirmation beside the assistant's question."""
    rules = [
        "Could you make sure customer_id stays a string, since leading zeros matter?",
        "Don't touch rows where status is 'pending'.",
        "If a date can't be parsed, set it to NaT rather than dropping the row.",
        "Columns to exclude from the export: ssn, dob, phone.",
        "Bitte die Beträge in Euro mit zwei Nachkommastellen ausgeben.",
    ]
    history = []
    for i in range(12):
        text = f"[T{i:02d}] Check column {i} of sales.csv and tell me what's odd."
        if i < len(rules):
            text += " " + rules[i]
        history += [
            user(text),
            assistant(out(f"col{i}: 3.14,2.71,{i}00,42 " + tokens_text(800))),
            assistant(said(f"[T{i:02d}] Column {i} has 17 nulls and 3 outliers."), finish="stop"),
        ]
        if i == 6:
            history += [
                assistant(said("Shall I treat -999 as missing everywhere?"), finish="stop"),
                user("yes"),
            ]
        if i == 8:
            history.append(user("Forget what I said about pending rows; you may drop them now."))
    history += [user("[T12] Now export the cleaned file."), assistant(out("ok " + tokens_text(50)))]
    pinned = _pinned_after(history, server, tmp_path)
    for rule in rules:
        assert rule in pinned, rule
    assert '- yes (in reply to: "Shall I treat -999 as missing everywhere?")' in pinned
    assert pinned.index(rules[1]) < pinned.index("Forget what I said about pending rows")


def test_the_pinned_section_stays_in_its_budget_on_a_long_session(server, tmp_path):
    """Hundreds of user messages, each saying something once (generated words), and a rule
    repeated in three of them: the section stays within its budget (at most 3,000 tokens'
    worth), keeps the first rule and the repeated one, and says how many it left out."""
    import random

    rng = random.Random(29)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=6)) for _ in range(5_000)]
    first = "The ledger file is semicolon separated, not comma separated."
    repeated = "Do not drop rows with a missing invoice number."
    history = []
    for i in range(300):
        text = "Please " + " ".join(rng.sample(vocabulary, 10)) + "."
        text = f"{first} {text}" if i == 0 else text
        text = f"{text} {repeated}" if i in (40, 150, 220) else text
        history += [
            user(text),
            assistant(out(tokens_text(200))),
            assistant(said("Result " + " ".join(rng.sample(vocabulary, 8)) + "."), finish="stop"),
        ]
    history += [user("Now summarise the ledger."), assistant(out("ok " + tokens_text(50)))]
    pinned = _pinned_after(history, server, tmp_path)
    assert len(pinned) <= 4 * 3_000, len(pinned)
    assert first in pinned and repeated in pinned
    assert re.search(r"\[… \d+ more …\]", pinned)
