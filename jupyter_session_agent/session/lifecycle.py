"""Session lifecycle: fork, revert/unrevert, archive and delete (docs/lifecycle.md).

One module: these operations share one vocabulary — message references, the revert point
and what it hides (``visible``), and the snapshots a revert restores from.

Module functions read an :class:`~jupyter_session_agent.session.agent_session.AgentSession`
(or a store and a session id where no live session is needed) and return values: the new
revert state and the history left visible; the ``AgentSession`` methods store them (the
session is the only writer of its own state) and the ``%agent`` subcommands are thin
wrappers. Subagents are in :mod:`.subagents`; export and import in :mod:`..exchange.transfer`
and :mod:`..exchange.opencode`.

Message references (``MSG`` in the magics): a message id or a unique prefix
of one, or a turn number — ``3`` is the third user message, ``-1`` the last.
Every id these functions take from outside (a session id, ``MSG``, a part id,
a model's ``task_id``) is checked against the id grammar first (``ids.check``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import ids
from ..core.chat import visible
from ..core.errors import UsageError
from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    PatchPart,
    ToolPart,
    UserMessage,
    WithParts,
    now_ms,
    replace,
)
from ..store.schema import quote
from ..store.tree import children
from . import snapshot
from .snapshot import SnapshotError

FORK_TITLE = re.compile(r"^(.+) \(fork #(\d+)\)$")
KERNEL_NOTE = "kernel variables are not reverted"


# --------------------------------------------------------------------------
# references and visibility


def resolve_message(history: Sequence[WithParts], ref: Any) -> str:
    """The id of the message ``ref`` names in ``history``: an id, a unique id prefix, or a turn number."""
    text = str(ref).strip()
    if re.fullmatch(r"[+-]?[0-9]{1,9}", text):
        users = [m.info.id for m in history if isinstance(m.info, UserMessage)]
        n = int(text)
        if n == 0 or abs(n) > len(users):
            raise UsageError(
                f"no turn {n} — this session has {len(users)} turn(s); `%agent turns` lists them"
            )
        return users[n - 1] if n > 0 else users[n]
    ids.check_ref(text, "message")
    matches = [m.info.id for m in history if m.info.id.startswith(text)] if text else []
    if text in matches:
        return text
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(
            f"no message {text!r} in this session — `%agent turns` lists the turns and their ids"
        )
    raise UsageError(f"{text!r} matches {len(matches)} messages — give more of the id")


def turns(history: Sequence[WithParts]) -> list[dict]:
    """One row per turn: number, user message id, prompt, messages, cost, files changed."""
    rows: list[dict] = []
    for item in history:
        if isinstance(item.info, UserMessage):
            text = " ".join(
                getattr(p, "text", "") or "" for p in item.parts if p.type == "text"
            ).strip()
            rows.append(
                {
                    "turn": len(rows) + 1,
                    "id": item.info.id,
                    "time": item.info.time_created,
                    "prompt": text,
                    "messages": 1,
                    "cost": 0.0,
                    "files": set(),
                }
            )
        elif rows:
            rows[-1]["messages"] += 1
            rows[-1]["cost"] += item.info.cost
        if rows:
            for part in item.parts:
                if isinstance(part, PatchPart):
                    rows[-1]["files"].update(part.files)
    return rows


# --------------------------------------------------------------------------
# fork: a new root session with copies of the messages before a point


def forked_title(title: str) -> str:
    match = FORK_TITLE.match(title)
    if match:
        return f"{match.group(1)} (fork #{int(match.group(2)) + 1})"
    return f"{title} (fork #1)"


def fork(session, at: Any = None):
    """A new root session holding copies of the messages before ``at`` (all when None).

    Messages get new ascending ids in order, an assistant's ``parentID`` points
    at the copied user message, parts get new ids; permissions, revert state,
    share and title usage are not copied. Lineage is kept in
    ``forkedFrom = {sessionID, messageID}`` (``messageID`` is the fork point,
    absent for a whole-session fork). Returns the new ``AgentSession``.
    """
    session.wait_title()
    store = session.store
    source = session.info
    history = visible(store.messages(source.id), source.revert)
    cut = resolve_message(history, at) if at is not None else None
    new = type(session).create(
        session.settings,
        store=store,
        shell=session.shell,
        directory=source.directory,
        title=forked_title(source.title),
        forked_from={"sessionID": source.id, **({"messageID": cut} if cut else {})},
        approver=session.approver,
        messages=[m for m in history if cut is None or m.info.id < cut],
    )
    snapshot.copy_repo(session.settings.data_dir, source.id, new.info.id)
    return new


def copy_messages(history: Iterable[WithParts], session_id: str) -> list[WithParts]:
    """Copies of ``history``'s messages for session ``session_id``: new ascending ids in
    order, an assistant's ``parentID`` pointing at the copied user message, parts with new ids."""
    id_map: dict[str, str] = {}
    out: list[WithParts] = []
    for item in history:
        mid = id_map[item.info.id] = ids.ascending("message")
        info = replace(item.info, id=mid, session_id=session_id)
        if isinstance(info, AssistantMessage):
            info = replace(info, parent_id=id_map.get(info.parent_id, info.parent_id))
        parts = tuple(_copy_part(p, session_id, mid, id_map) for p in item.parts)
        out.append(WithParts(info, parts))
    return out


