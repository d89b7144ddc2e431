"""Export a session (Markdown, self-contained HTML, JSON bundle) and import a bundle back.

* ``md``: the transcript for reading (parts rendered by ``render.markdown``, as the live
  view shows them) under a header with the session's id, models, tokens and cost (title
  and subagents included).
* ``html``: one file, no external assets (inline CSS, images as ``data:`` URLs,
  no scripts): the transcript (``render.html``: the same words), with reasoning
  and tool calls in collapsible ``<details>`` and subagent sessions nested in
  their ``task`` call. Share it as a file or an attachment: no server needed.
* ``json``: a bundle — OpenCode's export shape ``{"info": Session,
  "messages": [{"info", "parts"}]}`` plus ``"format"``, ``"version"`` and
  ``"children"`` (subagent sessions, recursively). It holds every stored
  message, hidden (reverted) ones and the revert state included, so
  :func:`import_bundle` restores the session exactly: same ids, same values.

Importing a bundle whose session already exists is a no-op when the stored
session is identical, and refused (one line naming the fix) when it differs.
``import_bundle`` also reads the output of ``opencode export``.

A bundle is untrusted data. It never brings permission rules (``permission`` is dropped), a
working folder (the importer's is used), or a parent link to a session it did not bring (a root
``parentID``, or a ``task`` call's ``metadata.sessionId`` naming a session outside the bundle, is
dropped); the result says what was dropped. It never overwrites, empties or re-parents what is
stored: a session, message or part id already in the history (in another session, or with other
contents) refuses the whole import in one line, before anything is written.

Every id in it (sessions, messages, parts,
parents, fork and revert points, compaction tails, task sessions, tool call
ids, snapshot trees) must follow the id grammar (``ids.check``) or nothing is
imported; a saved-output path (``metadata.outputPath``) outside this data
directory's ``tool-output`` folder is dropped, and counted in the result.

One module: the JSON bundle is written and read back here, so export and import keep one
format and one check of the ids in it. The ``md`` and ``html`` documents, never read back, are
:mod:`.transcript`'s (:func:`export` writes all three).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import SessionNotFoundError, UsageError
from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    PatchPart,
    Session,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    ToolPart,
    WithParts,
    message_from_data,
    read_part,
    replace,
)
from ..core.redact import clean, clean_value
from ..store.tree import children
from .transcript import html_page, markdown

BUNDLE_FORMAT = "jupyter-session-agent/session"
BUNDLE_VERSION = 1
FORMATS = ("md", "html", "json")


# --------------------------------------------------------------------------
# export


def export(store, session_id: str, format: str = "md", out: str | os.PathLike | None = None):
    """The session as ``format`` text; written to ``out`` (a file, or a folder for the default
    name) when given, and then the path is returned."""
    if format not in FORMATS:
        raise UsageError(f"unknown export format {format!r} — use md, html or json")
    info = store.session(ids.check_ref(session_id, "session"))
    # every export is redacted and encodable (``redact.clean``), whatever the history holds
    if format == "json":
        text = json.dumps(clean_value(bundle(store, info.id)), ensure_ascii=False, indent=1) + "\n"
    elif format == "md":
        text = clean(markdown(store, info))
    else:
        text = clean(html_page(store, info))
    if out is None:
        return text
    path = Path(out).expanduser()
    if path.is_dir():
        path = path / default_name(info, format)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def default_name(info: Session, format: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.title).strip("-").lower()[:48] or "session"
    return f"{slug}.{re.sub(r'[^A-Za-z0-9]', '', info.id[-8:])}.{format}"


def bundle(store, session_id: str, depth: int = 0) -> dict:
    """The JSON bundle of a session and (recursively) its subagent sessions."""
    info = store.session(session_id)
    out: dict[str, Any] = {}
    if depth == 0:
        out.update(format=BUNDLE_FORMAT, version=BUNDLE_VERSION, exported=int(time.time() * 1000))
    out["info"] = info.to_data()
    out["messages"] = [m.to_data() for m in store.messages(info.id)]
    kids = children(store, info.id)
    if kids:
        out["children"] = [
            bundle(store, c.id, depth + 1) for c in sorted(kids, key=lambda s: s.time_created)
        ]
    return out


# --------------------------------------------------------------------------
# import


@dataclass
class ImportResult:
    session_id: str
    status: str  # "imported" | "unchanged"
    messages: int = 0
    parts: int = 0
    sessions: list[str] = field(default_factory=list)  # this one and its children
    dropped_paths: int = 0  # saved-output paths outside this data directory, not kept
    directory: str = ""  # the working folder the imported sessions use (the importer's)
    dropped: list[str] = field(default_factory=list)  # what untrusted_session/links dropped

    def __str__(self) -> str:
        if self.status == "unchanged":
            return f"{self.session_id} is already in the history, unchanged — nothing imported"
        kids = (
            f" and {len(self.sessions) - 1} subagent session(s)" if len(self.sessions) > 1 else ""
        )
        dropped = (
            f"; {self.dropped_paths} saved-output path(s) outside this data directory dropped"
            if self.dropped_paths
            else ""
        )
        where = f"; it works in {self.directory}" if self.directory else ""
        if self.dropped:
            dropped += "; dropped: " + ", ".join(self.dropped)
        return (
            f"imported {self.session_id}{kids}: {self.messages} messages, {self.parts} parts "
            f"(same ids){dropped}{where}"
        )


def load_bundle(source: Any) -> dict:
    if isinstance(source, dict):
        return source
    path = Path(source).expanduser()
    hint = "give the path of a bundle file from `%agent export --format json`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no file {str(path)!r} — {hint}") from None
    except IsADirectoryError:
        raise UsageError(
            f"{path} is a folder — {hint} (for OpenCode's data folder: "
            "`%agent import-opencode DIR`)"
        ) from None
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err} — {hint}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(
            f"{path} is not JSON ({type(err).__name__}: {str(err)[:120]}) — "
            "expected a bundle from `%agent export --format json`"
        ) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("info"), dict)
        or not isinstance(data.get("messages"), list)
    ):
        raise UsageError(
            f'{path} is not a session bundle — expected {{"info": …, "messages": […]}} '
            "(from `%agent export --format json` or `opencode export`)"
        )
    version = data.get("version", 1)
    if (
        data.get("format", BUNDLE_FORMAT) != BUNDLE_FORMAT
        or not isinstance(version, int)
        or version > BUNDLE_VERSION
    ):
        raise UsageError(
            f"{path}: unsupported bundle format {ids.shown(data.get('format'))} "
            f"version {ids.shown(version)} — export it again with this version's "
            "`%agent export`"
        )
    return data


def decode(data: dict) -> tuple[Session, list[WithParts]]:
    """A loaded bundle's session and messages, ids checked; a malformed one is one line."""
    try:
        info = check_session(Session.from_data(data["info"]), what="the bundle's session")
        history = []
        for item in data["messages"]:
            _same_owner(item["info"], "sessionID", info.id, "message")
            message = check_message(message_from_data({**item["info"], "sessionID": info.id}))
            parts = []
            for p in item.get("parts", ()):
                _same_owner(p, "sessionID", info.id, "part")
                _same_owner(p, "messageID", message.id, "part")
                data = {**p, "sessionID": info.id, "messageID": message.id}
                parts.append(check_part(read_part(data)))  # a newer version's part is kept
            history.append(WithParts(message, tuple(parts)))
    except ids.InvalidIdError as err:
        raise UsageError(f"refusing the bundle: {err}; nothing was imported") from None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UsageError(
            f"the bundle has a malformed session, message or part "
            f"({type(err).__name__}: {str(err)[:120]})"
        ) from None
    return info, history


