"""Recall without embeddings: the history's latent space (LSI) finds a passage that shares no word
with the question when the history links their words; the truncated SVD is the matrix's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AssistantMessage,
    ModelRef,
    Session,
    TextPart,
    UserMessage,
)
from jupyter_session_agent.memory.latent import LatentSpace
from jupyter_session_agent.memory.search import DEFAULT_RANKING, PLAIN_BM25, MemoryIndex
from jupyter_session_agent.store import Store

T0 = 1_683_504_000_000  # 2023-05-08
DAY = 86_400_000

LINKS = [  # "puppy" and "dog" together, again and again
    "We adopted a puppy last week, a tiny dog with big ears.",
    "The puppy chewed my shoes again; the dog is teething.",
    "Our puppy loves the park, that dog runs all day long.",
]
FILLERS = [
    "The train to Lisbon was two hours late.",
    "I baked bread with rye flour and seeds.",
    "The quarterly report is due on Friday.",
    "My sister plays the cello in an orchestra.",
    "We repainted the kitchen a pale blue.",
    "The museum opens at ten on weekdays.",
]
ANSWER = "The dog sleeps in a crate by the back door."
QUESTION = "Where does the puppy rest at night?"  # no word of the answer's
# a history this small is below the passages the default needs before it uses the space
LSI = replace(DEFAULT_RANKING, latent_min=0)


def _sessions(store, directory, lines):
    """Each line its own session (no neighbours to carry words), a day apart."""
    out = []
    for i, line in enumerate(lines):
        when = T0 + i * DAY
        info = Session(
            id=ids.descending("session"),
            directory=str(directory),
            title="chat",
            time_created=when,
            time_updated=when + 2000,
        )
        store.put(info)
        user = UserMessage(ids.ascending("message"), info.id, when, ModelRef("openai", "x"))
        store.put(user, TextPart(ids.ascending("part"), info.id, user.id, text="Tell me more."))
        reply = AssistantMessage(ids.ascending("message"), info.id, user.id, when + 1000, "o", "x")
        store.put(reply, TextPart(ids.ascending("part"), info.id, reply.id, text=line))
        out.append(reply.id)
    store.flush()
    return out


def _found(store, tmp_path, ranking, query=QUESTION, k=6):
    index = MemoryIndex(store, tmp_path / "data", ranking=ranking)
    return index.search(query, k=k, threshold=0.0, sources=("history",))


def test_the_latent_space_finds_an_answer_that_shares_no_word_with_the_question(tmp_path):
    store = Store(tmp_path / "data")
    try:
        turns = _sessions(store, tmp_path, [*LINKS, *FILLERS, ANSWER])
        answer = turns[-1]
        lexical = _found(store, tmp_path, replace(DEFAULT_RANKING, latent=0))
        assert answer not in [h.message_id for h in lexical]  # no word of the question
        assert answer not in [h.message_id for h in _found(store, tmp_path, PLAIN_BM25)]
        small = _found(store, tmp_path, DEFAULT_RANKING)
        assert answer not in [h.message_id for h in small] and not any(h.latent for h in small)
        hits = _found(store, tmp_path, LSI)
        got = [h.message_id for h in hits]
        assert answer in got
        # the passages that hold the question's word still come first; the answer next, ahead
        # of every filler, and its line says the score came from the latent space
        assert set(got[:3]) == set(turns[:3]) and got[3] == answer
        hit = hits[3]
        assert hit.latent and hit.bm25 == 0.0 and "lsi" in hit.why()
    finally:
        store.close()


def test_the_latent_space_follows_the_history(tmp_path):
    """Built again after the history changes: a link written later is used."""
    store = Store(tmp_path / "data")
    try:
        turns = _sessions(store, tmp_path, [*FILLERS, ANSWER])
        answer = turns[-1]
        index = MemoryIndex(store, tmp_path / "data", ranking=LSI)

        def got() -> list[str | None]:
            hits = index.search(QUESTION, k=6, threshold=0.0, sources=("history",))
            return [h.message_id for h in hits]

        assert answer not in got()  # nothing yet says a puppy is a dog
        _sessions(store, tmp_path, LINKS)
        assert answer in got()
    finally:
        store.close()


def test_the_randomized_svd_recovers_the_matrix_leading_singular_directions():
    rng = np.random.default_rng(7)
    n_docs, n_terms = 300, 120
    # a low-rank topic structure plus noise, as sparse triples
    topics = rng.random((n_docs, 6)) @ rng.random((6, n_terms))
    dense = np.where(rng.random((n_docs, n_terms)) < 0.15, topics, 0.0)
    docs, terms = np.nonzero(dense)
    tf = np.expm1(dense[docs, terms])  # LatentSpace takes log(1 + tf)
    space = LatentSpace(docs, terms, tf, n_docs, dims=6, min_df=1)
    # the same tf-idf matrix, dense, and its exact SVD
    df = np.bincount(terms, minlength=n_terms)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    weighted = np.zeros((n_docs, n_terms))
    weighted[docs, terms] = dense[docs, terms] * idf[terms]
    weighted /= np.linalg.norm(weighted, axis=1, keepdims=True)
    _, exact, vt = np.linalg.svd(weighted, full_matrices=False)
    # the subspace found holds (nearly) as much of the matrix as the best one of its size
    captured = np.linalg.norm(weighted @ space.basis) ** 2 / (exact[:6] ** 2).sum()
    assert captured > 0.98  # the exact top three with three random directions: 0.85
    # and its leading direction is the exact one
    assert abs(float(vt[0] @ space.basis[:, 0])) > 0.99
    # folding a passage's own terms in gives back (nearly) that passage's direction
    row = 11
    query = [int(t) for t in terms[docs == row]]
    assert int(np.argmax(space.cosines(query))) in {row} | set(
        np.argsort(-(weighted @ weighted[row]))[:3].tolist()
    )