def _copy_part(part, session_id: str, message_id: str, id_map: dict[str, str]):
    changes: dict[str, Any] = {
        "id": ids.ascending("part"),
        "session_id": session_id,
        "message_id": message_id,
    }
    if isinstance(part, CompactionPart) and part.tail_start_id:
        changes["tail_start_id"] = id_map.get(part.tail_start_id, part.tail_start_id)
    return replace(part, **changes)


# --------------------------------------------------------------------------
# revert / unrevert (docs/lifecycle.md)


@dataclass
class RevertResult:
    session_id: str
    message_id: str | None
    part_id: str | None = None
    hidden: int = 0  # messages hidden (removed at the next prompt)
    restored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    note: str = ""  # why files could not be restored, when they could not
    undo: bool = False

    def __str__(self) -> str:
        names = [*self.restored, *self.deleted]
        files = f"{len(names)} file(s) restored" + (
            f" ({', '.join(_short(names))})" if names else ""
        )
        if self.deleted:
            files += f", {len(self.deleted)} of them deleted (created later)"
        skipped = (
            f"; {len(self.skipped)} left as they are ({', '.join(_short(self.skipped))})"
            if self.skipped
            else ""
        )
        note = f"; {self.note}" if self.note else ""
        if self.undo:
            return f"unreverted {self.session_id}: messages back, {files}{skipped}{note} — {KERNEL_NOTE}"
        return (
            f"reverted {self.session_id} to {self.message_id}: {self.hidden} message(s) hidden until the next "
            f"prompt removes them, {files}{skipped}{note} — {KERNEL_NOTE}; `%agent unrevert` undoes this"
        )


def _short(paths: Sequence[str], limit: int = 5) -> list[str]:
    names = [os.path.basename(p) for p in paths[:limit]]
    return names + [f"… {len(paths) - limit} more"] if len(paths) > limit else names


def _point(
    history: Sequence[WithParts], message_id: str, part_id: str | None
) -> tuple[str, str | None]:
    """OpenCode's revert target: the last user message at or before ``message_id``, or that
    message from ``part_id`` on when earlier text/tool parts of it stay."""
    if part_id is not None:
        ids.check(part_id, "part")
    last_user = None
    for item in history:
        if isinstance(item.info, UserMessage):
            last_user = item.info.id
        if item.info.id != message_id:
            continue
        if part_id:
            if part_id not in {p.id for p in item.parts}:
                raise UsageError(f"part {part_id!r} is not in message {message_id}")
            earlier = [p for p in item.parts if p.id < part_id and p.type in ("text", "tool")]
            if earlier:
                return item.info.id, part_id
        return (last_user or item.info.id), None
    raise UsageError(f"no message {message_id!r} in this session")


def _key(mid: str, pid: str | None) -> tuple[str, str]:
    return mid, pid or ""