def _same_owner(data: Any, key: str, expected: str, kind: str) -> None:
    value = data.get(key) if isinstance(data, dict) else None
    if value is not None and value != expected:
        raise ids.InvalidIdError(
            f"a {kind} in session {expected} says its {key} is {ids.shown(value)}"
        )


# --------------------------------------------------------------------------
# the ids of imported values (bundles and OpenCode): checked before anything uses them


def check_session(info: Session, *, what: str = "the session") -> Session:
    """``info`` if every id in it follows the grammar; else ``ids.InvalidIdError``."""
    ids.check(info.id, "session", what=f"{what} id")
    if info.parent_id is not None:
        ids.check(info.parent_id, "session", what=f"{what}'s parentID")
    for key, value in (info.forked_from or {}).items():
        if key in ("sessionID", "messageID"):
            kind = "session" if key == "sessionID" else "message"
            ids.check(value, kind, what=f"{what}'s forkedFrom.{key}")
    revert = info.revert
    if revert is not None:
        if not isinstance(revert, dict):
            raise ids.InvalidIdError(f"{what}'s revert is not an object")
        ids.check(revert.get("messageID"), "message", what=f"{what}'s revert.messageID")
        if revert.get("partID") is not None:
            ids.check(revert["partID"], "part", what=f"{what}'s revert.partID")
        tree = revert.get("snapshot")
        if tree is not None and not ids.is_hash(tree):
            raise ids.InvalidIdError(f"{what}'s revert.snapshot {ids.shown(tree)} is not a tree")
    return info


