"""Core subcommands: sessions, use, new, show, sql, help."""

from __future__ import annotations

import time

from ...core.errors import UsageError
from ...render import escape as X
from . import help_text, parse, subcommand


@subcommand("help", "help", "this list, and every setting with its default")
def help_(magics, args, raw):
    from ...core.settings import SETTINGS

    parse("help", args)
    print(help_text(SETTINGS))


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


@subcommand("sessions", "sessions", "list sessions, newest first")
def sessions(magics, args, raw):
    from ..display import Markdown

    parse("sessions", args)
    rows = magics.store().sessions()
    if not rows:
        return Markdown("*(no sessions yet — run a `%%agent` cell)*")
    current = magics.session.info.id if magics.session else None
    lines = ["| | id | title | updated |", "|---|---|---|---|"]
    for s in rows:
        mark = "▶" if s.id == current else ""
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.time_updated / 1000))
        lines.append(f"| {mark} | {X.code(s.id)} | {X.cell(s.title)} | {updated} |")
    return Markdown("\n".join(lines))


@subcommand("show", "show [ID]", "show a session's transcript (default: the current one)")
def show(magics, args, raw):
    from ..display import Markdown, transcript

    store = magics.store()
    if args:
        from ...core.ids import check_ref

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