def _patches(history: Sequence[WithParts], mid: str, pid: str | None) -> list[PatchPart]:
    """Every ``patch`` part at or after the revert point, oldest first."""
    out = []
    for item in history:
        if item.info.id < mid:
            continue
        for part in item.parts:
            if isinstance(part, PatchPart) and (item.info.id > mid or not pid or part.id >= pid):
                out.append(part)
    return out


def _restore_patches(snap, patches: Sequence[PatchPart], result: RevertResult) -> None:
    first: dict[str, str] = {}  # file → the oldest pre-change tree that lists it
    for patch in patches:
        for path in patch.files:
            first.setdefault(path, patch.hash)
    by_tree: dict[str, list[str]] = {}
    for path, tree in first.items():
        by_tree.setdefault(tree, []).append(path)
    foreign = 0
    for tree, files in by_tree.items():
        if not snap.took(tree):  # an imported session's patch names a tree made elsewhere
            result.skipped += files
            foreign += len(files)
            continue
        done = snap.restore(tree, files)
        result.restored += done.restored
        result.deleted += done.deleted
        result.skipped += done.skipped
    if foreign:
        result.note = (
            f"{foreign} file(s) left as they are: their snapshots were not taken here "
            "for this session (an imported session's changes cannot be reverted)"
        )


def _snapshot_note(snap) -> str:
    if snap is None:
        return "file snapshots are off (%config AgentMagics.snapshot) so files were not restored"
    reason = snap.disabled_reason
    return f"files were not restored: {reason}" if reason else ""


def revert(
    session, message: Any, part_id: str | None = None
) -> tuple[RevertResult, dict, list[WithParts]]:
    """Hide ``message``'s turn and everything after it, and restore the files changed since.

    Files changed by ``write``/``edit``/``bash``/``python`` inside the session
    directory come back as they were before (each from the oldest snapshot
    that lists it); files created since are deleted; files over the size cap
    are left alone and listed. Kernel variables are not reverted. Repeated
    reverts keep the first saved state, so one ``unrevert`` undoes them all.

    Returns (what was done, the session's new ``revert`` state, the history it leaves
    visible); ``AgentSession.revert`` stores them.
    """
    session.wait_title()
    _not_busy(session)
    store = session.store
    history = store.messages(session.info.id)
    mid, pid = _point(history, resolve_message(history, message), part_id)
    current = session.info.revert
    if current and _key(mid, pid) > _key(current["messageID"], current.get("partID")):
        session.unrevert()  # moving the point later: start from the unreverted files
        current = None
    result = RevertResult(session.info.id, mid, pid)
    result.hidden = sum(1 for m in history if m.info.id > mid or (m.info.id == mid and not pid))
    patches = _patches(history, mid, pid)
    snap = session.snapshot()
    saved = current.get("snapshot") if current else None
    diff = ""
    result.note = _snapshot_note(snap) if patches else ""
    if snap is not None and not snap.disabled_reason:
        try:
            saved = saved if saved and snap.took(saved) else snap.track()
            _restore_patches(snap, patches, result)
            now = snap.track()
            diff = snap.diff(saved, now) if saved and now else ""
        except SnapshotError as err:
            result.note = f"files could not be restored: {err}"
    state: dict[str, Any] = {"messageID": mid, **({"partID": pid} if pid else {})}
    if saved:
        state["snapshot"] = saved
    if diff:
        state["diff"] = diff
    state["files"] = sorted({*(current or {}).get("files", ()), *result.restored, *result.deleted})
    return result, state, visible(history, state)  # views of the live session hide them too


