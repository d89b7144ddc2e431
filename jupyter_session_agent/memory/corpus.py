"""The memory index's documents: built from the store's history and the memory files, with
their postings, for :mod:`.search` to score.

One row per searchable unit — a memory note, a text part (long ones cut into passages), a tool
call (name, input, start of the output) — with its session, message, time, project key and
length in terms, and an inverted index term → (documents, term frequency, whether the term is
the document's own, whether it counts for ``df``) from :func:`.text.tokens` and
:func:`.text.date_terms`. History rows come from the store's public ``sql()`` (the ``part``,
``message`` and ``session`` views); memory rows from the Markdown files. The corpus is rebuilt
when either changes (a cheap signature query decides). A passage with no term of its own
("ok", "Thanks!") is never a result.

**Passages carry their context** (:class:`.ranking.Ranking`'s weights): a text passage's terms
are its own plus, at ``neighbours``, ``before2`` and ``after`` weight, those of the texts before
and after it in its session, plus, at ``dates`` weight, the terms of its date (``@2023-05-08``,
``@2023-05``, ``@05-08``); its length for BM25F is its own plus its neighbours' at their weight.

One module: the rows, the postings built from them and the arrays that select them are made in
one pass and read together; this is the whole of the index's state that a rebuild replaces.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .files import all_items, project_folders, project_key, signature
from .ranking import Ranking
from .text import date_terms, sentences, time_terms, tokens

PASSAGE_CHARS = 1200  # text parts longer than this are cut into passages of about this size
TOOL_OUTPUT_CHARS = 2000

_QUESTION = re.compile(r"\?\s*$")

# A row per text or tool part, with what the index needs; pruned and interrupted tools included.
HISTORY_SQL = """
SELECT p.id AS part_id, p.session_id, p.message_id, m.data->>'role' AS role, s.directory, s.title,
       coalesce(TRY_CAST(m.data->'time'->>'created' AS BIGINT), p.time_created) AS time,
       p.data->>'type' AS type, p.data->>'text' AS text, p.data->>'tool' AS tool,
       (p.data->'state'->'input')::VARCHAR AS input, left(p.data->'state'->>'output', {out}) AS output,
       p.data->'state'->>'error' AS error,
       coalesce(TRY_CAST(p.data->>'synthetic' AS BOOLEAN), false) OR coalesce(TRY_CAST(p.data->>'ignored' AS BOOLEAN), false) AS hidden
