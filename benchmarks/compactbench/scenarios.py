"""Deterministic CompactBench scenarios (seeded; no network).

A scenario is a scripted coding session: user turns, each answered by a few
tool calls (``bash``/``read``/``edit`` with generated outputs) and a final
assistant text. *Needles* are planted early and checked later:

=========  ==============================================  =============================
class      planted in                                      answer (must be visible)
=========  ==============================================  =============================
tool       the middle of a long tool output                "dev server listening on port 48213"
constraint an early user message                            "never modify files under legacy/"
update     a tool output (v1), later a user message (v2)   "orders_v2" (and not only "orders_v1")
status     an assistant's final text                       "T2 (add retries): DONE"
decision   an assistant's final text                       "retry=3 because …"
file       an ``edit`` call's path                         "src/app/config.py"
=========  ==============================================  =============================

The *latest request* is checked separately, on every model request that
follows a compaction (the harness knows the turn in progress).

Two generators write them: :func:`generate` (a coding session: logs and notes) and
:func:`generate_analysis` (a data-analysis session: digit-heavy tables, requests in varied
words, statuses and decisions in plain prose). Half the noise lines of the first and all of
the second carry digits, timestamps or key=value pairs, as real logs and tables do, so a
summariser cannot tell a fact from noise by its digits. Constraints are drawn from
:data:`PHRASINGS`: rules a user might state, worded in many ways, none with the words a
keyword list would look for. Sizes follow ``chars / 4`` tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

WORDS = (
    "worker",
    "queue",
    "batch",
    "cache",
    "shard",
    "replica",
    "scheduler",
    "gateway",
    "indexer",
    "ingest",
    "parser",
    "router",
    "session",
    "ledger",
    "snapshot",
    "compactor",
    "watcher",
)
VERBS = (
    "processed",
    "flushed",
    "skipped",
    "retried",
    "accepted",
    "merged",
    "rotated",
    "warmed",
    "drained",
)
STATES = ("healthy", "idle", "busy", "steady", "nominal", "quiet")
TOPICS = (
    "the ingest pipeline",
    "the billing report",
    "the search index",
    "the nightly export",
    "the auth middleware",
    "the metrics dashboard",
    "the retry policy",
    "the CSV loader",
)


# What users tell an assistant once and expect kept: no "never / always / must / keep / use /
# instead / remember / from now on …", and none of these sentences is in either system's code.
PHRASINGS = (
    "Report every money figure in euros, not dollars",
    "Round percentages to one decimal place in all tables",
    "The column cust_ref is confidential and stays out of every output",
    "Dates go in ISO format (YYYY-MM-DD) throughout",
    "Stick to the 2023 data since the 2022 extract is unreliable",
    "Plots get a white background and no gridlines",
    "Treat negative quantities as returns rather than errors",
    "Write results to out/ rather than over anything in data/",
    "Tables are sorted by descending revenue",
    "Our fiscal year starts in April",
    "Leave the files under legacy/ exactly as they are",
    "HTTP calls go through httpie, not curl",
    "Public functions get a docstring each",
    "I would like type hints on anything new",
    "Please stay away from pandas apply; vectorised code reads better here",
    "Commit messages are in the imperative mood",
    "Ask me before deleting any file",
    "Tests live next to the module they cover",
)


@dataclass(frozen=True)
class Needle:
    id: str
    cls: str  # tool | constraint | update | status | decision | file
    answer: str
    turn: int  # planted in this turn
    stale: str | None = None  # for "update": the superseded value


@dataclass(frozen=True)
class Step:
    id: str  # unique; appears in the call's arguments (a path), so "done" is visible in context
    tool: str
    args: dict
    output: str


@dataclass(frozen=True)
class Turn:
    index: int
    request: str  # carries the marker
    marker: str  # e.g. "[T07]"
    steps: tuple[Step, ...]
    final: str
    attachment: dict | None = None  # {"mime", "filename", "url"}


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    description: str
    context: int
    output: int
    turns: tuple[Turn, ...]
    needles: tuple[Needle, ...]
    extra: dict = field(default_factory=dict)


def _noise(rng: random.Random, n_chars: int) -> list[str]:
    """Log lines; half of them with a timestamp, counts and a key=value pair."""
    lines, size = [], 0
    while size < n_chars:
        if rng.random() < 0.5:
            line = (
                f"INFO {rng.choice(WORDS)} {rng.choice(VERBS)} a {rng.choice(WORDS)} and the "
                f"{rng.choice(WORDS)} is {rng.choice(STATES)}"
            )
        else:
            line = (
                f"2026-0{rng.randint(1, 9)}-{rng.randint(10, 28)} {rng.randint(10, 23)}:"
                f"{rng.randint(10, 59)}:{rng.randint(10, 59)} {rng.choice(WORDS)} "
                f"{rng.choice(VERBS)} {rng.randint(10, 99_999)} items in {rng.randint(10, 9_999)} ms "
                f"{rng.choice(WORDS)}_id={rng.randint(100, 99_999)}"
            )
        lines.append(line)
        size += len(line) + 1
    return lines


def _output(rng: random.Random, tokens: int, header: str, facts: list[str] = ()) -> str:
    lines = _noise(rng, tokens * 4)
    for fact in facts:  # somewhere in the middle half
        lines.insert(rng.randint(len(lines) // 4, max(len(lines) // 4, 3 * len(lines) // 4)), fact)
    return header + "\n" + "\n".join(lines)


def generate(
    name: str,
    seed: int,
    *,
    turns: int = 40,
    context: int = 32_000,
    output: int = 4_096,
    out_tokens: tuple[int, int] = (600, 3_500),
    steps: tuple[int, int] = (1, 3),
    burst: dict[int, int] | None = None,
    giant: dict[int, int] | None = None,
    media: tuple[int, ...] = (),
    system_tokens: int = 0,
    manual: tuple[int, ...] = (),
    description: str = "",
) -> Scenario:
    """A session of ``turns`` turns; ``burst`` {turn: steps} makes long multi-step turns,
    ``giant`` {turn: tokens} a single huge tool output, ``media`` turns with a large image,
    ``manual`` turns after which the user compacts (``%agent compact``, OpenCode's summarize)."""
    rng = random.Random(seed)
    burst, giant = burst or {}, giant or {}
    needles: list[Needle] = []
    plan: dict[int, dict] = {t: {"facts": [], "user": [], "final": []} for t in range(turns)}

    # constraints: the first two turns, and one a third of the way in, in words from PHRASINGS
    worded = rng.sample(PHRASINGS, 3)
    for cid, t, text in zip(("C1", "C2", "C3"), (0, 1, max(2, turns // 3)), worded):
        plan[t]["user"].append(f"{text}.")
        needles.append(Needle(cid, "constraint", text, t))
    # tool facts, one about every five turns
    fact_pool = [
        "dev server listening on port {n}",
        "build id is bx{n}",
        "p95 latency measured at {n} ms",
        "migration batch size set to {n}",
        "feature flag rollout at {n} permille",
        "worker pool size is {n}",
        "nightly export wrote {n} rows",
        "cache hit ratio {n} per mille",
        "schema version {n} applied",
        "retry budget of {n} ms per call",
    ]
    for i, t in enumerate(range(1, turns - 2, 5)):
        fact = fact_pool[i % len(fact_pool)].format(n=rng.randint(10_000, 99_999))
        plan[t]["facts"].append(fact)
        needles.append(Needle(f"F{i + 1}", "tool", fact, t))
    # a value set in a tool output, superseded by the user later
    t_old, t_new = 2, max(3, (turns * 3) // 5)
    plan[t_old]["facts"].append("DATABASE_NAME=orders_v1")
    plan[t_new]["user"].append("We renamed the database: DATABASE_NAME is now orders_v2.")
    needles.append(Needle("U1", "update", "orders_v2", t_new, stale="orders_v1"))
    # task status and a decision, in the assistant's own words
    statuses = [
        (4, "T1 (migrate schema): DONE"),
        (max(5, turns // 2), "T2 (add retries): DONE"),
        (max(6, turns - 4), "T3 (write docs): PENDING"),
    ]
    for i, (t, text) in enumerate(statuses):
        plan[t]["final"].append(f"Task {text}")
        needles.append(Needle(f"S{i + 1}", "status", text, t))
    plan[3]["final"].append("Decision: retry=3 because the upstream API rate-limits bursts.")
    needles.append(
        Needle("D1", "decision", "retry=3 because the upstream API rate-limits bursts", 3)
    )

    out_turns = []
    for t in range(turns):
        marker = f"[T{t:02d}]"
        topic = rng.choice(TOPICS)
        n_steps = burst.get(t, rng.randint(*steps))
        parts = [f"{marker} Please look into {topic} and report what you find."]
        parts += plan[t]["user"]
        if t in burst:
            parts.append(f"This is a longer job: go through all {n_steps} checks, then summarise.")
        request = " ".join(parts)
        step_list = []
        facts = list(plan[t]["facts"])
        for s in range(n_steps):
            sid = f"T{t:02d}S{s}"
            kind = rng.random()
            if t in giant and s == 0:
                tokens = giant[t]
                path = f"logs/{sid}-full.log"
                out = _output(rng, tokens, f"$ cat {path}", facts)
                facts = []
                step_list.append(Step(sid, "bash", {"command": f"cat {path}"}, out))
            elif kind < 0.15 and s > 0:
                path = f"src/app/module_{sid.lower()}.py"
                step_list.append(
                    Step(
                        sid,
                        "edit",
                        {"filePath": path, "oldString": "a", "newString": "b"},
                        f"Edit applied successfully to {path}.",
                    )
                )
            elif kind < 0.55:
                tokens = rng.randint(*out_tokens)
                path = f"logs/{sid}.log"
                out = _output(rng, tokens, f"$ cat {path}", facts[:1])
                facts = facts[1:]
                step_list.append(Step(sid, "bash", {"command": f"cat {path}"}, out))
            else:
                tokens = rng.randint(*out_tokens)
                path = f"src/app/{sid.lower()}_notes.txt"
                out = _output(rng, tokens, f"<file {path}>", facts[:1])
                facts = facts[1:]
                step_list.append(Step(sid, "read", {"filePath": path}, out))
        if t == 6:  # one edit everybody must remember
            step_list.append(
                Step(
                    f"T{t:02d}S{n_steps}",
                    "edit",
                    {"filePath": "src/app/config.py", "oldString": "x", "newString": "y"},
                    "Edit applied successfully to src/app/config.py.",
                )
            )
            needles.append(Needle("E1", "file", "src/app/config.py", t))
        final = " ".join(
            [
                f"{marker} Finished looking into {topic}; nothing else is blocking.",
                *plan[t]["final"],
            ]
        )
        attachment = None
        if t in media:
            blob = "".join(
                rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                for _ in range(context * 4)
            )
            attachment = {
                "mime": "image/png",
                "filename": f"screenshot-{t}.png",
                "url": f"data:image/png;base64,{blob}",
            }
        out_turns.append(Turn(t, request, marker, tuple(step_list), final, attachment))
    extra = (
        {
            "system": "\n".join(
                ["Project instructions (background):", *_noise(rng, system_tokens * 4)]
            )
        }
        if system_tokens
        else {}
    )
    if manual:
        extra["manual"] = tuple(manual)
    return Scenario(
        name, seed, description, context, output, tuple(out_turns), tuple(needles), extra
    )


DATASETS = ("sales", "churn", "inventory", "web_sessions", "payroll", "shipments", "tickets")
COLUMNS = ("revenue", "tenure", "units", "latency", "margin", "basket", "visits", "age")
GROUPS = ("region", "plan", "channel", "month", "store", "segment")
ASKS = (
    "Load {d} and give me {c} by {g}.",
    "What does the distribution of {c} look like in {d}?",
    "Check {d} for gaps in {c}, split by {g}.",
    "Compare {c} across {g} for {d}, as a table.",
    "Can you profile the {d} table and flag odd {c} values?",
    "Next: correlate {c} with the {g} mix in {d}.",
    "Summarise {d}: counts and {c} per {g}.",
)


def _table(rng: random.Random, n_chars: int, columns: tuple[str, ...]) -> list[str]:
    """Rows of a numeric table: every line is digits."""
    head = "  ".join(f"{c:>10}" for c in ("date", *columns))
    lines, size = [head], len(head)
    while size < n_chars:
        row = [f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"] + [
            f"{rng.uniform(0, 99_999):>10.2f}"
            if rng.random() < 0.7
            else f"{rng.randint(0, 9_999):>10d}"
            for _ in columns
        ]
        line = "  ".join(row)
        lines.append(line)
        size += len(line) + 1
    return lines


def generate_analysis(
    name: str,
    seed: int,
    *,
    turns: int = 40,
    context: int = 32_000,
    output: int = 4_096,
    out_tokens: tuple[int, int] = (800, 3_000),
    steps: tuple[int, int] = (1, 3),
    description: str = "",
) -> Scenario:
    """A data-analysis session: requests in varied words, digit-heavy tables as tool output,
    constraints from :data:`PHRASINGS` stated early, statuses and decisions in prose (no
    DONE/PENDING, no key=value), a value moved by the user, a report the agent writes."""
    rng = random.Random(seed)
    needles: list[Needle] = []
    plan: dict[int, dict] = {t: {"facts": [], "user": [], "final": []} for t in range(turns)}
    worded = rng.sample(PHRASINGS, 4)
    for cid, t, text in zip(("C1", "C2", "C3", "C4"), (0, 1, 2, max(3, turns // 4)), worded):
        plan[t]["user"].append(f"{text}.")
        needles.append(Needle(cid, "constraint", text, t))
    facts = [
        "rows after cleaning: {n}",
        "the join dropped {n} orphan records",
        "median order value {n} cents",
        "checksum of the export is {n}",
        "{n} customers have no region",
        "the model's holdout AUC is 0.{n}",
        "peak load hour serves {n} sessions",
    ]
    for i, t in enumerate(range(1, turns - 2, 4)):
        fact = facts[i % len(facts)].format(n=rng.randint(10_000, 99_999))
        plan[t]["facts"].append(fact)
        needles.append(Needle(f"F{i + 1}", "tool", fact, t))
    t_new = max(4, turns // 2)
    plan[1]["facts"].append("source table: warehouse.orders_2023")
    plan[t_new]["user"].append(
        "Heads up, the orders data moved to warehouse.orders_rebuilt; read that one from here."
    )
    needles.append(
        Needle("U1", "update", "warehouse.orders_rebuilt", t_new, stale="warehouse.orders_2023")
    )
    statuses = [
        (3, "the cleaning pass is finished"),
        (max(5, turns // 2), "the regional breakdown is finished"),
        (max(6, turns - 5), "the forecast notebook is half written"),
    ]
    for i, (t, text) in enumerate(statuses):
        plan[t]["final"].append(f"Status: {text}.")
        needles.append(Needle(f"S{i + 1}", "status", text, t))
    decision = "we model revenue on a log scale since its distribution is heavy tailed"
    plan[2]["final"].append(f"We agreed that {decision}.")
    needles.append(Needle("D1", "decision", decision, 2))
    out_turns = []
    for t in range(turns):
        marker = f"[T{t:02d}]"
        d, c, g = rng.choice(DATASETS), rng.choice(COLUMNS), rng.choice(GROUPS)
        request = " ".join([f"{marker} {rng.choice(ASKS).format(d=d, c=c, g=g)}", *plan[t]["user"]])
        todo = list(plan[t]["facts"])
        step_list = []
        for k in range(rng.randint(*steps)):
            sid = f"T{t:02d}S{k}"
            cols = tuple(rng.sample(COLUMNS, 4))
            lines = _table(rng, rng.randint(*out_tokens) * 4, cols)
            if todo:
                fact = todo.pop(0)
                lines.insert(
                    rng.randint(len(lines) // 4, max(len(lines) // 4, 3 * len(lines) // 4)), fact
                )
            if rng.random() < 0.5:
                path = f"out/{sid.lower()}_{d}.tsv"
                step_list.append(Step(sid, "read", {"filePath": path}, "\n".join(lines)))
            else:
                path = f"out/{sid.lower()}_{d}_by_{g}.txt"
                step_list.append(Step(sid, "bash", {"command": f"cat {path}"}, "\n".join(lines)))
        if t == 5:
            path = "reports/findings_by_region.md"
            step_list.append(
                Step(
                    f"T{t:02d}S9",
                    "edit",
                    {"filePath": path, "oldString": "x", "newString": "y"},
                    f"Edit applied successfully to {path}.",
                )
            )
            needles.append(Needle("E1", "file", path, t))
        final = " ".join([f"{marker} Here is what {d} shows for {c} by {g}.", *plan[t]["final"]])
        out_turns.append(Turn(t, request, marker, tuple(step_list), final))
    return Scenario(name, seed, description, context, output, tuple(out_turns), tuple(needles), {})


def default_scenarios() -> list[Scenario]:
    """The eleven families of the published table (docs/compaction.md): nine coding sessions
    and two data-analysis sessions (the second generator)."""
    return [
        generate(
            "long-60",
            11,
            turns=60,
            context=64_000,
            output=8_192,
            description="60 turns, 1–3 tool outputs of 0.6–3.5k tokens, 64k window",
        ),
        generate(
            "long-200k",
            17,
            turns=60,
            context=200_000,
            output=32_000,
            out_tokens=(1_500, 6_000),
            description="60 turns of 1.5–6k-token outputs in a 200k window: OpenCode's prune is active",
        ),
        generate(
            "tight-24k",
            12,
            turns=80,
            context=24_000,
            output=4_096,
            out_tokens=(400, 2_500),
            description="80 turns, 24k window with 4k output: little margin between trigger and limit",
        ),
        generate(
            "burst",
            13,
            turns=30,
            context=64_000,
            output=8_192,
            burst={9: 12, 20: 14},
            description="two turns of 12–14 tool calls: compactions in the middle of a turn",
        ),
        generate(
            "giant-output",
            14,
            turns=20,
            context=32_000,
            output=4_096,
            giant={10: 40_000},
            description="one tool output over the window (cut to 50 KB by truncation, still overflows)",
        ),
        generate(
            "media",
            15,
            turns=16,
            context=64_000,
            output=8_192,
            media=(8,),
            description="a pasted image larger than the window: provider overflow error, replay",
        ),
        generate(
            "small-window",
            16,
            turns=30,
            context=8_192,
            output=1_024,
            out_tokens=(200, 900),
            steps=(1, 2),
            description="an 8k local model: OpenCode's 40k/20k prune never fires",
        ),
        generate(
            "manual",
            19,
            turns=24,
            context=128_000,
            output=8_192,
            manual=(7, 15),
            description="24 turns in a 128k window, compacted by the user after turns 7 and 15",
        ),
        generate_analysis(
            "analysis-32k",
            21,
            turns=40,
            context=32_000,
            output=4_096,
            description="data analysis, 40 turns, digit-heavy tables, 4 constraints early, 32k window",
        ),
        generate_analysis(
            "analysis-16k",
            22,
            turns=50,
            context=16_000,
            output=2_048,
            out_tokens=(400, 1_600),
            description="data analysis, 50 turns in a 16k window",
        ),
        generate(
            "loop",
            18,
            turns=10,
            context=32_000,
            output=4_096,
            system_tokens=24_000,
            description="system prompt alone over the usable window: compaction cannot help (#48827)",
        ),
    ]


def write_files(scn: Scenario, project: Path) -> None:
    """What the scenario's tool calls read, as files under ``project`` (``cat`` and ``read``
    return the outputs; the same files for every policy, so a path in view is one read away)."""
    for turn in scn.turns:
        for step in turn.steps:
            path = step.args.get("filePath") or step.args.get("command", "").split()[-1]
            target = Path(project) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if step.tool == "edit":
                target.write_text(f"{step.args.get('oldString', '')}\n")
            else:
                target.write_text(step.output)