def unrevert(session) -> tuple[RevertResult, list[WithParts]]:
    """Undo the pending revert: messages visible again, reverted files back as they were.
    Returns (what was done, the whole history); ``AgentSession.unrevert`` stores them."""
    session.wait_title()
    _not_busy(session)
    state = session.info.revert
    if not state:
        raise UsageError("nothing to unrevert — `%agent revert MSG` first")
    history = session.store.messages(session.info.id)
    result = RevertResult(session.info.id, state["messageID"], state.get("partID"), undo=True)
    files = sorted(
        {f for p in _patches(history, state["messageID"], state.get("partID")) for f in p.files}
    )
    snap = session.snapshot()
    if files and state.get("snapshot") and snap is not None and not snap.disabled_reason:
        if not snap.took(state["snapshot"]):  # a revert state that came with an imported session
            result.skipped = files
            result.note = "files left as they are: the saved state was not taken here"
        else:
            try:
                done = snap.restore(state["snapshot"], files)
                result.restored, result.deleted = done.restored, done.deleted
                result.skipped = done.skipped
            except SnapshotError as err:
                result.note = f"files could not be restored: {err}"
    elif files:
        result.note = _snapshot_note(snap) or "no snapshot was saved"
    return result, history


def cleanup(session) -> tuple[int, list[WithParts]]:
    """Remove (tombstone) what a pending revert hides; run by the next prompt.

    With a part point the message stays and loses its parts from that part on.
    Subagent sessions started by the removed turns are deleted with them. Returns (messages
    removed, the history kept); the session stores the history and clears its revert state.
    """
    state = session.info.revert
    if not state:
        return 0, list(session.history)
    store = session.store
    mid, pid = state["messageID"], state.get("partID")
    history = store.messages(session.info.id)
    kept: list[WithParts] = []
    removed = 0
    starts: list[int] = []  # when the removed turns began (their subagents started after)
    for item in history:
        if item.info.id < mid:
            kept.append(item)
            continue
        if item.info.id == mid and pid:
            for part in item.parts:
                if part.id >= pid:
                    store.delete("part", part.id)
                    if isinstance(part, ToolPart) and part.tool == "task":
                        starts.append(
                            getattr(part.state, "time_start", None) or item.info.time_created
                        )
            kept.append(WithParts(item.info, tuple(p for p in item.parts if p.id < pid)))
            continue
        starts.append(item.info.time_created)
        for part in item.parts:
            store.delete("part", part.id)
        store.delete("message", item.info.id)
        removed += 1
    since = min(starts) if starts else None
    if since is not None:
        for child in children(store, session.info.id):
            if child.time_created >= since:
                delete(store, child.id, data_dir=session.settings.data_dir)
    return removed, kept


def _not_busy(session) -> None:
    if session.busy:
        raise UsageError("the session is running a turn — wait for it to finish")


# --------------------------------------------------------------------------
# archive and delete


def archive(target, *, store=None, undo: bool = False):
    """Set (or with ``undo`` clear) ``time.archived``; ``%agent sessions`` hides archived sessions."""
    if hasattr(target, "update_info"):  # a live session: it stores its own info
        return target.update_info(time_archived=None if undo else now_ms())
    info = store.session(ids.check_ref(target, "session"))
    info = replace(info, time_archived=None if undo else now_ms(), time_updated=now_ms())
    store.put(info)
    store.flush(sync=True)
    return info


def delete(store, session_id: str, *, data_dir=None) -> list[str]:
    """Tombstone a session, its messages and parts, and its child sessions recursively.

    Returns the deleted session ids (the session first). Their snapshot
    repositories are removed too (forks keep their own copies of the objects).
    """
    root = store.session(ids.check_ref(session_id, "session")).id
    tree = list(
        store.sql(
            f"WITH RECURSIVE tree(id) AS (SELECT {quote(root)} UNION "
            f"SELECT s.id FROM session s JOIN tree t ON s.parent_id = t.id) SELECT id FROM tree"
        )["id"]
    )
    tree = [root] + [s for s in tree if s != root]
    quoted = ", ".join(quote(s) for s in tree)
    rows = store.sql(
        f"SELECT 'part' AS kind, id FROM part WHERE session_id IN ({quoted}) UNION ALL "
        f"SELECT 'message' AS kind, id FROM message WHERE session_id IN ({quoted})"
    )
    for kind, id in zip(rows["kind"], rows["id"]):
        store.delete(kind, id)
    for sid in tree:
        store.delete("session", sid)
    store.flush(sync=True)
    if data_dir is not None:
        for sid in tree:
            snapshot.remove_repo(data_dir, sid)
    return tree
