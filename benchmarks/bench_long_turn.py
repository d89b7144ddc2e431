"""A long turn's compact view: the cost of one live render as the turn grows.

The live view renders the running turn again after every step (several times per step); each
render's compact Markdown is made from each message's remembered, cleaned form, so only the
message that changed is made again. The baseline, measured in the same run, is the same turn
made from scratch and cleaned whole on every render (as before the per-message memo).

    python benchmarks/bench_long_turn.py [--steps 10,50,200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    StepFinishPart,
    StepStartPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    replace,
)
from jupyter_session_agent.core.redact import clean
from jupyter_session_agent.render import compact
from jupyter_session_agent.ui.display import TranscriptView

SESSION = "ses_bench"


def long_turn(steps: int) -> list[WithParts]:
    """A prompt, then ``steps`` steps: a sentence and a pandas call with 40 lines of output."""
    user = UserMessage(ids.ascending("message"), SESSION, 1, ModelRef("openai", "scripted"))
    turn = [WithParts(user, (TextPart(ids.ascending("part"), SESSION, user.id, "Explore it."),))]
    for i in range(steps):
        info = AssistantMessage(
            ids.ascending("message"), SESSION, user.id, 2 + i, "openai", "scripted",
            time_completed=3 + i, finish="tool-calls",
        )  # fmt: skip
        code = f"import pandas as pd\ndf = pd.read_csv('part{i}.csv')\ndf.describe()"
        state = ToolCompleted({"code": code}, "count  40\n" * 40, "df", {}, 1, 2)
        turn.append(
            WithParts(
                info,
                (
                    StepStartPart(ids.ascending("part"), SESSION, info.id),
                    TextPart(ids.ascending("part"), SESSION, info.id, "Looking at it. " * 6),
                    ToolPart(ids.ascending("part"), SESSION, info.id, f"c{i}", "python", state),
                    StepFinishPart(ids.ascending("part"), SESSION, info.id),
                ),
            )
        )
    return turn


def streamed(turn: list[WithParts], n: int) -> list[WithParts]:
    """The turn with its last step's text grown by a few words (what one live render sees)."""
    last = turn[-1]
    parts = tuple(
        replace(p, text=p.text + f"more {n} ") if isinstance(p, TextPart) else p for p in last.parts
    )
    return [*turn[:-1], WithParts(last.info, parts)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="10,50,200")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| steps in the turn | one render, from scratch | one render, now | ratio |")
    print("|---|---|---|---|")
    for steps in (int(s) for s in args.steps.split(",")):
        turn = long_turn(steps)
        assert TranscriptView(turn, detail="compact").markdown  # the earlier renders of this turn
        start = time.perf_counter()
        for n in range(args.repeat):
            clean(compact.turn(streamed(turn, n), None, budget=""))
        before = (time.perf_counter() - start) / args.repeat
        start = time.perf_counter()
        for n in range(args.repeat):
            assert TranscriptView(streamed(turn, n), detail="compact").markdown
        after = (time.perf_counter() - start) / args.repeat
        print(
            f"| {steps} | {before * 1000:.1f} ms | {after * 1000:.1f} ms | ×{before / after:.1f} |"
        )


if __name__ == "__main__":
    main()
