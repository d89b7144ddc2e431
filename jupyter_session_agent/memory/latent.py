"""Paraphrase without a model, from the history alone: latent semantic indexing.

It reads the index's postings of each passage's own terms (date terms left out) as a sparse
passage × term matrix of ``(doc, term, tf)`` triples, and uses numpy only.

**Latent semantic indexing** (:class:`LatentSpace`): the tf-idf matrix (``log(1 + tf) · idf``,
rows of unit length, terms in at least ``min_df`` passages) is factored by a randomized
truncated SVD (Halko, Martinsson and Tropp: a Gaussian sketch, two power iterations, the SVD of
the small projected matrix), computed with sparse products over the triples, so its cost is
linear in the postings. A passage is its row of ``U·S``; a query is folded in as
``q·V`` from its own tf-idf; their cosine ranks passages that share the query's *topic* even
when they share none of its words — provided the history links those words: terms that occur
in the same passages, or in passages that share other terms, get close directions.

It cannot connect a word the history never uses: a question's paraphrase of the answer
("canine companion" for "puppy") reaches the answer only if the user's own history has used
both words together.
"""

from __future__ import annotations

from typing import Any

OVERSAMPLE = 10
POWER_ITERATIONS = 2


class Triples:
    """A sparse passage × term matrix as ``(doc, term, value)`` arrays, kept in both orders (by
    passage and by term) so that each product sums contiguous runs (``np.add.reduceat``)."""

    def __init__(self, docs: Any, terms: Any, values: Any, shape: tuple[int, int]):
        import numpy as np

        values = values.astype(np.float32)
        self.shape = shape
        self.by_doc = self._runs(docs, terms, values, np.lexsort((terms, docs)))
        self.by_term = self._runs(terms, docs, values, np.lexsort((docs, terms)))

    @staticmethod
    def _runs(rows: Any, cols: Any, values: Any, order: Any) -> tuple:
        import numpy as np

        rows, cols, values = rows[order], cols[order], values[order]
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else rows
        return rows[starts], starts, cols, values

    def times(self, dense: Any) -> Any:
        """``X @ dense`` (dense: terms × l)."""
        return self._product(self.by_doc, dense, self.shape[0])

    def transposed_times(self, dense: Any) -> Any:
        """``X.T @ dense`` (dense: docs × l)."""
        return self._product(self.by_term, dense, self.shape[1])

    @staticmethod
    def _product(runs: tuple, dense: Any, n: int) -> Any:
        import numpy as np

        heads, starts, cols, values = runs
        out = np.zeros((n, dense.shape[1]), dtype=np.float32)
        if len(cols):
            out[heads] = np.add.reduceat(values[:, None] * dense[cols].astype(np.float32), starts)
        return out


class LatentSpace:
    """A truncated SVD of the history's tf-idf matrix; :meth:`cosines` of a query's terms."""

    def __init__(self, docs: Any, terms: Any, tf: Any, n_docs: int, dims: int, min_df: int = 2):
        import numpy as np

        self.index: dict[int, int] = {}
        self.idf = np.zeros(0, dtype=np.float32)
        self.basis = np.zeros((0, 0), dtype=np.float32)  # terms × dims: V
        self.passages = np.zeros((n_docs, 0), dtype=np.float32)  # unit rows of U·S
        df = np.bincount(terms, minlength=int(terms.max()) + 1 if len(terms) else 0)
        kept_terms = np.flatnonzero(df >= min_df)
        if not len(kept_terms) or not n_docs:
            return
        keep = df[terms] >= min_df
        local = np.full(len(df), -1, dtype=np.int64)
        local[kept_terms] = np.arange(len(kept_terms))
        self.index = {int(t): int(i) for i, t in enumerate(kept_terms)}
        self.idf = np.log1p((n_docs - df[kept_terms] + 0.5) / (df[kept_terms] + 0.5)).astype(
            np.float32
        )
        cols = local[terms[keep]]
        values = np.log1p(tf[keep]) * self.idf[cols]
        rows = docs[keep]
        norms = np.sqrt(np.bincount(rows, weights=values**2, minlength=n_docs))
        values = values / norms[rows]
        matrix = Triples(rows, cols, values, (n_docs, len(kept_terms)))
        k = max(1, min(dims, n_docs - 1, len(kept_terms) - 1))
        width = min(k + OVERSAMPLE, len(kept_terms), n_docs)
        sketch = np.random.default_rng(0).standard_normal((len(kept_terms), width))
        q = _orthonormal(matrix.times(sketch.astype(np.float32)))
        for _ in range(POWER_ITERATIONS):
            q = _orthonormal(matrix.times(_orthonormal(matrix.transposed_times(q))))
        small = matrix.transposed_times(q)  # terms × width: Xᵀ Q
        # its SVD from the width × width Gram matrix: small = V S Uᵀ, smallᵀ small = U S² Uᵀ
        s2, u = np.linalg.eigh(np.einsum("ij,ik->jk", small, small))
        order = np.argsort(-s2)[: min(k, int((s2 > s2.max() * 1e-10).sum()))]
        s, u = np.sqrt(s2[order]), u[:, order]
        self.basis = (np.einsum("ij,jk->ik", small, u) / s).astype(np.float32)  # V
        passages = np.einsum("ij,jk->ik", q, u) * s  # U·S of the passages
        norm = np.linalg.norm(passages, axis=1, keepdims=True)
        # a passage with no kept term, or none the space holds, is rounding error: not a direction
        some = (norm > 1e-6 * max(float(norm.max()), 1e-30)) & (norms[:, None] > 0)
        self.passages = np.where(some, passages / np.where(some, norm, 1), 0).astype(np.float32)

    @property
    def dims(self) -> int:
        return int(self.basis.shape[1])

    def cosines(self, term_ids: list[int]) -> Any | None:
        """Every passage's cosine with the query (its term ids, repeats as tf); None if no
        query term is in the space."""
        import numpy as np

        counts: dict[int, int] = {}
        for t in term_ids:
            if t in self.index:
                counts[self.index[t]] = counts.get(self.index[t], 0) + 1
        if not counts or not self.dims:
            return None
        cols = np.fromiter(counts, dtype=np.int64)
        weights = np.log1p(np.fromiter(counts.values(), dtype=np.float32)) * self.idf[cols]
        folded = weights @ self.basis[cols]
        norm = float(np.linalg.norm(folded))
        if not norm:
            return None
        return np.einsum("ij,j->i", self.passages, folded / norm)


def _orthonormal(y: Any) -> Any:
    """An orthonormal basis of ``y``'s columns (Cholesky-QR, twice), in ``einsum`` and a small
    eigendecomposition: LAPACK's QR of the tall matrix runs BLAS threads that spin for seconds
    on a busy machine."""
    import numpy as np

    for _ in range(2):
        w, v = np.linalg.eigh(np.einsum("ij,ik->jk", y, y))
        keep = w > max(float(w.max()), 1e-30) * 1e-10
        y = np.einsum("ij,jk->ik", y, v[:, keep] / np.sqrt(w[keep]))
    return y


__all__ = ["LatentSpace", "Triples"]
