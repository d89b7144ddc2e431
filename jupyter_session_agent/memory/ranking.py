"""How the memory index scores documents: one value, :class:`Ranking`, with the variant the
benchmarks chose (:data:`DEFAULT_RANKING`) and plain BM25 (:data:`PLAIN_BM25`, their baseline).

What each weight does is told where it is used: the context a passage carries in
:mod:`.corpus`, the scoring, fusion and supersession in :mod:`.search` (docs/memory.md has the
measurements that chose the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ranking:
    """How documents are scored; the defaults are the variant chosen on the benchmarks."""

    neighbours: float = 0.5  # weight of the text just before a passage in its BM25 terms
    before2: float = 0.3  # … two passages before (a topic raised, a reaction, the answer)
    after: float = 0.15  # … of the text just after it
    dates: float = 0.5  # weight of the terms of a passage's date
    question_weight: float = 0.6  # questions and requests that state nothing
    linear_weight: float = 0.8  # the cosine's share in the min-max mix with BM25
    pool: int = 100  # candidates from each ranking
    hub: float = 0.7  # weight of each passage's hubness subtracted from its cosine
    hub_k: int = 10  # hubness: the mean cosine to this many nearest passages of a sample
    hub_sample: int = 1000  # … of about this many passages, evenly spaced
    latent: int = 60  # without embeddings: dimensions of the history's LSI space (0: off)
    latent_weight: float = 0.5  # … the latent cosine's share in the min-max mix with BM25
    latent_min_df: int = 2  # … terms in fewer passages than this are left out of it
    # … used once the index holds this many passages: a space of ``latent`` dimensions is a
    # reduction (co-occurrence, not each passage's own words again) at about ten times as many
    latent_min: int = 600
    supersede: bool = True
    context: bool = True  # False: each passage alone (neighbours and dates off: plain BM25)


DEFAULT_RANKING = Ranking()
PLAIN_BM25 = Ranking(
    neighbours=0.0,
    before2=0.0,
    after=0.0,
    dates=0.0,
    question_weight=1.0,
    supersede=False,
    context=False,
    latent=0,
)


__all__ = ["DEFAULT_RANKING", "PLAIN_BM25", "Ranking"]
