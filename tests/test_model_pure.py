"""Pure layers against OpenCode's own test cases (v1.2.16): ids, isOverflow, Token.estimate,
cost, toModelMessages and filterCompacted."""

from __future__ import annotations

import pytest

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.budget import (
    ModelInfo,
    Prices,
    budget,
    cost,
    estimate,
    is_overflow,
    normalise_usage,
)
from jupyter_session_agent.core.chat import (
    COMPACTION_QUESTION,
    INTERRUPTED_OUTPUT,
    PRUNED_OUTPUT,
    SUBTASK_TEXT,
    filter_compacted,
    to_chat_messages,
)
from jupyter_session_agent.core.messages import (
    PART_TYPES,
    AssistantMessage,
    CompactionPart,
    FilePart,
    ModelRef,
    ReasoningPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    UserMessage,
    WithParts,
    error_data,
    part_from_data,
)

# -- ids ---------------------------------------------------------------------------


def test_ids_have_opencode_shape_and_order():
    a, b = ids.ascending("message"), ids.ascending("message")
    assert a.startswith("msg_") and len(a) == 4 + 26 and a < b
    s1, s2 = ids.descending("session"), ids.descending("session")
    assert s1.startswith("ses_") and s2 < s1  # newer sessions sort first
    assert (
        ids.create("part", now_ms=1_000)[4:16] == f"{(1_000 * 0x1000 + 1) & ((1 << 48) - 1):012x}"
    )


# -- isOverflow (compaction.test.ts), with reserved subtracted in both branches --

K = 1_000


def model(context, output, input_limit=0):
    return ModelInfo("p", "m", context=context, output=output, input=input_limit)


@pytest.mark.parametrize(
    ("info", "tokens", "expected"),
    [
        (model(100 * K, 32 * K), Tokens(input=75 * K, output=5 * K), True),
        (model(200 * K, 32 * K), Tokens(input=100 * K, output=10 * K), False),
        (model(100 * K, 32 * K), Tokens(input=60 * K, output=10 * K, cache_read=10 * K), True),
        (
            model(400 * K, 128 * K, 272 * K),
            Tokens(input=271 * K, output=1 * K, cache_read=2 * K),
            True,
        ),
        (
            model(400 * K, 128 * K, 272 * K),
            Tokens(input=200 * K, output=20 * K, cache_read=10 * K),
            False,
        ),
        (model(200 * K, 10 * K, 120 * K), Tokens(input=50 * K, output=9_999), False),
        (model(200 * K, 32 * K, 200 * K), Tokens(total=198 * K), True),
        (model(200 * K, 32 * K), Tokens(total=198 * K), True),
        # the asymmetry case: usable is input - reserved = 180k with an input limit,
        # context - max output - reserved = 148k without one
        (model(200 * K, 32 * K, 200 * K), Tokens(total=171 * K), False),
        (model(200 * K, 32 * K), Tokens(total=171 * K), True),
        (model(0, 32 * K), Tokens(total=10**9), False),
    ],
)
def test_is_overflow(info, tokens, expected):
    assert is_overflow(tokens, info) is expected


def test_is_overflow_off_when_auto_is_false_and_budget_numbers():
    assert is_overflow(Tokens(total=10**9), model(100 * K, 32 * K), auto=False) is False
    b = budget(model(200 * K, 32 * K, 200 * K))
    assert (b.reserved, b.usable) == (20 * K, 180 * K)
    assert budget(model(200 * K, 32 * K)).usable == 200 * K - 32 * K - 20 * K
    assert budget(model(8192, 1024), reserved=512).usable == 8192 - 1024 - 512
    # an unknown output limit on a small window: a quarter of it, not 32k (which left nothing)
    assert budget(model(8192, 0)).usable == 8192 - 2048 - 2048
    assert budget(model(16_384, 0)).usable == 8192


def test_token_estimate():
    assert estimate("x" * 4000) == 1000
    assert estimate("x" * 20_000) == 5000
    assert estimate("") == 0
    assert estimate("xx") == 1  # JS Math.round(0.5) = 1


def test_usage_and_cost():
    tokens = normalise_usage(
        prompt_tokens=1000, completion_tokens=500, cached_tokens=200, total_tokens=1500
    )
    assert (tokens.input, tokens.cache_read, tokens.total) == (800, 200, 1500)
    anthropic_like = normalise_usage(
        prompt_tokens=1000, cached_tokens=200, input_excludes_cache=True
    )
    assert anthropic_like.input == 1000
    assert normalise_usage(reasoning_tokens=7).reasoning == 7
    priced = ModelInfo("p", "m", prices=Prices(input=3, output=15))
    assert cost(Tokens(), priced) == 0
    assert cost(Tokens(input=1_000_000, output=100_000), priced) == pytest.approx(4.5)
    tiered = ModelInfo(
        "p", "m", prices=Prices(input=3, output=15), prices_over_200k=Prices(input=6, output=22.5)
    )
    assert cost(Tokens(input=250_000), tiered) == pytest.approx(1.5)
    assert cost(Tokens(output=0, reasoning=1_000_000), priced) == pytest.approx(
        15
    )  # reasoning billed as output


