"""Cross-session memory: ``%agent remember``, ``%agent recall``, ``%agent memory`` (docs/memory.md)."""

from __future__ import annotations

import os

from ... import memory
from ...core.errors import UsageError
from ...core.ids import check_ref
from ...render import escape as X
from ..display import Markdown
from . import subcommand, usage_parser

REMEMBER_USAGE = "remember [ID] [--all] [--rules|--llm] [--force]"
RECALL_USAGE = "recall [--all] [-k N] [--memory-only] [--stale] QUERY"


def _directory(magics) -> str:
    return magics.session.info.directory if magics.session is not None else os.getcwd()


@subcommand(
    "remember",
    REMEMBER_USAGE,
    "extract a session's decisions, preferences, facts and open tasks into the project's memory files",
)
def remember(magics, args, raw):
    parser = usage_parser(REMEMBER_USAGE)
    parser.add_argument("session", nargs="?")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--rules", action="store_true")
    parser.add_argument("--llm", action="store_true")
    parser.add_argument("--force", action="store_true")
    ns = parser.parse_args(args)
    if ns.rules and ns.llm:
        raise UsageError(f"--rules or --llm, not both — usage: %agent {REMEMBER_USAGE}")
    extractor = "rules" if ns.rules else "llm" if ns.llm else None
    settings, store = magics.settings(), magics.store()
    if ns.all:
        if ns.session:
            raise UsageError(f"an ID or --all, not both — usage: %agent {REMEMBER_USAGE}")
        done = memory.remember_project(
            store, settings, _directory(magics), extractor=extractor, force=ns.force
        )
        if not done:
            return Markdown("*(no sessions in this project yet)*")
        lines = [f"Remembered {len(done)} session(s) → `{done[-1].memory_path}`", ""]
        lines += [f"- {X.markdown(r.summary(), fences=False)}" for r in done]
        return Markdown("\n".join(lines))
    if ns.session:
        session_id = store.session(check_ref(ns.session, "session")).id
    elif magics.session is not None:
        session_id = magics.session.info.id
    else:
        raise UsageError(
            "no current session — %agent remember ID, or --all for every session of this project"
        )
    current = (
        magics.session
        if magics.session is not None and magics.session.info.id == session_id
        else None
    )
    done = memory.remember(
        store,
        session_id,
        settings,
        extractor=extractor,
        force=ns.force,
        history=current.history if current else None,
        info=current.info if current else None,
    )
    where = f"`{done.path}`" if done.status != "empty" else "(no file: nothing worth remembering)"
    return Markdown(
        f"**{X.markdown(done.summary(), fences=False)}**\n\n{where} · consolidated in "
        f"{X.code(done.memory_path)}\n\n{X.markdown(done.markdown)}"
    )


@subcommand(
    "recall",
    RECALL_USAGE,
    "search the project's memory and history (BM25 fused with embeddings); newest statement wins",
)
def recall(magics, args, raw):
    parser = usage_parser(RECALL_USAGE)
    parser.add_argument("query", nargs="*")
    parser.add_argument("--all", action="store_true", help="every project, not only this one")
    parser.add_argument("-k", type=int, default=None)
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument(
        "--stale", action="store_true", help="list superseded results too, after the others"
    )
    ns = parser.parse_args(args)
    query = " ".join(ns.query).strip()
    if not query:
        raise UsageError(f"what should I look for? — usage: %agent {RECALL_USAGE}")
    if ns.k is not None and ns.k < 1:
        raise UsageError("-k must be at least 1")
    settings, store = magics.settings(), magics.store()
    hits = memory.recall(
        store,
        settings,
        query,
        directory=_directory(magics),
        scope="all" if ns.all else None,
        k=ns.k,
        sources=("memory",) if ns.memory_only else None,
        include_superseded=ns.stale,
    )
    how = _ranked_by(memory.index_for(store, settings.data_dir).status, hits)
    if not hits:
        floor = f"{settings.memory.threshold}"
        model = memory.embedder(settings) if "cosine" in how else None
        if model is not None:
            cosine = settings.memory.cosine_threshold
            floor += f" in bm25 or {model.threshold if cosine is None else cosine} in cosine"
        return Markdown(
            f"*(nothing in {'any project' if ns.all else 'this project'} scores above "
            f"{floor} for “{query}”; {how})*"
        )
    lines = [
        "| # | date | source | text | session / message | why (bm25 · cosine · fused) |",
        "|---|---|---|---|---|---|",
    ]
    for i, hit in enumerate(hits, 1):
        text = X.cell(hit.text)
        if hit.superseded_by:
            text = f"~~{text}~~ (superseded by {X.code(hit.superseded_by)})"
        where = " / ".join(X.code(x) for x in (hit.session_id, hit.message_id) if x) or "pinned"
        source = X.cell(f"{hit.source}/{hit.kind}")
        lines.append(
            f"| {i} | {X.cell(hit.date)} | {source} | {text} | {where} | {X.cell(hit.why())} |"
        )
    return Markdown("\n".join(lines) + f"\n\n*{how}*")


def _ranked_by(status, hits) -> str:
    """How the results were ranked: BM25 alone, or fused with which model's cosine."""
    if not status.model:
        return "ranked by BM25 (no embedding model: docs/memory.md)"
    pending = f", {status.pending} still being embedded" if status.pending else ""
    error = f"; embedding failed: {status.error}" if status.error else ""
    return (
        f"ranked by BM25 and {status.model} cosine, fused linearly, each scaled to [0, 1]; "
        f"{status.embedded}/{status.passages} passages embedded{pending}{error}"
    )


@subcommand(
    "memory",
    "memory [--path]",
    "show this project's MEMORY.md (consolidated memory; edit the files to correct it)",
)
def show_memory(magics, args, raw):
    parser = usage_parser("memory [--path]")
    parser.add_argument("--path", action="store_true")
    ns = parser.parse_args(args)
    folder = memory.project_dir(magics.settings().data_dir, _directory(magics))
    path = folder / "MEMORY.md"
    if ns.path:
        print(folder)
        return None
    if not path.exists():
        return Markdown(
            f"*(no memory yet for this project — `%agent remember` or `%agent remember --all` "
            f"writes it to `{folder}`)*"
        )
    return Markdown(f"{X.code(path)}\n\n" + X.markdown(path.read_text(encoding="utf-8")))
