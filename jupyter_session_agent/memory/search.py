"""Search over the whole history and the memory files: BM25 in DuckDB SQL, plus
cosine similarity of embeddings when a provider offers them.

The index lives in a private in-memory DuckDB connection (no file, no lock):

- ``docs``: one row per searchable unit — a memory note, a text part (long
  ones cut into passages), a tool call (name, input, start of the output) —
  with its session, message, time, project key and length in terms;
- ``terms``: the document-term table ``(doc, term, tf)`` from
  :func:`.text.tokens`.

History rows come from the store's public ``sql()`` (the ``part``,
``message`` and ``session`` views); memory rows from the Markdown files. The
index is rebuilt when either changes (a cheap signature query decides).

Scoring, all in SQL: Okapi BM25 with k1 = 1.2, b = 0.75 and Lucene's
always-positive idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``, over the documents
in scope (a project, or everything). The reported ``score`` is BM25 with each
term's saturation capped at 1, divided by the sum of the query terms' idf: the
share of the query's information a document holds, in [0, 1] (1: every query
term, in a document no longer than average). Results are ordered by score,
then by plain BM25 (which favours short, dense documents), then newest first.
A query whose rare terms occur nowhere scores low, which is what lets a
question with no answer return nothing.

After scoring (Python, on the top candidates): questions, and requests of the
user that state nothing (no sentence the rule extractor would keep), weigh
less (``QUESTION_WEIGHT``); at equal score a memory note comes first; the same text repeated keeps only its newest
copy; and a document is *superseded* when a newer one that is not a question
matches at least ``SUPERSEDE_COVER`` of the idf it matches, scores at least
``SUPERSEDE_RATIO`` of it, and shares at least ``SAME_SUBJECT`` of the smaller
one's subject terms (its words minus numbers, paths and identifiers, at least
two) — the newer statement on the same subject
wins, so an updated fact beats the stale one. Only memory notes and history
text that states something (a sentence the rule extractor would keep) can
supersede: a later request that merely mentions the subject cannot. Superseded documents sink below
the others and carry ``superseded_by``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .extract import classify, subject
from .files import all_items, project_folders, project_key, signature
from .text import iso_date, one_line, sentences, tokens

K1 = 1.2
B = 0.75
QUESTION_WEIGHT = 0.6
SUPERSEDE_RATIO = 0.5
SAME_SUBJECT = 0.5  # overlap coefficient of the two documents' subject terms needed to supersede
SUPERSEDE_COVER = 0.8  # share of a document's matched idf a newer one must match to supersede it
POOL = 100
PASSAGE_CHARS = 1200  # text parts longer than this are cut into passages of about this size
TOOL_OUTPUT_CHARS = 2000
HYBRID_WEIGHT = 0.5  # share of the cosine similarity in the score when embeddings are on

Embed = Callable[[list[str]], list[list[float]]]


@dataclass(frozen=True)
class Hit:
    """One search result."""

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

    @property
    def date(self) -> str:
        return iso_date(self.time)

    def line(self) -> str:
        """One plain line: date · where · kind — text (score)."""
        where = "/".join(x for x in (self.session_id, self.message_id) if x) or (self.path or "memory")
        stale = f" [superseded by {self.superseded_by}]" if self.superseded_by else ""
        return f"{self.date} · {where} · {self.source}/{self.kind}{stale} — {self.text} (score {self.score:.2f})"

    def to_data(self) -> dict:
        return {"score": round(self.score, 4), "text": self.text, "source": self.source, "kind": self.kind,
                "sessionID": self.session_id, "messageID": self.message_id, "partID": self.part_id,
                "time": self.time, "date": self.date, "supersededBy": self.superseded_by}


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
"""
SIGNATURE_SQL = "SELECT count(*), max(time_updated), max(id) FROM part"

SEARCH_SQL = f"""
WITH scoped AS (
    SELECT doc, len FROM docs
    WHERE ($project IS NULL OR project = $project) AND ($exclude IS NULL OR session_id IS DISTINCT FROM $exclude)
      AND list_contains($sources, source)),
stats AS (SELECT count(*)::DOUBLE AS n, greatest(avg(len), 1)::DOUBLE AS avgdl FROM scoped),
q AS (SELECT DISTINCT unnest($terms::VARCHAR[]) AS term),
df AS (SELECT t.term, count(*)::DOUBLE AS df FROM terms t SEMI JOIN scoped s ON s.doc = t.doc
       WHERE t.term IN (SELECT term FROM q) GROUP BY t.term),
idf AS (SELECT q.term, ln(1 + (stats.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5)) AS idf
        FROM q CROSS JOIN stats LEFT JOIN df ON df.term = q.term),
total AS (SELECT sum(idf) AS total FROM idf),
weights AS (
    SELECT t.doc, t.term, idf.idf,
           t.tf * ({K1} + 1) / (t.tf + {K1} * (1 - {B} + {B} * s.len / stats.avgdl)) AS tfn
    FROM terms t JOIN scoped s ON s.doc = t.doc JOIN idf ON idf.term = t.term CROSS JOIN stats)
SELECT w.doc,
       sum(w.idf * least(w.tfn, 1.0)) / any_value(total.total) AS score,
       sum(w.idf * w.tfn) AS bm25,
       list(w.term ORDER BY w.term) AS matched,
       list(w.idf ORDER BY w.term) AS idfs
FROM weights w CROSS JOIN total
GROUP BY w.doc
ORDER BY score DESC, bm25 DESC, w.doc DESC
LIMIT $pool
"""


