"""Compaction by composition: the strategy interface (the product's and CompactBench's
OpenCode baseline answer every decision), the decision the loop asks for after each step,
and the one prune selection (what the gauge calls "prune due" is what the prune clears)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from benchmarks.compactbench.baseline import (
    OPENCODE,
    OpenCodeReservedBug,
    OpenCodeV1216,
    RawMessagesInput,
)
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.budget import ModelInfo
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
)
from jupyter_session_agent.loop.compaction import (
    CompactionConfig,
    CompactionStrategy,
    Compactor,
    Decision,
    ProductStrategy,
    prune_selection,
)
from jupyter_session_agent.loop.compaction.events import CompactionEvent, CompactionResult
from jupyter_session_agent.loop.step import StepResult, StepSetup
from jupyter_session_agent.loop.turn import ContextLimitError, TurnSetup, run_turn
from jupyter_session_agent.providers.openai_provider import ChatRequest, OpenAIProvider
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

S = "ses_strategy"
MODEL = ModelInfo("openai", "scripted", context=12_000, output=1_000)
STRATEGIES = [ProductStrategy(), OpenCodeV1216(), OpenCodeReservedBug(), RawMessagesInput()]


def user(text: str) -> WithParts:
    info = UserMessage(ids.ascending("message"), S, 1, ModelRef("openai", "scripted"))
    return WithParts(info, (TextPart(ids.ascending("part"), S, info.id, text=text),))


def step(output: str | None = None, *, finish="tool-calls", tokens=None, error=None) -> WithParts:
    info = AssistantMessage(
        ids.ascending("message"),
        S,
        "msg_u",
        1,
        "openai",
        "scripted",
        finish=finish,
        tokens=tokens or Tokens(),
        error=error,
    )
    parts = ()
    if output is not None:
        state = ToolCompleted({"command": "x"}, output, "bash", {}, 1, 2)
        call = ids.ascending("tool")
        parts = (
            ToolPart(ids.ascending("part"), S, info.id, call_id=call, tool="bash", state=state),
        )
    return WithParts(info, parts)


def compactor(tmp_path: Path, store, config=None, strategy=None, server=None) -> Compactor:
    provider = OpenAIProvider(
        provider_id="openai",
        base_url=server.base_url if server else "http://127.0.0.1:9/v1",
        api_key="sk-test",
    )
    return Compactor(
        config=config or CompactionConfig(),
        store=store,
        model=MODEL,
        data_dir=tmp_path / "data",
        system_prompt="You help.",
        summary_provider=provider,
        summary_request=lambda chat, n: ChatRequest(model="scripted", messages=chat, max_tokens=n),
        max_retries=0,
        sleep=lambda s: None,
        strategy=strategy or ProductStrategy(),
    )


# -- the strategy interface -------------------------------------------------------------------


def _decisions() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(CompactionStrategy).items()
        if not name.startswith("_") and callable(member)
    }


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
def test_every_strategy_answers_every_decision_with_the_interface_parameters(strategy):
    decisions = _decisions()
    assert len(decisions) >= 10  # the protocol's methods were found
    for name, wanted in decisions.items():
        method = getattr(strategy, name)
        got = inspect.signature(method)
        assert list(got.parameters) == list(wanted.parameters)[1:], name  # without self
    assert strategy.summary_input in ("transcript", "messages")


def test_the_baseline_strategy_lives_with_the_benchmark_not_in_the_product():
    import jupyter_session_agent.loop.compaction as package

    assert OpenCodeV1216.__module__.startswith("benchmarks.")
    names = {f for f in CompactionConfig.__dataclass_fields__}
    assert names.isdisjoint({"guard", "pin", "fallbacks", "summary_input", "legacy_reserved"})
    assert not hasattr(CompactionConfig, "opencode")
    assert all("OpenCode" not in n for n in package.__all__)


# -- the decision after a step ----------------------------------------------------------------


def _result(tokens=None, finish="stop", error=None) -> StepResult:
    item = step(finish=finish, tokens=tokens, error=error)
    assert isinstance(item.info, AssistantMessage)
    return StepResult(message=item.info, parts=[], outcome="stop")


def test_after_a_step_the_compactor_decides_nothing_summarise_or_stop(tmp_path):
    store = Store(tmp_path / "data")
    c = compactor(tmp_path, store)
    chat = c.chat([user("hi")])
    under = c.after_step(chat, _result(Tokens(input=100)), last_step=False)
    assert under == Decision("none") and c.consecutive == 0
    over = c.after_step(chat, _result(Tokens(input=c.trigger)), last_step=False)
    assert (
        over.action == "summarise"
        and over.cause == "auto"
        and str(c.trigger) in over.reason.replace(",", "")
    )
    assert not over.continue_after  # the turn had finished: no continue call (ours)
    working = c.after_step(chat, _result(Tokens(input=c.trigger), "tool-calls"), last_step=False)
    assert working.continue_after
    overflow = {"name": "ContextOverflowError", "data": {"message": "too long"}}
    error = c.after_step(chat, _result(error=overflow), last_step=False)
    assert error.action == "summarise" and error.cause == "overflow" and error.overflow_error
    c.disabled = True  # switched off for this turn: an overflow error is the end of the road
    stop = c.after_step(chat, _result(error=overflow), last_step=False)
    assert (
        stop.action == "stop" and "\n" not in stop.reason and "could not make room" in stop.reason
    )
    off = compactor(tmp_path, store, CompactionConfig(auto=False))
    stop = off.after_step(chat, _result(error=overflow), last_step=False)
    assert stop.action == "stop" and "compaction.auto is off" in stop.reason
    # the baseline continues after a finished turn (OpenCode's extra continue call)
    base = compactor(tmp_path, store, OPENCODE.config, OPENCODE.strategy)
    assert base.after_step(
        chat, _result(Tokens(input=base.trigger)), last_step=False
    ).continue_after
    store.close()


def _event(outcome: str) -> CompactionResult:
    return CompactionResult(CompactionEvent("evt", S, "summary", "auto", outcome, 1))


def test_what_the_loop_does_after_a_compaction():
    going, ending = Decision("summarise"), Decision("summarise", continue_after=False)
    overflow = Decision("summarise", cause="overflow", overflow_error=True)
    assert going.then(_event("ok")) == "again" and ending.then(_event("ok")) == "end"
    assert going.then(_event("no-gain")) == "again" and going.then(_event("failed")) == "go on"
    assert (
        overflow.then(_event("failed")) == "raise" and overflow.then(_event("rejected")) == "raise"
    )
    assert overflow.then(_event("no-gain")) == "again"


def test_a_strategy_the_loop_is_given_decides_the_turn(server, tmp_path):
    """The same turn ends after the summary under ours, and goes on with a continue call under
    a strategy that continues after a finished turn; a strategy that refuses every auto
    compaction makes no summary call at all."""

    class Refusing(ProductStrategy):
        def refusal(self, *, fixed, before, consecutive, trigger):
            return before, "refused by this strategy"

    def turn(strategy, replies):
        store = Store(tmp_path / f"data-{type(strategy).__name__}")
        sent = len(server.requests)
        server.enqueue(*replies)
        history = [user("wrap up")]
        setup = TurnSetup(
            step=StepSetup(store=store, model=MODEL, tools={}, run_tool=_no_tool, max_retries=0),
            provider=OpenAIProvider(provider_id="openai", base_url=server.base_url, api_key="k"),
            request_factory=lambda chat, last: ChatRequest(model="scripted", messages=chat),
            system_prompt="You help.",
            max_steps=5,
            compactor=compactor(tmp_path, store, strategy=strategy, server=server),
        )
        run_turn(setup, history)
        events = store.sql("SELECT outcome, llm_calls FROM compaction_event").to_dict("records")
        store.close()
        return len(server.requests) - sent, events

    full = {"prompt_tokens": 10_500, "completion_tokens": 10, "total_tokens": 10_510}
    answer, summary = Reply(text="all wrapped up", usage=full), Reply(text="## Goal\nwrap up")
    assert turn(ProductStrategy(), [answer, summary]) == (2, [{"outcome": "ok", "llm_calls": 1}])

    class Continuing(ProductStrategy):
        def continue_after(self, *, finished, last_step):
            return not last_step

    calls, events = turn(Continuing(), [answer, summary, Reply(text="nothing left")])
    assert calls == 3 and events[0]["outcome"] == "ok"
    calls, events = turn(Refusing(), [answer])
    assert calls == 1 and events == [{"outcome": "no-gain", "llm_calls": 0}]


def test_an_overflow_the_strategy_cannot_fix_is_one_line(server, tmp_path):
    store = Store(tmp_path / "data")
    server.enqueue(
        Reply(
            status=400,
            error_body={"error": {"message": "too long", "code": "context_length_exceeded"}},
        )
    )
    setup = TurnSetup(
        step=StepSetup(store=store, model=MODEL, tools={}, run_tool=_no_tool, max_retries=0),
        provider=OpenAIProvider(provider_id="openai", base_url=server.base_url, api_key="k"),
        request_factory=lambda chat, last: ChatRequest(model="scripted", messages=chat),
        system_prompt="You help.",
        max_steps=5,
        compactor=compactor(tmp_path, store, server=server),
    )
    with pytest.raises(ContextLimitError) as info:
        run_turn(setup, [user("too long")])  # nothing before it to summarise: a failed summary
    assert "\n" not in str(info.value)
    store.close()


# -- one prune selection ----------------------------------------------------------------------


def test_prune_due_is_exactly_what_the_prune_clears(tmp_path):
    store = Store(tmp_path / "data")
    big = "x" * 4 * 2_000
    history = [user("t1"), step(big), step(big), step(big), user("t2"), step("y"), user("t3")]
    store.put(*[m.info for m in history], *[p for m in history for p in m.parts])
    config = CompactionConfig(prune_protect=1_000, prune_minimum=500)
    c = compactor(tmp_path, store, config)
    due, tokens = c.prune_due(history)
    assert (due, tokens) == prune_selection(history, config, MODEL) and len(due) == 3
    event = c.prune(history)
    cleared = [
        p.id
        for m in history
        for p in m.parts
        if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) and p.state.time_compacted
    ]
    assert event is not None and event.parts_pruned == len(due) and event.tokens_pruned == tokens
    assert sorted(cleared) == sorted(p.id for p in due)
    assert c.prune_due(history) == ([], 0)  # nothing left to prune
    assert prune_selection(history, CompactionConfig(prune=False), MODEL) == ([], 0)
    # the baseline's limits are its own (not scaled by the window): nothing is due here
    base = compactor(tmp_path, store, OPENCODE.config, OPENCODE.strategy)
    assert base.prune_due(history) == ([], 0)
    store.close()


def _no_tool(tool, args, call):
    raise AssertionError("no tool is offered")