def check_message(message) -> Any:
    ids.check(message.id, "message", what="a message id")
    ids.check(message.session_id, "session", what=f"message {message.id}'s sessionID")
    if isinstance(message, AssistantMessage) and message.parent_id:  # "" when OpenCode stored none
        ids.check(message.parent_id, "message", what=f"message {message.id}'s parentID")
    return message


def check_part(part) -> Any:
    where = f"part {ids.shown(part.id, 40)}"
    ids.check(part.id, "part", what="a part id")
    ids.check(part.session_id, "session", what=f"{where}'s sessionID")
    ids.check(part.message_id, "message", what=f"{where}'s messageID")
    if isinstance(part, ToolPart):
        if part.call_id and not ids.safe_name(part.call_id):
            raise ids.InvalidIdError(
                f"{where}'s callID {ids.shown(part.call_id)} is not a tool "
                "call id (letters, digits and _.:- only)"
            )
        metadata = getattr(part.state, "metadata", None) or {}
        child = metadata.get("sessionId") if part.tool == "task" else None
        if child is not None:
            ids.check(child, "session", what=f"{where}'s task sessionId")
    trees = isinstance(part, (PatchPart, SnapshotPart, StepStartPart, StepFinishPart))
    for name in ("hash", "snapshot") if trees else ():
        value = getattr(part, name, None)
        if value and not ids.is_hash(value):
            raise ids.InvalidIdError(f"{where}'s {name} {ids.shown(value)} is not a tree hash")
    if isinstance(part, PatchPart) and not all(
        isinstance(f, str) and "\0" not in f for f in part.files
    ):
        raise ids.InvalidIdError(f"{where}'s files are not all paths")
    if isinstance(part, CompactionPart) and part.tail_start_id is not None:
        ids.check(part.tail_start_id, "message", what=f"{where}'s tail_start_id")
    return part


def keep_paths_inside(part, data_dir: str | os.PathLike):
    """``(part, dropped)``: a tool part's ``metadata.outputPath`` outside ``<data_dir>/tool-output``
    removed (a path from outside is never read: it could name any file)."""
    metadata = getattr(getattr(part, "state", None), "metadata", None)
    path = metadata.get("outputPath") if isinstance(metadata, dict) else None
    if path is None or metadata is None:
        return part, False
    root = (Path(data_dir) / "tool-output").resolve()
    try:
        inside = isinstance(path, str) and "\0" not in path and Path(path).resolve().parent == root
    except (OSError, ValueError, RuntimeError):
        inside = False
    if inside:
        return part, False
    kept = {k: v for k, v in metadata.items() if k != "outputPath"}
    return replace(part, state=replace(part.state, metadata=kept)), True


