"""One step: one LLM call turned into parts, tool runs, usage and cost.

One module: :class:`StepProcessor` is one state machine over one stream (the open parts, the
attempt, the usage), writing parts as the events arrive; its pieces share that state.

Follows OpenCode's ``SessionProcessor`` (stream events → parts, one attempt per retry) with
three deliberate differences: tools run after the stream ends (chat completions deliver a
call whole only at the end of the step); a failed attempt's partial text is
discarded before the retry instead of being left beside the retried text; and
retries are bounded by ``max_retries``, each recorded as a ``retry`` part.

Persistence: text and reasoning live in memory while they stream and are
written once, when they end; every tool state change is written at once; the
step ends with an fsync, so ``kill -9`` loses at most the step in flight.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..core import budget, ids, retry
from ..core.errors import ContextOverflowError, ProviderError, ToolFailure
from ..core.messages import (
    AssistantMessage,
    FilePart,
    Part,
    PatchPart,
    ReasoningPart,
    RetryPart,
    StepFinishPart,
    StepStartPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    WithParts,
    error_data,
    now_ms,
    replace,
)
from ..core.permission import RejectedError
from ..core.redact import clean_record
from ..core.stream import Finish, ReasoningDelta, StreamEvent, TextDelta, ToolCall, ToolInputStart
from ..tools.base import Tool, ToolResult
from .history import History

if TYPE_CHECKING:  # the store's modules load when a session opens one, not with the loop
    from ..store.store import Store

ABORTED_TOOL_ERROR = "Tool execution aborted"
# tools that change no file: no snapshot around their calls
READ_ONLY_TOOLS = frozenset({"read", "list", "glob", "grep", "notebook"})
# tools that change only the file their ``filePath`` names: a patch credits them with that one
PATH_TOOLS = frozenset({"write", "edit"})


class Observer:
    """Receives what happens during a turn; the live view implements it.

    Called on the kernel's main thread, synchronously: keep it cheap.
    """

    def on_message(self, message: AssistantMessage) -> None: ...
    def on_part(self, part: Part) -> None: ...
    def on_delta(self, part: Part, delta: str) -> None: ...
    def on_part_removed(self, part_id: str) -> None: ...
    def on_retry(self, attempt: int, delay: float, reason: str) -> None:
        """A retry is scheduled in ``delay`` seconds; called again about once a second while
        waiting, with the seconds left (the retry part's ``time_next`` says when it is due)."""


@dataclass
class StepResult:
    message: AssistantMessage
    parts: list[Part]
    outcome: str  # "continue" | "stop" | "compact"
    tool_calls: int = 0


class Snapshots(Protocol):
    """File snapshots of the session's folder (``session/snapshot.py``'s ``Snapshot``)."""

    @property
    def work_tree(self) -> Path: ...

    def track(self) -> str | None: ...

    def changed(self, before: str, after: str) -> list[str]: ...


ToolRunner = Callable[[Tool, dict, ToolCall], ToolResult]  # (tool, args, call) → result
# checked just before a tool runs: (tool name, args, call); raises a ToolFailure to refuse
Permit = Callable[[str, dict, ToolCall], object]


@dataclass(frozen=True)
class StepSetup:
    """What every step of a turn runs with (a turn's ``TurnSetup.step``, passed whole)."""

    store: Store
    model: budget.ModelInfo
    tools: Mapping[str, Tool]  # name → tool
    run_tool: ToolRunner
    max_retries: int = 4
    auto_compact: bool = True
    reserved: int | None = None
    sleep: Callable[[float], None] = time.sleep
    # Bounded waits: a server's retry-after beyond `max_retry_wait` seconds fails the step at once
    # (retry.next_wait) and the backoff never exceeds it; each attempt is bounded by the provider.
    max_retry_wait: float = 60.0
    # permission.Gate (or None: every call runs). A RejectedError also stops the turn after this
    # step (OpenCode's "blocked").
    permit: Permit | None = None
    # the session's folder: tree hashes on step-start/step-finish and a `patch` part when files
    # changed (what revert restores); None: no snapshots. Failures never fail the step.
    snapshot: Snapshots | None = None


@dataclass
class StepProcessor:
    """Runs one assistant message (one step). Not reusable: one instance per step.
    ``permit``: this step's, when it differs from the turn's (the last step refuses tools)."""

    setup: StepSetup
    stream: Callable[[], Iterable[StreamEvent]]  # opens a fresh stream per attempt
    observer: Observer = field(default_factory=Observer)
    permit: Permit | None = None

    def __post_init__(self) -> None:
        if self.permit is None:
            self.permit = self.setup.permit

    def run(self, message: AssistantMessage) -> StepResult:
        self.message = message
        self.parts: dict[str, Part] = {}
        self._open: Part | None = None  # the text/reasoning part being streamed
        self._chunks: list[str] = []
        self._written: set[str] = set()
        self._calls: list[ToolCall] = []
        self.blocked = False
        outcome = "continue"
        self._save_message()
        self._before, self._patched = self._track(), False
        self._changed: set[str] = set()  # files this step's tool calls changed (_attribute)
        self._patch_base: str | None = None
        self._running: tuple[str, dict, str | None] | None = None  # the tool call under way
        self._add(
            StepStartPart(
                ids.ascending("part"), message.session_id, message.id, snapshot=self._before
            ),
            write=True,
        )
        try:
            finish = self._stream_with_retries()
            self._run_tools()
            self._finish_step(finish)
            if self.blocked:
                outcome = "stop"
            if not message.summary and budget.is_overflow(
                finish.tokens,
                self.setup.model,
                auto=self.setup.auto_compact,
                reserved=self.setup.reserved,
            ):
                outcome = "compact"
        except ContextOverflowError as err:
            self.message = replace(self.message, error=error_data("ContextOverflowError", str(err)))
            outcome = "compact"
        except ProviderError as err:
            self.message = replace(self.message, error=_api_error(err))
            raise
        except KeyboardInterrupt:
            self.message = replace(
                self.message, error=error_data("MessageAbortedError", "The turn was interrupted")
            )
            raise
        except BaseException as err:
            self.message = replace(
                self.message, error=error_data("UnknownError", f"{type(err).__name__}: {err}")
            )
            raise
        finally:
            self._finalise()
        return StepResult(self.message, list(self.parts.values()), outcome, len(self._calls))

    # -- streaming ---------------------------------------------------------

    def _stream_with_retries(self) -> Finish:
        self.attempts = 1

        def attempt_once() -> Finish:
            mark = set(self.parts)
            try:
                return self._consume(self.stream())
            except ProviderError:
                self._discard_since(mark)
                raise

        def wait(attempt: int, err: ProviderError, delay: float, reason: str) -> None:
            self.attempts = attempt + 1
            created = now_ms()
            part = RetryPart(
                ids.ascending("part"),
                self.message.session_id,
                self.message.id,
                attempt=attempt,
                error=_api_error(err),
                time_created=created,
                time_next=created + int(delay * 1000),
            )
            self._add(part, write=True)
            self.setup.store.flush(sync=False)
            self._wait(attempt, delay, reason)

        return retry.with_retries(
            attempt_once,
            retries=self.setup.max_retries,
            max_wait=self.setup.max_retry_wait,
            wait=wait,
        )

    def _wait(self, attempt: int, delay: float, reason: str) -> None:
        """Sleep ``delay`` seconds in steps of at most one, telling the observer what is left
        (the live view counts down); an interrupt ends the wait and the turn."""
        until = time.monotonic() + delay
        left = delay
        while True:
            self.observer.on_retry(attempt, left, reason)
            if left <= 0:
                return
            step = min(1.0, left)
            self.setup.sleep(step)
            # an injected sleep may not sleep: count what it was asked for
            left = max(0.0, min(left - step, until - time.monotonic()))
            if left < 0.05:  # not worth another update
                self.setup.sleep(left)
                return

    def _consume(self, events: Iterable[StreamEvent]) -> Finish:
        self._calls = []
        for event in events:
            if isinstance(event, (TextDelta, ReasoningDelta)):
                self._delta(event)
            elif isinstance(event, ToolInputStart):
                self._end_open()
                self._tool_part(event.call_id, event.name)
            elif isinstance(event, ToolCall):
                self._end_open()
                self._calls.append(event)
                if self._find_tool(event.call_id) is None:
                    self._tool_part(event.call_id, event.name)
                if event.metadata:  # what the vendor needs back with the call (a signature)
                    found = self._find_tool(event.call_id)
                    if found is not None:
                        merged = {**(found.metadata or {}), **event.metadata}
                        self._add(replace(found, metadata=merged), write=True)
            elif isinstance(event, Finish):
                self._end_open()
                return event
        raise ProviderError("the stream ended without a finish event", retryable=True)

    def _delta(self, event: TextDelta | ReasoningDelta) -> None:
        kind = TextPart if isinstance(event, TextDelta) else ReasoningPart
        if (
            isinstance(event, ReasoningDelta)
            and event.reclaim
            and isinstance(self._open, TextPart)
            and self._open.time_start is not None
        ):
            # the text streamed so far was reasoning: the same part, as reasoning
            self._open = ReasoningPart(
                self._open.id,
                self._open.session_id,
                self._open.message_id,
                text="".join(self._chunks),
                time_start=self._open.time_start,
            )
            self._add(self._open, write=True)
        if not isinstance(self._open, kind):
            self._end_open()
            self._open = kind(
                ids.ascending("part"), self.message.session_id, self.message.id, time_start=now_ms()
            )
            self._chunks = []
            self._add(self._open)
        self._chunks.append(event.text)
        self.observer.on_delta(self._open, event.text)

    def _end_open(self) -> None:
        if self._open is None:
            return
        text = "".join(self._chunks)
        part = replace(self._open, text=text.rstrip(), time_end=now_ms())
        self._open, self._chunks = None, []
        self._add(part, write=True)

    def _tool_part(self, call_id: str, name: str) -> None:
        part = ToolPart(
            ids.ascending("part"),
            self.message.session_id,
            self.message.id,
            call_id=call_id,
            tool=name,
        )
        self._add(part, write=True)
        self.setup.store.flush(sync=False)

    def _find_tool(self, call_id: str) -> ToolPart | None:
        for part in self.parts.values():
            if isinstance(part, ToolPart) and part.call_id == call_id:
                return part
        return None

    # -- tools ---------------------------------------------------------------

    def _run_tools(self) -> None:
        for call in self._calls:
            part = self._find_tool(call.call_id)
            name = self._tool_name(call.name)
            start = now_ms()
            running = replace(
                part, tool=name or call.name, state=ToolRunning(input=call.input, time_start=start)
            )
            self._add(running, write=True)
            if call.invalid is not None or name is None:
                self._add(
                    replace(
                        running,
                        state=ToolError(
                            call.input, self._call_problem(call, name), start, now_ms()
                        ),
                    ),
                    write=True,
                )
                continue
            self.setup.store.flush(
                sync=False
            )  # a crash while the tool runs shows it as interrupted
            decision = None  # the user's answer, when asked (recorded in the part)
            pre: str | None = None
            state: ToolCompleted | ToolError
            try:
                if self.permit is not None:
                    decision = self.permit(name, call.input, call)
                if name not in READ_ONLY_TOOLS:  # what this call changes: the folder around it
                    pre = self._track()
                    self._running = (name, call.input, pre)
                result = self.setup.run_tool(self.setup.tools[name], call.input, call)
                metadata = dict(result.metadata)
                if decision:
                    metadata["approval"] = decision
                state = ToolCompleted(
                    input=call.input,
                    output=result.output,
                    title=result.title or name,
                    metadata=metadata,
                    time_start=start,
                    time_end=now_ms(),
                    attachments=self._attachments(result.attachments),
                )
            except ToolFailure as err:
                failure = err.metadata
                if decision:  # allowed, then the tool failed: the answer stays recorded
                    failure = {**(failure or {}), "approval": decision}
                state = ToolError(call.input, str(err), start, now_ms(), failure)
                self.blocked = self.blocked or isinstance(err, RejectedError)
            except Exception as err:  # a tool's bug is the model's tool error, never a crashed turn
                state = ToolError(call.input, f"{type(err).__name__}: {err}", start, now_ms())
            self._running = None
            if pre is not None:
                self._attribute(name, call.input, pre, self._track())
            self._add(replace(running, state=state), write=True)

    def _attribute(self, name: str, args: dict, pre: str, post: str | None) -> None:
        """Credit this step's patch with the files one tool call changed: what the folder's
        snapshot saw change during the call, and for ``write``/``edit`` only the file the call
        names — never what another process wrote while the model was thinking."""
        snapshot = self.setup.snapshot
        if not post or snapshot is None:
            return  # (equal trees: the snapshot's changed() is empty, a replay's may not be)
        try:
            files = snapshot.changed(pre, post)
        except Exception:
            return
        path = args.get("filePath") if name in PATH_TOOLS and isinstance(args, dict) else None
        if isinstance(path, str):
            wanted = os.path.realpath(os.path.join(snapshot.work_tree, path))
            files = [f for f in files if os.path.realpath(f) == wanted]
        if files and self._patch_base is None:
            self._patch_base = pre  # the tree before the first change: what revert restores
        self._changed.update(files)

    def _attachments(self, files: Iterable[Mapping[str, str]] | None) -> tuple | None:
        """A tool's returned files as OpenCode's file parts (``state.attachments``)."""
        parts = tuple(
            FilePart(
                ids.ascending("part"),
                self.message.session_id,
                self.message.id,
                mime=f["mime"],
                url=f["url"],
                filename=f.get("filename"),
            ).to_data()
            for f in files or ()
        )
        return parts or None

    def _tool_name(self, name: str) -> str | None:
        if name in self.setup.tools:
            return name
        return name.lower() if name.lower() in self.setup.tools else None

    def _call_problem(self, call: ToolCall, name: str | None) -> str:
        if name is None:
            return f"Unknown tool '{call.name}'. Available tools: {', '.join(sorted(self.setup.tools))}."
        return (
            f"Invalid arguments for tool '{name}': {call.invalid}. "
            f"Send a JSON object matching the tool's parameters. Received: {call.raw[:500]!r}"
        )

    # -- bookkeeping ---------------------------------------------------------

    def _finish_step(self, finish: Finish) -> None:
        # a cost the server reports for the call wins over tokens × catalogue prices
        if finish.cost is not None:
            step_cost, cost_source = finish.cost, "server"
        else:
            step_cost = budget.cost(finish.tokens, self.setup.model)
            cost_source = budget.price_source(self.setup.model)
        reason = finish.reason
        if reason == "unknown" and self._calls:
            reason = "tool-calls"
        # a step that ran no tool changed nothing of the agent's: no second snapshot (whatever
        # else changed meanwhile is the next step's starting point, not this step's patch)
        after = self._track() if self._calls else self._before
        # the patch goes before step-finish (OpenCode writes it after) so that step-finish
        # stays the last part of a step
        self._patch(after)
        self._add(
            StepFinishPart(
                ids.ascending("part"),
                self.message.session_id,
                self.message.id,
                reason=reason,
                cost=step_cost,
                tokens=finish.tokens,
                snapshot=after,
                metadata={
                    "firstTokenMs": finish.first_token_ms,
                    "latencyMs": finish.latency_ms,
                    "attempts": self.attempts,
                    "costSource": cost_source,
                },
            ),
            write=True,
        )
        self.message = replace(
            self.message, finish=reason, cost=self.message.cost + step_cost, tokens=finish.tokens
        )

    def _track(self) -> str | None:
        snapshot = self.setup.snapshot
        if snapshot is None:
            return None
        try:
            return snapshot.track()
        except Exception:
            return None  # no snapshot for this step: revert cannot restore what it changes

    def _patch(self, after: str | None) -> None:
        """A `patch` part when the step's tool calls changed files: the tree before the first
        of them, and the files they changed (:meth:`_attribute`)."""
        self._patched = True
        if self._changed and self._patch_base:
            part = PatchPart(
                ids.ascending("part"),
                self.message.session_id,
                self.message.id,
                hash=self._patch_base,
                files=tuple(sorted(self._changed)),
            )
            self._add(part, write=True)

    def _finalise(self) -> None:
        """Always runs: keep partial text, mark unfinished tools, complete and fsync."""
        self._end_open()
        if not self._patched and self._calls:  # the step did not finish (error, interrupt)
            if self._running is not None:  # a tool call was interrupted: what it changed so far
                name, args, pre = self._running
                self._running = None
                if pre is not None:
                    self._attribute(name, args, pre, self._track())
            self._patch(None)
        for part in list(self.parts.values()):
            if isinstance(part, ToolPart) and isinstance(part.state, (ToolPending, ToolRunning)):
                start = part.state.time_start if isinstance(part.state, ToolRunning) else now_ms()
                state = ToolError(
                    part.state.input, ABORTED_TOOL_ERROR, start, now_ms(), {"interrupted": True}
                )
                self._add(replace(part, state=state), write=True)
        self.message = replace(self.message, time_completed=now_ms())
        self._save_message()
        self.setup.store.flush(sync=True)

    def _add(self, part: Part, *, write: bool = False) -> None:
        part = clean_record(part)  # in memory and shown as the journal keeps it: no key, encodable
        self.parts[part.id] = part
        if write:
            self.setup.store.put(part)
            self._written.add(part.id)
        self.observer.on_part(part)

    def _discard_since(self, mark: set[str]) -> None:
        """Drop what a failed attempt produced, so the retry starts clean."""
        self._open, self._chunks = None, []
        for part_id in [p for p in self.parts if p not in mark]:
            del self.parts[part_id]
            self.observer.on_part_removed(part_id)
            if part_id in self._written:
                self.setup.store.delete("part", part_id)
                self._written.discard(part_id)

    def _save_message(self) -> None:
        self.message = clean_record(self.message)
        self.setup.store.put(self.message)
        self.observer.on_message(self.message)


def run_step(
    processor: StepProcessor,
    message: AssistantMessage,
    history: History | list[WithParts],
    added: list[WithParts],
) -> StepResult:
    """Run one step and append it to ``history`` and ``added`` even when it raises:
    an interrupted or failed step is part of the history too."""
    try:
        return processor.run(message)
    finally:
        item = WithParts(processor.message, tuple(processor.parts.values()))
        History.of(history).add(item)
        added.append(item)


def _api_error(err: ProviderError) -> dict:
    return error_data(
        "APIError",
        err.message,
        statusCode=err.status,
        isRetryable=err.retryable,
        responseHeaders=err.headers or None,
    )


__all__ = [
    "Observer",
    "Permit",
    "Snapshots",
    "StepProcessor",
    "StepResult",
    "StepSetup",
    "Tokens",
    "ToolRunner",
    "run_step",
]
