"""The hybrid ranking's mechanisms (docs/memory.md): a passage close to every text (a *hub*) does
not outrank the specific answer, and DialogueBench's evidence labels count the turns that answer."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from _dialogue import dialogue

from jupyter_session_agent.memory import embed as embeddings
from jupyter_session_agent.memory.search import DEFAULT_RANKING, MemoryIndex
from jupyter_session_agent.store import Store

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_683_504_000_000  # 2023-05-08


class Directions(embeddings.Embedder):
    """A deterministic embedder: each word a fixed random direction, a text the sum of its words'.
    Texts that share words are close; "chat" in every filler turn makes them a cluster."""

    name = "directions"
    dim = 128

    def _vectors(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for word in t.lower().replace(":", " ").split():
                seed = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
                out[i] += np.random.default_rng(seed).normal(size=self.dim)
        return out

    _passages = _vectors
    _queries = _vectors


def test_a_passage_close_to_everything_does_not_outrank_the_specific_answer(tmp_path):
    store = Store(tmp_path / "data")
    try:
        fillers = [f"chat chat filler{i}" for i in range(24)]
        # the hub shares the question's word *and* the fillers' common one: close to everything
        lines = [*fillers[:12], "chat lighthouse", *fillers[12:], "lighthouse keeper harbour"]
        turns = dialogue(store, tmp_path, lines, T0)
        hub, answer = turns[12], turns[-1]
        embedder = Directions()

        def top(ranking) -> list[str | None]:
            index = MemoryIndex(store, tmp_path / "data", ranking=ranking)
            hits = index.search(
                "lighthouse",
                k=3,
                threshold=0.0,
                embedder=embedder,
                cosine_threshold=-1.0,
                sources=("history",),
                wait=60,
            )
            assert all(h.fused for h in hits)
            return [h.message_id for h in hits]

        without = top(replace(DEFAULT_RANKING, hub=0.0))
        assert without[:2] == [hub, answer]  # raw (centred) cosine: the hub wins
        assert top(DEFAULT_RANKING)[:2] == [answer, hub]  # its closeness to everything discounted
    finally:
        store.close()


def _bench():
    spec = importlib.util.spec_from_file_location(
        "dialoguebench", ROOT / "benchmarks" / "dialoguebench.py"
    )
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    sys.modules["dialoguebench"] = bench  # dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop("dialoguebench", None)
    return bench


def test_dialoguebench_labels_every_turn_that_answers_and_keeps_the_strict_reading():
    bench = _bench()
    conv = bench.generate(1, 0)
    turns = {t.id: t for s in conv.sessions for t in s}
    themed = [q for q in conv.questions if q.kind in ("multi-hop", "open-domain")]
    assert themed
    for q in themed:
        assert len(q.alternatives) == len(q.evidence)
        for e, alts in zip(q.evidence, q.alternatives):
            # the detail turn of the same telling: same speaker, same session, two turns later
            (detail,) = alts
            assert turns[detail].speaker == turns[e].speaker
            assert detail[:-3] == e[:-3] and int(detail[-3:]) == int(e[-3:]) + 2
        first = q.evidence[0]
        assert q.found([q.alternatives[0][0]]) == 1 / len(q.evidence)
        assert q.found([q.alternatives[0][0]], strict=True) == 0.0
        assert q.found([first], strict=True) == q.found([first]) == 1 / len(q.evidence)
    # a single-hop question's answer is the detail turn alone
    single = [q for q in conv.questions if q.kind == "single-hop"]
    assert single and all(not q.alternatives for q in single)
    assert all(q.found([]) == 0.0 for q in single)
    # multi-hop needs turns from at least two sessions
    multi = [q for q in conv.questions if q.kind == "multi-hop"]
    assert multi and all(len({e[:-4] for e in q.evidence}) >= 2 for q in multi)