# --------------------------------------------------------------------------
# imports are untrusted data: what they may not bring, and what they may not overwrite


def untrusted_session(
    info: Session, brought: set[str] | frozenset[str], directory: str
) -> tuple[Session, list[str]]:
    """``(info as an import may store it, what was dropped)``: no permission rules (they would
    allow tools without asking), the importer's working folder (the "inside the session folder"
    rules follow it), and a parent only when the same import ``brought`` it (else the session
    would adopt itself as a subagent of a stored one: its cost, its deletion)."""
    dropped = []
    if info.permission:
        dropped.append(f"{len(info.permission)} permission rule(s) of {info.id}")
    if info.parent_id is not None and info.parent_id not in brought:
        dropped.append(f"parent link of {info.id} to {info.parent_id} (not in this import)")
    parent = info.parent_id if info.parent_id in brought else None
    return replace(info, permission=None, parent_id=parent, directory=directory), dropped


def untrusted_part(part, brought: set[str] | frozenset[str]):
    """``(part, what was dropped or "")``: a ``task`` call's link to a session the import did
    not bring is removed (the HTML export would nest that stored session inside this one)."""
    metadata = getattr(getattr(part, "state", None), "metadata", None)
    if getattr(part, "tool", None) != "task" or not isinstance(metadata, dict):
        return part, ""
    child = metadata.get("sessionId")
    if child is None or child in brought:
        return part, ""
    kept = {k: v for k, v in metadata.items() if k != "sessionId"}
    why = f"task link of part {part.id} to {child} (not in this import)"
    return replace(part, state=replace(part.state, metadata=kept)), why


def stored_owners(store, kind: str, wanted: Iterable[str]) -> dict[str, str]:
    """``{id: owner}`` for the ``wanted`` message ids (owner: their session) or part ids (owner:
    their message) already in the history."""
    wanted = sorted(set(wanted))
    if not wanted:
        return {}
    table, owner = ("message", "session_id") if kind == "message" else ("part", "message_id")
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 5000):
        frame = store.sql(
            f"SELECT id, {owner} AS owner FROM {table} WHERE list_contains($1, id)",
            [wanted[start : start + 5000]],
        )
        found.update(zip(frame["id"], frame["owner"]))
    return found


def refuse_clashes(
    store, what: str, owners: dict[str, dict[str, str]], allowed: Callable[[str, str, str], bool]
) -> None:
    """Refuse the whole import (one line naming the clash) when a message or part id it would
    write is stored under another owner: writing it would move the user's row into the import.
    ``owners``: kind → {id: the owner the import gives it}; ``allowed(kind, id, stored_owner)``
    says when a stored row may be rewritten (a re-import of the same session)."""
    for kind in ("message", "part"):
        wanted = owners.get(kind, {})
        for id, stored in sorted(stored_owners(store, kind, wanted).items()):
            if stored != wanted[id] or not allowed(kind, id, stored):
                where = "session" if kind == "message" else "message"
                raise UsageError(
                    f"refusing {what}: its {kind} {id} is already in the history in {where} "
                    f"{stored} (an import never overwrites or moves a stored {kind}); "
                    "nothing was imported"
                )


def _same(store, info: Session, history: list[WithParts]) -> bool | None:
    """None: not stored yet; True: stored and identical; False: stored and different."""
    try:
        existing = store.session(info.id)
    except SessionNotFoundError:
        return None
    if existing.id != info.id:  # a prefix match of another session
        return None
    # what the import may not bring (working folder, rules, links out) is not compared
    return (
        replace(existing, directory=info.directory, permission=None, parent_id=info.parent_id)
        == info
        and store.messages(info.id) == history
    )