# -- toModelMessages (message-v2.test.ts) ------------------------------------------

S = "ses_1"


def user(mid, *parts):
    return WithParts(UserMessage(mid, S, 1, ModelRef("p", "m")), tuple(parts))


def assistant(mid, *parts, **kw):
    info = AssistantMessage(mid, S, kw.pop("parent", "msg_u"), 1, "p", "m", **kw)
    return WithParts(info, tuple(parts))


def text(pid, mid, body, **kw):
    return TextPart(pid, S, mid, text=body, **kw)


def tool(pid, mid, call, state):
    return ToolPart(pid, S, mid, call_id=call, tool="bash", state=state)


def done(output, compacted=None):
    return ToolCompleted({"command": "ls"}, output, "ls", {}, 1, 2, time_compacted=compacted)


def test_user_parts_become_text():
    history = [
        user(
            "m1",
            text("p1", "m1", "hello"),
            text("p2", "m1", "hidden", ignored=True),
            text("p3", "m1", "injected", synthetic=True),
        ),
        user("m2", CompactionPart("p4", S, "m2", auto=True)),
        user("m3", SubtaskPart("p5", S, "m3", prompt="x", description="d", agent="general")),
        user("m4"),
        user("m5", text("p6", "m5", "only ignored", ignored=True)),
    ]
    assert to_chat_messages(history) == [
        {"role": "user", "content": "hello\n\ninjected"},
        {"role": "user", "content": COMPACTION_QUESTION},
        {"role": "user", "content": SUBTASK_TEXT},
    ]


def test_media_is_stripped_to_a_placeholder():
    image = FilePart(
        "p2", S, "m1", mime="image/png", url="data:image/png;base64,AAAA", filename="plot.png"
    )
    history = [user("m1", text("p1", "m1", "look"), image)]
    assert to_chat_messages(history)[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": image.url},
    }
    assert to_chat_messages(history, strip_media=True) == [
        {"role": "user", "content": "look\n\n[Attached image/png: plot.png]"}
    ]


def test_tool_states_become_call_and_result_pairs():
    history = [
        assistant(
            "m2",
            StepStartPart("p0", S, "m2"),
            text("p1", "m2", "checking"),
            tool("p2", "m2", "c1", done("files")),
            tool("p3", "m2", "c2", done("old", compacted=5)),
            tool("p4", "m2", "c3", ToolError({"command": "x"}, "boom", 1, 2)),
            tool("p5", "m2", "c4", ToolPending()),
            tool("p6", "m2", "c5", ToolRunning({"command": "y"}, 1)),
        )
    ]
    messages = to_chat_messages(history)
    assert messages[0]["content"] == "checking"
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["c1", "c2", "c3", "c4", "c5"]
    assert [m["content"] for m in messages[1:]] == [
        "files",
        PRUNED_OUTPUT,
        "boom",
        INTERRUPTED_OUTPUT,
        INTERRUPTED_OUTPUT,
    ]
    assert all(m["role"] == "tool" for m in messages[1:])


def test_errored_assistants_are_dropped_unless_aborted_with_content():
    failed = assistant("m2", text("p1", "m2", "partial"), error=error_data("APIError", "x"))
    aborted = assistant(
        "m3", text("p2", "m3", "partial"), error=error_data("MessageAbortedError", "x")
    )
    aborted_empty = assistant(
        "m4",
        StepStartPart("p3", S, "m4"),
        ReasoningPart("p4", S, "m4", text="hmm"),
        error=error_data("MessageAbortedError", "x"),
    )
    only_step_start = assistant("m5", StepStartPart("p5", S, "m5"))
    assert to_chat_messages([failed, aborted, aborted_empty, only_step_start]) == [
        {"role": "assistant", "content": "partial"}
    ]


def test_filter_compacted_stops_at_the_completed_request():
    old = user("m1", text("p1", "m1", "old question"))
    request = user("m3", CompactionPart("p3", S, "m3", auto=True))
    summary = assistant("m4", text("p4", "m4", "summary"), summary=True, finish="stop", parent="m3")
    newer = user("m5", text("p5", "m5", "continue"))
    assert filter_compacted([old, request, summary, newer]) == [request, summary, newer]
    failed = assistant(
        "m4",
        text("p4", "m4", "summary"),
        summary=True,
        finish="stop",
        parent="m3",
        error=error_data("ContextOverflowError", "too big"),
    )
    assert filter_compacted([old, request, failed, newer]) == [old, request, failed, newer]


def test_every_part_type_round_trips():
    assert len(PART_TYPES) == 12
    for cls in PART_TYPES.values():
        part = cls("prt_x", S, "msg_x")
        assert part_from_data(part.to_data()) == part
