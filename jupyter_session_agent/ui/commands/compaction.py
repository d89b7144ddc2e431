"""``%agent compact [--instructions TEXT]``: compact the current session now.

The work is :meth:`AgentSession.compact` (prune, then a summary of the head with the
recent turns kept verbatim; see the ``compaction`` package). The result is stored as a
``compaction_event`` row; this prints a one-line account of it.
"""

from __future__ import annotations

from ...analytics import replay as R
from ...core.errors import UsageError
from ..display import Markdown
from ..live import LiveView
from ..magics import is_kernel
from . import existing_session, subcommand

USAGE = "compact [--instructions TEXT]"


@subcommand(
    "compact",
    USAGE,
    "prune old tool outputs and summarise the conversation now (recent turns kept)",
)
def compact(magics, args, raw):
    instructions = _instructions(args)
    session = existing_session(magics)
    view = LiveView(live=magics.notebook().live and is_kernel(magics.shell), session=session)
    try:
        event = session.compact(instructions, observer=view)
    finally:
        view.finish()
    return Markdown(describe(event))


def _instructions(args: list[str]) -> str | None:
    if not args:
        return None
    if args[0] not in ("--instructions", "-i") or len(args) < 2:
        raise UsageError(
            f'usage: %agent {USAGE} — e.g. %agent compact --instructions "keep the SQL schema"'
        )
    return " ".join(args[1:])


def describe(event) -> str:
    """One line for a ``CompactionEvent``."""
    parts = [
        f"**compacted** ({event.cause}): {event.tokens_before:,} → {event.tokens_after:,} tokens"
    ]
    if event.parts_pruned:
        parts.append(
            f"{event.parts_pruned} tool output(s) pruned ({event.tokens_pruned:,} tokens, recoverable)"
        )
    if event.kind == "summary":
        parts.append(f"summary {event.summary_tokens:,} tokens of {event.head_messages} message(s)")
        parts.append(f"{event.tail_messages} recent message(s) kept verbatim")
        parts.append(f"{event.llm_calls} LLM call(s), ${event.cost:.4f}")
    parts.append(f"{event.duration_ms / 1000:.1f} s")
    return " · ".join(parts)


REPLAY_USAGE = "compaction replay [SESSION|--all] [--policy KEY=VALUE,…] [--plot]"


@subcommand(
    "compaction",
    REPLAY_USAGE,
    "rerun recorded sessions' context management offline under other settings; rows in the "
    "compaction_replay view",
)
def compaction(magics, args, raw):
    if not args or args[0] != "replay":
        raise UsageError(
            f"usage: %agent {REPLAY_USAGE} — e.g. %agent compaction replay --policy "
            "prune_protect=20000,tail_turns=1"
        )
    target, policy, plot = _replay_args(args[1:])
    store = magics.store()
    settings = magics.settings()
    parsed = R.ReplayPolicy.parse(policy)
    if target == "--all":
        results = R.replay_all(store, parsed, settings=settings)
    else:
        session_id = target or (magics.session.info.id if magics.session is not None else None)
        if session_id is None:
            raise UsageError("no current session — name one: %agent compaction replay SESSION")
        results = [R.replay(store, session_id, parsed, settings=settings)]
    if plot and len(results) == 1:
        return R.plot_replay(store, results[0].replay_id)
    import pandas as pd

    return pd.DataFrame([{"replay_id": r.replay_id, **r.totals()} for r in results])


def _replay_args(args: list[str]) -> tuple[str | None, str, bool]:
    target, policy, plot = None, "", False
    rest = list(args)
    while rest:
        word = rest.pop(0)
        if word == "--policy":
            if not rest:
                raise UsageError(f"usage: %agent {REPLAY_USAGE} — --policy needs KEY=VALUE pairs")
            policy = f"{policy},{rest.pop(0)}" if policy else rest.pop(0)
        elif word.startswith("--policy="):
            policy = word.split("=", 1)[1]
        elif word == "--plot":
            plot = True
        elif word == "--all" or not word.startswith("-"):
            if target is not None:
                raise UsageError(f"usage: %agent {REPLAY_USAGE} — one session, or --all")
            target = word
        else:
            raise UsageError(f"usage: %agent {REPLAY_USAGE} — unknown option {word}")
    return target, policy, plot
