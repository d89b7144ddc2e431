"""``%agent compact [--instructions TEXT]``: compact the current session now.

The work is :meth:`AgentSession.compact` (prune, then a summary of the head with the
recent turns kept verbatim; see the ``compaction`` package). The result is stored as a
``compaction_event`` row; this prints a one-line account of it.
"""

from __future__ import annotations

from ...core.errors import UsageError
from . import subcommand

USAGE = "compact [--instructions TEXT]"


@subcommand(
    "compact",
    USAGE,
    "prune old tool outputs and summarise the conversation now (recent turns kept)",
)
def compact(magics, args, raw):
    from ..display import LiveView, Markdown
    from ..magics import is_kernel

    instructions = _instructions(args)
    if magics.session is None:
        raise UsageError("no current session — run a %%agent cell first, or %agent use ID")
    session = magics.current()
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