class MemoryIndex:
    """The searchable corpus of one store and data directory; rebuilt when it changes."""

    def __init__(self, store: Any, data_dir: str | Path):
        self.store = store
        self.data_dir = Path(data_dir)
        self._con = None
        self._signature: Any = None
        self._lock = threading.RLock()
        self._rows: dict[int, dict] = {}
        self._vectors: dict[str, list[float]] = {}
        self._vector_model: str | None = None
        self.builds = 0

    # -- building ---------------------------------------------------------------

    def _current_signature(self) -> Any:
        memory = tuple(signature(folder) for folder in project_folders(self.data_dir))
        try:
            history = tuple(self.store.sql(SIGNATURE_SQL).iloc[0].tolist())
        except Exception:  # a store without the column: rebuild every time rather than serve stale rows
            history = object()
        return history, memory

    def refresh(self) -> None:
        with self._lock:
            current = self._current_signature()
            if self._con is not None and current == self._signature:
                return
            self._build()
            self._signature = current

    def _build(self) -> None:
        import pandas as pd

        from ..store import scratch_connection

        rows: list[dict] = []
        for folder in project_folders(self.data_dir):
            for item in all_items(folder):
                rows.append({"source": "memory", "kind": item.kind, "session_id": item.session_id,
                             "message_id": item.message_id, "part_id": None, "time": item.time,
                             "project": folder.name, "title": item.title, "text": item.text,
                             "superseded_by": item.superseded_by, "path": item.path})
        frame = self.store.sql(HISTORY_SQL.format(out=TOOL_OUTPUT_CHARS))
        keys: dict[str, str] = {}
        for r in frame.itertuples(index=False):
            if r.hidden is True:
                continue  # injected memory, compaction prompts and other synthetic text
            directory = r.directory or ""
            project = keys.get(directory) or keys.setdefault(directory, project_key(directory or "/"))
            base = {"source": "history", "session_id": r.session_id, "message_id": r.message_id,
                    "part_id": r.part_id, "time": int(r.time or 0), "project": project, "title": r.title or "",
                    "superseded_by": None, "path": ""}
            if r.type == "text":
                if not isinstance(r.text, str) or not r.text.strip():
                    continue
                for passage in _passages(r.text):
                    rows.append({**base, "kind": r.role or "assistant", "text": passage})
            else:
                body = " ".join(x for x in (r.tool, _args_text(r.input), r.output, r.error) if isinstance(x, str))
                if body.strip():
                    rows.append({**base, "kind": "tool", "text": body})
        self._rows = {}
        docs, term_lists = [], []
        for i, row in enumerate(rows):
            terms = tokens(row["text"])
            row["doc"], row["len"] = i, len(terms)
            row["question"] = bool(_QUESTION.search(row["text"].strip()))
            self._rows[i] = row
            docs.append(row)
            term_lists.append(terms)
        con = scratch_connection()
        columns = ["doc", "source", "kind", "session_id", "message_id", "time", "project", "len"]
        meta = pd.DataFrame({c: [d[c] for d in docs] for c in columns}) if docs else pd.DataFrame(
            {c: pd.Series(dtype="int64" if c in ("doc", "time", "len") else "object") for c in columns})
        postings = pd.DataFrame({"doc": [d["doc"] for d in docs], "toks": term_lists})
        con.register("meta_frame", meta)
        con.register("postings_frame", postings)
        con.execute("CREATE TABLE docs AS SELECT doc::INTEGER doc, source::VARCHAR source, kind::VARCHAR kind, "
                    "session_id::VARCHAR session_id, message_id::VARCHAR message_id, time::BIGINT time, "
                    "project::VARCHAR project, len::INTEGER len FROM meta_frame")
        if docs:
            con.execute("CREATE TABLE terms AS SELECT doc::INTEGER doc, term::VARCHAR term, count(*)::INTEGER tf "
                        "FROM (SELECT doc, unnest(toks) AS term FROM postings_frame) GROUP BY ALL ORDER BY term")
        else:
            con.execute("CREATE TABLE terms (doc INTEGER, term VARCHAR, tf INTEGER)")
        con.unregister("meta_frame")
        con.unregister("postings_frame")
        if self._con is not None:
            self._con.close()
        self._con = con
        self._vector_model = None
        self.builds += 1

    @property
    def size(self) -> int:
        return len(self._rows)

    # -- searching ----------------------------------------------------------------

    def search(self, query: str, *, project: str | None = None, k: int = 5, threshold: float = 0.0,
               exclude_session: str | None = None, sources: Sequence[str] = ("memory", "history"),
               embed: Embed | None = None, embed_model: str = "", include_superseded: bool = False,
               supersede: bool = True) -> list[Hit]:
        """The best ``k`` documents for ``query`` scoring at least ``threshold`` (see the module docstring).

        ``project`` limits the search to one project key (None: everything);
        ``exclude_session`` leaves a session out (the one asking). With
        ``include_superseded`` superseded documents may fill the list after
        the others; by default they are left out. ``supersede=False`` turns
        supersession off (plain BM25 order, for comparison).
        """
        terms = tokens(query)
        if not terms and embed is None:
            return []
        with self._lock:
            self.refresh()
            params = {"project": project, "exclude": exclude_session, "sources": list(sources),
                      "terms": terms or ["\x00"], "pool": POOL}
            scores: dict[int, float] = {}
            bm25: dict[int, float] = {}
            matched: dict[int, tuple[str, ...]] = {}
            idf: dict[str, float] = {}
            if terms:
                for doc, score, raw, words, idfs in self._con.execute(SEARCH_SQL, params).fetchall():
                    scores[doc], bm25[doc], matched[doc] = float(score), float(raw), tuple(words)
                    idf.update(zip(words, idfs))
            if embed is not None:
                scores = self._hybrid(query, scores, embed, embed_model, params)
            hits = self._rank(scores, bm25, matched, idf, supersede)
        hits = [h for h in hits if h.score >= threshold]
        fresh = [h for h in hits if not h.superseded_by]
        if include_superseded:
            fresh += [h for h in hits if h.superseded_by]
        return fresh[:k]

    def _rank(self, scores: dict[int, float], bm25: dict[int, float], matched: dict[int, tuple[str, ...]],
              idf: dict[str, float], supersede: bool = True) -> list[Hit]:
        rows = self._rows
        weighted = {d: s * (QUESTION_WEIGHT if self._request(d) else 1.0) for d, s in scores.items()}
        order = sorted(weighted, key=lambda d: (-weighted[d], rows[d]["source"] != "memory", -bm25.get(d, 0.0),
                                                -rows[d]["time"], -d))
        superseded: dict[int, str] = {}
        seen_text: dict[str, int] = {}
        for d in order if supersede else ():
            row = rows[d]
            if row.get("superseded_by"):
                superseded[d] = row["superseded_by"]  # the memory files already said so
                continue
            key = " ".join(row["text"].lower().split())
            if key in seen_text:  # the same words again (a repeated reply): the newest copy stands for all
                first = seen_text[key]
                older, newer = (d, first) if rows[first]["time"] >= row["time"] else (first, d)
                superseded[older] = rows[newer]["message_id"] or rows[newer]["session_id"] or "memory"
                seen_text[key] = newer
                if older == d:
                    continue
                superseded.pop(newer, None)
            seen_text[key] = d
            mine = matched.get(d, ())
            mass = sum(idf.get(t, 0.0) for t in mine)
            for e in order:
                other = rows[e]
                if e == d or other["question"] or weighted[e] < SUPERSEDE_RATIO * weighted[d]:
                    continue
                newer = other["time"] > row["time"] or (
                    other["time"] == row["time"] and other["source"] == "memory" and row["source"] == "history")
                same_part = other["part_id"] is not None and other["part_id"] == row["part_id"]
                if not newer or same_part or not mass:
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
        hits = []
        for d in order:
            row = rows[d]
            words = matched.get(d, ())
            text = row["text"] if row["source"] == "memory" else _snippet(row["text"], words)
            hits.append(Hit(score=weighted[d], text=text, source=row["source"], kind=row["kind"],
                            session_id=row["session_id"], message_id=row["message_id"], time=row["time"],
                            part_id=row["part_id"], title=row["title"], superseded_by=superseded.get(d),
                            matched=tuple(words), path=row.get("path", "")))
        return hits

    def _same_subject(self, a: int, b: int) -> bool:
        """Whether two documents share most of the smaller one's subject terms (values left out)."""
        sa, sb = self._subject(a), self._subject(b)
        shared = len(sa & sb)
        return shared >= 2 and shared >= SAME_SUBJECT * min(len(sa), len(sb))

    def _subject(self, doc: int) -> set[str]:
        row = self._rows[doc]
        if "subject" not in row:
            row["subject"] = subject(row["text"])
        return row["subject"]

    def _request(self, doc: int) -> bool:
        """A question, or something the user asked for without stating anything."""
        row = self._rows[doc]
        return row["question"] or (row["source"] == "history" and row["kind"] == "user" and not self._asserts(doc))

    def _asserts(self, doc: int) -> bool:
        """Whether a history document states something (a sentence the rule extractor would keep)."""
        row = self._rows[doc]
        if "asserts" not in row:
            role = row["kind"]
            row["asserts"] = role in ("user", "assistant") and any(
                classify(s, role) is not None for s in sentences(row["text"]))
        return row["asserts"]

    # -- embeddings -------------------------------------------------------------------

    def _hybrid(self, query: str, scores: dict[int, float], embed: Embed, model: str, params: dict) -> dict[int, float]:
        """Mix BM25 (capped at 1) with the cosine similarity of embeddings, computed in DuckDB."""
        self._ensure_vectors(embed, model, params)
        qv = embed([query])[0]
        dim = len(qv)
        rows = self._con.execute(
            f"SELECT v.doc, array_cosine_similarity(v.vec::FLOAT[{dim}], $q::FLOAT[{dim}]) AS cos "
            "FROM vecs v JOIN docs d ON d.doc = v.doc "
            "WHERE ($project IS NULL OR d.project = $project) AND ($exclude IS NULL OR d.session_id IS DISTINCT FROM $exclude) "
            "AND list_contains($sources, d.source) AND len(v.vec) = $dim ORDER BY cos DESC LIMIT $pool",
            {"q": qv, "dim": dim, "project": params["project"], "exclude": params["exclude"],
             "sources": params["sources"], "pool": params["pool"]}).fetchall()
        cosine = {doc: max(0.0, float(c)) for doc, c in rows if c is not None}
        out = {}
        for doc in set(scores) | set(cosine):
            out[doc] = (1 - HYBRID_WEIGHT) * min(1.0, scores.get(doc, 0.0)) + HYBRID_WEIGHT * cosine.get(doc, 0.0)
        return out

    def _ensure_vectors(self, embed: Embed, model: str, params: dict) -> None:
        if self._vector_model == (model or "default"):
            return
        cache = _VectorCache(self.data_dir, model or "default")
        texts = {d: row["text"] for d, row in self._rows.items()}
        keys = {d: cache.key(t) for d, t in texts.items()}
        missing = sorted({keys[d]: texts[d] for d in texts if keys[d] not in cache}.items())
        for start in range(0, len(missing), 64):
            batch = missing[start:start + 64]
            vectors = embed([t for _, t in batch])
            cache.add({key: vec for (key, _), vec in zip(batch, vectors)})
        self._con.execute("CREATE OR REPLACE TABLE vecs (doc INTEGER, vec FLOAT[])")
        import pandas as pd

        frame = pd.DataFrame({"doc": list(texts), "vec": [cache.get(keys[d]) for d in texts]})
        self._con.register("vec_frame", frame)
        self._con.execute("INSERT INTO vecs SELECT doc, vec::FLOAT[] FROM vec_frame WHERE vec IS NOT NULL")
        self._con.unregister("vec_frame")
        self._vector_model = model or "default"

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
            self._con, self._signature = None, None


class _VectorCache:
    """Embeddings by text hash, one JSONL file per model under ``<data_dir>/memory/.embeddings``."""

    def __init__(self, data_dir: Path, model: str):
        self.model = model
        self.path = data_dir / "memory" / ".embeddings" / (re.sub(r"[^\w.-]+", "_", model) + ".jsonl")
        self._vectors: dict[str, list[float]] = {}
        try:
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                        self._vectors[row["k"]] = row["v"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line
        except FileNotFoundError:
            pass

    def key(self, text: str) -> str:
        return hashlib.sha1(f"{self.model}\0{text}".encode()).hexdigest()

    def __contains__(self, key: str) -> bool:
        return key in self._vectors

    def get(self, key: str) -> list[float] | None:
        return self._vectors.get(key)

    def add(self, vectors: dict[str, list[float]]) -> None:
        self._vectors.update(vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps({"k": k, "v": [float(x) for x in v]}) + "\n" for k, v in vectors.items()))


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
    return [p[:PASSAGE_CHARS * 2] for p in out]


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


__all__ = ["MemoryIndex", "Hit", "K1", "B"]
