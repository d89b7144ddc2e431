"""Compaction: prune old tool outputs, summarise the head, keep the tail verbatim.

OpenCode's ``SessionCompaction`` (spec §3, §8.4) plus what its users asked for
(spec §6, compaction.md §4). One :class:`Compactor` per turn does three things:

* **prune** (§3.2, exactly): walk newest → oldest, skip the last two user
  turns, stop at the last summary or at an output already pruned; keep the
  newest ``prune_protect`` estimated tokens of tool output; clear the rest if
  that frees more than ``prune_minimum``. Clearing sets
  ``state.time.compacted`` and writes the part. *Ours:* the output stays
  recoverable: it is saved to ``<data_dir>/tool-output/<part id>`` (unless
  truncation already saved it) and the model sees
  ``[Old tool result content cleared] — full output: <path>``, which its
  ``read``/``grep`` tools can open. Protect/minimum are capped by the window
  (``usable // 4`` and ``usable // 8``) so pruning still works on small models.
* **summary compaction** (§3.3, §8.4): a request (user message with a
  ``compaction`` part), a summary (assistant, ``summary: true``, agent
  ``compaction``) of the *head*, the *tail* kept verbatim (``tail_start_id``;
  default: the current turn), then a synthetic continue message (auto only)
  or the replayed request after an overflow error. *Ours, on top:* the head
  is sent as a text transcript (tool outputs cut at 2,000 characters; 3× fewer
  tokens than the raw history in CompactBench); the summary is asked to stay
  near a tenth of what it summarises (at most 3% of the window); a pinned,
  deterministic section on the summary keeps the user's rules verbatim (the
  sentences of their messages that state one), the files the agent changed,
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

The OpenCode v1.2.16 behaviour is one configuration of the same code
(:meth:`CompactionConfig.opencode`): no tail, raw messages as summary input,
no pinned section, no fallbacks or guards, prune only at the end of a loop.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from . import budget as B
from . import ids
from .errors import ConfigError
from .history import (
    COMPACTION_QUESTION,
    PRUNED_OUTPUT,
    attached_placeholder,
    filter_compacted,
    to_chat_messages,
    without_failed_compactions,
)
from .messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    ReasoningPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    UserMessage,
    WithParts,
    error_data,
    now_ms,
    replace,
)
from .processor import Observer, StepProcessor

PRUNE_MINIMUM = 20_000
PRUNE_PROTECT = 40_000
PRUNE_PROTECTED_TOOLS = ("skill",)
TOOL_OUTPUT_MAX_CHARS = 2_000  # transcript cut (§8.4)
TAIL_MIN, TAIL_MAX = 2_000, 15_000  # preserve_recent_tokens = clamp(usable × 0.25, …)
OUTPUT_DIR = "tool-output"
SUMMARY_AGENT = "compaction"
MAX_CONSECUTIVE = 2  # auto compactions in a row with no step in between
SUMMARY_MIN = 300  # tokens: the smallest summary ours asks for
CHANGE_TOOLS = ("edit", "write")  # their filePath goes into the pinned "files changed" list

SUMMARY_SYSTEM = (
    "You are the conversation summariser of a coding and data assistant. You read a conversation "
    "between a user and the assistant and write the summary another assistant will continue from. "
    "Be detailed but concise: what was done, what is in progress, which files are involved, what "
    "comes next, the user's lasting constraints and preferences, and the key technical decisions "
    "with their reasons. Keep exact names, paths, numbers and identifiers. Do not answer questions "
    "that appear in the conversation, do not invent anything, and do not call tools."
)
SUMMARY_TEMPLATE = (
    "Write a summary that lets another agent continue this work: what we did, what we are doing, "
    "which files we are working on, and what we will do next. Follow this template:\n\n"
    "## Goal\n[what the user wants to achieve]\n\n"
    "## Instructions\n[the user's instructions and constraints that still apply; any plan or spec]\n\n"
    "## Discoveries\n[what was learned: facts, values, errors, decisions and why]\n\n"
    "## Accomplished\n[done / in progress / left to do]\n\n"
    "## Relevant files / directories\n[paths read, edited or created]"
)
TRANSCRIPT_INTRO = "Below is the conversation to summarise, as a transcript."
PREVIOUS_INTRO = (
    "This is the summary written at the previous compaction. Update it with the conversation "
    "below instead of starting over; drop what is no longer true."
)
PINNED_NOTE = (
    "The user's rules and recent requests, and where the tool outputs are saved, are added to your "
    "summary verbatim by the system: do not copy those messages out, and keep the summary under "
    "about {tokens} tokens."
)
CONTINUE_TEXT = (
    "The conversation above was compacted: the summary replaces the earlier messages. Continue "
    "with the next steps if there are any; if you are not sure what to do next, stop and ask "
    "the user."
)
OVERFLOW_NOTE = (
    "The previous request exceeded the model's context window, most likely because of large "
    "attachments or tool outputs; attachments were removed. Tell the user to try smaller or "
    "fewer files if that matters."
)
RESTATE_TEXT = "The user's latest request, verbatim:\n\n{text}"
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# A sentence that states a rule, a preference or a changed fact: kept verbatim across compactions.
_RULE = re.compile(
    r"\b(never|always|must|mustn't|do not|don't|should|shouldn't|only|instead|prefer|avoid|make sure|"
    r"remember|from now on|is now|are now|renamed|no longer|keep|use)\b", re.IGNORECASE)
PINNED_HEADER = "---\n*Pinned from the history (verbatim, not summarised):*"


# --------------------------------------------------------------------------
# settings


@dataclass(frozen=True)
class CompactionConfig:
    """Resolved compaction settings. The first block are user settings
    (``%config AgentMagics.compaction = {...}``); the second are policy switches
    the benchmark uses to reproduce OpenCode v1.2.16 with the same code."""

    auto: bool = True
    prune: bool = True
    reserved: int | None = None
    threshold: float = 1.0  # compact when the last step's count >= usable × threshold
    prune_protect: int = PRUNE_PROTECT
    prune_minimum: int = PRUNE_MINIMUM
    protected_tools: tuple[str, ...] = PRUNE_PROTECTED_TOOLS
    tail_turns: int = 1  # the current (or just finished) turn; the latest request is restated if cut
    preserve_recent_tokens: int | None = None
    model: str | None = None  # "provider/model" for the summary calls

    summary_input: str = "transcript"  # or "messages" (v1.2.16: the raw history)
    scale_prune: bool = True  # cap protect/minimum by the window
    pin: bool = True  # pinned user messages + saved-output pointers on the summary
    prune_tail: bool = True  # at a summary, clear (recoverably) all outputs but the newest few
    tail_output_share: float = 0.01  # ours: the newest outputs kept verbatim ≈ usable × share (≤ 4000)
    restate: bool = True  # the continue message restates a summarised latest request
    fallbacks: bool = True  # shrink the summary request instead of giving up
    guard: bool = True  # no-gain / consecutive / inflation guards
    smart_replay: bool = True  # replay the request only if the overflow hit the turn's first step
    skip_turn_end_continue: bool = True  # no continue message when the turn already finished
    legacy_reserved: bool = False  # v1.2.16's isOverflow: reserved not subtracted without an input limit
    pin_requests: int = 0  # ours: earlier requests (first sentence) pinned beside the rules
    summary_share: float = 0.03  # ours: summary target ≈ usable × share (clamped 300..4000)

    USER_KEYS: ClassVar[tuple[str, ...]] = (
        "auto", "prune", "reserved", "threshold", "prune_protect", "prune_minimum",
        "protected_tools", "tail_turns", "preserve_recent_tokens", "model",
    )

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None, model: B.ModelInfo | None = None) -> "CompactionConfig":
        """Validate ``settings`` (``Settings.compaction``); a model's ``compaction_threshold`` override wins."""
        s = dict(settings or {})
        unknown = sorted(set(s) - set(cls.USER_KEYS))
        if unknown:
            raise ConfigError(f"unknown compaction setting(s) {unknown}; valid: {sorted(cls.USER_KEYS)}")
        kw: dict[str, Any] = {}
        for key in ("auto", "prune"):
            if key in s and s[key] is not None:
                if not isinstance(s[key], bool):
                    raise ConfigError(f"compaction[{key!r}] must be True or False, got {s[key]!r}")
                kw[key] = s[key]
        for key in ("reserved", "prune_protect", "prune_minimum", "tail_turns", "preserve_recent_tokens"):
            if key in s and s[key] is not None:
                value = s[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"compaction[{key!r}] must be a whole number >= 0, got {value!r}")
                kw[key] = value
        threshold = s.get("threshold")
        if model is not None and model.extra.get("compaction_threshold") is not None:
            threshold = model.extra["compaction_threshold"]
        if threshold is not None:
            kw["threshold"] = _check_threshold(threshold, "compaction['threshold']")
        if s.get("protected_tools") is not None:
            tools = s["protected_tools"]
            if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):
                raise ConfigError(f"compaction['protected_tools'] must be a list of tool names, got {tools!r}")
            kw["protected_tools"] = tuple(tools)
        if s.get("model"):
            if not isinstance(s["model"], str) or "/" not in s["model"]:
                raise ConfigError(f"compaction['model'] must be a 'provider/model' id, got {s['model']!r}")
            kw["model"] = s["model"]
        return cls(**kw)

    @classmethod
    def opencode(cls, **changes: Any) -> "CompactionConfig":
        """OpenCode v1.2.16 as specified: prune at loop end, summary of everything, no tail."""
        base = dict(
            tail_turns=0, summary_input="messages", scale_prune=False, pin=False, prune_tail=False,
            restate=False, fallbacks=False, guard=False, smart_replay=False,
            skip_turn_end_continue=False,
        )
        base.update(changes)
        return cls(**base)

    def with_changes(self, **changes: Any) -> "CompactionConfig":
        return replace(self, **changes)

    # -- numbers for one model ------------------------------------------------

    def budget(self, model: B.ModelInfo) -> B.Budget:
        limits = B.budget(model, self.reserved)
        if self.legacy_reserved and not model.input:
            return B.Budget(limits.context, limits.max_output, limits.reserved,
                            max(0, model.context - limits.max_output))
        return limits

    def trigger(self, model: B.ModelInfo) -> int:
        """The last step's token count at which auto compaction starts."""
        return int(self.budget(model).usable * self.threshold)

    def is_overflow(self, tokens: Tokens, model: B.ModelInfo) -> bool:
        if not self.auto or model.context == 0:
            return False
        return tokens.count >= self.trigger(model)

    def prune_limits(self, model: B.ModelInfo) -> tuple[int, int]:
        """(protect, minimum) in estimated tokens, capped by the window for ours."""
        if not self.scale_prune or model.context == 0:
            return self.prune_protect, self.prune_minimum
        usable = self.budget(model).usable
        return min(self.prune_protect, max(2_000, usable // 4)), min(self.prune_minimum, max(1_000, usable // 8))

    def tail_budget(self, model: B.ModelInfo) -> int:
        if self.preserve_recent_tokens is not None:
            return self.preserve_recent_tokens
        return min(TAIL_MAX, max(TAIL_MIN, self.budget(model).usable // 4))

    def summary_target(self, model: B.ModelInfo) -> int:
        return min(4_000, max(SUMMARY_MIN, int(self.budget(model).usable * self.summary_share)))

    def tail_output_budget(self, model: B.ModelInfo) -> int:
        return min(4_000, int(self.budget(model).usable * self.tail_output_share))


def _check_threshold(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{what} must be a ratio of the usable window, 0 < r <= 1 (e.g. 0.8), got {value!r}")
    return float(value)


# --------------------------------------------------------------------------
# the event


_EVENT_KEYS = {"session_id": "sessionID"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


@dataclass(frozen=True)
class CompactionEvent:
    """One prune or summary compaction, as stored (journal kind ``event``) and
    queried (view ``compaction_event``). Token numbers are the estimated size
    of the next model request (chars / 4, calibrated by the last reported
    usage), so before and after compare like with like."""

    JOURNAL_KIND: ClassVar[str] = "event"
    TYPE: ClassVar[str] = "compaction"

    id: str
    session_id: str
    kind: str  # "prune" | "summary"
    cause: str  # "auto" | "manual" | "overflow"
    outcome: str  # "ok" | "rejected" | "failed" | "no-gain"
    time_created: int
    duration_ms: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    usable: int = 0
    trigger: int = 0
    step_tokens: int | None = None  # the reported usage that triggered it
    parts_pruned: int = 0
    tokens_pruned: int = 0
    head_messages: int = 0
    head_tokens: int = 0
    tail_messages: int = 0
    tail_tokens: int = 0
    summary_tokens: int = 0  # what the model sees of the summary (text + pinned), estimated
    summary_input_tokens: int = 0  # prompt tokens of the summary calls, as reported
    summary_output_tokens: int = 0
    llm_calls: int = 0
    cost: float = 0.0
    summary_input: str | None = None  # "transcript" | "messages"
    model: str | None = None
    request_id: str | None = None
    summary_id: str | None = None
    tail_start_id: str | None = None
    attempts: tuple = ()  # per summary call: {"level", "inputTokens", "outcome"}
    error: str | None = None

    @property
    def tokens_freed(self) -> int:
        return self.tokens_before - self.tokens_after

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[_EVENT_KEYS.get(f.name) or _camel(f.name)] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "CompactionEvent":
        kw = {}
        for f in fields(cls):
            key = _EVENT_KEYS.get(f.name) or _camel(f.name)
            if key in data:
                kw[f.name] = tuple(data[key]) if f.name == "attempts" else data[key]
        return cls(**kw)


@dataclass
class CompactionResult:
    event: CompactionEvent
    added: list[WithParts] = field(default_factory=list)
    message: str = ""  # one line when the outcome is not "ok"

    @property
    def ok(self) -> bool:
        return self.event.outcome == "ok"


# --------------------------------------------------------------------------
# pure helpers


def is_request(item: WithParts) -> bool:
    return isinstance(item.info, UserMessage) and any(isinstance(p, CompactionPart) for p in item.parts)


def is_real_user(item: WithParts) -> bool:
    """A user message the user wrote: not a compaction request, not only synthetic text."""
    if not isinstance(item.info, UserMessage) or is_request(item):
        return False
    return any((isinstance(p, TextPart) and not p.synthetic and not p.ignored) or isinstance(p, FilePart)
               for p in item.parts)


def user_text(item: WithParts) -> str:
    return "\n\n".join(p.text for p in item.parts if isinstance(p, TextPart) and not p.synthetic and not p.ignored)


def is_summary(item: WithParts) -> bool:
    return isinstance(item.info, AssistantMessage) and bool(item.info.summary)


def plan_prune(
    history: Sequence[WithParts],
    *,
    protect: int = PRUNE_PROTECT,
    minimum: int = PRUNE_MINIMUM,
    protected_tools: Sequence[str] = PRUNE_PROTECTED_TOOLS,
) -> tuple[list[ToolPart], int]:
    """OpenCode's prune walk (§3.2): the tool parts to clear and their estimated tokens.

    Newest → oldest: skip until two user messages were seen, stop at a summary
    or at an output already cleared, keep the newest ``protect`` tokens of tool
    output, clear the rest if that is more than ``minimum`` (else nothing).
    """
    turns = total = pruned = 0
    chosen: list[ToolPart] = []
    for item in reversed(history):
        if isinstance(item.info, UserMessage):
            turns += 1
        if turns < 2:
            continue
        if is_summary(item):
            break
        stop = False
        for part in reversed(item.parts):
            if not (isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)):
                continue
            if part.tool in protected_tools:
                continue
            if part.state.time_compacted:
                stop = True
                break
            est = B.estimate(part.state.output)
            total += est
            if total > protect:
                pruned += est
                chosen.append(part)
        if stop:
            break
    if pruned > minimum:
        return chosen, pruned
    return [], 0


def select_tail(items: Sequence[WithParts], *, turns: int, budget: int,
                size: Callable[[Sequence[WithParts]], int]) -> int:
    """Where the verbatim tail starts in ``items`` (``len(items)``: no tail), §8.4.

    Walk the real user turns backwards, at most ``turns`` of them; add whole
    turns while they fit ``budget``; if the next one does not fit, start at the
    latest message of it that does.
    """
    if turns <= 0 or budget <= 0:
        return len(items)
    starts = [i for i, item in enumerate(items) if is_real_user(item)]
    start = end = len(items)
    total = 0
    for s in reversed(starts[-turns:]):
        n = size(items[s:end])
        if total + n <= budget:
            total, start, end = total + n, s, s
            continue
        for j in range(s + 1, end):
            if total + size(items[j:end]) <= budget:
                start = j
                break
        break
    return start


def transcript(items: Sequence[WithParts], *, tool_chars: int = TOOL_OUTPUT_MAX_CHARS,
               originals: bool = True) -> str:
    """The head as text (§8.4): ``[User]:``, ``[Assistant]:``, ``[Assistant reasoning]:``,
    ``[Assistant tool call]: name(json)``, ``[Tool result]:``. Tool output is cut at
    ``tool_chars`` (+ ``[truncated]`` and where the full text is). With ``originals``
    (ours) a pruned output is shown as it was, since the summariser has not seen it."""
    lines: list[str] = []
    for item in items:
        info = item.info
        if isinstance(info, UserMessage):
            for part in item.parts:
                if isinstance(part, TextPart) and not part.ignored and part.text:
                    lines.append(f"[User]: {part.text}")
                elif isinstance(part, FilePart) and part.mime not in ("text/plain", "application/x-directory"):
                    lines.append(f"[User]: {attached_placeholder(part)}")
                elif isinstance(part, CompactionPart):
                    lines.append(f"[User]: {COMPACTION_QUESTION}")
            continue
        if info.error and info.error.get("name") != "MessageAbortedError":
            continue
        for part in item.parts:
            if isinstance(part, TextPart) and part.text and not part.ignored:
                lines.append(f"[Assistant]: {part.text}")
            elif isinstance(part, ReasoningPart) and part.text:
                lines.append(f"[Assistant reasoning]: {part.text}")
            elif isinstance(part, ToolPart):
                lines.append(f"[Assistant tool call]: {part.tool}({json.dumps(part.state.input, ensure_ascii=False)})")
                lines.append(f"[Tool result]: {_transcript_output(part, tool_chars, originals)}")
    return "\n\n".join(lines)


def _transcript_output(part: ToolPart, limit: int, originals: bool) -> str:
    state = part.state
    if isinstance(state, ToolError):
        return state.error
    if not isinstance(state, ToolCompleted):
        return "[Tool execution was interrupted]"
    if state.time_compacted and not originals:
        return PRUNED_OUTPUT
    text = state.output
    if len(text) > limit:  # the full text is in the session's archive (pinned on the summary)
        text = text[:limit] + "\n[truncated]"
    return text


def water_fill(texts: Sequence[str], budget_chars: int) -> list[str]:
    """Cut the longest texts first so that all of them fit ``budget_chars``; each keeps its head."""
    if sum(len(t) for t in texts) <= budget_chars or not texts:
        return list(texts)
    lengths = sorted(len(t) for t in texts)
    remaining, n, cap = budget_chars, len(texts), 0
    for i, length in enumerate(lengths):
        share = remaining // (n - i)
        if length <= share:
            remaining -= length
            continue
        cap = max(40, share)
        break
    return [t if len(t) <= cap else t[:cap].rstrip() + " […]" for t in texts]


# --------------------------------------------------------------------------
# the compactor


@dataclass
class Compactor:
    """Prune and compact one session's history (a list of ``WithParts``, mutated in place).

    ``request_tokens(chat)`` estimates the main model's request for a chat list
    (system message included), tools schemas added; it is calibrated by
    :meth:`observe` against the usage the server reports.
    """

    config: CompactionConfig
    store: Any
    model: B.ModelInfo
    data_dir: Path
    system_prompt: str
    tools_tokens: int = 0
    summary_provider: Any = None  # .stream(request)
    summary_model: B.ModelInfo | None = None
    summary_request: Callable[[list[dict], int | None], Any] | None = None  # (chat, max_tokens) → ChatRequest
    max_retries: int = 2
    cwd: str = "."
    sleep: Callable[[float], None] = time.sleep
    state: dict = field(default_factory=dict)  # kept by the session between turns: the calibration ratio
    consecutive: int = 0  # auto compactions since the last step that stayed under the trigger
    disabled: bool = False  # set by the loop after an auto compaction that did not make room

    @property
    def ratio(self) -> float:
        return self.state.get("ratio", 1.0)

    @ratio.setter
    def ratio(self, value: float) -> None:
        self.state["ratio"] = value

    # -- sizes -----------------------------------------------------------------

    @property
    def usable(self) -> int:
        return self.config.budget(self.model).usable

    @property
    def trigger(self) -> int:
        return self.config.trigger(self.model)

    def raw_tokens(self, chat: list[dict]) -> int:
        return B.estimate(json.dumps(chat, ensure_ascii=False)) + self.tools_tokens

    def chat(self, history: Sequence[WithParts]) -> list[dict]:
        """What the main model would be sent next (the loop builds the same list)."""
        visible = without_failed_compactions(filter_compacted(history))
        return [{"role": "system", "content": self.system_prompt}, *to_chat_messages(visible)]

    def context_tokens(self, history: Sequence[WithParts]) -> int:
        """The next main request's size, estimated and calibrated."""
        return int(self.raw_tokens(self.chat(history)) * self.ratio)

    def observe(self, chat: list[dict], tokens: Tokens | None) -> None:
        """Calibrate chars/4 against a step's reported prompt tokens (clamped to 0.5–2×)."""
        if tokens is None or tokens.estimated or tokens.prompt <= 0:
            return
        est = self.raw_tokens(chat)
        if est > 0:
            self.ratio = min(2.0, max(0.5, tokens.prompt / est))

    def is_overflow(self, tokens: Tokens) -> bool:
        """Auto compaction is due (and not switched off for this turn by a compaction that failed)."""
        return not self.disabled and self.config.is_overflow(tokens, self.model)

    def step_done(self, tokens: Tokens) -> None:
        """A normal step finished under the trigger: compaction made progress."""
        if not self.is_overflow(tokens):
            self.consecutive = 0

    def _size(self, items: Sequence[WithParts]) -> int:
        return B.estimate(json.dumps(to_chat_messages(items), ensure_ascii=False))

    # -- prune -------------------------------------------------------------------

    def prune(self, history: list[WithParts], *, cause: str = "auto") -> CompactionEvent | None:
        """OpenCode's end-of-loop prune; records an event when something was cleared."""
        if not self.config.prune or not history:
            return None
        start = time.monotonic()
        protect, minimum = self.config.prune_limits(self.model)
        parts, tokens = plan_prune(history, protect=protect, minimum=minimum,
                                   protected_tools=self.config.protected_tools)
        if not parts:
            return None
        before = self.context_tokens(history)
        self._clear(history, parts)
        event = self._event(history, "prune", cause, "ok", start, tokens_before=before,
                            tokens_after=self.context_tokens(history), parts_pruned=len(parts),
                            tokens_pruned=tokens)
        self._record(event)
        return event

    def _clear(self, history: list[WithParts], parts: Sequence[ToolPart]) -> int:
        """Mark ``parts`` pruned (saving their output once) and write them; returns tokens cleared."""
        if not parts:
            return 0
        now = now_ms()
        wanted = {p.id for p in parts}
        updated: dict[str, ToolPart] = {}
        cleared = 0
        for i, item in enumerate(history):
            if not any(p.id in wanted for p in item.parts):
                continue
            new_parts = []
            for part in item.parts:
                if part.id in wanted and isinstance(part.state, ToolCompleted) and not part.state.time_compacted:
                    metadata = dict(part.state.metadata or {})
                    if not metadata.get("outputPath"):
                        metadata["outputPath"] = self._save_output(part)
                    part = replace(part, state=replace(part.state, time_compacted=now, metadata=metadata))
                    updated[part.id] = part
                    cleared += B.estimate(part.state.output)
                new_parts.append(part)
            history[i] = WithParts(item.info, tuple(new_parts))
        if updated:
            self.store.put(*updated.values())
            self.store.flush(sync=False)
        return cleared

    def _save_output(self, part: ToolPart) -> str:
        path = Path(self.data_dir) / OUTPUT_DIR / part.id
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(part.state.output, encoding="utf-8", newline="")
        return str(path)

    # -- summary compaction ---------------------------------------------------------

    def compact(
        self,
        history: list[WithParts],
        *,
        cause: str,
        auto: bool,
        continue_after: bool = True,
        instructions: str | None = None,
        step_tokens: int | None = None,
        observer: Observer | None = None,
    ) -> CompactionResult:
        """Summarise the head of ``history``; see the module docstring. Never raises for a
        failed compaction (the result says why); a provider error is re-raised after the
        event is recorded."""
        observer = observer or Observer()
        start = time.monotonic()
        cfg = self.config
        added: list[WithParts] = []
        before = self.context_tokens(history)
        if auto and cfg.guard:
            self.consecutive += 1
        common = dict(tokens_before=before, step_tokens=step_tokens)
        fixed = self.raw_tokens([{"role": "system", "content": self.system_prompt}])
        if auto and cfg.guard and self.trigger and int(fixed * self.ratio) >= self.trigger:
            return self._finish(history, added, start, cause, "no-gain", common, message=self._limit_text(
                int(fixed * self.ratio), "the system prompt and tool definitions alone fill the window"))
        if auto and cfg.guard and self.consecutive > MAX_CONSECUTIVE:
            return self._finish(history, added, start, cause, "no-gain", common,
                                message=self._limit_text(before, "compaction already ran twice in this turn "
                                                                 "without making room"))
        last_user = next((m for m in reversed(history) if isinstance(m.info, UserMessage)), None)
        if last_user is None:
            return self._finish(history, added, start, cause, "failed", common, message="nothing to compact yet")

        # 1. what is visible now: previous summary / head / tail / replay
        visible = without_failed_compactions(filter_compacted(history))
        previous = next((m for m in visible if is_summary(m)), None)
        items = [m for m in visible if not is_request(m) and not is_summary(m)]
        replay = None
        if cause == "overflow":
            replay = self._replay_target(items)
            if replay is not None:
                idx = items.index(replay)
                if any(is_real_user(m) for m in items[:idx]) or previous is not None:
                    items = items[:idx]
                else:
                    replay = None

        pruned_parts = pruned_tokens = 0
        if cfg.prune_tail and cfg.prune:
            # The head's outputs leave the view with the summary anyway, and the tail keeps its
            # messages verbatim: only its newest outputs (within a small budget) stay as they are;
            # every other output becomes a placeholder naming its saved file.
            room, keep, targets = cfg.tail_output_budget(self.model), True, []
            for m in reversed(items):
                for p in reversed(m.parts):
                    if not (isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)) \
                            or p.state.time_compacted or p.tool in cfg.protected_tools:
                        continue
                    size = B.estimate(p.state.output)
                    if keep and size <= room:
                        room -= size
                        continue
                    keep = False
                    targets.append(p)
            if targets:
                pruned_parts, pruned_tokens = len(targets), self._clear(history, targets)
                fresh = {m.info.id: m for m in history}
                items = [fresh.get(m.info.id, m) for m in items]
                if previous is not None:
                    previous = fresh.get(previous.info.id, previous)
        common.update(parts_pruned=pruned_parts, tokens_pruned=pruned_tokens)

        tail_turns = 0 if replay is not None else cfg.tail_turns
        target = cfg.summary_target(self.model) if cfg.pin else 0
        tail_budget = cfg.tail_budget(self.model)
        if cfg.guard and self.trigger:  # the tail must leave room for the summary and some work
            tail_budget = min(tail_budget, max(0, self.trigger // 2 - fixed - target))
        cut = select_tail(items, turns=tail_turns, budget=tail_budget, size=self._size)
        while cut == 0 and tail_turns > 0:  # everything fits the tail: keep less so there is a head
            tail_turns -= 1
            cut = select_tail(items, turns=tail_turns, budget=tail_budget, size=self._size)
        head, tail = items[:cut], items[cut:]
        if not head:
            return self._finish(history, added, start, cause, "failed", common,
                                message="nothing to compact: no messages since the last summary")

        # 2. the request (created now, so that it is newer than every tail message)
        request = self._request(last_user.info, auto=auto, overflow=cause == "overflow")
        history.append(request)
        added.append(request)
        common["request_id"] = request.info.id
        for part in request.parts:
            observer.on_part(part)
        pair = [m for m in visible if is_request(m) or is_summary(m)]
        common.update(head_messages=len(head), head_tokens=self._size(head), tail_messages=len(tail),
                      tail_tokens=self._size(tail), tail_start_id=tail[0].info.id if tail else None,
                      summary_input=cfg.summary_input)

        # 3. the summary, with fallbacks when its request does not fit. Ours asks for about a tenth
        # of what it summarises, at most the window's share: the tail and the pinned rules are kept
        # verbatim beside it, so the summary need not restate them.
        if cfg.pin:
            content = B.estimate(transcript(head)) + (self._size([previous]) if previous is not None else 0)
            target = min(target, max(SUMMARY_MIN, content // 10))
        summary_item, attempts, error = self._summarise(history, added, request, previous, pair, head,
                                                        replay, instructions, target, observer)
        calls = [a for a in attempts if a.get("sent")]
        common.update(llm_calls=len(calls), attempts=tuple(attempts),
                      cost=sum(m.info.cost for m in added if isinstance(m.info, AssistantMessage)),
                      summary_input_tokens=sum(a.get("inputTokens", 0) for a in calls),
                      summary_output_tokens=sum(a.get("outputTokens", 0) for a in calls),
                      model=f"{self._summary_model().provider_id}/{self._summary_model().model_id}")
        if summary_item is None:
            limit = self._summary_model()
            return self._finish(history, added, start, cause, "failed", common, message=error or (
                f"the conversation is too large to compact: "
                f"{'even a shortened' if cfg.fallbacks else 'the'} summary request does not fit "
                f"{limit.provider_id}/{limit.model_id}'s {limit.context:,}-token context — start a new "
                "session with %%agent --new"))
        common["summary_id"] = summary_item.info.id

        # 4. pinned section, then the inflation guard
        if cfg.pin:
            archive = self._archive(head)
            summary_item = self._pin(history, summary_item, head, tail, replay, observer, archive)
        summary_tokens = self._size([summary_item])
        common["summary_tokens"] = summary_tokens
        replaced = common["head_tokens"] + (self._size([previous]) if previous is not None else 0)
        if cfg.guard and summary_tokens >= replaced:
            self._reject(history, summary_item, f"the summary ({summary_tokens:,} tokens) is not smaller "
                                                f"than what it replaces ({replaced:,})")
            return self._finish(history, added, start, cause, "rejected", common, message=self._limit_text(
                before, "the summary would not be smaller than the messages it replaces"))

        # 5. the tail marker, then what follows a summary
        if tail:
            part = replace(request.parts[0], tail_start_id=tail[0].info.id)
            self.store.put(part)
            request = WithParts(request.info, (part, *request.parts[1:]))
            _put_back(history, request)
        if auto and replay is not None:
            item = self._replay(replay, request.info)
            history.append(item)
            added.append(item)
        elif auto and continue_after:
            item = self._continue(request.info, history, tail, overflow=cause == "overflow")
            if item is not None:
                history.append(item)
                added.append(item)
        self.store.flush(sync=True)
        after = self.context_tokens(history)
        outcome = "ok"
        message = ""
        if cfg.guard and auto and self.trigger and after >= self.trigger:
            outcome, message = "no-gain", self._limit_text(after, "after compaction the kept context still "
                                                                  "fills the window")
        return self._finish(history, added, start, cause, outcome, common, message=message, tokens_after=after)

    # -- pieces ------------------------------------------------------------------

    def _request(self, last_user: UserMessage, *, auto: bool, overflow: bool) -> WithParts:
        info = UserMessage(id=ids.ascending("message"), session_id=last_user.session_id, time_created=now_ms(),
                           model=last_user.model, agent=last_user.agent)
        part = CompactionPart(ids.ascending("part"), info.session_id, info.id, auto=auto, overflow=overflow or None)
        self.store.put(info, part)
        self.store.flush(sync=False)
        return WithParts(info, (part,))

    def _replay_target(self, items: Sequence[WithParts]) -> WithParts | None:
        """The newest real user message; ours only replays it when the overflow hit the turn's
        first step (everything after it is the failed step), since replaying a turn that had
        already run tools would run them again and overflow again."""
        users = [i for i, m in enumerate(items) if is_real_user(m)]
        if not users:
            return None
        idx = users[-1]
        if self.config.smart_replay:
            after = items[idx + 1:]
            if any(isinstance(m.info, AssistantMessage) and not m.info.error for m in after):
                return None
        return items[idx]

    def _summary_model(self) -> B.ModelInfo:
        return self.summary_model or self.model

    def _summarise(self, history, added, request, previous, pair, head, replay, instructions, target,
                   observer) -> tuple[WithParts | None, list[dict], str | None]:
        cfg = self.config
        model = self._summary_model()
        limit = B.budget(model, None).usable if model.context else 0
        levels = self._levels(head) if cfg.fallbacks else [(head, TOOL_OUTPUT_MAX_CHARS)]
        attempts: list[dict] = []
        for level, (part_head, chars) in enumerate(levels):
            chat = self._summary_chat(request, previous, pair, part_head, replay, chars, instructions, target)
            est = B.estimate(json.dumps(chat, ensure_ascii=False))
            if cfg.fallbacks and limit and est >= limit and level < len(levels) - 1:
                attempts.append({"level": level, "estimatedTokens": est, "outcome": "skipped", "sent": False})
                continue
            item, outcome = self._summary_call(history, added, request, chat, target, observer)
            tokens = item.info.tokens
            attempts.append({"level": level, "estimatedTokens": est, "inputTokens": tokens.prompt,
                             "outputTokens": tokens.output, "outcome": outcome, "sent": True})
            if outcome == "ok":
                return item, attempts, None
            if outcome != "overflow" or not cfg.fallbacks:
                err = item.info.error or {}
                what = err.get("data", {}).get("message", outcome)
                return None, attempts, (f"compaction failed: {what}" if outcome != "overflow" else None)
        return None, attempts, None

    def _levels(self, head: list[WithParts]) -> list[tuple[list[WithParts], int]]:
        """Ever smaller summary inputs: full; short tool outputs; the oldest half of the head dropped (×3)."""
        levels = [(head, TOOL_OUTPUT_MAX_CHARS), (head, 300)]
        part = head
        for _ in range(3):
            starts = [i for i, m in enumerate(part) if is_real_user(m)]
            if len(part) < 2:
                break
            mid = len(part) // 2
            cut = next((s for s in starts if s >= mid), mid)
            part = part[cut:] or part[-1:]
            levels.append((part, 300))
        return levels

    def _summary_chat(self, request, previous, pair, head, replay, chars, instructions, target) -> list[dict]:
        cfg = self.config
        prompt = SUMMARY_TEMPLATE
        if cfg.pin:
            prompt += "\n\n" + PINNED_NOTE.format(tokens=target)
        if instructions:
            prompt += f"\n\nAdditional instructions from the user: {instructions}"
        system = {"role": "system", "content": SUMMARY_SYSTEM}
        if cfg.summary_input == "messages":
            # v1.2.16: the filtered history (earlier request and summary included), media stripped,
            # the request itself ("What did we do so far?") unless replaying, then the prompt.
            msgs = [*pair, *head, *([] if replay is not None else [request])]
            if chars < TOOL_OUTPUT_MAX_CHARS:
                msgs = [_short_outputs(m, chars) for m in msgs]
            return [system, *to_chat_messages(msgs, strip_media=True), {"role": "user", "content": prompt}]
        blocks = []
        if previous is not None:
            text = "\n\n".join(p.text for p in previous.parts
                               if isinstance(p, TextPart) and not p.synthetic and p.text)
            blocks.append(f"{PREVIOUS_INTRO}\n\n<previous-summary>\n{text}\n</previous-summary>")
        blocks.append(f"{TRANSCRIPT_INTRO}\n\n<transcript>\n{transcript(head, tool_chars=chars)}\n</transcript>")
        blocks.append(prompt)
        return [system, {"role": "user", "content": "\n\n".join(blocks)}]

    def _summary_call(self, history, added, request, chat, target, observer) -> tuple[WithParts, str]:
        model = self._summary_model()
        info = AssistantMessage(
            id=ids.ascending("message"), session_id=request.info.session_id, parent_id=request.info.id,
            time_created=now_ms(), provider_id=model.provider_id, model_id=model.model_id,
            agent=SUMMARY_AGENT, mode=SUMMARY_AGENT, path={"cwd": self.cwd, "root": self.cwd}, summary=True,
        )
        max_tokens = None
        if self.config.pin and model.output:
            max_tokens = min(model.max_output_tokens, max(1_024, target * 2))
        chat_request = self.summary_request(chat, max_tokens)
        processor = StepProcessor(
            store=self.store, stream=lambda: self.summary_provider.stream(chat_request), model=model,
            tools={}, run_tool=_no_tool, observer=observer, max_retries=self.max_retries,
            auto_compact=False, sleep=self.sleep,
        )
        try:
            result = processor.run(info)
        finally:
            item = WithParts(processor.message, tuple(processor.parts.values()))
            history.append(item)
            added.append(item)
        if result.outcome == "compact":
            return item, "overflow"
        message = result.message
        text = "".join(p.text for p in item.parts if isinstance(p, TextPart)).strip()
        problem = None
        if message.error:
            problem = message.error.get("data", {}).get("message", "error")
        elif result.tool_calls:
            problem = "the summariser called a tool"
        elif not text:
            problem = "the summary was empty"
        if problem:
            if not message.error:
                self._reject(history, item, problem, name="CompactionFailedError")
            return item, "failed"
        return item, "ok"

    def _reject(self, history, item: WithParts, why: str, name: str = "CompactionRejectedError") -> None:
        info = replace(item.info, error=error_data(name, why))
        self.store.put(info)
        self.store.flush(sync=False)
        _put_back(history, WithParts(info, next(m.parts for m in history if m.info.id == info.id)))

    def _archive(self, head: Sequence[WithParts]) -> Path | None:
        """Append the head's tool outputs (which leave the model's view now) to the session's
        archive, ``<data_dir>/tool-output/<session id>.outputs``, so one grep finds any of them."""
        path = Path(self.data_dir) / OUTPUT_DIR / f"{head[0].info.session_id if head else 'session'}.outputs"
        chunks = []
        for item in head:
            for p in item.parts:
                if not (isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)):
                    continue
                full = p.state.output
                saved = (p.state.metadata or {}).get("outputPath")
                if saved and (p.state.metadata or {}).get("truncated"):
                    try:
                        full = Path(saved).read_text(encoding="utf-8", errors="replace")
                    except OSError:
                        pass
                args = json.dumps(p.state.input, ensure_ascii=False)
                chunks.append(f"===== {p.id} · {p.tool} {args[:200]}\n{full}\n")
        if chunks:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8", newline="") as fh:
                fh.write("".join(chunks))
        return path if path.exists() else None

    def _pin(self, history, summary: WithParts, head, tail, replay, observer, archive=None) -> WithParts:
        """Append the deterministic pinned section: the rules the user stated (verbatim), the
        newest earlier requests, and where the earlier tool outputs are saved."""
        tail_ids = {m.info.id for m in tail}
        stop = replay.info.id if replay is not None else (tail[0].info.id if tail else None)
        summary_text = "".join(p.text for p in summary.parts if isinstance(p, TextPart))
        rules: list[str] = []
        requests: list[str] = []
        files: list[str] = []
        for item in history:
            if item.info.id in tail_ids or item.info.id >= summary.info.id or (stop and item.info.id >= stop):
                continue
            if is_real_user(item):
                text = user_text(item).strip()
                sentences = [x.strip() for x in _SENTENCE.split(text) if x.strip()]
                for sentence in sentences:
                    if _RULE.search(sentence) and sentence not in rules:
                        rules.append(sentence[:400])
                if sentences:
                    requests.append(sentences[0][:200])
            elif isinstance(item.info, AssistantMessage) and not item.info.summary:
                for p in item.parts:  # files the agent changed: edit/write calls that succeeded
                    if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) and p.tool in CHANGE_TOOLS:
                        path = p.state.input.get("filePath") or p.state.input.get("path")
                        if isinstance(path, str):
                            if path in files:
                                files.remove(path)
                            files.append(path)
        budget_chars = 4 * max(300, min(3_000, (self.usable or 8_000) // 16))
        rules = [r for r in rules if r not in summary_text]
        lines = [PINNED_HEADER]
        if rules:
            lines.append("The user's rules and changes, oldest first (in force unless a later one changes them):")
            lines += [f"- {r}" for r in water_fill(rules, budget_chars * 2 // 3)]
        used = sum(len(x) for x in lines)
        if files:
            shown_files, size = [], 0
            for path in reversed(files):
                if used + size + len(path) > budget_chars:
                    break
                shown_files.append(path)
                size += len(path) + 2
            lines.append(f"Files the agent changed, newest first ({len(shown_files)} of {len(files)}): "
                         + ", ".join(shown_files))
            used += size
        shown = []
        for text in reversed(requests[-self.config.pin_requests:] if self.config.pin_requests else []):
            if used + len(text) > budget_chars:
                break
            shown.append(f"- {text}")
            used += len(text) + 2
        if shown:
            lines.append(f"Earlier requests, newest first ({len(shown)} of {len(requests)}):")
            lines += shown
        if archive is not None:
            lines.append(f"All earlier tool outputs, in full: {archive} (grep it; a `=====` line starts each).")
        if len(lines) == 1:
            return summary
        part = TextPart(ids.ascending("part"), summary.info.session_id, summary.info.id,
                        text="\n\n" + "\n".join(lines), synthetic=True, metadata={"compaction": "pinned"})
        self.store.put(part)
        observer.on_part(part)
        new = WithParts(summary.info, (*summary.parts, part))
        _put_back(history, new)
        return new

    def _continue(self, request: UserMessage, history, tail, *, overflow: bool) -> WithParts | None:
        cfg = self.config
        latest = next((m for m in reversed(history) if is_real_user(m)), None)
        latest_in_tail = latest is not None and any(m.info.id == latest.info.id for m in tail)
        if cfg.skip_turn_end_continue and latest_in_tail and tail and tail[-1].info.id == latest.info.id:
            return None  # the tail already ends with the unanswered request: the model answers it
        text = CONTINUE_TEXT
        if overflow:
            text = OVERFLOW_NOTE + "\n\n" + text
        if cfg.restate and latest is not None and not latest_in_tail:
            text += "\n\n" + RESTATE_TEXT.format(text=user_text(latest))
        info = UserMessage(id=ids.ascending("message"), session_id=request.session_id, time_created=now_ms(),
                           model=request.model, agent=request.agent)
        part = TextPart(ids.ascending("part"), info.session_id, info.id, text=text, synthetic=True,
                        metadata={"compaction_continue": True})
        self.store.put(info, part)
        return WithParts(info, (part,))

    def _replay(self, original: WithParts, request: UserMessage) -> WithParts:
        src = original.info
        info = UserMessage(id=ids.ascending("message"), session_id=src.session_id, time_created=now_ms(),
                           model=src.model, agent=src.agent, system=src.system, variant=src.variant,
                           format=src.format)
        parts = []
        for p in original.parts:
            if isinstance(p, CompactionPart):
                continue
            if isinstance(p, FilePart) and p.mime.startswith(("image/", "application/pdf")):
                parts.append(TextPart(ids.ascending("part"), info.session_id, info.id, text=attached_placeholder(p)))
            else:
                parts.append(replace(p, id=ids.ascending("part"), message_id=info.id))
        self.store.put(info, *parts)
        return WithParts(info, tuple(parts))

    def _limit_text(self, tokens: int, why: str) -> str:
        b = self.config.budget(self.model)
        return (f"{why}: the conversation needs about {tokens:,} tokens and {self.model.provider_id}/"
                f"{self.model.model_id} allows {b.usable:,} (context {b.context:,} minus output and "
                f"{b.reserved:,} reserved) — start a new session with %%agent --new, or set a larger "
                "context in model_overrides")

    def _finish(self, history, added, start, cause, outcome, common, *, message="", tokens_after=None) -> CompactionResult:
        if tokens_after is None:
            tokens_after = self.context_tokens(history)
        event = self._event(history, "summary", cause, outcome, start, tokens_after=tokens_after,
                            error=message or None, **common)
        self._record(event)
        return CompactionResult(event, added, message)

    def _event(self, history, kind, cause, outcome, start, **values) -> CompactionEvent:
        session_id = history[0].info.session_id if history else ""
        return CompactionEvent(
            id=ids.ascending("event"), session_id=session_id, kind=kind, cause=cause, outcome=outcome,
            time_created=now_ms(), duration_ms=int((time.monotonic() - start) * 1000),
            usable=self.usable, trigger=self.trigger, **values,
        )

    def _record(self, event: CompactionEvent) -> None:
        self.store.put(event)
        self.store.flush(sync=True)


def _no_tool(tool, args, call):  # pragma: no cover - the summariser gets no tools
    raise RuntimeError("the compaction agent has no tools")


def _put_back(history: list[WithParts], item: WithParts) -> None:
    """Replace the message with ``item``'s id in ``history`` (newest first: it is usually recent)."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].info.id == item.info.id:
            history[i] = item
            return


def _short_outputs(item: WithParts, chars: int) -> WithParts:
    parts = []
    for p in item.parts:
        if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) and len(p.state.output) > chars:
            p = replace(p, state=replace(p.state, output=p.state.output[:chars] + "\n[truncated]"))
        parts.append(p)
    return WithParts(item.info, tuple(parts))


__all__ = [
    "CompactionConfig", "CompactionEvent", "CompactionResult", "Compactor", "plan_prune", "select_tail",
    "transcript", "water_fill", "PRUNE_PROTECT", "PRUNE_MINIMUM", "PRUNE_PROTECTED_TOOLS",
    "SUMMARY_SYSTEM", "SUMMARY_TEMPLATE", "CONTINUE_TEXT", "TOOL_OUTPUT_MAX_CHARS",
]
