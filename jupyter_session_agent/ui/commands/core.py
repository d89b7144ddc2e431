"""Core subcommands: sessions, use, new, show, sql, help."""

from __future__ import annotations

import time

from ...core.errors import UsageError
from ...core.ids import check_ref
from ...core.settings import SETTINGS
from ...render import escape as X
from ..display import Markdown, transcript
from . import help_text, parse, subcommand


@subcommand("help", "help [settings]", "this list; with settings: every setting and its default")
def help_(magics, args, raw):
    ns = parse("help [settings]", args, (("what",), {"nargs": "?", "choices": ["settings"]}))
    print(help_text(SETTINGS if ns.what else (), type(magics).agent_cell.parser))


@subcommand("new", "new", "start a new session (the next %%agent continues it)")
def new(magics, args, raw):
    parse("new", args)
    session = magics.current(new=True)
    print(f"new session {session.info.id}")


@subcommand("use", "use ID", "make ID the current session (a unique prefix is enough)")
def use(magics, args, raw):
    if len(args) != 1:
        raise UsageError("usage: %agent use SESSION_ID — %agent sessions lists them")
    session = magics.current(session_id=args[0])
    print(f"using {session.info.id} — {session.info.title}")


SESSIONS_PAGE = 20  # sessions a page of %agent sessions lists


@subcommand(
    "sessions",
    "sessions [PAGE] [--all]",
    f"list sessions, newest first, {SESSIONS_PAGE} a page (--all: every one)",
)
def sessions(magics, args, raw):
    ns = parse(
        "sessions [PAGE] [--all]",
        args,
        (("page",), {"nargs": "?", "type": int, "default": 1}),
        (("--all",), {"action": "store_true"}),
    )
    if ns.page < 1:
        raise UsageError("the page is a number from 1 — e.g. %agent sessions 2")
    store = magics.store()
    total = store.session_count()
    if not total:
        return Markdown("*(no sessions yet — run a `%%agent` cell)*")
    pages = -(-total // SESSIONS_PAGE)
    if ns.page > pages:
        raise UsageError(f"there are {pages} pages of sessions — e.g. %agent sessions {pages}")
    if ns.all:
        rows = store.sessions()
    else:
        rows = store.sessions(limit=SESSIONS_PAGE, offset=(ns.page - 1) * SESSIONS_PAGE)
    current = magics.session.info.id if magics.session else None
    lines = ["| | id | title | updated |", "|---|---|---|---|"]
    for s in rows:
        mark = "▶" if s.id == current else ""
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.time_updated / 1000))
        lines.append(f"| {mark} | {X.code(s.id)} | {X.cell(s.title)} | {updated} |")
    first = 1 if ns.all else (ns.page - 1) * SESSIONS_PAGE + 1
    last = first + len(rows) - 1
    if last < total:
        lines.append(
            f"\n*sessions {first:,}–{last:,} of {total:,} — next: `%agent sessions {ns.page + 1}`, "
            "every one: `%agent sessions --all`*"
        )
    elif first > 1:
        lines.append(f"\n*sessions {first:,}–{last:,} of {total:,}*")
    return Markdown("\n".join(lines))


@subcommand("show", "show [ID]", "show a session's transcript (default: the current one)")
def show(magics, args, raw):
    store = magics.store()
    if args:
        session_id = store.session(check_ref(args[0], "session")).id
    elif magics.session is not None:
        session_id = magics.session.info.id
    else:
        raise UsageError("no current session — %agent show ID, or run a %%agent cell first")
    return Markdown(transcript(store.messages(session_id)))


@subcommand(
    "sql",
    "sql QUERY",
    "read-only SQL over the history: step, tool_call, session_summary, daily_cost, "
    "… (docs/analytics.md)",
    expand=False,
    split=False,
)
def sql(magics, args, raw):  # the query as typed: no $var/{expr} expansion, quotes are SQL's
    if not raw.strip():
        raise UsageError("usage: %agent sql SELECT …")
    return magics.store().sql(raw)
