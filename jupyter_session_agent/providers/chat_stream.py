"""A streamed chat completion read chunk by chunk: the request value, the accumulator that
turns the chunks of an OpenAI-compatible stream into :mod:`..core.stream` events (text,
reasoning in ``<think>`` tags or typed fields, tool calls whose arguments arrive in pieces), and
the usage and finish-reason mappings.

It reads the chunks as plain mappings (the SDK's objects are turned into dicts at the edge),
so it never imports ``openai``: :mod:`.openai_provider` owns the connection and the errors.

One module: the accumulator's state (open text, reasoning, tool calls, the answer cap) is
one state machine over one stream, and its finish and usage mapping read that same state.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import budget
from ..core.messages import Tokens
from ..core.stream import Finish, ReasoningDelta, StreamEvent, TextDelta, ToolCall, ToolInputStart


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions call. ``model`` is the server's name (no provider prefix)."""

    model: str
    messages: list[dict]
    tools: list[dict] | tuple = ()
    max_tokens: int | None = None
    temperature: float | None = None
    extra_body: dict | None = None
    # Characters of answer (text and reasoning) kept from one stream; beyond it the answer is
    # cut with one line and the stream closed (None: no cap). Setting ``max_answer_chars``.
    max_answer_chars: int | None = None
    reasoning_effort: str | None = None  # sent as ``reasoning_effort`` when set


_FINISH = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}


def finish_reason(raw: str | None, has_tool_calls: bool = False) -> str:
    """OpenAI finish reason → OpenCode's vocabulary.

    A step that produced tool calls finishes as ``tool-calls`` when the server
    sent no reason, or said ``stop`` (Ollama and some llama.cpp builds do):
    the loop must send the tool results back, not end the turn.
    """
    if has_tool_calls and raw in (None, "", "stop"):
        return "tool-calls"
    return _FINISH.get(raw or "", "unknown")


def nonnegative_int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


def _as_dict(obj: Any) -> dict:
    """An SDK model or mapping → plain dict of what the server sent."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    to_dict = getattr(obj, "to_dict", None)  # openai BaseModel: only the fields set
    if callable(to_dict):
        try:
            return to_dict()
        except Exception:  # noqa: BLE001 - a half-constructed model; fall back
            pass
    dump = getattr(obj, "model_dump", None)
    return dump() if callable(dump) else {}


def tokens_from_usage(usage: Mapping[str, Any], *, input_excludes_cache: bool = False) -> Tokens:
    """Normalise an OpenAI-style usage object (plus common server variants).

    Cache reads: ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM,
    OpenRouter) or DeepSeek's top-level ``prompt_cache_hit_tokens``. Cache
    writes: ``prompt_tokens_details.cache_write_tokens`` (OpenRouter) or
    ``cache_creation_input_tokens`` (Anthropic-style proxies), in the details
    or at the top level. Reasoning: ``completion_tokens_details.reasoning_tokens``.
    """
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    if not isinstance(prompt_details, Mapping):
        prompt_details = {}
    if not isinstance(completion_details, Mapping):
        completion_details = {}

    def first(*values: Any) -> int:
        for value in values:
            if value is not None:
                return nonnegative_int(value)
        return 0

    cached = first(prompt_details.get("cached_tokens"), usage.get("prompt_cache_hit_tokens"))
    written = first(
        prompt_details.get("cache_write_tokens"),
        prompt_details.get("cache_creation_input_tokens"),
        usage.get("cache_creation_input_tokens"),
    )
    total = usage.get("total_tokens")
    return budget.normalise_usage(
        prompt_tokens=nonnegative_int(usage.get("prompt_tokens")),
        completion_tokens=nonnegative_int(usage.get("completion_tokens")),
        cached_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=nonnegative_int(completion_details.get("reasoning_tokens")),
        total_tokens=nonnegative_int(total) if total is not None else None,
        input_excludes_cache=input_excludes_cache,
    )


@dataclass
class _Call:
    index: int
    call_id: str
    server_id: str | None
    name: str = ""
    args: list[str] = field(default_factory=list)
    started: bool = False
    size: int = 0  # characters of arguments received (kept only up to MAX_ARGUMENT_CHARS)
    signature: str | None = None  # Gemini's thought signature, sent back with the call


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _partial_tail(text: str, tag: str) -> int:
    """How many trailing characters of ``text`` could begin ``tag`` (kept for the next delta)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def _detail_texts(details: Any) -> str:
    """The readable text of OpenRouter-style ``reasoning_details`` (encrypted items have none)."""
    out = []
    for item in details if isinstance(details, list) else ():
        if isinstance(item, Mapping):
            text = item.get("text") if item.get("type") != "reasoning.summary" else None
            text = text if isinstance(text, str) else item.get("summary")
            if isinstance(text, str):
                out.append(text)
    return "".join(out)


