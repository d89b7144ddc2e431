"""Lifecycle subcommands: fork, revert, unrevert, turns, archive, unarchive, delete, export,
import, import-opencode. Each parses its words and calls one function of
:mod:`jupyter_session_agent.session.lifecycle` (docs/lifecycle.md). Every session id
typed here is checked against the id grammar (``ids.check_ref``) before it is
looked up; message and part ids are checked by the lifecycle functions."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ...core.chat import visible
from ...core.ids import check_ref
from ...exchange.opencode import import_opencode as do_import
from ...exchange.transfer import default_name, import_bundle
from ...exchange.transfer import export as do_export
from ...render import escape as X
from ...session.lifecycle import archive as do_archive
from ...session.lifecycle import delete as do_delete
from ...session.lifecycle import turns as rows_of
from ..display import Markdown
from . import existing_session, parse, subcommand


@subcommand(
    "fork",
    "fork [--at MSG] [-s ID]",
    "copy the session (up to before MSG: an id or turn number) into a new current session",
)
def fork(magics, args, raw):
    ns = parse("fork [--at MSG] [-s ID]", args, (("--at",), {}), (("-s", "--session"), {}))
    source = existing_session(magics, ns.session)
    new = source.fork(ns.at)
    magics.session = new
    print(
        f"forked {source.info.id} → {new.info.id} “{new.info.title}”: {len(new.history)} message(s) copied; "
        "it is now the current session"
    )


@subcommand(
    "revert",
    "revert MSG",
    "hide turn MSG and later ones, restore the files they changed (not kernel variables)",
)
def revert(magics, args, raw):
    ns = parse("revert MSG [--part PART_ID]", args, (("message",), {}), (("--part",), {}))
    print(existing_session(magics).revert(ns.message, ns.part))


@subcommand("unrevert", "unrevert", "undo the last revert: messages and files come back")
def unrevert(magics, args, raw):
    parse("unrevert", args)
    print(existing_session(magics).unrevert())


@subcommand(
    "turns", "turns [ID]", "the session's turns with their message ids (for fork --at and revert)"
)
def turns(magics, args, raw):
    ns = parse("turns [ID]", args, (("session",), {"nargs": "?"}))
    store = magics.store()
    if ns.session:
        info = store.session(check_ref(ns.session, "session"))
        history = store.messages(info.id)
    else:
        session = existing_session(magics)
        info, history = session.info, store.messages(session.info.id)
    hidden_from = (info.revert or {}).get("messageID")
    shown = {m.info.id for m in visible(history, info.revert)}
    lines = [
        "| turn | message | time | prompt | msgs | cost | files |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows_of(history):
        prompt = " ".join(row["prompt"].split())
        prompt = X.cell(prompt[:60] + ("…" if len(prompt) > 60 else ""))
        mark = " *(reverted)*" if hidden_from and row["id"] not in shown else ""
        when = time.strftime("%H:%M:%S", time.localtime(row["time"] / 1000))
        files = X.cell(", ".join(sorted(os.path.basename(f) for f in row["files"]))[:60])
        lines.append(
            f"| {row['turn']} | {X.code(row['id'])}{mark} | {when} | {prompt} | {row['messages']} | "
            f"${row['cost']:.4f} | {files} |"
        )
    if len(lines) == 2:
        return Markdown(f"*(no turns yet in {info.id})*")
    title = X.markdown(info.title, fences=False)
    return Markdown(f"**{title}** {X.code(info.id)}\n\n" + "\n".join(lines))


def _resolve(magics, session_id: str):
    info = magics.store().session(check_ref(session_id, "session"))
    current = (
        magics.session if magics.session is not None and magics.session.info.id == info.id else None
    )
    return info, current


@subcommand(
    "archive", "archive ID", "hide a session from %agent sessions (kept; unarchive brings it back)"
)
def archive(magics, args, raw):
    ns = parse("archive ID", args, (("session",), {}))
    info, current = _resolve(magics, ns.session)
    do_archive(current or info.id, store=magics.store())
    print(f"archived {info.id} “{info.title}”")


@subcommand("unarchive", "unarchive ID", "list an archived session again")
def unarchive(magics, args, raw):
    ns = parse("unarchive ID", args, (("session",), {}))
    info, current = _resolve(magics, ns.session)
    do_archive(current or info.id, store=magics.store(), undo=True)
    print(f"unarchived {info.id} “{info.title}”")


@subcommand(
    "delete", "delete ID", "delete a session, its messages and parts, and its subagent sessions"
)
def delete(magics, args, raw):
    ns = parse("delete ID", args, (("session",), {}))
    info, current = _resolve(magics, ns.session)
    if current is not None:
        current.wait_title()
    removed = do_delete(magics.store(), info.id, data_dir=magics.settings().data_dir)
    note = ""
    if current is not None:
        magics.session = None
        note = "; there is no current session now (the next %%agent starts one)"
    kids = f" and {len(removed) - 1} subagent session(s)" if len(removed) > 1 else ""
    print(f"deleted {info.id} “{info.title}”{kids}{note}")


@subcommand(
    "export",
    "export [ID] --format md|html|json [--out PATH]",
    "write a session as Markdown, a self-contained HTML page, or a JSON bundle for %agent import",
)
def export(magics, args, raw):
    ns = parse(
        "export [ID] --format md|html|json [--out PATH]",
        args,
        (("session",), {"nargs": "?"}),
        (("-f", "--format"), {"default": "md", "choices": ("md", "html", "json")}),
        (("-o", "--out"), {}),
    )
    if ns.session:
        info = magics.store().session(check_ref(ns.session, "session"))
    else:
        info = existing_session(magics).info
    if magics.session is not None and magics.session.info.id == info.id:
        magics.session.wait_title()
        info = magics.session.info
    out = Path(ns.out) if ns.out else Path(os.getcwd()) / default_name(info, ns.format)
    path = do_export(magics.store(), info.id, ns.format, out)
    print(
        f"exported {info.id} “{info.title}” as {ns.format} to {path} ({path.stat().st_size / 1024:.1f} KB)"
    )
    return None


@subcommand(
    "import", "import PATH", "read a JSON bundle from %agent export (same ids; twice is a no-op)"
)
def import_(magics, args, raw):
    ns = parse("import PATH", args, (("path",), {}))
    print(import_bundle(magics.store(), ns.path))


@subcommand(
    "import-opencode",
    "import-opencode [DIR]",
    "import OpenCode's sessions (opencode.db or storage/; default ~/.local/share/opencode)",
)
def import_opencode(magics, args, raw):
    ns = parse(
        "import-opencode [DIR] [--session ID …]",
        args,
        (("path",), {"nargs": "?"}),
        (("--session",), {"action": "append"}),
    )
    path = (
        ns.path
        or Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "opencode"
    )
    result = do_import(magics.store(), path, sessions=ns.session)
    print(result.report())  # the result line, then what was skipped and why
