"""The compaction replay lab: rerun a recorded session's context management offline under
other settings, and keep the result as rows beside the recorded run (``docs/compaction.md``).

:func:`replay` takes a recorded session (ours, or one imported from OpenCode), strips what
its own compaction did (compaction requests, summaries, continue messages, the prune
marks), and feeds its messages again, step by step, to a real :class:`Compactor` built
with the :class:`ReplayPolicy`'s settings, on a scratch store:

* **no model call** where none is needed: the context size of every step (the package's
  token estimate, calibrated on the recorded usage while both runs still see the same
  history), the trigger, the prune (protect / minimum / protected tools), the tail, the
  head a summary would replace;
* **a summary** where one is due: written by the policy's ``model`` (any ``provider/model``
  id the session could use), with its ``template`` if given; without a model, a
  placeholder of the recorded summaries' median size stands in (``summary_source`` says
  which), so the token accounting goes on.

Every step becomes one row of the ``compaction_replay`` view (journal kind ``event``, type
``compaction_replay``): the recorded tokens beside the replayed ones, and what the policy
did at that step (``prune`` / ``summary``, with tokens before and after, parts pruned,
summary calls and input). :func:`replays` lists the runs; :func:`plot_replay` draws a run
beside its recorded session. ``%agent compaction replay`` wraps :func:`replay`.

One module: the policy, the row, the run and its listing and plot read the same row shape (the
view's columns); apart, the writer and the readers of a row would drift.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..core import budget as B
from ..core import ids
from ..core.compaction_config import CompactionConfig
from ..core.errors import ProviderError, UsageError
from ..core.messages import (
    AssistantMessage,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    now_ms,
    replace,
)
from ..core.settings import Settings
from ..core.stream import Finish, StreamEvent, TextDelta
from ..loop.compaction import Compactor
from ..loop.compaction.items import is_real_user, is_request, is_summary
from ..loop.compaction.prompts import SUMMARY_TEMPLATE
from ..loop.compaction.strategy import ProductStrategy, SummaryInput
from ..providers.openai_provider import ChatRequest
from ..providers.registry import resolve, settings_model_info
from ..store import Store

# what --policy may set beside the compaction settings
POLICY_KEYS = ("name", "context", "output", "model", "template")
PLACEHOLDER = "[replay: no model chose what to keep; this stands for a summary of {n} tokens]"


@dataclass(frozen=True)
class ReplayPolicy:
    """The settings a session is replayed under.

    ``compaction``: keys of the ``compaction`` setting (``prune``, ``prune_protect``,
    ``prune_minimum``, ``tail_turns``, ``reserved``, ``threshold``, …) over the defaults;
    ``context`` / ``output``: the window (default: the recorded model's); ``model``: the
    ``provider/model`` that writes the summaries (None: no model call, a placeholder);
    ``template``: the summary template instead of ours (in ``--policy``: a file holding it)."""

    name: str = "policy"
    compaction: dict = field(default_factory=dict)
    context: int | None = None
    output: int | None = None
    model: str | None = None
    template: str | None = None

    @classmethod
    def parse(cls, text: str) -> ReplayPolicy:
        """``key=value`` pairs separated by commas or spaces, e.g. ``prune_protect=20000,
        tail_turns=1,context=32000,model=openai/gpt-4o-mini,name=small``."""
        values: dict[str, Any] = {}
        compaction: dict[str, Any] = {}
        for item in text.replace(",", " ").split():
            key, sep, raw = item.partition("=")
            if not sep or not key or not raw:
                raise UsageError(
                    f"--policy takes key=value pairs, got {item!r} — e.g. --policy "
                    "prune_protect=20000,tail_turns=1"
                )
            if key in values or key in compaction:
                raise UsageError(f"--policy: {key} is given twice — give each key once")
            value = _value(raw)
            if key == "template":  # a file holding the template
                try:
                    value = Path(raw).expanduser().read_text(encoding="utf-8")
                except OSError as err:
                    raise UsageError(
                        f"--policy template= names a file holding the summary template: {err}"
                    ) from err
            if key in POLICY_KEYS:
                values[key] = value
            elif key in CompactionConfig.USER_KEYS:
                compaction[key] = value
            else:
                known = ", ".join([*POLICY_KEYS, *CompactionConfig.USER_KEYS])
                raise UsageError(f"--policy: unknown key {key!r} — use one of {known}")
        for key in ("context", "output"):
            value = values.get(key)
            if key in values and (
                not isinstance(value, int) or isinstance(value, bool) or value <= 0
            ):
                raise UsageError(f"--policy: {key} must be a whole number of tokens above 0")
        _check_window(values.get("context"), values.get("output"))
        CompactionConfig.from_settings(compaction)  # validates, one line
        given: dict[str, Any] = {
            k: (str(v) if k in ("name", "model", "template") else v) for k, v in values.items()
        }
        return cls(compaction=compaction, **given)

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "compaction": dict(self.compaction),
            "context": self.context,
            "output": self.output,
            "model": self.model,
            "template": self.template,
        }


def _check_window(context: int | None, output: int | None) -> None:
    """The window must leave room for the input: ``output`` below ``context``."""
    if context and output and output >= context:
        raise UsageError(
            f"--policy: output ({output:,}) must be below context ({context:,}) — "
            "e.g. --policy context=32000,output=4000"
        )


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class ReplayRow:
    """One step of a replay (an event in the journal; the ``compaction_replay`` view)."""

    JOURNAL_KIND: ClassVar[str] = "event"

    id: str
    session_id: str
    replay_id: str
    policy: dict
    step: int  # 0, 1, … over the recorded session's steps
    turn: int  # the user turn the step belongs to
    message_id: str  # the recorded assistant message
    recorded_tokens: int  # what the recorded step used (reported, or estimated by the run)
    replay_tokens: int  # the same step's context under the policy (estimated, calibrated)
    action: str | None = None  # prune | summary
    outcome: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    parts_pruned: int | None = None
    tokens_pruned: int | None = None
    llm_calls: int | None = None
    summary_input_tokens: int | None = None
    summary_tokens: int | None = None
    summary_source: str | None = None  # model id, or "placeholder"
    recorded_action: str | None = None  # what the recorded run did after this step
    usable: int = 0
    trigger: int = 0
    time_created: int = 0

    def to_data(self) -> dict[str, Any]:
        data = {
            "type": "compaction_replay",
            "sessionID": self.session_id,
            "replayID": self.replay_id,
            "policy": self.policy,
            "step": self.step,
            "turn": self.turn,
            "messageID": self.message_id,
            "recordedTokens": self.recorded_tokens,
            "replayTokens": self.replay_tokens,
            "action": self.action,
            "outcome": self.outcome,
            "tokensBefore": self.tokens_before,
            "tokensAfter": self.tokens_after,
            "partsPruned": self.parts_pruned,
            "tokensPruned": self.tokens_pruned,
            "llmCalls": self.llm_calls,
            "summaryInputTokens": self.summary_input_tokens,
            "summaryTokens": self.summary_tokens,
            "summarySource": self.summary_source,
            "recordedAction": self.recorded_action,
            "usable": self.usable,
            "trigger": self.trigger,
            "time": {"created": self.time_created},
        }
        return {"id": self.id, **data}


@dataclass(frozen=True)
class ReplayResult:
    """One replayed session: its rows and totals beside the recorded run's."""

    replay_id: str
    session_id: str
    policy: ReplayPolicy
    rows: tuple[ReplayRow, ...]

    def totals(self) -> dict[str, Any]:
        rows = self.rows
        return {
            "session_id": self.session_id,
            "policy": self.policy.name,
            "steps": len(rows),
            "recorded_summaries": sum(1 for r in rows if r.recorded_action == "summary"),
            "replay_summaries": sum(1 for r in rows if r.action == "summary"),
            "replay_prunes": sum(1 for r in rows if r.action == "prune"),
            "recorded_peak": max((r.recorded_tokens for r in rows), default=0),
            "replay_peak": max((r.replay_tokens for r in rows), default=0),
            "summary_input_tokens": sum(r.summary_input_tokens or 0 for r in rows),
            "summary_calls": sum(r.llm_calls or 0 for r in rows if r.action == "summary"),
        }


class PlaceholderSummaries:
    """The summary "model" of a replay without one: a placeholder as large as ours asks a
    summary to be (a tenth of what it reads), at most ``cap`` tokens (the recorded summaries'
    median, when there are some), so the token accounting can go on; rows mark its summaries
    ``summary_source = 'placeholder'``."""

    def __init__(self, cap: int = 0) -> None:
        self.cap = cap

    def stream(self, request: Any) -> Iterator[StreamEvent]:
        read = B.estimate_chat(getattr(request, "messages", None) or [])
        tokens = max(50, read // 10)
        if self.cap:
            tokens = min(tokens, self.cap)
        head = PLACEHOLDER.format(n=tokens)
        text = head + " " + "." * max(0, 4 * tokens - len(head) - 1)
        yield TextDelta(text)
        yield Finish("stop", Tokens(input=read, output=B.estimate(text), estimated=True))


@dataclass
class _TemplateStrategy(ProductStrategy):
    """Ours, with another summary template."""

    template: str = SUMMARY_TEMPLATE

    def summary_chat(self, summary: SummaryInput) -> list[dict]:
        prompt = summary.prompt.replace(SUMMARY_TEMPLATE, self.template)
        return super().summary_chat(replace(summary, prompt=prompt))


def raw_history(history: Sequence[WithParts]) -> list[WithParts]:
    """A recorded history as it was before any compaction: no compaction requests, summaries
    or synthetic follow-ups, no prune marks."""
    out = []
    for item in history:
        if is_request(item) or is_summary(item):
            continue
        if isinstance(item.info, UserMessage) and not is_real_user(item):
            continue  # a continue / restated-request message
        info = item.info
        if isinstance(info, AssistantMessage) and (info.error or {}).get("name") == (
            "ContextOverflowError"
        ):
            continue  # the step the recorded window refused
        parts = tuple(
            replace(p, state=replace(p.state, time_compacted=None))
            if isinstance(p, ToolPart)
            and isinstance(p.state, ToolCompleted)
            and p.state.time_compacted
            else p
            for p in item.parts
        )
        out.append(WithParts(item.info, parts))
    return out


def _renumbered(item: WithParts, parent: dict[str, str]) -> WithParts:
    """The item with fresh ascending ids (the replay's own compaction messages come later in
    id order than anything it has fed in)."""
    new_id = ids.ascending("message")
    parent[item.info.id] = new_id
    changes: dict[str, Any] = {"id": new_id}
    if isinstance(item.info, AssistantMessage) and item.info.parent_id:
        changes["parent_id"] = parent.get(item.info.parent_id, item.info.parent_id)
    info = replace(item.info, **changes)
    parts = tuple(replace(p, id=ids.ascending("part"), message_id=new_id) for p in item.parts)
    return WithParts(info, parts)


def _is_step(item: WithParts) -> bool:
    info = item.info
    return isinstance(info, AssistantMessage) and not info.summary and info.tokens.count > 0


def _tokens(step: WithParts) -> Tokens:
    """What a step (:func:`_is_step`) recorded it used."""
    assert isinstance(step.info, AssistantMessage)
    return step.info.tokens


def _recorded_actions(recorded: Sequence[WithParts]) -> dict[str, str]:
    """Recorded step id → the compaction that followed it (a summary), read from the history."""
    out: dict[str, str] = {}
    last_step = None
    for item in recorded:
        if _is_step(item):
            last_step = item.info.id
        elif is_summary(item) and last_step is not None:
            out[last_step] = "summary"
    return out


def _model_info(store: Any, session_id: str, policy: ReplayPolicy, settings: Any) -> B.ModelInfo:
    first = next(
        (m.info for m in store.messages(session_id) if isinstance(m.info, AssistantMessage)),
        None,
    )
    spec = f"{first.provider_id}/{first.model_id}" if first is not None else ""
    info = settings_model_info(spec, settings)
    context = policy.context or info.context
    output = policy.output or info.output or (min(32_000, context // 4) if context else 0)
    if not context:
        raise UsageError(
            f"the window of {spec or 'the recorded model'} is unknown — give it: "
            "--policy context=128000,output=8192"
        )
    _check_window(context, output)
    return B.ModelInfo(
        info.provider_id, info.model_id, context=context, output=output, prices=info.prices
    )


def replay(
    store: Any,
    session_id: str,
    policy: ReplayPolicy | str | None = None,
    *,
    settings: Any = None,
    summariser: tuple[Any, B.ModelInfo, str] | None = None,
    save: bool = True,
) -> ReplayResult:
    """Replay one recorded session under ``policy`` and (``save``) store its rows.

    ``settings``: the user's (model limits and overrides, providers for ``policy.model``);
    ``summariser``: (provider, ModelInfo, model name) for the summaries instead of resolving
    ``policy.model``."""
    if isinstance(policy, str) or policy is None:
        policy = ReplayPolicy.parse(policy or "")
    if settings is None:
        settings = Settings(data_dir=store.data_dir)
    session_id = store.session(session_id).id
    recorded = store.messages(session_id)
    if not any(_is_step(m) for m in recorded):
        raise UsageError(f"session {session_id} has no recorded steps to replay")
    info = _model_info(store, session_id, policy, settings)
    config = CompactionConfig.from_settings(policy.compaction, info)
    if summariser is None and policy.model:
        provider, sinfo, resolved = resolve(policy.model, settings)
        summariser = (provider, sinfo, resolved.model_id)
    recorded_sizes = [
        B.estimate_chat([{"role": "assistant", "content": _text(m)}])
        for m in recorded
        if is_summary(m)
    ]
    placeholder = int(statistics.median(recorded_sizes)) if recorded_sizes else 0
    replay_id = ids.ascending("replay")
    scratch = Path(tempfile.mkdtemp(prefix="jsa-replay-"))
    try:
        rows = _run(
            store,
            session_id,
            recorded,
            policy,
            info,
            config,
            summariser,
            placeholder,
            replay_id,
            scratch,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if save:
        store.put(*rows)
        store.flush(sync=True)
    return ReplayResult(replay_id, session_id, policy, tuple(rows))


def _text(item: WithParts) -> str:
    return "".join(getattr(p, "text", "") or "" for p in item.parts)


def _run(
    store: Any,
    session_id: str,
    recorded: list[WithParts],
    policy: ReplayPolicy,
    info: B.ModelInfo,
    config: CompactionConfig,
    summariser: tuple[Any, B.ModelInfo, str] | None,
    placeholder: int,
    replay_id: str,
    scratch: Path,
) -> list[ReplayRow]:
    sstore = Store(scratch / "data")
    strategy = _TemplateStrategy(template=policy.template) if policy.template else ProductStrategy()
    if summariser is not None:
        provider, sinfo, model_name = summariser
        source = model_name
    else:
        provider, sinfo, model_name, source = (
            PlaceholderSummaries(placeholder),
            info,
            "placeholder",
            "placeholder",
        )

    def summary_request(chat: list[dict], max_tokens: int | None) -> Any:
        return ChatRequest(model=model_name, messages=chat, max_tokens=max_tokens)

    raw = raw_history(recorded)
    first = next(m for m in raw if _is_step(m))
    head = [m for m in raw if m.info.id < first.info.id]
    compactor = Compactor(
        config=config,
        store=sstore,
        model=info,
        data_dir=scratch / "data",
        system_prompt="",
        summary_provider=provider,
        summary_model=sinfo,
        summary_request=summary_request,
        max_retries=0,
        sleep=lambda s: None,
        strategy=strategy,
    )
    # what the recorded first step was sent beyond the history: system prompt and tools
    compactor.tools_tokens = max(
        0, _tokens(first).prompt - compactor.raw_tokens(compactor.chat(head))
    )
    actions = _recorded_actions(recorded)
    parents: dict[str, str] = {}
    history: list[WithParts] = []
    rows: list[ReplayRow] = []
    same = True  # the replay still sees what the recording saw: calibrate on its usage
    turn = -1
    step = 0
    pending_prune = False

    def row(item: WithParts, tokens: int, **kw: Any) -> ReplayRow:
        return ReplayRow(
            id=ids.ascending("event"),
            session_id=session_id,
            replay_id=replay_id,
            policy=policy.to_data(),
            step=step,
            turn=max(0, turn),
            message_id=item.info.id,
            recorded_tokens=_tokens(item).count,
            replay_tokens=tokens,
            recorded_action=actions.get(item.info.id),
            usable=compactor.usable,
            trigger=compactor.trigger,
            time_created=now_ms(),
            **kw,
        )

    def end_of_turn() -> None:
        """The loop's prune at the end of a turn, on the turn's last row."""
        nonlocal same
        event = compactor.prune(history) if config.prune else None
        if event is None or not rows:
            return
        same = False
        last = rows[-1]
        rows[-1] = replace(
            last,
            action=last.action or "prune",
            outcome=last.outcome or event.outcome,
            parts_pruned=(last.parts_pruned or 0) + event.parts_pruned,
            tokens_pruned=(last.tokens_pruned or 0) + event.tokens_pruned,
            tokens_before=last.tokens_before or event.tokens_before,
            tokens_after=event.tokens_after,
        )

    for item in raw:
        if is_real_user(item):
            if pending_prune:
                end_of_turn()
            turn += 1
            pending_prune = False
            history.append(_renumbered(item, parents))
            continue
        if not _is_step(item):
            history.append(_renumbered(item, parents))
            continue
        chat = compactor.chat(history)
        if same:
            compactor.observe(chat, _tokens(item))
        tokens = int(compactor.raw_tokens(chat) * compactor.ratio) + _tokens(item).output
        history.append(_renumbered(item, parents))
        pending_prune = True
        if item.info.id in actions:
            same = False
        current = row(item, tokens)
        if compactor.is_overflow(Tokens(total=tokens)):
            try:
                result = compactor.compact(history, cause="auto", auto=True, continue_after=False)
            except ProviderError as err:  # the summary model failed: the row says so, one line
                rows.append(replace(current, action="summary", outcome=f"error: {err}"[:200]))
                break
            event = result.event
            same = False
            current = replace(
                current,
                action="summary",
                outcome=event.outcome,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                parts_pruned=event.parts_pruned or None,
                tokens_pruned=event.tokens_pruned or None,
                llm_calls=event.llm_calls,
                summary_input_tokens=event.summary_input_tokens,
                summary_tokens=event.summary_tokens,
                summary_source=source,
            )
            compactor.disabled = False  # a new step gets a new chance, as in the next turn
        rows.append(current)
        step += 1
    if pending_prune:
        end_of_turn()
    sstore.close()
    return rows


def replay_all(
    store: Any, policy: ReplayPolicy | str | None = None, *, settings: Any = None, **kw: Any
) -> list[ReplayResult]:
    """:func:`replay` every root session that has recorded steps."""
    frame = store.sql(
        "SELECT session_id FROM session_summary WHERE parent_id IS NULL AND steps > 0 "
        "ORDER BY time_created"
    )
    return [replay(store, sid, policy, settings=settings, **kw) for sid in frame["session_id"]]


def replays(store: Any) -> Any:
    """One row per replay run: session, policy, steps, summaries and prunes (recorded vs
    replayed), peaks."""
    return store.sql(
        """SELECT replay_id, session_id, any_value(policy_name) policy, count(*) steps,
        count(*) FILTER (WHERE recorded_action = 'summary') recorded_summaries,
        count(*) FILTER (WHERE action = 'summary') replay_summaries,
        count(*) FILTER (WHERE action = 'prune') replay_prunes,
        max(recorded_tokens) recorded_peak, max(replay_tokens) replay_peak,
        sum(coalesce(summary_input_tokens, 0)) summary_input_tokens, min(time_created) time_created
        FROM compaction_replay GROUP BY replay_id, session_id ORDER BY time_created"""
    )


def plot_replay(store: Any, replay_id: str | None = None) -> Any:
    """The recorded run's context per step beside the replay's, summaries and prunes marked
    (``replay_id`` None: the newest replay)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    if replay_id is None:
        runs = replays(store)
        if runs.empty:
            raise UsageError("no replay yet — run %agent compaction replay first")
        replay_id = str(runs["replay_id"].iloc[-1])
    frame = store.sql(
        "SELECT * FROM compaction_replay WHERE replay_id = ? ORDER BY step", [replay_id]
    )
    if frame.empty:
        raise UsageError(f"no replay {replay_id!r} — list them with replays()")
    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    ax.plot(frame["step"], frame["recorded_tokens"], label="recorded", color="#888")
    ax.plot(frame["step"], frame["replay_tokens"], label=f"replay: {frame['policy_name'][0]}")
    for kind, marker in (("summary", "v"), ("prune", "x")):
        sel = frame[frame["action"] == kind]
        ax.scatter(sel["step"], sel["replay_tokens"], marker=marker, label=f"replay {kind}")
    rec = frame[frame["recorded_action"] == "summary"]
    ax.scatter(
        rec["step"],
        rec["recorded_tokens"],
        marker="o",
        facecolors="none",
        edgecolors="#888",
        label="recorded summary",
    )
    ax.axhline(int(frame["trigger"][0]), linestyle=":", color="#c44", label="replay trigger")
    ax.set_xlabel("step")
    ax.set_ylabel("context tokens")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