def import_bundle(
    store, source: Any, *, directory: str | os.PathLike | None = None
) -> ImportResult:
    """Write a bundle's session (and its subagent sessions) into the history, ids unchanged.

    The bundle's working folder is a path from outside: the imported sessions work in
    ``directory`` (default: the current working directory) instead, so a bundle cannot point the
    tools, and the "inside the session folder" permission rules, at a folder of its choosing.
    """
    data = clean_value(load_bundle(source))  # stored as the journal keeps it: no key, encodable
    plan: list[tuple[Session, list[WithParts]]] = []
    _collect(data, plan, 0)
    home = str(Path(directory or os.getcwd()).resolve())
    brought = {info.id for info, _ in plan}
    if len(brought) != len(plan):
        raise UsageError(
            "refusing the bundle: it holds the same session twice; nothing was imported"
        )
    notes: list[str] = []
    dropped = 0
    for n, (info, history) in enumerate(plan):
        info, lost_links = untrusted_session(info, brought, home)
        notes += lost_links
        for i, item in enumerate(history):
            parts = []
            for part in item.parts:
                part, lost = keep_paths_inside(part, store.data_dir)
                part, link = untrusted_part(part, brought)
                parts.append(part)
                dropped += lost
                notes += [link] if link else []
            history[i] = WithParts(item.info, tuple(parts))
        plan[n] = (info, history)
    owners: dict[str, dict[str, str]] = {"message": {}, "part": {}}
    for info, history in plan:
        for item in history:
            if item.info.id in owners["message"]:
                raise UsageError(
                    f"refusing the bundle: it holds message {item.info.id} twice; "
                    "nothing was imported"
                )
            owners["message"][item.info.id] = info.id
            for p in item.parts:
                if p.id in owners["part"]:
                    raise UsageError(
                        f"refusing the bundle: it holds part {p.id} twice; nothing was imported"
                    )
                owners["part"][p.id] = item.info.id
    states = [_same(store, info, history) for info, history in plan]
    root = plan[0][0]
    if all(s is True for s in states):
        return ImportResult(root.id, "unchanged", sessions=[i.id for i, _ in plan])
    clash = next((info.id for (info, _), s in zip(plan, states) if s is False), None)
    if clash:
        raise UsageError(
            f"session {clash} is already in the history and differs from this bundle — "
            f"`%agent delete {clash}` first to replace it"
        )
    fresh = {info.id for (info, _), s in zip(plan, states) if s is None}
    # only a fresh session's rows are written: none of them may exist anywhere yet
    refuse_clashes(
        store,
        "the bundle",
        {
            "message": {k: v for k, v in owners["message"].items() if v in fresh},
            "part": {k: v for k, v in owners["part"].items() if owners["message"][v] in fresh},
        },
        lambda kind, id, stored: False,
    )
    result = ImportResult(root.id, "imported", dropped_paths=dropped, directory=home, dropped=notes)
    for (info, history), state in zip(plan, states):
        if state is True:
            continue
        store.put(info, time_created=info.time_created)
        for item in history:
            store.put(item.info, *item.parts, time_created=item.info.time_created)
            result.messages += 1
            result.parts += len(item.parts)
        result.sessions.append(info.id)
    store.flush(sync=True)
    return result


def _collect(data: dict, plan: list, depth: int, parent: str | None = None) -> None:
    if depth > 32:
        raise UsageError("the bundle nests subagent sessions more than 32 deep")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("info"), dict)
        or not isinstance(data.get("messages"), list)
        or not isinstance(data.get("children") or [], list)
    ):
        raise UsageError(
            "the bundle has a malformed subagent session — expected "
            '{"info": …, "messages": […], "children": […]}'
        )
    info, history = decode(data)
    if parent is not None and info.parent_id != parent:
        raise UsageError(
            f"refusing the bundle: subagent session {info.id} names "
            f"{ids.shown(info.parent_id)} as its parent, not {parent}; "
            "nothing was imported"
        )
    plan.append((info, history))
    for child in data.get("children") or ():
        _collect(child, plan, depth + 1, info.id)


def iter_bundle_sessions(data: dict) -> Iterable[str]:
    yield data["info"]["id"]
    for child in data.get("children") or ():
        yield from iter_bundle_sessions(child)
