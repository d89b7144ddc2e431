"""One LLM call over an OpenAI-compatible chat-completions API.

One module: the one import of ``openai``; the connection, its deadlines and the error mapping
all read the SDK's objects, which no other module may see. Reading the stream's chunks into
events is :mod:`.chat_stream`'s (``ChatRequest`` and ``finish_reason`` are re-exported here).

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
from typing import Any
from urllib.parse import urlsplit

from ..core import retry
from ..core.errors import AuthError, ContextOverflowError, ProviderError
from ..core.redact import clean_value, remember
from ..core.stream import StreamEvent, TextDelta
from .chat_stream import Accumulator, ChatRequest, finish_reason, nonnegative_int

__all__ = ["ChatRequest", "OpenAIProvider", "finish_reason"]

AUTH_HINT = "check OPENAI_API_KEY / the provider's key"
# Local servers (llama.cpp, vLLM, Ollama…) ignore the key, but the SDK insists on one.
NO_KEY_PLACEHOLDER = "sk-no-key-required"
_DETAIL_MAX = 300


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


def _connection_reason(err: Any) -> str:
    """The transport's own words for a connection error (the SDK's message is generic)."""
    cause = err.__cause__ or err.__context__
    return _one_line(cause) if cause is not None and str(cause) else _one_line(err.message)


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

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client: made once per provider, with the SDK's retries off
        (retries are the loop's policy) and this provider's timeout."""
        return self._client

    def request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``chat.completions.create`` for ``request``: messages
        cleaned, the output limit under the name this server takes, refused parameters dropped."""
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

        kwargs = self.request_kwargs(request)
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
                    kwargs = self.request_kwargs(request)
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
        acc = Accumulator(started, request.max_answer_chars)
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
            kwargs = self.request_kwargs(request)
            try:
                response = self._client.chat.completions.create(**kwargs, timeout=self._whole())
            except openai.APIStatusError as err:
                if not self._adapt(err, kwargs):  # a parameter refused by name: once without
                    raise
                response = self._client.chat.completions.create(
                    **self.request_kwargs(request), timeout=self._whole()
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
                found = nonnegative_int(entry.get(key) or meta.get(key))
                if found:
                    return found
        if self.base_url.endswith("/v1"):  # llama.cpp's server: the slot's n_ctx in /props
            props = get(self.base_url[: -len("/v1")] + "/props")
            if isinstance(props, Mapping):
                settings = props.get("default_generation_settings")
                settings = settings if isinstance(settings, Mapping) else {}
                return nonnegative_int(props.get("n_ctx") or settings.get("n_ctx"))
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
