"""Compaction: prune old tool outputs, summarise the head, keep the tail verbatim.

OpenCode's ``SessionCompaction`` (v1.2.16, with the later upstream tail and transcript)
plus what its users asked for. One :class:`Compactor` per turn does three things:

* **prune** (OpenCode's, exactly): walk newest → oldest, skip the last two user
  turns, stop at the last summary or at an output already pruned; keep the
  newest ``prune_protect`` estimated tokens of tool output; clear the rest if
  that frees more than ``prune_minimum``. Clearing sets
  ``state.time.compacted`` and writes the part. *Ours:* the output stays
  recoverable: it is saved to ``<data_dir>/tool-output/<part id>`` (unless
  truncation already saved it) and the model sees
  ``[Old tool result content cleared] — full output: <path>``, which its
  ``read``/``grep`` tools can open. Protect/minimum are capped by the window
  (``usable // 4`` and ``usable // 8``) so pruning still works on small models.
* **summary compaction**: a request (user message with a
  ``compaction`` part), a summary (assistant, ``summary: true``, agent
  ``compaction``) of the *head*, the *tail* kept verbatim (``tail_start_id``;
  default: the current turn; a manual compaction keeps every recent turn the tail budget
  holds, as OpenCode 1.18), then a synthetic continue message (auto only)
  or the replayed request after an overflow error. *Ours, on top:* the head
  is sent as a text transcript (tool outputs cut at 2,000 characters; 3× fewer
  tokens than the raw history in CompactBench); the summary is asked to stay
  near a tenth of what it summarises (at most 3% of the window); a pinned,
  deterministic section on the summary keeps what the user and the assistant
  said once verbatim (no word list: recurring phrasings are left out), the
  files the agent changed,
  and the session's archive of every output that left the view
  (``tool-output/<session>.outputs``); at a compaction every output but the
  newest few is cleared recoverably; the continue message restates the latest
  request when it was summarised; no continue call when the turn had ended.
* **fallbacks and guards**: a summary request that does not fit is shrunk
  (shorter tool outputs, then the oldest head turns dropped) before giving up;
  a summary larger than what it replaces is rejected; a context that cannot
  fit (system prompt and tools alone) is refused without an LLM call; a
  compaction that leaves the context above the trigger is "no-gain"; a third
  auto compaction in a turn without a step in between is refused. After any
  of these the loop stops auto-compacting for the rest of the turn (never a
  loop) and a request the provider then rejects is a one-line error.
  Failed attempts stay stored but are hidden from the model
  (``history.without_failed_compactions``).

Every prune and compaction is a :class:`CompactionEvent` written to the
history (journal kind ``event``, SQL view ``compaction_event``).

Where a policy decides (the window, the prune limits, the guards, the replay, the tail,
the summary input and its fallbacks, the pinned section, the continue message) the
:class:`Compactor` asks its :class:`CompactionStrategy`; the session uses
:class:`ProductStrategy` (all of the above). CompactBench passes OpenCode v1.2.16 as
another strategy (no tail, raw messages as summary input, no pinned section, no
fallbacks or guards), kept with the benchmark.

The package, one responsibility per module (settings and limits: ``core/compaction_config``):

* ``events`` — :class:`CompactionEvent`, :class:`CompactionResult`, the :class:`EventLog`;
* ``items`` — what a history item is (request, summary, real user message);
* ``prune`` — the prune walk (OpenCode's), :func:`prune_selection` and the :class:`Pruner`;
* ``tail`` — where the verbatim tail starts;
* ``transcribe`` — the head as a text transcript (the summary input);
* ``prompts`` — the texts sent to the summariser and the continue message;
* ``pinned`` — the :class:`Pinner`: the pinned section on a summary and the output archive;
* ``strategy`` — :class:`CompactionStrategy` (the policy's decisions), :class:`ProductStrategy`;
* ``summary`` — the :class:`Summariser`: the summary call with its fallbacks;
* ``followups`` — the request, the continue message, the replay, a rejected summary;
* ``decision`` — :class:`Decision`, what the loop asks the compactor after each step;
* ``compactor`` — :class:`Compactor`, which composes the above and the loop calls;
* ``derive`` — the events of a history written elsewhere (an OpenCode import).
"""

from __future__ import annotations

from ...core.compaction_config import (
    PRUNE_MINIMUM,
    PRUNE_PROTECT,
    PRUNE_PROTECTED_TOOLS,
    TOOL_OUTPUT_MAX_CHARS,
    CompactionConfig,
)
from .compactor import CompactionPlan, Compactor
from .decision import CONTINUE_REASONS, Decision, overflow_text
from .derive import events_from_history, stable_event_id
from .events import CompactionEvent, CompactionResult, EventLog
from .pinned import Pinner, water_fill
from .prompts import CONTINUE_TEXT, SUMMARY_SYSTEM, SUMMARY_TEMPLATE, continue_text
from .prune import Pruner, plan_prune, prune_selection
from .strategy import CompactionStrategy, PinInput, ProductStrategy, SummaryInput, transcript_chat
from .summary import Summariser, SummaryJob, SummaryOutcome
from .tail import select_tail
from .transcribe import transcript

__all__ = [
    "CONTINUE_REASONS",
    "CompactionConfig",
    "CompactionEvent",
    "CompactionPlan",
    "CompactionResult",
    "CompactionStrategy",
    "Compactor",
    "Decision",
    "EventLog",
    "PinInput",
    "Pinner",
    "ProductStrategy",
    "Pruner",
    "Summariser",
    "SummaryInput",
    "SummaryJob",
    "SummaryOutcome",
    "continue_text",
    "overflow_text",
    "plan_prune",
    "prune_selection",
    "transcript_chat",
    "select_tail",
    "events_from_history",
    "stable_event_id",
    "transcript",
    "water_fill",
    "PRUNE_PROTECT",
    "PRUNE_MINIMUM",
    "PRUNE_PROTECTED_TOOLS",
    "SUMMARY_SYSTEM",
    "SUMMARY_TEMPLATE",
    "CONTINUE_TEXT",
    "TOOL_OUTPUT_MAX_CHARS",
]
