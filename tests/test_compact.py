"""The compact form of a turn (``render/compact.py``): the answer first, one line per tool call,
the exception line of a real traceback first, a footer whose gauge opens only near a threshold
or when one was crossed in the turn; and the ``%%agent`` bundle that carries it."""

from __future__ import annotations

import dataclasses
import traceback

import pytest
from _synthetic import synthetic_session

from jupyter_session_agent.core.budget import ModelInfo, Prices
from jupyter_session_agent.core.messages import (
    StepFinishPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    WithParts,
)
from jupyter_session_agent.loop.budget_report import budget_report
from jupyter_session_agent.render import compact
from jupyter_session_agent.ui.display import MIME_TYPE, TranscriptView

MODEL = ModelInfo("openai", "scripted", context=128_000, output=16_384, prices=Prices(0.15, 0.6))


def _real_pandas_traceback() -> str:
    """A traceback pandas really raises, its internals' frames included (not written here)."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"region": ["north", "south"], "sales": [3, 4]})
    try:
        frame.groupby("region")["revenue"].sum()
    except KeyError:
        return traceback.format_exc()
    raise AssertionError("pandas did not raise")


def _tool(tool: str, state) -> ToolPart:
    return ToolPart("prt_1", "ses_1", "msg_1", call_id="call_1", tool=tool, state=state)


def test_the_exception_line_of_a_real_pandas_traceback_comes_first():
    text = _real_pandas_traceback()
    assert "pandas" in text and text.count("\n") > 5  # internals' frames, as a user sees them
    assert compact.exception_line(text) == "KeyError: 'Column not found: revenue'"
    failed = ToolCompleted(
        {"code": "df.groupby('region')['revenue'].sum()"},
        "--- error ---\n" + text,
        "df.groupby",
        {"error": "KeyError"},
        1,
        2,
    )
    assert compact.tool_problem(_tool("python", failed)) == "KeyError: 'Column not found: revenue'"
    # a tool's own error (no traceback): its first meaningful line
    error = ToolError({"filePath": "nope.csv"}, "file not found: nope.csv\nlooked in /work", 1, 2)
    assert compact.tool_problem(_tool("read", error)) == "file not found: nope.csv"
    ok = ToolCompleted({"code": "1"}, "1", "1", {}, 1, 2)
    assert compact.tool_problem(_tool("python", ok)) is None


@pytest.mark.parametrize(
    ("tool", "args", "summary", "language"),
    [
        (
            "python",
            {"code": "# load\nimport pandas as pd\ndf = pd.read_csv('x')"},
            "import pandas as pd  (+2 lines)",
            "python",
        ),
        ("bash", {"command": "ls -la data/"}, "ls -la data/", "bash"),
        ("read", {"filePath": "notes.md", "offset": 3}, "notes.md", None),
        ("grep", {"pattern": "TODO", "path": "src"}, "src", None),
        ("todo", {"items": [1, 2]}, '{"items": [1, 2]}', None),
    ],
)
def test_a_call_in_one_line(tool, args, summary, language):
    part = _tool(tool, ToolCompleted(args, "", tool, {}, 1_000, 1_050))
    assert compact.input_summary(part) == summary
    assert compact.code_language(part) == language
    assert compact.tool_line(part).endswith("· completed · 0.05 s")
    long = _tool("bash", ToolCompleted({"command": "echo " + "x" * 300}, "", "", {}, 1, 2))
    assert len(compact.input_summary(long)) == compact.SUMMARY_CHARS


def test_the_decision_in_words():
    assert compact.approval_words({"reply": "once"}) == "allowed once by you"
    assert compact.approval_words({"reply": "always"}) == "allowed always by you"
    said = compact.approval_words({"reply": "reject", "feedback": "only list them"})
    assert said == "rejected with feedback: only list them by you"
    assert compact.approval_words(None) is None and compact.approval_words({"reply": "o"}) is None


def _turn(history: list[WithParts]) -> list[WithParts]:
    """The last prompt's turn of a history."""
    start = max(i for i, m in enumerate(history) if m.info.role == "user" and not m.info.summary)
    return history[start:]


def test_the_gauge_opens_only_near_a_threshold_or_when_one_was_crossed():
    session, history = synthetic_session()
    # the synthetic session compacts and prunes: a view of its whole history opens the gauge
    report = budget_report(history, MODEL, {})
    assert compact.gauge_opens(history, report) == "compacted in this turn"
    # its last turn alone, far from both thresholds: folded
    last = _turn(history)
    quiet = budget_report(history, MODEL, {})
    assert compact.gauge_opens(last, quiet) is None
    # the same turn in a window where the context sits at 90% of the compaction trigger
    near = dataclasses.replace(quiet, used=int(0.9 * quiet.compaction_at))
    assert compact.gauge_opens(last, near) == "near the compaction threshold"
    due = dataclasses.replace(quiet, prune_due=True)
    assert compact.gauge_opens(last, due) == "near the prune threshold"


def test_the_footer_line_counts_the_turn():
    session, history = synthetic_session()
    last = _turn(history)
    report = budget_report(history, MODEL, {})
    steps = [m for m in last if m.info.role == "assistant"]
    tokens = sum(m.info.tokens.count for m in steps)
    line = compact.footer_line(last, report)
    assert line.startswith(f"{tokens:,} tokens · ")
    assert f"{report.fraction:.0%} of the context" in line
    assert line.endswith(f"{len(steps)} step{'' if len(steps) == 1 else 's'}")


def test_the_compact_bundle_folds_the_telemetry_and_keeps_the_answer():
    session, history = synthetic_session()
    report = budget_report(history, MODEL, {})
    view = TranscriptView(history, session=session, report=report, detail="compact")
    bundle = view._repr_mimebundle_()
    data = bundle[MIME_TYPE]
    assert data["detail"] == "compact" and data["footer"]["open"] == "compacted in this turn"
    tools = [p for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert set(data["tools"]) == {p.id for p in tools}
    markdown = bundle["text/markdown"]
    head, _, folded = markdown.partition("<details open><summary>")  # the footer, opened
    assert folded, markdown[-600:]
    finishes = [p for m in history for p in m.parts if isinstance(p, StepFinishPart)]
    assert finishes and "step ·" not in head.replace("<summary>", "")  # steps under the footer
    assert folded.count("step ·") == len(finishes)
    answer = [p for p in history[-1].parts if p.type == "text"][-1].text
    assert answer[:40] in head
    # the full view keeps today's transcript: every step inline, no footer
    full = TranscriptView(history, session=session, report=report)._repr_mimebundle_()
    assert full[MIME_TYPE]["detail"] == "full" and "footer" not in full[MIME_TYPE]
    assert full["text/markdown"].count("step ·") == len(finishes)
