"""The embedding side of a memory search: every passage's vector from the embedding model,
centred on the model's common direction, with each passage's hubness; and the query's cosine
against them.

The passages are :class:`.corpus.Corpus`'s; the vectors are cached on disk by text hash
(:mod:`.vectors`) and computed by its background worker. :class:`.search.MemoryIndex` fuses the
cosine this gives with its BM25 share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .corpus import Corpus
from .embed import Embedder
from .ranking import Ranking
from .text import long_date
from .vectors import text_key, vector_file, worker

CENTER_MIN = 50  # vectors needed before their mean is the model's common direction
# Varied sentences whose vectors join the passages' when their mean is taken, so that a small
# history is centred on the model's common direction rather than on itself.
BACKGROUND = (
    "The meeting was moved to Thursday afternoon.",
    "I love hiking in the mountains with my dog.",
    "The quarterly revenue grew by twelve percent.",
    "Please restart the server after the update.",
    "She baked a chocolate cake for the party.",
    "The train to the airport leaves every twenty minutes.",
    "We fixed the bug in the login form.",
    "My grandmother grew tomatoes in her garden.",
    "The museum is closed on Mondays.",
    "He plays the guitar in a small band.",
    "The database query takes too long on large tables.",
    "It rained all weekend, so we stayed inside.",
    "The kids started school last week.",
    "Our team chose Python for the data pipeline.",
    "The doctor said to rest for a few days.",
    "I finished reading a novel about a lighthouse keeper.",
    "The flight was delayed by two hours.",
    "Thanks, that sounds great!",
    "Haha, I can imagine.",
    "What are you doing this weekend?",
    "The model's accuracy dropped after retraining.",
    "We adopted a cat from the shelter.",
    "The concert tickets sold out in minutes.",
    "I need to renew my passport before the trip.",
    "The recipe needs two cups of flour.",
    "Let's use a bar chart for the monthly totals.",
    "The new office has a view of the river.",
    "My phone battery dies by lunchtime.",
    "The report is due at the end of the month.",
    "He ran his first marathon in the spring.",
    "The coffee machine on the third floor is broken.",
    "We painted the living room light blue.",
    "The API returns an error for empty requests.",
    "I'm learning Spanish with an app.",
    "The beach was crowded on Sunday.",
    "Remember to water the plants while I'm away.",
    "The test suite passes on every platform now.",
    "Our neighbours are building a treehouse.",
    "The budget for the project was approved.",
    "I watched an old film about space travel.",
)

_BACKGROUND_KEYS = tuple(text_key(t) for t in BACKGROUND)


@dataclass
class Status:
    """What the embedding side of a search had: for ``%agent recall`` and the benchmarks."""

    model: str = ""
    passages: int = 0
    embedded: int = 0
    pending: int = 0
    error: str = ""


class DenseIndex:
    """The vectors of one corpus's passages for one embedding model at a time."""

    def __init__(self, corpus: Corpus, data_dir: Path, ranking: Ranking):
        self.corpus = corpus
        self.data_dir = data_dir
        self.ranking = ranking
        self._matrix: tuple | None = None  # (key, matrix, has-vector mask, mean, own, hub)
        self._prepared: tuple | None = None  # (build, vector file, its version) last looked at
        self._missing: dict[bytes, int] = {}  # vector key → a document that needs it
        self.status = Status()

    def reset(self) -> None:
        """The corpus was rebuilt: the cached matrix no longer matches its documents."""
        self._matrix = None

    def embed_text(self, doc: int) -> str:
        """What is embedded for a document: its text after its date (``8 May 2023: text``)."""
        row = self.corpus.rows[doc]
        if row["time"]:
            return f"{long_date(row['time'])}: {row['text']}"
        return row["text"]

    def prepare(self, embedder: Embedder, dim: int, wait: float) -> Status:
        """Queue the passages without a vector for ``embedder``'s background worker; wait up to
        ``wait`` s for them."""
        vectors = vector_file(self.data_dir, embedder.name, dim)
        vectors.sync()
        jobs = worker(embedder, vectors)
        seen = (self.corpus.builds, id(vectors), vectors.version)
        if self._prepared != seen:  # something changed: look for passages without a vector
            for row in self.corpus.rows.values():
                if "vkey" not in row:
                    row["vkey"] = text_key(self.embed_text(row["doc"]))
            self._missing = {
                row["vkey"]: row["doc"]
                for row in self.corpus.rows.values()
                if row["vkey"] not in vectors
            }
            self._missing.update(
                (key, -1 - i) for i, key in enumerate(_BACKGROUND_KEYS) if key not in vectors
            )
            self._prepared = seen
        if self._missing:
            jobs.submit(
                (key, self.embed_text(d) if d >= 0 else BACKGROUND[-1 - d])
                for key, d in self._missing.items()
            )
            if wait > 0:
                jobs.wait(list(self._missing), wait)
            self._missing = {key: d for key, d in self._missing.items() if key not in vectors}
        missing = sum(1 for d in self._missing.values() if d >= 0)
        self.status = Status(
            embedder.name,
            len(self.corpus.rows),
            len(self.corpus.rows) - missing,
            missing,
            jobs.error,
        )
        return self.status

    def cosine(
        self, query: str, embedder: Embedder, params: dict, wait: float
    ) -> tuple[dict[int, float], dict[int, float]]:
        """(ranking cosine, the model's own cosine) of the best ``pool`` passages in scope
        (``params``: the search's project, excluded session and sources)."""
        import numpy as np

        raw = embedder.query(query)
        self.prepare(embedder, len(raw), wait)
        matrix, has, mean, own, hub = self._vector_matrix(embedder, len(raw))
        if not len(self.corpus.rows):
            return {}, {}
        qv = raw
        if mean is not None:
            qv = raw - mean
            qv = qv / (np.linalg.norm(qv) or 1.0)
        mask = has & self.corpus.scope(params["project"], params["exclude"], params["sources"])
        scores = np.einsum("ij,j->i", matrix, qv)  # not BLAS: its threads spin on a busy machine
        if self.ranking.hub:
            scores = scores - self.ranking.hub * hub
        scores = np.where(mask, scores, -np.inf)
        pool = min(self.ranking.pool, int(mask.sum()))
        if pool <= 0:
            return {}, {}
        top = np.argpartition(-scores, pool - 1)[:pool]
        plain = np.einsum("ij,j->i", own[top], raw)
        return (
            {int(d): float(scores[d]) for d in top},
            {int(d): float(c) for d, c in zip(top, plain)},
        )

    def _vector_matrix(self, embedder: Embedder, dim: int):
        """The passages' vectors, centred, with each one's hubness; cached."""
        import numpy as np

        vectors = vector_file(self.data_dir, embedder.name, dim)
        key = (embedder.name, dim, vectors.version, id(vectors))
        if self._matrix is not None and self._matrix[0] == key:
            return self._matrix[1:]
        n = len(self.corpus.rows)
        own = np.zeros((n, dim), dtype=np.float32)
        has = np.zeros(n, dtype=bool)
        for d, row in self.corpus.rows.items():
            v = vectors.get(row["vkey"])
            if v is not None:
                own[d], has[d] = v, True
        matrix = own
        mean = None
        background = [v for v in (vectors.get(key) for key in _BACKGROUND_KEYS) if v is not None]
        if len(background) == len(BACKGROUND) or has.sum() >= CENTER_MIN:
            # e5's vectors share a large common component (any two texts score 0.7-0.9), which
            # lets short generic turns ("Haha, I can imagine") come close to every question
            extra = np.array(background, dtype=np.float32).reshape(-1, dim)
            stacked = np.concatenate([matrix[has], extra])
            mean = stacked.mean(axis=0)
            matrix = np.where(has[:, None], unit_rows(matrix - mean), 0).astype(np.float32)
        hub = np.zeros(n, dtype=np.float32)
        if self.ranking.hub and len(background) == len(BACKGROUND):
            # the built-in sentences join the sample: a small history has its hubs measured
            # against varied text too, not only against itself
            extra = np.array(background, dtype=np.float32).reshape(-1, dim)
            extra = unit_rows(extra - mean) if mean is not None else extra
            hub = hubness(matrix, has, extra, self.ranking.hub_k, self.ranking.hub_sample)
        self._matrix = (key, matrix, has, mean, own, hub)
        return matrix, has, mean, own, hub


def hubness(matrix, has, extra, k: int, sample: int):
    """Each row's mean cosine to its ``k`` nearest among an evenly spaced sample of the rows and
    ``extra``: a passage close to everything (a generic "Oh no, hang in there") is a *hub*, close
    to every question too; subtracting it (as CSLS does) lets the specific passages rank."""
    import numpy as np

    rows = np.flatnonzero(has)
    picked = np.concatenate([matrix[rows[:: max(1, len(rows) // sample)]], extra])
    k = min(k, len(picked) - 1)
    if k < 1:
        return np.zeros(len(matrix), dtype=np.float32)
    out = np.zeros(len(matrix), dtype=np.float32)
    for start in range(0, len(rows), 2048):
        block = rows[start : start + 2048]
        sims = matrix[block] @ picked.T
        sims[sims > 0.999] = -1.0  # itself (or the same text again)
        top = np.partition(sims, -k, axis=1)[:, -k:]
        out[block] = top.mean(axis=1)
    return out


def unit_rows(matrix):
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.where(norms > 0, matrix / np.where(norms > 0, norms, 1), 0).astype(np.float32)
