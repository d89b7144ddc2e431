"""Views: ``%agent show [ID]``, ``%agent budget [ID]``, ``%agent browse``.

``show`` replaces core's Markdown-only version with the rich transcript
(registered after ``core`` in ``MODULES``, so this one wins). The data behind
``budget`` is :func:`jupyter_session_agent.loop.budget_report.budget_report` (also
``AgentSession.budget_report()``), so other features can reuse it.
"""

from __future__ import annotations

from typing import Any

from ...core.chat import history_model
from ...core.errors import UsageError
from ...core.ids import check_ref
from ...loop.budget_report import budget_report
from ...providers.registry import settings_model_info
from ..display import BudgetView, TranscriptView
from . import parse, subcommand


def load_session(magics: Any, args: list[str], usage: str):
    """(session info, history, budget report) for ``ID`` or the current session."""
    if len(args) > 1:
        raise UsageError(f"usage: %agent {usage} — one session id (or a unique prefix) at most")
    given = parse(usage, args, (("session",), {"nargs": "?", "metavar": "ID"})).session
    args = [given] if given else []
    store = magics.store()
    current = magics.session
    if args:
        info = store.session(check_ref(args[0], "session"))
    elif current is not None:
        info = current.info
    else:
        raise UsageError(
            f"no current session — %agent {usage.split()[0]} ID, or run a %%agent cell first "
            "(%agent sessions lists them)"
        )
    if current is not None and current.info.id == info.id:
        current.use_settings(magics.settings())
        return current.info, list(current.history), current.budget_report()
    settings = magics.settings()
    history = store.messages(info.id)
    model = settings_model_info(settings.model or history_model(history), settings)
    return info, history, budget_report(history, model, settings.compaction)


@subcommand(
    "show", "show [ID]", "a session's transcript: every part, tool states, compactions, budget"
)
def show(magics, args, raw):
    info, history, report = load_session(magics, args, "show [ID]")
    return TranscriptView(history, session=info, report=report)


@subcommand(
    "budget",
    "budget [ID]",
    "the token budget: context used/usable/reserved, prune and compaction triggers, steps, cost",
)
def budget(magics, args, raw):
    info, _, report = load_session(magics, args, "budget [ID]")
    return BudgetView(report, session=info)


@subcommand(
    "browse", "browse", "a widget listing every session; pick one to see its transcript and budget"
)
def browse(magics, args, raw):
    parse("browse", args)
    try:
        from ..widgets import SessionBrowser
    except ImportError:
        raise UsageError("%agent browse needs ipywidgets — pip install ipywidgets") from None
    current = magics.session.info.id if magics.session is not None else None
    return SessionBrowser(magics.store(), settings=magics.settings(), current=current)
