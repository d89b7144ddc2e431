"""What escaping untrusted text costs a live-view update.

Builds the output bundle a live-view update sends (``TranscriptView._repr_mimebundle_``: the
renderer's JSON, the ``text/markdown`` fallback and ``text/plain``) for the same histories twice
in the same run, alternating: as shipped, and with the escaping functions of
``render/escape.py`` replaced by the identity (the unescaped baseline). Answers are realistic
Markdown (prose, lists, inline code, fenced Python with ``<``, a table, links): one long turn
and a session of many turns. Prints the median time of each, the ratio, and the escaping's
own cost per KB of answer.

Run: ``python benchmarks/bench_escape.py [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    TextPart,
    UserMessage,
    WithParts,
)
from jupyter_session_agent.render import escape as X
from jupyter_session_agent.render import markdown as M
from jupyter_session_agent.ui.display import TranscriptView

ANSWER = """Here is what I found in `data.csv`:

- **age** has 31 missing values (`df.age.isna().sum()`), see [pandas](https://pandas.pydata.org)
- *income* is skewed: the mean is 52,000 < the median of 61,000
- the `id` column has duplicates where `count > 1`

```python
import pandas as pd
df = pd.read_csv("data.csv")
dupes = df[df.id.duplicated(keep=False)]
print(dupes[dupes.age < 30].head())
```

| column | missing |
|---|---|
| age | 31 |
| income | 0 |

Shall I drop the duplicated rows next?
"""


def history(turns: int, repeat: int) -> list[WithParts]:
    sid = ids.descending("session")
    out = []
    for _ in range(turns):
        user = UserMessage(ids.ascending("message"), sid, 1, ModelRef("openai", "m"))
        out.append(
            WithParts(
                user,
                (TextPart(ids.ascending("part"), sid, user.id, text="look at data.csv"),),
            )
        )
        reply = AssistantMessage(ids.ascending("message"), sid, user.id, 1, "openai", "m")
        text = TextPart(ids.ascending("part"), sid, reply.id, text=ANSWER * repeat)
        out.append(WithParts(reply, (text,)))
    return out


def timed(histories, rounds: int) -> dict[str, list[float]]:
    shipped = (X.markdown, M.code)
    times: dict[str, list[float]] = {"escaped": [], "unescaped": []}
    for _ in range(rounds):
        for mode in ("escaped", "unescaped"):
            if mode == "unescaped":
                X.markdown = lambda text, fences=True: str(text)  # type: ignore[assignment]
                M.code = lambda text: f"`{text}`"  # type: ignore[assignment]
            start = time.perf_counter()
            for h in histories:
                TranscriptView(h)._repr_mimebundle_()
            times[mode].append(time.perf_counter() - start)
            X.markdown, M.code = shipped  # type: ignore[assignment]
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    cases = {
        "one long turn (100 KB answer)": [history(1, 150)],
        "50 turns of 1 KB answers": [history(50, 1)],
    }
    for name, histories in cases.items():
        t = timed(histories, args.rounds)
        esc, raw = statistics.median(t["escaped"]), statistics.median(t["unescaped"])
        print(
            f"{name}: live-view bundle escaped {esc * 1000:.1f} ms, unescaped "
            f"{raw * 1000:.1f} ms, ratio {esc / raw:.2f}x"
        )
    text = ANSWER * 100
    runs = [time.perf_counter() for _ in range(1)]
    for _ in range(args.rounds):
        start = time.perf_counter()
        X.markdown(text)
        runs.append(time.perf_counter() - start)
    per_kb = statistics.median(runs[1:]) / (len(text) / 1024) * 1000
    print(f"render/escape.markdown alone: {per_kb:.3f} ms per KB of answer")


if __name__ == "__main__":
    main()
