"""Cross-session memory (docs/memory.md): extraction, the Markdown files, BM25 in DuckDB,
supersession, the recall tool, injection, the subcommands — offline, through the real
session API and magics against the scripted server over HTTP."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
import warnings
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent import memory
from jupyter_session_agent.core import ids
from jupyter_session_agent.core.errors import ConfigError, ProviderError, UsageError
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    TextPart,
    UserMessage,
    WithParts,
)
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.memory import extract, files, text
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01


def write_session(store, directory, turns, when, title="t"):
    """A session of (user text, assistant text) turns written through the Store API."""
    info = Session(
        id=ids.descending("session"),
        directory=str(directory),
        title=title,
        time_created=when,
        time_updated=when + len(turns) * 1000,
    )
    store.put(info)
    for i, (user, reply) in enumerate(turns):
        u = UserMessage(ids.ascending("message"), info.id, when + i * 1000, ModelRef("openai", "x"))
        store.put(u, TextPart(ids.ascending("part"), info.id, u.id, text=user))
        a = AssistantMessage(
            ids.ascending("message"),
            info.id,
            u.id,
            when + i * 1000 + 500,
            "openai",
            "x",
            finish="stop",
        )
        store.put(a, TextPart(ids.ascending("part"), info.id, a.id, text=reply))
    store.flush()
    return info.id


def history_of(*turns):
    out = []
    for user, reply in turns:
        u = UserMessage(ids.ascending("message"), "ses_x", 1, ModelRef("openai", "x"))
        a = AssistantMessage(
            ids.ascending("message"), "ses_x", u.id, 2, "openai", "x", finish="stop"
        )
        out.append(WithParts(u, (TextPart(ids.ascending("part"), "ses_x", u.id, text=user),)))
        out.append(WithParts(a, (TextPart(ids.ascending("part"), "ses_x", a.id, text=reply),)))
    return out


@pytest.fixture
def env(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    settings = Settings(
        model="openai/x",
        data_dir=tmp_path / "data",
        titles=False,
        memory={"extractor": "rules", "embeddings": None},
    )  # hybrid: test_memory_hybrid
    store = Store(settings.data_dir)
    yield store, settings, project
    store.close()


# --------------------------------------------------------------------------
# text


def test_tokens_stem_inflections_drop_stopwords_and_split_cjk():
    assert text.tokens("The staging databases are listening on port 5433") == [
        "stage",
        "databas",
        "listen",
        "port",
        "5433",
    ]
    assert text.tokens("plots plotting plotted") == ["plot"] * 3
    assert text.tokens("数据库端口") == ["数据", "据库", "库端", "端口"]
    assert text.tokens("Which of them do we use?") == []


# --------------------------------------------------------------------------
# extraction


def test_rule_extractor_finds_the_four_kinds_and_keeps_the_later_of_two_statements():
    history = history_of(
        ("FYI the staging database listens on port 5433.", "Noted."),
        ("We decided to use polars instead of pandas for the ETL.", "Sounds good."),
        ("I prefer seaborn for plots, never matplotlib defaults.", "Got it."),
        ("TODO: add tests for the loader module.", "I'll add them next time."),
        ("Load sales.csv and plot revenue by month.", "Here is the chart; revenue peaks in May."),
        ("What is the staging port again?", "It is 5433."),
        ("Actually, the staging database listens on port 6543.", "Updated."),
    )
    found = extract.extract_rules(history)
    texts = {k: [n.text for n in v] for k, v in found.items()}
    assert texts["decisions"] == ["We decided to use polars instead of pandas for the ETL."]
    assert texts["preferences"] == ["I prefer seaborn for plots, never matplotlib defaults."]
    assert texts["tasks"] == ["TODO: add tests for the loader module."]
    assert texts["facts"] == [
        "The staging database listens on port 6543."
    ]  # "Actually," stripped; 5433 replaced
    assert found["facts"][0].message_id == history[12].info.id
    # requests, questions and chit-chat are not memory
    assert not any("sales.csv" in t or "again" in t for v in texts.values() for t in v)


def test_llm_answer_is_parsed_and_unparseable_answers_give_none():
    answer = """Here is the memory:

## Decisions
- Use polars for the ETL.
## Preferences and constraints
- (none)
**Facts learned:**
* The staging database listens on port 6543.
## Open tasks
1. Add loader tests.
## Other
- ignored
"""
    parsed = extract.extract_llm(history_of(("hi", "hello")), lambda messages: answer)
    assert {k: [n.text for n in v] for k, v in parsed.items()} == {
        "decisions": ["Use polars for the ETL."],
        "preferences": [],
        "facts": ["The staging database listens on port 6543."],
        "tasks": ["Add loader tests."],
    }
    assert (
        extract.extract_llm(history_of(("hi", "hello")), lambda m: "Sure! Nothing to add.") is None
    )


# --------------------------------------------------------------------------
# files


def test_session_files_respect_user_edits_and_memory_md_keeps_the_pinned_section(env):
    store, settings, project = env
    sid = write_session(
        store, project, [("Note that the API limit is 600 requests per minute.", "ok")], T0
    )
    done = memory.remember(store, sid, settings)
    assert done.status == "written" and done.counts["facts"] == 1
    path = done.path
    assert path == files.session_path(files.project_dir(settings.data_dir, project), sid)
    assert (
        "- The API limit is 600 requests per minute." in path.read_text()
    )  # "Note that" is a cue, kept
    memory_md = done.memory_path
    memory_md.write_text(
        memory_md.read_text().replace(
            "<!-- Your own notes: kept when this file is regenerated, always injected when memory is on. -->",
            "- Always answer in British English.",
        )
    )
    # the user edits the session file: it is kept, unless forced
    path.write_text(path.read_text().replace("600", "900"))
    again = memory.remember(store, sid, settings)
    assert again.status == "kept-edited" and "900" in path.read_text()
    assert (
        "Always answer in British English." in memory_md.read_text()
    )  # pinned survives regeneration
    items = files.all_items(files.project_dir(settings.data_dir, project))
    assert [i.kind for i in items] == ["pinned", "facts"] and "900" in items[1].text
    forced = memory.remember(store, sid, settings, force=True)
    assert forced.status == "written" and "600" in path.read_text()


def test_a_newer_session_supersedes_an_older_note_on_the_same_subject(env):
    store, settings, project = env
    old = write_session(
        store,
        project,
        [
            ("FYI the staging database listens on port 5433.", "ok"),
            ("For the record, the production database listens on port 5432.", "ok"),
        ],
        T0,
    )
    new = write_session(
        store, project, [("FYI the staging database now listens on port 6543.", "ok")], T0 + DAY
    )
    memory.remember_project(store, settings, project)
    folder = files.project_dir(settings.data_dir, project)
    items = {i.text: i for i in files.session_items(folder)}
    assert items["The staging database listens on port 5433."].superseded_by == new
    assert items["The production database listens on port 5432."].superseded_by is None
    md = (folder / "MEMORY.md").read_text()
    facts = md.split("## Facts learned")[1].split("##")[0]
    assert "6543" in facts and "5432" in facts and "5433" not in facts
    assert (
        f"~~The staging database listens on port 5433.~~ _(2026-01-01 · {old} → 2026-01-02 · {new})_"
        in md
    )


# --------------------------------------------------------------------------
# search


def test_bm25_in_sql_matches_a_reference_implementation(env):
    store, settings, project = env
    docs = [
        "the cat sat on the mat",
        "a cat and a dog and another cat",
        "dogs chase cats in the park",
        "quantum chromodynamics lecture notes",
    ]
    for i, d in enumerate(docs):
        write_session(
            store, project, [("", d)], T0 + i * DAY
        )  # assistant text: no request weighting
    index = memory.index_for(store, settings.data_dir)
    hits = index.search("cat dog", k=10, sources=("history",), include_superseded=True)
    corpus = [text.tokens(d) for d in docs]
    n, avgdl = len(corpus), sum(map(len, corpus)) / len(corpus)
    q = ["cat", "dog"]
    idf = {
        t: math.log(
            1 + (n - sum(t in c for c in corpus) + 0.5) / (sum(t in c for c in corpus) + 0.5)
        )
        for t in q
    }
    expected = {}
    for d, toks in zip(docs, corpus):
        parts = [
            idf[t]
            * min(
                1.0, toks.count(t) * 2.2 / (toks.count(t) + 1.2 * (0.25 + 0.75 * len(toks) / avgdl))
            )
            for t in q
            if t in toks
        ]
        if parts:
            expected[d] = sum(parts) / sum(idf.values())
    assert {h.text: round(h.bm25, 6) for h in hits} == {d: round(s, 6) for d, s in expected.items()}
    assert (
        hits[0].text == "a cat and a dog and another cat"
    )  # both terms, cat twice: first by plain BM25


def test_newest_statement_wins_unanswerable_returns_nothing_and_scope_is_the_project(env, tmp_path):
    store, settings, project = env
    other = tmp_path / "other"
    write_session(
        store, project, [("FYI the staging database listens on port 5433.", "Noted.")], T0
    )
    write_session(
        store,
        project,
        [("Can you check whether the staging database port is open?", "It is open.")],
        T0 + DAY,
    )
    newest = write_session(
        store,
        project,
        [("Heads-up: the staging database moved to port 6543.", "Thanks.")],
        T0 + 2 * DAY,
    )
    write_session(
        store,
        other,
        [("The staging database of the other project uses port 9999.", "ok")],
        T0 + 3 * DAY,
    )
    hits = memory.recall(
        store, settings, "Which port does the staging database use?", directory=project
    )
    assert (
        hits[0].session_id == newest and "6543" in hits[0].text
    )  # a later *request* does not supersede
    assert not any("5433" in h.text for h in hits)
    stale = memory.recall(
        store, settings, "staging database port", directory=project, include_superseded=True
    )
    assert any("5433" in h.text and h.superseded_by for h in stale)
    assert (
        memory.recall(store, settings, "What is the production Redis password?", directory=project)
        == []
    )
    everywhere = memory.recall(
        store, settings, "staging database port", directory=project, scope="all"
    )
    assert "9999" in everywhere[0].text
    assert memory.recall(
        store,
        settings,
        "staging database port",
        directory=project,
        exclude_session=newest,
        sources=("history",),
    )[0].text.endswith("5433.")


def test_the_index_is_rebuilt_only_when_history_or_memory_changes(env):
    store, settings, project = env
    write_session(store, project, [("The invoice parser lives in src/parse.py.", "ok")], T0)
    index = memory.index_for(store, settings.data_dir)
    assert memory.recall(store, settings, "invoice parser", directory=project)
    builds = index.builds
    memory.recall(store, settings, "invoice parser", directory=project)
    assert index.builds == builds
    write_session(store, project, [("The invoice schema is in docs/schema.md.", "ok")], T0 + DAY)
    assert len(memory.recall(store, settings, "invoice", directory=project)) == 2
    assert index.builds == builds + 1


def _bag_of_words(texts):
    """A fake embedding model: hashed bag of words knowing two synonyms."""
    out = []
    for t in texts:
        v = [0.0] * 64
        for tok in text.tokens(t.replace("access", "reachable").replace("gateway", "vpn")):
            v[int(hashlib.md5(tok.encode()).hexdigest(), 16) % 64] += 1.0
        out.append(v)
    return out


def test_an_embedding_function_adds_cosine_similarity_and_its_vectors_are_cached(env, monkeypatch):
    store, settings, project = env
    write_session(
        store, project, [("The warehouse is only reachable through vpn-gw-17.", "ok")], T0
    )
    question = "Which gateway gives access to the warehouse?"
    plain = memory.recall(store, settings, question, directory=project, threshold=0.3)
    assert plain == []
    calls = []

    def embed(texts):
        calls.append(len(texts))
        return _bag_of_words(texts)

    hybrid = memory.recall(
        store, settings, question, directory=project, threshold=0.3, embed=embed, embed_model="fake"
    )
    assert hybrid and "vpn-gw-17" in hybrid[0].text
    # vectors are cached by text: a second index (a new process) embeds only the query
    memory.index_for(store, settings.data_dir).close()
    calls.clear()
    memory.recall(
        store, settings, question, directory=project, threshold=0.3, embed=embed, embed_model="fake"
    )
    assert calls == [1]
    assert (settings.data_dir / "memory" / ".embeddings" / "fake.vec").exists()


def test_embeddings_setting_falls_back_to_bm25_when_the_server_has_no_endpoint(
    env, server, monkeypatch
):
    store, settings, project = env
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    write_session(
        store, project, [("The warehouse is only reachable through vpn-gw-17.", "ok")], T0
    )
    from jupyter_session_agent.providers.registry import resolve

    provider, _, _ = resolve("openai/scripted", settings)
    with pytest.raises(ProviderError):
        provider.embed(["x"], model="text-embedding-3-small")
    configured = Settings(
        model="openai/scripted", data_dir=settings.data_dir, memory={"embeddings": "emb"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hits = memory.recall(store, configured, "warehouse vpn", directory=project)
    assert hits and "vpn-gw-17" in hits[0].text
    assert any("BM25 only" in str(w.message) for w in caught)


# --------------------------------------------------------------------------
# the LLM extractor over real HTTP


def test_remember_with_the_model_and_fallback_to_rules(env, server, monkeypatch):
    store, settings, project = env
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = Settings(
        model="openai/scripted", data_dir=settings.data_dir, memory={"extractor": "auto"}
    )
    sid = write_session(
        store, project, [("We decided to use duckdb for the ETL.", "Good choice.")], T0
    )
    server.enqueue(
        Reply(
            text="## Decisions\n- DuckDB runs the ETL (chosen over pandas).\n## Preferences and "
            "constraints\n- (none)\n## Facts learned\n- (none)\n## Open tasks\n- (none)\n"
        )
    )
    done = memory.remember(store, sid, settings)
    assert done.extractor == "llm:openai/scripted" and done.counts["decisions"] == 1
    assert "DuckDB runs the ETL" in done.path.read_text()
    sent = server.requests[-1]["messages"]
    assert "## Decisions" in sent[0]["content"] and "We decided to use duckdb" in sent[1]["content"]
    # a reply without the sections (the scripted default echo) → rules, and the reason is kept
    done = memory.remember(store, sid, settings, force=True)
    assert done.extractor == "rules" and "none of the four sections" in done.fallback
    assert "We decided to use duckdb for the ETL." in done.path.read_text()
    # "llm" raises what "auto" forgives
    server.enqueue(Reply(status=500), Reply(status=500), Reply(status=500))
    assert memory.remember(store, sid, settings, force=True).extractor == "rules"
    server.enqueue(Reply(status=400))
    with pytest.raises(ProviderError):
        memory.remember(store, sid, settings, extractor="llm", force=True)


def test_auto_extraction_without_a_usable_model_uses_the_rules(env, monkeypatch):
    store, settings, project = env
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    sid = write_session(store, project, [("We decided to use duckdb for the ETL.", "ok")], T0)
    hosted = Settings(
        model="openai/gpt-4o-mini", data_dir=settings.data_dir, memory={"extractor": "auto"}
    )
    done = memory.remember(store, sid, hosted)
    assert (
        done.extractor == "rules"
        and "OPENAI_API_KEY" in done.fallback
        and done.counts["decisions"] == 1
    )
    local = Settings(
        model="local/smollm2", data_dir=settings.data_dir, memory={"extractor": "auto"}
    )
    done = memory.remember(
        store, sid, local, force=True
    )  # never starts the embedded server for this
    assert done.extractor == "rules" and "too small" in done.fallback


# --------------------------------------------------------------------------
# settings


def test_memory_settings_are_validated():
    with pytest.raises(ConfigError, match="unknown memory setting"):
        Settings(memory={"inject_everything": True})
    with pytest.raises(ConfigError, match="extractor"):
        Settings(memory={"extractor": "magic"})
    # the recall tool and the injection each follow enabled unless set
    assert not Settings().memory.tool_on and not Settings().memory.inject_on
    assert Settings(memory={"enabled": True}).memory.tool_on
    assert Settings(memory={"enabled": True}).memory.inject_on
    assert Settings(memory={"inject": True}).memory.inject_on
    assert not Settings(memory={"inject": True}).memory.tool_on
    assert not Settings(memory={"enabled": True, "tool": False}).memory.tool_on


# --------------------------------------------------------------------------
# end to end: magics, the recall tool, injection, auto-remember


def run(ip, prompt, line=""):
    return ip.run_cell_magic("agent", line, prompt)


def agent_line(ip, words):
    with capture_output() as out:
        value = ip.run_line_magic("agent", words)
    return value, out.stdout


def md(value) -> str:
    return value._repr_markdown_() if hasattr(value, "_repr_markdown_") else str(value)


def tool_names(request):
    return [t["function"]["name"] for t in request.get("tools") or ()]


def test_subcommands_remember_recall_and_memory(ip, server, magics, store):
    server.enqueue(Reply(text="Noted."), Reply(text="Sure."))
    run(ip, "FYI the staging database listens on port 5433.")
    run(ip, "I prefer seaborn for plots.")
    value, _ = agent_line(ip, "memory")
    assert "no memory yet" in md(value)
    value, _ = agent_line(ip, "remember")
    assert "1 preferences, 1 facts" in md(value) and "port 5433" in md(value)
    value, _ = agent_line(ip, "recall staging database port")
    assert "port 5433" in md(value) and magics.session.info.id in md(value)
    value, _ = agent_line(ip, "recall quantum chromodynamics")
    assert "nothing in this project" in md(value)
    value, _ = agent_line(ip, "memory")
    assert "## Facts learned" in md(value) and "seaborn" in md(value)
    value, _ = agent_line(ip, "remember --all --rules")
    assert "Remembered 1 session(s)" in md(value)
    with pytest.raises(UsageError, match="usage: %agent recall"):
        ip.run_line_magic("agent", "recall")
    with pytest.raises(UsageError, match="not both"):
        ip.run_line_magic("agent", "remember --rules --llm")


def test_recall_tool_is_offered_only_when_memory_is_on_and_finds_other_sessions(
    ip, server, magics, store
):
    server.enqueue(Reply(text="Noted."))
    run(ip, "FYI the staging database listens on port 5433.")
    assert "recall" not in tool_names(server.requests[-1])
    agent_line(ip, "remember")
    magics.memory = {"enabled": True, "inject": False}
    server.enqueue(
        Reply(tool_calls=({"name": "recall", "arguments": {"query": "staging database port"}},)),
        Reply(text="Port 5433."),
    )
    run(ip, "Which port does staging use?", "--new")
    first, second = server.requests[-2:]
    assert (
        "recall" in tool_names(first) and "recall" in first["messages"][0]["content"]
    )  # system prompt lists it
    result = second["messages"][-1]
    assert (
        result["role"] == "tool"
        and "port 5433" in result["content"]
        and "memory/facts" in result["content"]
    )
    part = [p for m in store.messages(magics.session.info.id) for p in m.parts if p.type == "tool"][
        0
    ]
    assert (
        part.state.status == "completed"
        and part.state.metadata["hits"][0]["sessionID"] != magics.session.info.id
    )


def test_injection_adds_a_visible_synthetic_part_that_is_sent_once(ip, server, magics, store):
    server.enqueue(Reply(text="Noted."))
    run(ip, "FYI the staging database listens on port 5433.")
    agent_line(ip, "remember")
    memory_md = (
        memory.project_dir(magics.settings().data_dir, magics.session.info.directory) / "MEMORY.md"
    )
    memory_md.write_text(
        memory_md.read_text().replace(
            "<!-- Your own notes: kept when this file is regenerated, always injected when memory is on. -->",
            "- Answer in one sentence.",
        )
    )
    magics.memory = {"inject": True, "max_tokens": 200}
    server.enqueue(Reply(text="It is 5433."), Reply(text="ok"))
    run(ip, "Which port does the staging database use?", "--new")
    sent = server.requests[-1]
    assert "recall" not in tool_names(sent)  # inject alone does not add the tool
    user = sent["messages"][-1]["content"]
    assert user.startswith("Which port does the staging database use?\n\n<memory>")
    assert "[pinned] Answer in one sentence." in user and "port 5433" in user
    first = store.messages(magics.session.info.id)[0]
    prompt, injected = first.parts
    assert (
        not prompt.synthetic and injected.synthetic and injected.metadata["memory"]["pinned"] == 1
    )
    tokens = injected.metadata["memory"]["tokens"]
    assert 0 < tokens <= 200 and injected.metadata["memory"]["hits"][0]["text"].endswith(
        "port 5433."
    )
    # counted: the step's (estimated) input covers the injected block
    assistant = store.messages(magics.session.info.id)[1].info
    assert assistant.tokens.input >= tokens
    # the display marks it
    from jupyter_session_agent.ui.display import render_part

    assert "(synthetic)" in render_part(injected)
    run(ip, "And production?")
    assert (
        "<memory>" not in server.requests[-1]["messages"][-1]["content"]
    )  # only a session's first message


def test_auto_remember_writes_the_session_file_after_each_turn(ip, server, magics):
    magics.memory = {"auto_remember": True}
    server.enqueue(Reply(text="Noted."))
    run(ip, "TODO: backfill the 2023 orders into the warehouse.")
    folder = memory.project_dir(magics.settings().data_dir, magics.session.info.directory)
    path = files.session_path(folder, magics.session.info.id)
    assert "backfill the 2023 orders" in path.read_text()
    assert len(server.requests) == 1  # rules: no extra model call


def test_python_api_session_with_memory(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = Settings(
        model="openai/scripted",
        data_dir=tmp_path / "data",
        titles=False,
        memory={"enabled": True, "auto_remember": True},
    )
    store = Store(settings.data_dir)
    server.enqueue(Reply(text="Noted."))
    AgentSession.create(settings, store=store, directory=tmp_path).prompt(
        "We decided to use ruff for linting."
    )
    server.enqueue(Reply(text="ruff."))
    second = AgentSession.create(settings, store=store, directory=tmp_path)
    second.prompt("What did we decide for linting?")
    assert "ruff for linting" in server.requests[-1]["messages"][-1]["content"]
    store.close()


# --------------------------------------------------------------------------
# the benchmark, small


def test_memorybench_small_run_meets_floors():
    spec = importlib.util.spec_from_file_location(
        "memorybench", Path(__file__).resolve().parents[1] / "benchmarks" / "memorybench.py"
    )
    bench = importlib.util.module_from_spec(spec)
    sys.modules["memorybench"] = bench  # dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop("memorybench", None)
    out = bench.run(n_sessions=16, seed=3, via="store")
    r = out["results"]["memory+history"]
    assert r["recall@5"] >= 0.7 and r["recall@1"] >= 0.6
    assert r["stale"] <= 0.15
    assert r["abstain"] >= 0.5
    assert out["results"]["injection"]["tokens max"] <= 800
    json.dumps(out, default=str)
