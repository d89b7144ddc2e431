"""One LLM call over an OpenAI-compatible chat-completions API.

One module: the one import of ``openai``; the chunk accumulator, the usage mapping and the
error mapping all read the SDK's objects, which no other module may see.

The only module that imports ``openai`` (inside functions, so that importing
the package stays cheap). :class:`OpenAIProvider` turns a streamed response
into :mod:`..core.stream` values and every failure into an :mod:`..core.errors` type:

- ``ProviderError(retryable=…, status, headers, body)`` — the server failed;
  ``retryable`` follows OpenCode's ``fromError``: 408, 409, 429, 5xx, timeouts,
  unreachable servers and interrupted streams are; other 4xx are not (404 is,
  for provider ids starting with ``openai``);
- ``AuthError`` — 401/403, or no key for the official endpoint;
- ``ContextOverflowError`` — :func:`retry.is_context_overflow` says the prompt
  did not fit (HTTP error or an in-stream ``context_length_exceeded`` event).

The SDK's exception is kept as ``__cause__``; every message is one line.
A provider never retries (the SDK client has ``max_retries=0``): retrying,
with backoff and a visible status, is the agent loop's job.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..core import budget, retry
from ..core.errors import AuthError, ContextOverflowError, ProviderError
from ..core.messages import Tokens
from ..core.redact import clean_value, remember
from ..core.stream import Finish, ReasoningDelta, StreamEvent, TextDelta, ToolCall, ToolInputStart

__all__ = ["ChatRequest", "OpenAIProvider", "finish_reason"]

AUTH_HINT = "check OPENAI_API_KEY / the provider's key"
# Local servers (llama.cpp, vLLM, Ollama…) ignore the key, but the SDK insists on one.
NO_KEY_PLACEHOLDER = "sk-no-key-required"
_DETAIL_MAX = 300


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


# parameters a request may do without, when a server refuses one by name
_OPTIONAL_PARAMS = frozenset(
    {
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "reasoning_effort",
        "stream_options",
        "parallel_tool_calls",
        "seed",
        "thinking",
    }
)
_TOKEN_ALIASES = {"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}
# OpenAI's reasoning models: they take ``max_completion_tokens`` (on Azure too)
_REASONING_MODEL = re.compile(r"(?:o\d|gpt-5)(?:\b|[-_.])", re.IGNORECASE)


def _http_module(obj: Any) -> Any:
    """The module (``httpx``, ``httpx2``…) an HTTP response or exception comes from."""
    return importlib.import_module(type(obj).__module__.split(".")[0])


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str | None, str]]:
    """(event name, data) of each server-sent event: ``data:`` lines joined by newlines,
    comments (``: OPENROUTER PROCESSING``) skipped, an event ended by a blank line or the
    end of the body."""
    data: list[str] = []
    event: str | None = None
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            data, event = [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)


def _one_line(text: Any, limit: int = _DETAIL_MAX) -> str:
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


def _connection_reason(err: Any) -> str:
    """The transport's own words for a connection error (the SDK's message is generic)."""
    cause = err.__cause__ or err.__context__
    return _one_line(cause) if cause is not None and str(cause) else _one_line(err.message)


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
                return _int(value)
        return 0

    cached = first(prompt_details.get("cached_tokens"), usage.get("prompt_cache_hit_tokens"))
    written = first(
        prompt_details.get("cache_write_tokens"),
        prompt_details.get("cache_creation_input_tokens"),
        usage.get("cache_creation_input_tokens"),
    )
    total = usage.get("total_tokens")
    return budget.normalise_usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=_int(completion_details.get("reasoning_tokens")),
        total_tokens=_int(total) if total is not None else None,
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


class _Accumulator:
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


class OpenAIProvider:
    """A chat-completions endpoint (OpenAI or any compatible server).

    The SDK client is created once, here, with ``max_retries=0``. Three bounds per
    request (see :meth:`stream`): ``first_byte_timeout`` seconds to connect and get the
    response's first byte, ``idle_timeout`` seconds of silence between chunks, and
    ``timeout`` (``request_timeout``) for the whole request, however the server trickles;
    the first two default to, and never exceed, ``timeout``. ``input_excludes_cache``
    is for servers whose ``prompt_tokens`` already excludes cached tokens.
    """

    def __init__(
        self,
        *,
        provider_id: str,
        base_url: str | None,
        api_key: str | None,
        timeout: float = 600.0,
        first_byte_timeout: float | None = None,
        idle_timeout: float | None = None,
        input_excludes_cache: bool = False,
        token_param: str | None = None,
    ) -> None:
        import openai

        self.provider_id = provider_id
        self.timeout = timeout
        self.first_byte_timeout = min(first_byte_timeout or timeout, timeout)
        self.idle_timeout = min(idle_timeout or timeout, timeout)
        self.input_excludes_cache = input_excludes_cache
        self.token_param = token_param  # the preset's output-limit parameter name, if it has one
        # parameters this server refused by name (400), for the rest of the session
        self.renamed: dict[str, str] = {}
        self.dropped: set[str] = set()
        key = api_key or os.environ.get("OPENAI_API_KEY")
        remember(key, "api_key")  # whatever it came from, the key sent is never shown or stored
        if not key:
            if not (base_url or os.environ.get("OPENAI_BASE_URL")):
                raise AuthError(f"no API key for the OpenAI API — {AUTH_HINT}")
            key = NO_KEY_PLACEHOLDER
        try:
            self._client = openai.OpenAI(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=0
            )
        except openai.OpenAIError as err:
            raise AuthError(
                f"cannot create the OpenAI client: {_one_line(err)} — {AUTH_HINT}"
            ) from err
        self.base_url = str(self._client.base_url).rstrip("/")
        # OpenAI's own API rejects `max_tokens` for reasoning models; others may
        # not know `max_completion_tokens` (older vLLM, llama.cpp): see _token_param
        self._official = (urlsplit(self.base_url).hostname or "").endswith("api.openai.com")

    def __repr__(self) -> str:
        return f"OpenAIProvider(provider_id={self.provider_id!r}, base_url={self.base_url!r})"

    # -- requests --------------------------------------------------------------

    def _token_param(self, model: str) -> str:
        """The name of the output-limit parameter: the preset's, else ``max_completion_tokens``
        for OpenAI's API and for reasoning models (o-series, gpt-5) anywhere (Azure rejects
        ``max_tokens`` for them), else ``max_tokens`` (what older servers know)."""
        if self.token_param:
            return self.token_param
        if self._official or _REASONING_MODEL.match(model.rsplit("/", 1)[-1]):
            return "max_completion_tokens"
        return "max_tokens"

    def _kwargs(self, request: ChatRequest) -> dict[str, Any]:
        # Redacted and encodable (``redact.clean``): a lone surrogate would fail the request's
        # JSON encoding, and then every later turn of the session with it
        messages = clean_value(list(request.messages))
        kwargs: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            kwargs["tools"] = list(request.tools)
        if request.max_tokens is not None:
            kwargs[self._token_param(request.model)] = request.max_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
        extra = dict(request.extra_body or {})
        # what a server refused with a 400 naming it, this session: renamed or left out
        for old, new in self.renamed.items():
            for where in (kwargs, extra):
                if old in where:
                    where[new] = where.pop(old)
        for name in self.dropped:
            kwargs.pop(name, None)
            extra.pop(name, None)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _adapt(self, err: Any, kwargs: Mapping[str, Any]) -> bool:
        """A 400 that names a parameter we sent: remember to rename it (to the other
        output-limit name, when the message names that) or to leave it out. True when the
        request can be retried without it."""
        if getattr(err, "status_code", None) != 400:
            return False
        try:
            text = f"{err.message} {err.response.text}"
        except Exception:  # noqa: BLE001 - an unread body
            text = str(err.message)
        sent = [k for k in kwargs if k in _OPTIONAL_PARAMS]
        sent += [k for k in kwargs.get("extra_body") or {} if k not in sent]
        for name in sent:
            if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text):
                continue
            other = _TOKEN_ALIASES.get(name)
            if other and other in text:
                self.renamed[name] = other
                self.renamed.pop(other, None)
            else:
                self.dropped.add(name)
            return True
        return False

    def _open(self, request: ChatRequest, deadline: float) -> tuple[Any, Any]:
        """Send the request; (the SDK's response context, the httpx response, body unread).

        A 400 naming a parameter we sent is retried once without it (remembered for the
        session: ``renamed``/``dropped``)."""
        import openai

        kwargs = self._kwargs(request)
        for attempt in range(2):
            manager = self._client.chat.completions.with_streaming_response.create(
                **kwargs,
                stream=True,
                stream_options={"include_usage": True},
                timeout=self._first_byte(deadline),
            )
            try:
                response = manager.__enter__()
            except openai.APIStatusError as err:
                if attempt == 0 and self._adapt(err, kwargs):
                    kwargs = self._kwargs(request)
                    continue
                raise
            return manager, response.http_response
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(
        self, request: ChatRequest, *, deadline: float | None = None
    ) -> Iterator[StreamEvent]:
        """Stream one completion as events; ``Finish`` is last. Never retries a failure
        (only a request a server refused for a parameter it names, once, without it).

        Bounded waits: the response must start within ``first_byte_timeout``, no gap
        between chunks may exceed ``idle_timeout``, and everything ends by ``deadline``
        (a ``time.monotonic()`` value; default: ``timeout`` seconds from now), when the
        connection is shut down, however the server trickles.

        The body is read here as server-sent events (comments, ``event:`` lines and
        multi-line data as the SSE format allows), or as one JSON completion when the
        server answers ``application/json`` although a stream was asked for. The stream
        ends normally at a finish reason or at ``data: [DONE]`` (some servers send usage
        and ``[DONE]`` but no finish reason). An in-stream error event after the finish
        reason keeps the answer and the usage it carries; before it, it is the step's error.

        Raises ``ProviderError``/``AuthError``/``ContextOverflowError``. A
        stream that stops before the server gave a finish reason or ``[DONE]`` (connection
        dropped, read timeout, malformed chunk, or a clean close) is a retryable
        ``ProviderError("stream interrupted: …")``; the deadline passing is not retryable.
        """
        import openai

        started = time.monotonic()
        deadline = started + self.timeout if deadline is None else deadline
        if deadline - started <= 0:
            raise self._deadline_error()
        try:
            manager, http = self._open(request, deadline)
        except openai.OpenAIError as err:
            if isinstance(err, openai.APITimeoutError) and time.monotonic() >= deadline - 0.05:
                raise self._deadline_error() from err
            raise self._request_error(err) from err
        acc = _Accumulator(started, request.max_answer_chars)
        done = False
        hx = _http_module(http)  # the HTTP library the SDK runs on (httpx or its successor)
        guard = _Deadline(http, deadline, self.idle_timeout)
        try:
            try:
                if "json" in http.headers.get("content-type", "").lower():
                    events: Iterator[tuple[str | None, str]] = iter([(None, http.read().decode())])
                    done = True  # a whole completion: nothing more will come
                else:
                    events = _sse_events(http.iter_lines())
                for event, data in events:
                    if guard.fired:  # the shutdown raced with a last chunk
                        raise self._deadline_error(guard)
                    guard.last = time.monotonic()
                    if data.strip() == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError as err:
                        raise ProviderError(
                            f"stream interrupted: malformed chunk from {self.base_url} "
                            f"({_one_line(err)})",
                            retryable=True,
                        ) from err
                    error = chunk.get("error") if isinstance(chunk, Mapping) else None
                    if error or event == "error":
                        yield from acc.feed(chunk)  # its usage, if any
                        if acc.saw_reason:
                            continue  # the answer was complete: keep it, with its usage
                        raise self._event_error(error if isinstance(error, Mapping) else chunk)
                    yield from acc.feed(chunk)
                    if acc.cut:
                        yield TextDelta(acc.cut)
                        acc.reason = acc.reason or "length"
                        acc.saw_reason = True
                        break  # the rest of the stream is not read: memory stays bounded
            except (hx.HTTPError, openai.OpenAIError, UnicodeDecodeError) as err:
                if guard.fired or time.monotonic() >= deadline:
                    raise self._deadline_error(guard) from err
                raise self._stream_error(err) from err
        finally:
            guard.cancel()
            manager.__exit__(None, None, None)  # also when the consumer stops early
        if not (acc.saw_reason or done):
            if guard.fired:
                raise self._deadline_error(guard)
            raise ProviderError(
                f"stream interrupted: {self.base_url} closed the stream without a finish reason",
                retryable=True,
            )
        if not acc.saw_reason:
            acc.reason = "stop"  # [DONE] (or a whole completion) without a finish reason
        yield from acc.finish(request, self.input_excludes_cache)

    def complete(self, request: ChatRequest) -> str:
        """Non-streaming text of one completion (for titles and summaries)."""
        import openai

        try:  # the whole answer is the first byte here: request_timeout bounds the wait
            kwargs = self._kwargs(request)
            try:
                response = self._client.chat.completions.create(**kwargs, timeout=self._whole())
            except openai.APIStatusError as err:
                if not self._adapt(err, kwargs):  # a parameter refused by name: once without
                    raise
                response = self._client.chat.completions.create(
                    **self._kwargs(request), timeout=self._whole()
                )
        except openai.OpenAIError as err:
            if isinstance(err, openai.APITimeoutError):
                raise self._deadline_error() from err
            raise self._request_error(err) from err
        except ValueError as err:  # a 200 whose body is not JSON
            raise ProviderError(
                f"malformed response from {self.base_url}: {_one_line(err)}", retryable=True
            ) from err
        choices = getattr(response, "choices", None) or ()
        message = getattr(choices[0], "message", None) if choices else None
        content = getattr(message, "content", None)
        return content if isinstance(content, str) else ""

    def embed(self, texts: list[str], *, model: str) -> list[list[float]]:
        """Embeddings of ``texts`` from the server's ``/v1/embeddings`` (cross-session memory search).

        Raises ``ProviderError`` like the chat calls (a server without the endpoint answers 404).
        """
        import openai

        try:
            response = self._client.embeddings.create(
                model=model, input=clean_value(list(texts)), timeout=self._whole()
            )
        except openai.OpenAIError as err:
            raise self._request_error(err) from err
        except ValueError as err:
            raise ProviderError(
                f"malformed response from {self.base_url}: {_one_line(err)}"
            ) from err
        rows = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in rows]

    def server_context(self, model: str, timeout: float = 2.0) -> int:
        """The context window the server reports for ``model``, 0 when it reports none:
        ``max_model_len`` (vLLM), ``context_length``/``max_context_length`` (OpenRouter,
        LM Studio, Together), ``n_ctx`` (llama.cpp's ``/props``). One short request each."""
        import httpx

        headers = {"Authorization": f"Bearer {self._client.api_key}"}
        wait = min(timeout, self.first_byte_timeout)

        def get(url: str) -> Any:
            try:
                response = httpx.get(url, headers=headers, timeout=wait)
                return response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None

        listed = get(f"{self.base_url}/models")
        entries = listed.get("data") if isinstance(listed, Mapping) else None
        entries = [e for e in entries or () if isinstance(e, Mapping)]
        mine = [e for e in entries if e.get("id") == model] or (
            entries if len(entries) == 1 else []
        )
        for entry in mine:
            meta = entry.get("meta") if isinstance(entry.get("meta"), Mapping) else {}
            for key in ("max_model_len", "context_length", "max_context_length", "n_ctx"):
                found = _int(entry.get(key) or meta.get(key))
                if found:
                    return found
        if self.base_url.endswith("/v1"):  # llama.cpp's server: the slot's n_ctx in /props
            props = get(self.base_url[: -len("/v1")] + "/props")
            if isinstance(props, Mapping):
                settings = props.get("default_generation_settings")
                settings = settings if isinstance(settings, Mapping) else {}
                return _int(props.get("n_ctx") or settings.get("n_ctx"))
        return 0

    # -- bounded waits -----------------------------------------------------------

    def _first_byte(self, deadline: float) -> Any:
        """Connect, send and wait for the response's head within ``first_byte_timeout``."""
        import httpx

        return httpx.Timeout(max(0.001, min(self.first_byte_timeout, deadline - time.monotonic())))

    def _whole(self) -> Any:
        """A non-streamed call: connect within ``first_byte_timeout``, the rest in ``timeout``."""
        import httpx

        return httpx.Timeout(self.timeout, connect=self.first_byte_timeout)

    def _deadline_error(self, guard: _Deadline | None = None) -> ProviderError:
        """The request's time is up: not retried (the next attempt would cost as much again),
        unless the stream had been silent for ``idle_timeout`` by then (a stall, retried)."""
        if guard is not None and time.monotonic() - guard.last >= self.idle_timeout - 0.05:
            return self._idle_error()
        return ProviderError(
            f"the model server {self.base_url} did not finish within request_timeout "
            f"({self.timeout:g}s) — ask for a shorter answer, or raise "
            "%config AgentMagics.request_timeout",
            retryable=False,
        )

    def _idle_error(self) -> ProviderError:
        return ProviderError(
            f"stream interrupted: no data from {self.base_url} for {self.idle_timeout:g}s — "
            "check the server, or raise %config AgentMagics.idle_timeout",
            retryable=True,
        )

    # -- error mapping -----------------------------------------------------------

    def _request_error(self, err: Exception) -> ProviderError:
        """An error before any chunk arrived."""
        import openai

        if isinstance(err, openai.APIStatusError):
            return self._status_error(err)
        if isinstance(err, openai.APITimeoutError):
            return ProviderError(
                f"request timed out after {self.first_byte_timeout:g}s waiting for "
                f"{self.base_url} to answer — check the server, or raise "
                "%config AgentMagics.first_byte_timeout",
                retryable=True,
            )
        if isinstance(err, openai.APIConnectionError):
            return ProviderError(
                f"cannot reach {self.base_url}: {_connection_reason(err)}", retryable=True
            )
        if isinstance(err, openai.APIError):
            return self._event_error(err.body, err.message)
        return ProviderError(f"{type(err).__name__} from {self.base_url}: {_one_line(err)}")

    def _stream_error(self, err: Exception) -> ProviderError:
        """An error after the response started: mostly an interrupted stream."""
        import openai

        hx = _http_module(err)
        if isinstance(err, (openai.APITimeoutError, getattr(hx, "TimeoutException", ()))):
            return self._idle_error()
        if isinstance(err, getattr(hx, "HTTPError", ())):
            reason = _one_line(err) or type(err).__name__
            return ProviderError(f"stream interrupted: {reason}", retryable=True)
        if isinstance(err, openai.APIConnectionError):
            return ProviderError(f"stream interrupted: {_connection_reason(err)}", retryable=True)
        if isinstance(err, ValueError):
            return ProviderError(
                f"stream interrupted: malformed chunk from {self.base_url} ({_one_line(err)})",
                retryable=True,
            )
        if isinstance(err, openai.APIStatusError):
            return self._status_error(err)
        if isinstance(err, openai.APIError):
            return self._event_error(err.body, err.message)
        return ProviderError(
            f"stream interrupted: {type(err).__name__}: {_one_line(err)}", retryable=True
        )

    def _event_error(self, body: Any, message: Any = None) -> ProviderError:
        """An in-stream error event (``data: {"error": …}``; ``body`` is the inner error
        object). Classified like OpenCode's ``parseStreamError``, plus overload/5xx codes
        as retryable."""
        body = body if isinstance(body, Mapping) else {}
        message = _one_line(message or body.get("message") or json.dumps(body, default=str))
        code, etype = body.get("code"), body.get("type")
        text = json.dumps(body, default=str) if body else None
        status = code if isinstance(code, int) and 100 <= code < 600 else None
        where = f"error event from {self.base_url}"
        if retry.is_context_overflow(message, None, {"error": body}):
            return ContextOverflowError(
                f"context overflow: {where}: {message}", status=status, body=text
            )
        scode, stype = str(code or ""), str(etype or "")
        if scode in ("insufficient_quota", "usage_not_included", "invalid_prompt"):
            retryable = False
        elif (
            stype in ("too_many_requests", "rate_limit_error")
            or "rate_limit" in scode
            or any(
                w in f"{scode} {stype}".lower()
                for w in ("overloaded", "exhausted", "unavailable", "server_error")
            )
        ):
            retryable = True
        else:
            retryable = status is not None and (status in (408, 409, 429) or status >= 500)
        return ProviderError(f"{where}: {message}", status=status, retryable=retryable, body=text)

    def _status_error(self, err: Any) -> ProviderError:
        status = int(err.status_code)
        response = err.response
        headers = {str(k).lower(): str(v) for k, v in response.headers.items()}
        try:
            text = response.text
        except Exception:  # noqa: BLE001 - body never read (closed stream)
            text = ""
        detail = _detail(err.body, text)
        reason = getattr(response, "reason_phrase", "") or ""
        prefix = f"HTTP {status}{' ' + reason if reason else ''} from {self.base_url}"
        # What OpenCode matches: the SDK message plus body, or "400 status code
        # (no body)" for an empty one (Cerebras/Mistral overflow).
        probe = f"{err.message} {detail}" if text.strip() else f"{status} status code (no body)"
        if retry.is_context_overflow(
            probe, status, err.body if isinstance(err.body, Mapping) else text
        ):
            return ContextOverflowError(
                f"context overflow: {prefix}: {detail}", status=status, headers=headers, body=text
            )
        if status in (401, 403):
            return AuthError(
                f"{prefix}: {detail} — {AUTH_HINT}", status=status, headers=headers, body=text
            )
        retryable = status in (408, 409, 429) or status >= 500
        if status == 404 and self.provider_id.startswith("openai"):
            retryable = True  # OpenAI sometimes 404s for models that exist
        return ProviderError(
            f"{prefix}: {detail}", status=status, retryable=retryable, headers=headers, body=text
        )


class _Deadline:
    """The two bounds of a response already started: reads after its head wait at most
    ``idle`` seconds each, and at ``deadline`` the connection is shut down (a server that
    trickles a byte at a time cannot hold the call longer)."""

    def __init__(self, response: Any, deadline: float, idle: float) -> None:
        self.fired = False
        self.last = time.monotonic()  # when data last arrived (the head, then each chunk)
        self._response = response
        left = deadline - time.monotonic()
        # httpx hands this dict to httpcore, which reads "read" when the body starts
        timeouts = getattr(getattr(response, "request", None), "extensions", {}).get("timeout")
        if isinstance(timeouts, dict):
            timeouts["read"] = max(0.001, min(idle, left))
        self._timer = threading.Timer(max(0.0, left), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        stream = (getattr(self._response, "extensions", None) or {}).get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the read blocked on it
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def _detail(body: Any, text: str) -> str:
    """The server's explanation, one line: ``error.message``, else the body text."""
    if isinstance(body, Mapping):
        for value in (body.get("message"), body.get("error")):
            if isinstance(value, str) and value.strip():
                return _one_line(value)
            if isinstance(value, Mapping) and isinstance(value.get("message"), str):
                return _one_line(value["message"])
    stripped = (text or "").strip()
    if not stripped:
        return "(no body)"
    if re.match(r"<!doctype|<html", stripped, re.IGNORECASE):
        title = re.search(r"<title>(.*?)</title>", stripped, re.IGNORECASE | re.DOTALL)
        return f"HTML error page{': ' + _one_line(title.group(1), 120) if title else ''}"
    try:
        data = json.loads(stripped)
    except ValueError:
        return _one_line(stripped)
    if isinstance(data, Mapping):
        inner = data.get("error", data)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return _one_line(inner["message"])
        if isinstance(inner, str):
            return _one_line(inner)
    return _one_line(stripped)
