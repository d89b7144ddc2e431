"""Search over the whole history and the memory files: BM25 fused with the cosine
similarity of embeddings when an embedding model is available (:mod:`.embed`).

One module: scoring, fusion and supersession decide one ranking over the same candidates
(a document's BM25 share, its cosine and its weight are read by all three). The documents and
their postings are :mod:`.corpus`'s; the passages' vectors, centred and hubness-corrected,
:mod:`.dense`'s; the weights a :class:`.ranking.Ranking`.

The documents (:class:`.corpus.Corpus`, rebuilt when the history or the memory files change)
are built in memory: numpy arrays, no file. **Passages carry their context**: a text passage's
terms are its own plus those of the turns before and after it and of its date, so a question
naming a day meets that day's turns, and an answer split over two turns is found from either.
The hit still points at the one turn.

**BM25** (BM25F over the passage and its context): Okapi BM25 with k1 = 1.2,
b = 0.75 and Lucene's always-positive idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``
over the documents in scope (a project, or everything); ``df`` counts the passages
that hold a term themselves (or by their date), not through a neighbour; the length
is the passage's own plus its neighbours' at their weight. The
``bm25`` share is BM25 with each term's saturation capped at 1, divided by the
sum of the query terms' idf: the share of the query's information a document
holds, in [0, 1]. A query whose rare terms occur nowhere scores low, which is
what lets a question with no answer return nothing.

**Cosine** (with an embedder): every passage's unit vector (cached on disk by
text hash, see :mod:`.vectors`), centred on the passages' mean (e5's vectors
share a large common direction) and compared with the query's, in numpy; minus
``Ranking.hub`` times the passage's *hubness* — its mean cosine to its
``hub_k`` nearest among a sample of the passages and the built-in sentences
(CSLS's correction): a generic turn close to everything ("Oh no, hang in
there") is close to every question too, and would otherwise crowd out the
specific answer.

**Fusion**: each ranking's scores are mapped onto [0, 1] for the query (the BM25 share
over the best share, the cosine between the pool's lowest and highest) and mixed,
``(1 - w)·bm25 + w·cosine`` with ``w = Ranking.linear_weight``. This min-max mix was chosen
on benchmarks/dialoguebench.py's development seed over a linear mix of the raw share and
cosine and over reciprocal rank fusion (docs/memory.md). Without an
embedder the score is the weighted BM25 share, fused the same way (min-max, weight
``Ranking.latent_weight``) with the cosine in the history's own latent space
(:class:`.latent.LatentSpace`: a truncated SVD of the passages' tf-idf, built on the first
search after each rebuild, once the index holds ``Ranking.latent_min`` passages), which
connects words the history uses together. A result must reach
``threshold`` in (weighted) BM25 share or ``cosine_threshold`` in the model's
own cosine.

After scoring (Python, on the candidates): questions and requests (text that
asks and states nothing) weigh less (``Ranking.question_weight``); at equal
score a memory note comes first; the same text repeated keeps only its newest
copy; and a document is *superseded* when a newer one that is not a question
matches at least ``SUPERSEDE_COVER`` of the idf it matches (own terms), scores
at least ``SUPERSEDE_RATIO`` of its BM25 share, and shares at least
``SAME_SUBJECT`` of the smaller one's subject terms (its words minus numbers,
paths and identifiers, at least two) — the newer statement on the same subject
wins, so an updated fact beats the stale one. Only memory notes and history
text that states something can supersede. Superseded documents sink below the
others and carry ``superseded_by``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .corpus import Corpus
from .dense import BACKGROUND, DenseIndex, Status
from .embed import Embedder
from .extract import classify, is_request, subject
from .latent import LatentSpace
from .ranking import DEFAULT_RANKING, PLAIN_BM25, Ranking
from .text import date_terms, iso_date, one_line, sentences, tokens

K1 = 1.2
B = 0.75
SUPERSEDE_RATIO = 0.5
SAME_SUBJECT = 0.5  # overlap coefficient of the two documents' subject terms needed to supersede
SUPERSEDE_COVER = 0.8  # share of a document's matched idf a newer one must match to supersede it


@dataclass(frozen=True)
class Hit:
    """One search result, with why it scored: ``bm25`` share, ``cosine``, and the ``score`` used."""

    score: float
    text: str  # the note, or the best passage of the part
    source: str  # "memory" | "history"
    kind: str  # memory: decisions|preferences|facts|tasks|pinned; history: user|assistant|tool
    session_id: str | None
    message_id: str | None
    time: int
    part_id: str | None = None
    title: str = ""
    superseded_by: str | None = None
    matched: tuple[str, ...] = ()
    path: str = ""
    bm25: float = 0.0  # share of the query's idf this document holds (capped saturation)
    cosine: float | None = None  # with embeddings: the ranking's cosine (centred, hubness off)
    similarity: float | None = None  # … the model's own cosine of the query and the passage
    ranks: tuple[int | None, int | None] = (None, None)  # 1-based rank in BM25 and in cosine
    fused: bool = False  # the score is the fusion of both rankings
    latent: bool = False  # … ``cosine`` is in the history's LSI space, not an embedding's

    @property
    def date(self) -> str:
        return iso_date(self.time)

    def why(self) -> str:
        """``bm25 0.52 (#1) · cosine 0.87 (#3) · fused 0.032``, or ``bm25 0.52``."""
        if not self.fused:
            return f"bm25 {self.bm25:.2f}"
        b, c = self.ranks
        bm25 = f"bm25 {self.bm25:.2f}" + (f" (#{b})" if b else " (—)")
        name = "lsi" if self.latent else "cosine"
        cosine = (
            f"{name} —"
            if self.cosine is None
            else f"{name} {self.cosine:.2f}" + (f" (#{c})" if c else "")
        )
        return f"{bm25} · {cosine} · fused {self.score:.3f}"

    def line(self) -> str:
        """One plain line: date · where · kind — text (why it scored)."""
        where = "/".join(x for x in (self.session_id, self.message_id) if x) or (
            self.path or "memory"
        )
        stale = f" [superseded by {self.superseded_by}]" if self.superseded_by else ""
        score = self.why() if self.fused else f"score {self.score:.2f}"
        return f"{self.date} · {where} · {self.source}/{self.kind}{stale} — {self.text} ({score})"

    def to_data(self) -> dict:
        out = {
            "score": round(self.score, 4),
            "text": self.text,
            "source": self.source,
            "kind": self.kind,
            "sessionID": self.session_id,
            "messageID": self.message_id,
            "partID": self.part_id,
            "time": self.time,
            "date": self.date,
            "supersededBy": self.superseded_by,
            "bm25": round(self.bm25, 4),
        }
        if self.fused:
            out["cosine"] = None if self.cosine is None else round(self.cosine, 4)
            out["similarity"] = None if self.similarity is None else round(self.similarity, 4)
            out["ranks"] = {"bm25": self.ranks[0], "cosine": self.ranks[1]}
            out["latent"] = self.latent
        return out


class MemoryIndex:
    """The searchable corpus of one store and data directory; rebuilt when it changes."""

    def __init__(self, store: Any, data_dir: str | Path, ranking: Ranking = DEFAULT_RANKING):
        self.store = store
        self.data_dir = Path(data_dir)
        self.ranking = ranking
        self.corpus = Corpus(store, data_dir, ranking)
        self._lock = threading.RLock()
        self.dense = DenseIndex(self.corpus, self.data_dir, ranking)
        self._latent: LatentSpace | None = None  # built on first use after each build
        self.latent_seconds = 0.0  # the last latent space's build time

    @property
    def status(self) -> Status:
        """What the embedding side of the last search or :meth:`prepare` had."""
        return self.dense.status

    def refresh(self) -> None:
        """Rebuild the corpus if the history or the memory files changed."""
        with self._lock:
            if self.corpus.refresh():
                self._latent = None
                self.dense.reset()

    @property
    def builds(self) -> int:
        return self.corpus.builds

    @property
    def build_seconds(self) -> float:
        return self.corpus.build_seconds

    @property
    def size(self) -> int:
        return len(self.corpus.rows)

    # -- searching ----------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        project: str | None = None,
        k: int = 5,
        threshold: float = 0.0,
        exclude_session: str | None = None,
        sources: Sequence[str] = ("memory", "history"),
        embedder: Embedder | None = None,
        cosine_threshold: float = 1.0,
        wait: float = 0.0,
        include_superseded: bool = False,
        supersede: bool | None = None,
    ) -> list[Hit]:
        """The best ``k`` documents for ``query`` (see the module docstring).

        ``project`` limits the search to one project key (None: everything);
        ``exclude_session`` leaves a session out (the one asking). A result
        needs ``bm25 >= threshold`` or (with an ``embedder``) ``cosine >=
        cosine_threshold``. Passages without a vector yet are queued for the
        background worker; the search waits up to ``wait`` seconds for them.
        With ``include_superseded`` superseded documents may fill the list
        after the others; by default they are left out. ``supersede=False``
        turns supersession off.
        """
        terms = tokens(query) + date_terms(query)
        if not terms and embedder is None:
            return []
        supersede = self.ranking.supersede if supersede is None else supersede
        with self._lock:
            self.refresh()
            params = {"project": project, "exclude": exclude_session, "sources": list(sources)}
            lex, raw, matched, idf = self._bm25(terms, params) if terms else ({}, {}, {}, {})
            cosine: dict[int, float] = {}
            plain: dict[int, float] = {}
            mix: float | None = None  # the latent cosine's share, when it is the one fused
            if embedder is not None:
                cosine, plain = self.dense.cosine(query, embedder, params, wait)
            else:
                self.dense.status = Status()
                if (
                    self.ranking.latent
                    and terms
                    and len(self.corpus.rows) >= self.ranking.latent_min
                ):
                    cosine, mix = self._latent_cosine(terms, params), self.ranking.latent_weight
            return self._rank(
                lex,
                raw,
                matched,
                idf,
                cosine,
                embedder is not None or bool(cosine),
                supersede,
                threshold,
                cosine_threshold,
                k,
                include_superseded,
                plain,
                mix,
            )

    def _latent_cosine(self, terms: list[str], params: dict) -> dict[int, float]:
        """The best ``pool`` passages in scope by cosine in the history's LSI space (:mod:`.latent`;
        built on first use after each rebuild of the index)."""
        import numpy as np

        if self._latent is None:
            started = time.perf_counter()
            docs, ids, tf = self.corpus.words
            self._latent = LatentSpace(
                docs,
                ids,
                tf,
                len(self.corpus.rows),
                self.ranking.latent,
                self.ranking.latent_min_df,
            )
            self.latent_seconds = time.perf_counter() - started
        vocabulary = self.corpus.vocabulary
        scores = self._latent.cosines([vocabulary[t] for t in terms if t in vocabulary])
        if scores is None:
            return {}
        mask = self._scope_of(params)
        scores = np.where(mask, scores, -np.inf)
        pool = min(self.ranking.pool, int(mask.sum()))
        if pool <= 0:
            return {}
        top = np.argpartition(-scores, pool - 1)[:pool]
        # a passage with no direction in common with the query (a cosine at rounding error
        # from 0) has no latent evidence
        return {int(d): float(scores[d]) for d in top if scores[d] > 1e-6}

    def _bm25(self, terms: list[str], params: dict):
        """(share score, BM25, own matched terms, idf) of the best ``pool`` documents in scope."""
        import numpy as np

        mask = self._scope_of(params)
        n = float(mask.sum())
        if not n:
            return {}, {}, {}, {}
        length = self.corpus.arrays["len"]
        avgdl = max(float(length[mask].mean()), 1.0)
        share = np.zeros(len(mask))
        bm25 = np.zeros(len(mask))
        idf: dict[str, float] = {}
        owned: list[tuple[str, Any]] = []
        for term in dict.fromkeys(terms):
            docs, tf, own, counted = self.corpus.postings.get(term) or _no_postings()
            keep = mask[docs]
            docs, tf, own = docs[keep], tf[keep], own[keep]
            df = int(counted[keep].sum())
            idf[term] = weight = _idf(n, df)
            if not len(docs):
                continue
            tfn = tf * (K1 + 1) / (tf + K1 * (1 - B + B * length[docs] / avgdl))
            share[docs] += weight * np.minimum(tfn, 1.0)
            bm25[docs] += weight * tfn
            owned.append((term, docs[own]))
        total = sum(idf.values()) or 1.0
        found = np.nonzero(bm25 > 0)[0]
        order = found[np.lexsort((-found, -bm25[found], -share[found]))][: self.ranking.pool]
        lex = {int(d): float(share[d] / total) for d in order}
        raw = {int(d): float(bm25[d]) for d in order}
        matched: dict[int, list[str]] = {d: [] for d in lex}
        for term, docs in sorted(owned):
            for d in docs[np.isin(docs, order)]:
                matched[int(d)].append(term)
        return lex, raw, {d: tuple(t) for d, t in matched.items()}, idf

    def _weight(self, doc: int) -> float:
        return self.ranking.question_weight if self._request(doc) else 1.0

    def _rank(
        self,
        lex: dict[int, float],
        raw: dict[int, float],
        matched: dict[int, tuple[str, ...]],
        idf: dict[str, float],
        cosine: dict[int, float],
        hybrid: bool,
        supersede: bool,
        threshold: float = 0.0,
        cosine_threshold: float = 1.0,
        k: int = 5,
        include_superseded: bool = False,
        plain: dict[int, float] | None = None,
        mix: float | None = None,
    ) -> list[Hit]:
        """The best ``k`` results (superseded ones after the others when asked for)."""
        rows, rank = self.corpus.rows, self.ranking
        weighted = {d: s * self._weight(d) for d, s in lex.items()}
        ranks: dict[int, list] = {}
        if hybrid:
            by_bm25 = sorted(weighted, key=lambda d: (-weighted[d], -raw[d], -d))
            by_cos = sorted(cosine, key=lambda d: (-cosine[d] * self._weight(d), -d))[: rank.pool]
            for r, d in enumerate(by_bm25, 1):
                ranks.setdefault(d, [None, None])[0] = r
            for r, d in enumerate(by_cos, 1):
                ranks.setdefault(d, [None, None])[1] = r
            norm = (
                max(lex.values(), default=0.0) or 1.0,
                min(cosine.values(), default=0.0),
                max(cosine.values(), default=0.0),
            )
            score = {d: self._fuse(d, lex, cosine, norm, mix) for d in ranks}
        else:
            score = weighted
        order = sorted(
            score,
            key=lambda d: (
                -score[d],
                rows[d]["source"] != "memory",
                -raw.get(d, 0.0),
                -rows[d]["time"],
                -d,
            ),
        )
        plain = plain or {}  # admission on the model's own cosine: centring is a ranking device
        order = [
            d
            for d in order
            if weighted.get(d, 0.0) >= threshold or plain.get(d, -1.0) >= cosine_threshold
        ]
        superseded = self._supersession(order, weighted, matched, idf, k) if supersede else {}
        fresh = [d for d in order if d not in superseded][:k]
        stale = [d for d in order if d in superseded][: max(0, k - len(fresh))]
        stale = stale if include_superseded else []
        hits = []
        for d in fresh + stale:
            row = rows[d]
            words = matched.get(d, ())
            text = row["text"] if row["source"] == "memory" else _snippet(row["text"], words)
            rb, rc = ranks.get(d, (None, None))
            hits.append(
                Hit(
                    score=score[d],
                    text=text,
                    source=row["source"],
                    kind=row["kind"],
                    session_id=row["session_id"],
                    message_id=row["message_id"],
                    time=row["time"],
                    part_id=row["part_id"],
                    title=row["title"],
                    superseded_by=superseded.get(d),
                    matched=tuple(words),
                    path=row.get("path", ""),
                    bm25=lex.get(d, 0.0),
                    cosine=cosine.get(d),
                    similarity=plain.get(d),
                    ranks=(rb, rc),
                    fused=hybrid,
                    latent=hybrid and mix is not None,
                )
            )
        return hits

    def _fuse(
        self,
        doc: int,
        lex: dict[int, float],
        cosine: dict[int, float],
        norm: tuple[float, float, float] = (1.0, 0.0, 1.0),
        mix: float | None = None,
    ) -> float:
        """Each ranking's scores mapped onto [0, 1] for this query, mixed linearly."""
        top, low, high = norm
        w = self.ranking.linear_weight if mix is None else mix
        c = cosine.get(doc)
        c = 0.0 if c is None else (c - low) / ((high - low) or 1.0)
        b = lex.get(doc, 0.0) / top
        return ((1 - w) * b + w * c) * self._weight(doc)

    def _supersession(
        self,
        order: list[int],
        weighted: dict[int, float],
        matched: dict[int, tuple[str, ...]],
        idf: dict[str, float],
        k: int,
    ) -> dict[int, str]:
        """doc → what supersedes it (see the module docstring); decided on the lexical evidence,
        for the documents in ``order`` until ``k`` of them stand."""
        rows = self.corpus.rows
        superseded: dict[int, str] = {}
        seen_text: dict[str, int] = {}
        lexical = sorted(weighted, key=lambda d: -weighted[d])
        processed: list[int] = []
        for d in order:
            if sum(1 for x in processed if x not in superseded) >= k:
                break  # enough results stand: what follows is never shown
            processed.append(d)
            row = rows[d]
            if row.get("superseded_by"):
                superseded[d] = row["superseded_by"]  # the memory files already said so
                continue
            key = " ".join(row["text"].lower().split())
            if (
                key in seen_text
            ):  # the same words again (a repeated reply): the newest copy stands for all
                first = seen_text[key]
                older, newer = (d, first) if rows[first]["time"] >= row["time"] else (first, d)
                superseded[older] = (
                    rows[newer]["message_id"] or rows[newer]["session_id"] or "memory"
                )
                seen_text[key] = newer
                if older == d:
                    continue
                superseded.pop(newer, None)
            seen_text[key] = d
            mine = matched.get(d, ())
            mass = sum(idf.get(t, 0.0) for t in mine)
            if not mass:
                continue
            for e in lexical:
                if weighted[e] < SUPERSEDE_RATIO * weighted[d]:
                    break  # (sorted) no later one scores enough
                other = rows[e]
                if e == d or other["question"]:
                    continue
                newer = other["time"] > row["time"] or (
                    other["time"] == row["time"]
                    and other["source"] == "memory"
                    and row["source"] == "history"
                )
                same_part = other["part_id"] is not None and other["part_id"] == row["part_id"]
                if not newer or same_part:
                    continue
                theirs = set(matched.get(e, ()))
                covered = sum(idf.get(t, 0.0) for t in mine if t in theirs)
                if covered < SUPERSEDE_COVER * mass:
                    continue
                if not self._same_subject(d, e):
                    continue  # both match the query, but they are about different things
                if other["source"] == "history" and not self._asserts(e):
                    continue  # a request or a tool output mentioning the subject states nothing new
                superseded[d] = other["message_id"] or other["session_id"] or "memory"
                break
        return superseded

    def _same_subject(self, a: int, b: int) -> bool:
        """Whether two documents share most of the smaller one's subject terms (values left out)."""
        sa, sb = self._subject(a), self._subject(b)
        shared = len(sa & sb)
        return shared >= 2 and shared >= SAME_SUBJECT * min(len(sa), len(sb))

    def _subject(self, doc: int) -> set[str]:
        row = self.corpus.rows[doc]
        if "subject" not in row:
            row["subject"] = subject(row["text"])
        return row["subject"]

    def _request(self, doc: int) -> bool:
        """A question, or user text that only asks (questions and requests, no statement)."""
        row = self.corpus.rows[doc]
        if "request" not in row:
            row["request"] = row["question"] or (
                row["source"] == "history"
                and row["kind"] == "user"
                and not self._asserts(doc)
                and all(is_request(s) for s in sentences(row["text"]))
            )
        return row["request"]

    def _asserts(self, doc: int) -> bool:
        """Whether a history document states something (a sentence the rule extractor would keep)."""
        row = self.corpus.rows[doc]
        if "asserts" not in row:
            role = row["kind"]
            row["asserts"] = role in ("user", "assistant") and any(
                classify(s, role) is not None for s in sentences(row["text"])
            )
        return row["asserts"]

    def embed_text(self, doc: int) -> str:
        """What is embedded for a document: its text after its date (``8 May 2023: text``)."""
        return self.dense.embed_text(doc)

    def prepare(self, embedder: Embedder, *, wait: float = 0.0) -> Status:
        """Queue the passages without a vector for the background worker; wait up to ``wait`` s."""
        with self._lock:
            self.refresh()
            dim = embedder.dim or len(embedder.query("dimension"))
            return self.dense.prepare(embedder, dim, wait)

    def _scope_of(self, params: dict):
        return self.corpus.scope(params["project"], params["exclude"], params["sources"])

    def close(self) -> None:
        with self._lock:
            self.corpus.close()


def _idf(n: float, df: int) -> float:
    """Lucene's always-positive idf."""
    return math.log1p((n - df + 0.5) / (df + 0.5))


def _no_postings():
    import numpy as np

    return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool), np.zeros(0, bool)


def _snippet(text: str, matched: Sequence[str], limit: int = 280) -> str:
    """The sentence (and its neighbour) of ``text`` holding most matched terms, on one line."""
    if len(text) <= limit:
        return one_line(text, limit)
    parts = sentences(text)
    if not parts:
        return one_line(text, limit)
    wanted = set(matched)
    best = max(range(len(parts)), key=lambda i: (len(wanted & set(tokens(parts[i]))), -i))
    snippet = parts[best]
    if best + 1 < len(parts) and len(snippet) + len(parts[best + 1]) < limit:
        snippet += " " + parts[best + 1]
    return one_line(snippet, limit)


__all__ = [
    "MemoryIndex",
    "Hit",
    "Ranking",
    "Status",
    "BACKGROUND",
    "DEFAULT_RANKING",
    "PLAIN_BM25",
    "K1",
    "B",
]