def _typed_texts(value: Any) -> str:
    """Text inside a typed-content value: a string, or ``[{"type": "text", "text": …}, …]``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            item["text"]
            for item in value
            if isinstance(item, Mapping) and isinstance(item.get("text"), str)
        )
    return ""


def server_cost(usage: Mapping[str, Any] | None) -> float | None:
    """The cost a server reports in its usage, in USD, or None.

    OpenRouter: ``usage.cost`` (credits = USD), plus ``cost_details.upstream_inference_cost``
    when the key is the user's own (``is_byok``: the upstream bills that part); xAI:
    ``usage.cost_in_usd_ticks`` (10^-10 USD each); DeepInfra: ``usage.estimated_cost`` (USD,
    what the call is billed: tokens × its published per-model prices); Perplexity:
    ``usage.cost.total_cost`` (tokens plus its per-request search fee, which no token price
    covers).
    """
    if not isinstance(usage, Mapping):
        return None
    ticks = usage.get("cost_in_usd_ticks")
    if isinstance(ticks, (int, float)) and not isinstance(ticks, bool) and ticks >= 0:
        return float(ticks) / 1e10
    cost = usage.get("cost")
    if isinstance(cost, Mapping):  # Perplexity: a breakdown with its total
        cost = cost.get("total_cost")
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or cost < 0:
        cost = usage.get("estimated_cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
            return float(cost)
        return None
    total = float(cost)
    details = usage.get("cost_details")
    if usage.get("is_byok") and isinstance(details, Mapping):
        upstream = details.get("upstream_inference_cost")
        if isinstance(upstream, (int, float)) and not isinstance(upstream, bool):
            total += float(upstream)
    return total


class Accumulator:
    """Folds chat-completion chunks (JSON objects) into events; remembers what ``Finish`` needs.

    Reads every dialect of the corpus: reasoning as ``reasoning_content`` (DeepSeek, vLLM,
    llama.cpp, Z.ai), ``reasoning`` (OpenRouter, Groq, Ollama, Cerebras), ``reasoning_details``
    (OpenRouter, Snowflake: used when no reasoning string came), ``<think>…</think>`` opening
    the content (DeepSeek-R1 and Qwen on Together, HF, Groq) and typed content arrays
    (Mistral's ``{"type": "thinking", …}``); tool calls split over chunks, without ``index``,
    or parallel at one index (Gemini), with Gemini's thought signatures.
    """

    def __init__(self, started: float, max_chars: int | None = None) -> None:
        self.started = started
        self.max_chars = max_chars
        self.chars = 0
        self.cut = ""  # the line that ends a cut answer, once over max_chars
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}  # key → call, in arrival order
        self.by_index: dict[int, int] = {}  # server index → current key
        self.used_ids: set[str] = set()
        self.reason: str | None = None
        self.saw_reason = False
        self.usage: dict | None = None
        self.first_token_ms: float | None = None
        self._fresh = 0
        self._pending = ""  # content held back: it may be the start of a think tag
        self._in_think = False
        self._spoke = False  # non-blank answer text was emitted (a later <think> is text)
        self._thought = False  # a think block was read

    def _first_token(self) -> None:
        if self.first_token_ms is None:
            self.first_token_ms = (time.monotonic() - self.started) * 1000

    def _new_id(self) -> str:
        while True:
            self._fresh += 1
            candidate = f"call_{self._fresh}"
            if candidate not in self.used_ids:
                return candidate

    def feed(self, chunk: Any) -> Iterator[StreamEvent]:
        if not isinstance(chunk, Mapping):
            return
        usage = chunk.get("usage")
        if not usage:  # Groq without stream_options: the usage rides in its x_groq object
            groq = chunk.get("x_groq")
            usage = groq.get("usage") if isinstance(groq, Mapping) else None
        if isinstance(usage, Mapping) and usage:
            self.usage = dict(usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) not in (0, None):
                continue  # n > 1 is never requested; ignore extra choices
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                delta = choice.get("message")  # a whole (non-streamed) completion
            if isinstance(delta, Mapping):
                yield from self._delta(delta)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.reason = reason
                self.saw_reason = True

    def _over(self, text: str) -> str:
        """``text`` within the answer cap (the part of it that fits); sets :attr:`cut`."""
        if self.max_chars is None or self.cut:
            return "" if self.cut else text
        room = self.max_chars - self.chars
        if len(text) > room:
            text = text[: max(0, room)]
            self.cut = (
                f"\n\n[answer cut: the model sent more than {self.max_chars:,} characters; "
                "raise max_answer_chars to keep more]"
            )
        self.chars += len(text)
        return text

    def _reasoning(self, text: str) -> Iterator[StreamEvent]:
        text = self._over(text)
        if text:
            self._first_token()
            self.reasoning.append(text)
            yield ReasoningDelta(text)

    def _text(self, text: str) -> Iterator[StreamEvent]:
        text = self._over(text)
        if text:
            self._first_token()
            self.text.append(text)
            self._spoke = self._spoke or bool(text.strip())
            yield TextDelta(text)

    def _delta(self, delta: Mapping[str, Any]) -> Iterator[StreamEvent]:
        # one reasoning source per delta, so a server sending several forms is not doubled
        reasoning = delta.get("reasoning_content")
        if not isinstance(reasoning, str) or not reasoning:
            reasoning = delta.get("reasoning")
        if not isinstance(reasoning, str) or not reasoning:
            reasoning = _detail_texts(delta.get("reasoning_details"))
        yield from self._reasoning(reasoning)
        content = delta.get("content")
        if isinstance(content, str):
            yield from self._content(content)
        elif isinstance(content, list):  # typed content: Mistral's thinking/text items
            for item in content:
                if not isinstance(item, Mapping):
                    continue
                if item.get("type") == "thinking":
                    yield from self._reasoning(_typed_texts(item.get("thinking")))
                elif item.get("type") == "text" and isinstance(item.get("text"), str):
                    yield from self._content(item["text"])
        for position, tc in enumerate(delta.get("tool_calls") or ()):
            if isinstance(tc, Mapping):
                yield from self._tool_delta(position, tc)
        legacy = delta.get("function_call")  # pre-tools servers
        if isinstance(legacy, Mapping) and (legacy.get("name") or legacy.get("arguments")):
            yield from self._tool_fragment(-1, None, legacy.get("name"), legacy.get("arguments"))

    def _may_close(self) -> bool:
        """Could a bare ``</think>`` still end reasoning sent as answer text? Only before any
        think block was read and when no reasoning came in a field of its own."""
        return not self._thought and not self._in_think and not self.reasoning

    def _reclaim(self, text: str) -> Iterator[StreamEvent]:
        """A bare ``</think>`` (Qwen3-Thinking, whose template opens the block in the prompt):
        the answer text so far and ``text`` were reasoning."""
        earlier, self.text, self._spoke = "".join(self.text), [], False
        text = self._over(text)
        if (earlier + text).strip():
            self._first_token()
            self.reasoning.append(earlier + text)
            yield ReasoningDelta(text, reclaim=bool(earlier))

    def _content(self, piece: str) -> Iterator[StreamEvent]:
        """Answer text, with a ``<think>…</think>`` block opening it read as reasoning, and
        text before a bare ``</think>`` too (no think block read, no reasoning field)."""
        buf, self._pending = self._pending + piece, ""
        while buf:
            if self._in_think:
                end = buf.find(_THINK_CLOSE)
                if end < 0:
                    keep = _partial_tail(buf, _THINK_CLOSE)
                    yield from self._reasoning(buf[: len(buf) - keep])
                    self._pending = buf[len(buf) - keep :]
                    return
                yield from self._reasoning(buf[:end])
                buf, self._in_think, self._thought = buf[end + len(_THINK_CLOSE) :], False, True
                continue
            if self._may_close():
                end = buf.find(_THINK_CLOSE)
                if end >= 0 and _THINK_OPEN not in buf[:end]:
                    yield from self._reclaim(buf[:end])
                    buf, self._thought = buf[end + len(_THINK_CLOSE) :], True
                    continue
            if self._spoke:
                # hold back what may begin a bare </think>
                keep = _partial_tail(buf, _THINK_CLOSE) if self._may_close() else 0
                yield from self._text(buf[: len(buf) - keep])
                self._pending = buf[len(buf) - keep :]
                return
            stripped = buf.lstrip()
            if stripped.startswith(_THINK_OPEN):
                self._in_think = True
                buf = stripped[len(_THINK_OPEN) :]
                continue
            if (
                not stripped
                or _THINK_OPEN.startswith(stripped)
                or (self._may_close() and _THINK_CLOSE.startswith(stripped))
            ):
                self._pending = buf  # blank, or maybe the start of a tag: wait
                return
            # the blank lines between a think block and the answer only separate them
            buf = stripped if self._thought else buf
            keep = _partial_tail(buf, _THINK_CLOSE) if self._may_close() else 0
            yield from self._text(buf[: len(buf) - keep])
            self._pending = buf[len(buf) - keep :]
            return

    def flush(self) -> Iterator[StreamEvent]:
        """The end of the content: what was held back is reasoning (an unclosed think block)
        or text."""
        rest, self._pending = self._pending, ""
        if self._in_think:
            yield from self._reasoning(rest)
        elif rest.strip():
            yield from self._text(rest)

    def _tool_delta(self, position: int, tc: Mapping[str, Any]) -> Iterator[StreamEvent]:
        index = tc.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position  # some servers omit the index on single-call chunks
        fn = tc.get("function")
        fn = fn if isinstance(fn, Mapping) else {}
        yield from self._tool_fragment(index, tc.get("id"), fn.get("name"), fn.get("arguments"))
        extra = tc.get("extra_content")
        google = extra.get("google") if isinstance(extra, Mapping) else None
        signature = google.get("thought_signature") if isinstance(google, Mapping) else None
        key = self.by_index.get(index)
        if isinstance(signature, str) and signature and key is not None:
            self.calls[key].signature = signature

    def _tool_fragment(
        self, index: int, server_id: Any, name: Any, args: Any
    ) -> Iterator[StreamEvent]:
        server_id = server_id if isinstance(server_id, str) and server_id else None
        key = self.by_index.get(index)
        call = self.calls.get(key) if key is not None else None
        # Gemini's OpenAI endpoint reuses index 0 for parallel calls, each with
        # its own id: a new id on a named call at a known index is a new call.
        if (
            call is not None
            and server_id
            and call.server_id
            and server_id != call.server_id
            and call.name
        ):
            call = None
        if call is None:
            key = len(self.calls)
            call_id = server_id if server_id and server_id not in self.used_ids else self._new_id()
            self.used_ids.add(call_id)
            call = self.calls[key] = _Call(index=index, call_id=call_id, server_id=server_id)
            self.by_index[index] = key
            self._first_token()
        if isinstance(name, str) and name and not call.name:
            call.name = name
        if isinstance(args, str) and args:
            call.size += len(args)
            if call.size <= MAX_ARGUMENT_CHARS:
                call.args.append(args)  # beyond: not kept (the call is refused, one line)
        elif isinstance(args, Mapping):  # a server sending the arguments as an object
            text = json.dumps(args)
            call.size += len(text)
            if call.size <= MAX_ARGUMENT_CHARS:
                call.args.append(text)
        if call.name and not call.started:
            call.started = True
            yield ToolInputStart(call.call_id, call.name)

    def finish(self, request: ChatRequest, input_excludes_cache: bool) -> Iterator[StreamEvent]:
        yield from self.flush()
        for call in self.calls.values():
            if not call.started:
                call.started = True
                yield ToolInputStart(call.call_id, call.name)
            yield _tool_call(call)
        if self.usage:
            tokens = tokens_from_usage(self.usage, input_excludes_cache=input_excludes_cache)
        else:
            tokens = self.estimate(request)
        yield Finish(
            reason=finish_reason(self.reason, bool(self.calls)),
            tokens=tokens,
            first_token_ms=self.first_token_ms,
            latency_ms=(time.monotonic() - self.started) * 1000,
            raw_usage=self.usage or None,
            cost=server_cost(self.usage),
        )

    def estimate(self, request: ChatRequest) -> Tokens:
        """No usage from the server: count locally (chars / 4) and say so."""
        sent = list(request.messages) + list(request.tools or ())  # an image counts as one image
        reasoning = "".join(self.reasoning)
        generated = (
            "".join(self.text) + reasoning + "".join("".join(c.args) for c in self.calls.values())
        )
        return budget.normalise_usage(
            prompt_tokens=budget.estimate_chat(sent),
            completion_tokens=budget.estimate(generated),
            reasoning_tokens=budget.estimate(reasoning),
            estimated=True,
        )


MAX_ARGUMENT_CHARS = 16 * 1024 * 1024  # one tool call's arguments (a write of a big file fits)
MAX_ARGUMENT_DEPTH = 64  # nesting of arrays and objects in one tool call's arguments
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def argument_depth(raw: str) -> int:
    """How deeply arrays and objects nest in the JSON text ``raw`` (strings skipped);
    linear, no recursion, so a 100,000-deep input is measured, not parsed."""
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", raw)):
        if bracket.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _tool_call(call: _Call) -> ToolCall:
    if call.size > MAX_ARGUMENT_CHARS:
        return ToolCall(
            call.call_id,
            call.name,
            {},
            "",
            invalid=f"arguments are {call.size:,} characters, over the limit of "
            f"{MAX_ARGUMENT_CHARS:,}; send smaller pieces",
        )
    raw = "".join(call.args)
    meta = {"thoughtSignature": call.signature} if call.signature else None
    if not raw.strip():
        return ToolCall(call.call_id, call.name, {}, raw, metadata=meta)
    depth = argument_depth(raw)
    if depth > MAX_ARGUMENT_DEPTH:
        return ToolCall(
            call.call_id,
            call.name,
            {},
            raw[:200],
            invalid=f"arguments nest {depth:,} levels deep, over the limit of "
            f"{MAX_ARGUMENT_DEPTH}; send a flatter object",
        )
    try:
        parsed = json.loads(raw)
    except RecursionError:
        return ToolCall(call.call_id, call.name, {}, raw[:200], invalid="arguments nest too deeply")
    except ValueError as err:
        return ToolCall(
            call.call_id, call.name, {}, raw, invalid=f"arguments are not valid JSON: {err}"
        )
    if not isinstance(parsed, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(parsed), "a number"
        )
        return ToolCall(
            call.call_id, call.name, {}, raw, invalid=f"arguments must be a JSON object, got {kind}"
        )
    return ToolCall(call.call_id, call.name, parsed, raw, metadata=meta)


__all__ = [
    "Accumulator",
    "ChatRequest",
    "argument_depth",
    "finish_reason",
    "nonnegative_int",
    "server_cost",
    "tokens_from_usage",
]