FROM part p JOIN message m ON m.id = p.message_id JOIN session s ON s.id = p.session_id
WHERE p.data->>'type' IN ('text', 'tool')
ORDER BY p.session_id, time, p.message_id, p.id
"""
SIGNATURE_SQL = "SELECT count(*), max(time_updated), max(id) FROM part"


class Corpus:
    """The documents of one store and data directory and their postings; :meth:`refresh`
    rebuilds them when either changed. Not locked: its one user (:class:`.search.MemoryIndex`)
    holds its own lock around every call."""

    def __init__(self, store: Any, data_dir: str | Path, ranking: Ranking):
        self.store = store
        self.data_dir = Path(data_dir)
        self.ranking = ranking
        self.rows: dict[int, dict] = {}
        self.postings: dict[str, tuple] = {}  # term → (docs, tf, own, counted)
        self.arrays: dict[str, Any] = {}  # per document: len, project, session, source codes
        self.codes: dict[str, dict] = {}  # the codes' values: project, session, source
        self.vocabulary: dict[str, int] = {}  # term → id (ids are never reused)
        self.words: tuple = ()  # (docs, term ids, tf) of the passages' own words, dates apart
        self.builds = 0
        self.build_seconds = 0.0
        self._built = False
        self._signature: Any = None
        self._token_cache: dict[str, tuple[list[str], list[str]]] = {}
        self._bag_cache: dict[str, tuple] = {}

    def _current_signature(self) -> Any:
        memory = tuple(signature(folder) for folder in project_folders(self.data_dir))
        try:
            history: object = tuple(self.store.sql(SIGNATURE_SQL).iloc[0].tolist())
        except (
            Exception
        ):  # a store without the column: rebuild every time rather than serve stale rows
            history = object()
        return history, memory

    def refresh(self) -> bool:
        """Rebuild if the history or the memory files changed; whether it rebuilt."""
        current = self._current_signature()
        if self._built and current == self._signature:
            return False
        started = time.perf_counter()
        self._build()
        self.build_seconds = time.perf_counter() - started
        self._signature = current
        return True

    def terms(self, text: str) -> tuple[list[str], list[str]]:
        """(tokens, tokens and date terms) of a text, kept between builds (most texts stay)."""
        found = self._token_cache.get(text)
        if found is None:
            terms = tokens(text)
            found = self._token_cache[text] = (terms, terms + date_terms(text))
        return found

    def _text_bag(self, text: str, terms: list[str]):
        """:meth:`bag` of a text's terms, kept between builds with its tokens."""
        found = self._bag_cache.get(text)
        if found is None:
            found = self._bag_cache[text] = self.bag(terms)
        return found

    def bag(self, terms: list[str]):
        """(term ids, counts) of a list of terms, ids from the index's vocabulary."""
        import numpy as np

        counts = Counter(terms)
        vocabulary = self.vocabulary
        ids = np.fromiter(
            (vocabulary.setdefault(t, len(vocabulary)) for t in counts),
            dtype=np.int64,
            count=len(counts),
        )
        return ids, np.fromiter(counts.values(), dtype=np.float64, count=len(counts))

    def _history_rows(self) -> list[dict]:
        frame = self.store.sql(HISTORY_SQL.format(out=TOOL_OUTPUT_CHARS))
        keys: dict[str, str] = {}
        rows: list[dict] = []
        columns = {c: frame[c].tolist() for c in frame.columns}  # iterating pandas rows is slow
        for values in zip(*columns.values()):
            r = _Row(zip(columns, values))
            if r.hidden is True:
                continue  # injected memory, compaction prompts and other synthetic text
            directory = r.directory or ""
            project = keys.get(directory) or keys.setdefault(
                directory, project_key(directory or "/")
            )
            base = {
                "source": "history",
                "session_id": r.session_id,
                "message_id": r.message_id,
                "part_id": r.part_id,
                "time": int(r.time or 0),
                "project": project,
                "title": r.title or "",
                "superseded_by": None,
                "path": "",
            }
            if r.type == "text":
                if not isinstance(r.text, str) or not r.text.strip():
                    continue
                for passage in _passages(r.text):
                    rows.append({**base, "kind": r.role or "assistant", "text": passage})
            else:
                body = " ".join(
                    x
                    for x in (r.tool, _args_text(r.input), r.output, r.error)
                    if isinstance(x, str)
                )
                if body.strip():
                    rows.append({**base, "kind": "tool", "text": body})
        return rows

    def _build(self) -> None:
        import numpy as np

        rows: list[dict] = []
        for folder in project_folders(self.data_dir):
            for item in all_items(folder):
                rows.append(
                    {
                        "source": "memory",
                        "kind": item.kind,
                        "session_id": item.session_id,
                        "message_id": item.message_id,
                        "part_id": None,
                        "time": item.time,
                        "project": folder.name,
                        "title": item.title,
                        "text": item.text,
                        "superseded_by": item.superseded_by,
                        "path": item.path,
                    }
                )
        # a passage without a term of its own ("ok", "Thanks!") says nothing: never a result
        rows.extend(r for r in self._history_rows() if self.terms(r["text"])[1])
        rank = self.ranking
        self.rows = {}
        own_terms: list[list[str]] = []
        for i, row in enumerate(rows):
            passage_terms, with_dates = self.terms(row["text"])
            row["doc"], row["len"], row["own_len"] = i, len(passage_terms), len(passage_terms)
            row["question"] = bool(_QUESTION.search(row["text"].strip()))
            row["prev"] = row["next"] = None
            self.rows[i] = row
            own_terms.append(with_dates)
        self._token_cache = {r["text"]: self._token_cache[r["text"]] for r in rows}  # still there
        self._bag_cache = {t: b for t, b in self._bag_cache.items() if t in self._token_cache}
        if rank.context:  # neighbours: the text passages before and after, in the same session
            last: dict[str, int] = {}
            for i, row in enumerate(rows):
                if row["source"] != "history" or row["kind"] == "tool":
                    continue
                before = last.get(row["session_id"])
                if before is not None:
                    row["prev"], rows[before]["next"] = before, i
                last[row["session_id"]] = i
        # postings as arrays: (doc, term id, tf, own, counted) for a passage's own terms, its
        # neighbours' at their weight and its date's; summed per (term, doc); split per term
        vocabulary = self.vocabulary
        bags = [self._text_bag(r["text"], own_terms[i]) for i, r in enumerate(rows)]
        parts: list[tuple] = []

        def add(docs, bag_of, weight: float, own: bool, counted: bool) -> None:
            ids = [bag_of[j][0] for j in range(len(docs))]
            if not ids:
                return
            sizes = np.array([len(x) for x in ids])
            parts.append(
                (
                    np.repeat(np.array(docs, dtype=np.int64), sizes),
                    np.concatenate(ids),
                    np.concatenate([bag_of[j][1] for j in range(len(docs))]) * weight,
                    np.full(int(sizes.sum()), own),
                    np.full(int(sizes.sum()), counted),
                )
            )

        add(list(range(len(rows))), bags, 1.0, True, True)
        prev = [r["prev"] for r in rows]
        before2 = [prev[p] if p is not None else None for p in prev]
        after = [r["next"] for r in rows]
        links_weights = ((prev, rank.neighbours), (before2, rank.before2), (after, rank.after))
        for links, weight in links_weights:
            if not weight:
                continue
            pairs = [(i, j) for i, j in enumerate(links) if j is not None]
            for i, j in pairs:
                rows[i]["len"] += weight * rows[j]["own_len"]  # BM25F: the field's weighted length
            add([i for i, _ in pairs], [bags[j] for _, j in pairs], weight, False, False)
        if rank.dates and rank.context:
            days: dict[int, tuple] = {}
            dated = [
                days.get(r["time"] // 86_400_000)
                or days.setdefault(r["time"] // 86_400_000, self.bag(time_terms(r["time"])))
                for r in rows
            ]
            add(list(range(len(rows))), dated, rank.dates, False, True)
        if parts:
            docs, terms, tf, own, counted = (np.concatenate(x) for x in zip(*parts))
            key = terms * max(1, len(rows)) + docs
            unique, inverse = np.unique(key, return_inverse=True)
            tf = np.bincount(inverse, weights=tf, minlength=len(unique))
            own = np.bincount(inverse, weights=own, minlength=len(unique)) > 0
            counted = np.bincount(inverse, weights=counted, minlength=len(unique)) > 0
            terms, docs = unique // max(1, len(rows)), unique % max(1, len(rows))
            starts = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]])
            ends = np.r_[starts[1:], len(terms)]
            names = {v: k for k, v in vocabulary.items()}
            self.postings = {
                names[int(terms[a])]: (docs[a:b], tf[a:b], own[a:b], counted[a:b])
                for a, b in zip(starts, ends)
            }
            is_date = np.array([names[i].startswith("@") for i in range(len(names))])
            words = ~is_date[terms] & own  # each passage's own words, for the latent space
            self.words = (docs[words], terms[words], tf[words])
        else:
            self.postings = {}
            self.words = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        codes: dict[str, dict] = {"project": {}, "session": {}, "source": {}}

        def code(kind: str, value: Any) -> int:
            return codes[kind].setdefault(value or "", len(codes[kind]))

        self.codes = codes
        self.arrays = {
            "len": np.array([r["len"] for r in rows], dtype=np.float64),
            "project": np.array([code("project", r["project"]) for r in rows], dtype=np.int64),
            "session": np.array([code("session", r["session_id"]) for r in rows], dtype=np.int64),
            "source": np.array([code("source", r["source"]) for r in rows], dtype=np.int64),
        }
        self._built = True
        self.builds += 1

    @property
    def size(self) -> int:
        return len(self.rows)

    def scope(self, project: str | None, exclude: str | None, sources: Sequence[str]):
        """The documents in scope, a bool per document: from ``sources``, of ``project`` (None:
        every project), not of the session ``exclude``."""
        import numpy as np

        arrays, codes = self.arrays, self.codes
        wanted = [codes["source"][s] for s in sources if s in codes["source"]]
        mask = np.isin(arrays["source"], wanted)
        if project is not None:
            mask &= arrays["project"] == codes["project"].get(project, -1)
        if exclude is not None:
            mask &= arrays["session"] != codes["session"].get(exclude, -1)
        return mask

    def close(self) -> None:
        self._built, self._signature, self.postings = False, None, {}


class _Row(dict):
    """A row of the history query, its columns as attributes."""

    def __getattr__(self, column: str) -> Any:
        return self[column]


def _args_text(raw: Any) -> str:
    if not isinstance(raw, str):
        return ""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, dict):
        return " ".join(str(v) for v in value.values())
    return str(value)


def _passages(text: str) -> list[str]:
    """A long text cut at paragraph (else sentence) boundaries into pieces of about PASSAGE_CHARS."""
    if len(text) <= PASSAGE_CHARS:
        return [text]
    pieces = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    units: list[str] = []
    for piece in pieces:
        units.extend([piece] if len(piece) <= PASSAGE_CHARS else sentences(piece))
    out, current = [], ""
    for unit in units:
        if current and len(current) + len(unit) > PASSAGE_CHARS:
            out.append(current)
            current = ""
        current = f"{current}\n{unit}" if current else unit
    if current:
        out.append(current)
    return [p[: PASSAGE_CHARS * 2] for p in out]


__all__ = ["Corpus", "HISTORY_SQL", "PASSAGE_CHARS", "SIGNATURE_SQL", "TOOL_OUTPUT_CHARS"]
