"""``%agent permit``: the current session's permission rules (docs/permissions.md).

``%agent permit TOOL [PATTERN] allow|ask|deny`` appends a rule to the session's
own rules (``Session.permission``, stored in the history so it survives a
reload); ``%agent permit`` lists every rule in the order they are evaluated
(last match wins); ``%agent permit --clear`` drops the session's rules.
"""

from __future__ import annotations

import os

from ...core import permission as P
from ...core.errors import ConfigError, UsageError
from ...render import escape as X
from ..display import Markdown
from . import subcommand

USAGE = (
    "usage: %agent permit TOOL [PATTERN] allow|ask|deny — e.g. %agent permit bash allow, "
    '%agent permit edit "*.py" allow, %agent permit bash "git *" allow'
)


@subcommand(
    "permit",
    "permit TOOL [PATTERN] allow|ask|deny",
    "allow, ask or deny a tool (or a pattern) in this session; no arguments: list the rules",
)
def permit(magics, args, raw):
    if args and args != ["--clear"] and (len(args) < 2 or args[-1].lower() not in P.ACTIONS):
        raise UsageError(USAGE)  # before a session is made: a refused command changes nothing
    session = magics.current()
    if not args:
        return _listing(magics, session)
    if args == ["--clear"]:
        session.set_permission(None)
        session.store.flush(sync=True)
        print(f"cleared the permission rules of session {session.info.id}")
        return None
    tool, action = args[0], args[-1].lower()
    pattern = " ".join(args[1:-1]) or "*"
    try:
        name = P.permission_name(tool)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    rule = P.Rule(name, P.expand(pattern), action)
    session.allow([rule])
    session.store.flush(sync=True)
    note = f" ({tool} uses the {name} permission)" if name != tool else ""
    print(f"session {session.info.id}: {name} {rule.pattern!r} → {action}{note}")
    return None


def _listing(magics, session):
    groups = [
        (
            "default",
            P.defaults(
                data_dir=os.path.abspath(session.settings.data_dir),
                sandboxed=session.sandboxed,
            ),
        ),
        ("%config", P.from_config(session.settings.permission)),
        ("session", P.from_data(session.info.permission)),
    ]
    lines = [
        f"Permission rules of session `{session.info.id}`, in order — the **last** matching rule "
        "wins; no match asks.",
        "",
        "| from | permission | pattern | action |",
        "|---|---|---|---|",
    ]
    for source, rules in groups:
        for rule in rules:
            lines.append(
                f"| {source} | {X.code(rule.permission)} | {X.code(rule.pattern)} | "
                f"{X.cell(rule.action)} |"
            )
    lines.append("")
    lines.append(
        "Add one with `%agent permit TOOL [PATTERN] allow|ask|deny`, for one cell with "
        '`%%agent -p "bash=allow"`, for every session with `%config AgentMagics.permission`.'
    )
    return Markdown("\n".join(lines))
