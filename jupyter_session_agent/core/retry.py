"""Retry policy: which errors to retry, how long to wait, what is a context overflow.

One module: the three answers are one policy over the same provider error (an overflow is
never retried, a retryable error's wait comes from its headers), so they are read together.

Pure functions (no I/O, no ``openai`` import), ported from OpenCode v1.2.16
``src/session/retry.ts`` and ``src/provider/error.ts`` (its overflow patterns,
``fromError`` mapping, ``retryable`` and ``delay``):

- :func:`is_context_overflow` — does a provider error mean "the prompt did not
  fit"? Such errors are never retried; the loop compacts instead.
- :func:`retry_message` — the status line to show while retrying, or ``None``
  for "do not retry".
- :func:`retry_delay` — seconds to wait before attempt ``attempt`` (1-based),
  honouring ``retry-after-ms`` / ``retry-after`` response headers.
- :func:`next_wait` — the same, bounded: the backoff is capped at
  ``max_retry_wait`` and a server that asks for longer is a
  :class:`RetryWaitError` at once (one line: how long, which setting), never
  an hour's sleep.

There is no maximum number of attempts here (as in OpenCode); the agent loop
owns that decision and the user can interrupt the wait.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import ContextOverflowError, ProviderError

T = TypeVar("T")

RETRY_INITIAL_DELAY = 2000  # ms
RETRY_BACKOFF_FACTOR = 2
RETRY_MAX_DELAY_NO_HEADERS = 30_000  # ms
RETRY_MAX_DELAY = 2_147_483_647  # ms; setTimeout's limit in OpenCode, kept as a sanity cap

# OpenCode v1.2.16's overflow patterns, in upstream order, plus the two vLLM patterns added later
# (``provider/error.ts`` after v1.2.16): vLLM is a common local server here.
OVERFLOW_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"prompt is too long",  # Anthropic
        r"input is too long for requested model",  # Amazon Bedrock
        r"exceeds the context window",  # OpenAI
        r"input token count.*exceeds the maximum",  # Google (Gemini)
        r"maximum prompt length is \d+",  # xAI (Grok)
        r"reduce the length of the messages",  # Groq
        r"maximum context length is \d+ tokens",  # OpenRouter, DeepSeek, vLLM
        r"exceeds the limit of \d+",  # GitHub Copilot
        r"exceeds the available context size",  # llama.cpp server
        r"greater than the context length",  # LM Studio
        r"context window exceeds limit",  # MiniMax
        r"exceeded model token limit",  # Kimi, Moonshot
        r"context[_ ]length[_ ]exceeded",  # generic
        r"request entity too large",  # HTTP 413
        r"context length is only \d+ tokens",  # vLLM (later upstream)
        r"input length.*exceeds.*context length",  # vLLM (later upstream)
    )
)
# Cerebras and Mistral answer an oversized prompt with a bare 400/413.
_NO_BODY = re.compile(r"^4(00|13)\s*(status code)?\s*\(no body\)", re.IGNORECASE)

OVERLOADED = "Provider is overloaded"
FREE_USAGE = "Free usage exceeded, add credits https://opencode.ai/zen"


# --------------------------------------------------------------------------
# overflow


def _as_json(body: Any) -> Any:
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return None
    return body


def _overflow_code(body: Any) -> bool:
    """``context_length_exceeded`` as ``{error:{code}}`` (HTTP body or stream
    event ``{type:"error", error:{...}}``) or as a bare ``{code}`` (what the
    openai SDK keeps after unwrapping ``error``)."""
    data = _as_json(body)
    if not isinstance(data, Mapping):
        return False
    inner = data.get("error")
    if isinstance(inner, Mapping) and inner.get("code") == "context_length_exceeded":
        return True
    return data.get("code") == "context_length_exceeded"


def is_context_overflow(message: str, status: int | None = None, body: Any = None) -> bool:
    """True when a provider error means the request exceeded the context window.

    ``message`` is matched against every ``OVERFLOW_PATTERNS`` entry (case-insensitive) and
    the bare ``400/413 (no body)`` form; HTTP 413 always counts; ``body`` (a
    dict or JSON text) counts when it carries ``context_length_exceeded``.
    Text bodies are matched too, since some servers put the explanation only
    there. A 429 with no body is a rate limit, not an overflow.
    """
    message = message or ""
    if status == 413:
        return True
    texts = [message]
    if isinstance(body, str) and body:
        texts.append(body)
    elif isinstance(body, Mapping):
        texts.append(json.dumps(body, default=str))
    if any(p.search(t) for p in OVERFLOW_PATTERNS for t in texts):
        return True
    if _NO_BODY.search(message):
        return True
    return _overflow_code(body)


# --------------------------------------------------------------------------
# retryable


def _js_json(value: Any) -> str:
    """``JSON.stringify``: compact separators, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def retry_message(err: BaseException) -> str | None:
    """OpenCode's ``SessionRetry.retryable``: a status message, or ``None`` = do not retry.

    - :class:`ContextOverflowError` → never (the loop compacts instead);
    - :class:`ProviderError`: not ``retryable`` → ``None``; a body mentioning
      ``FreeUsageLimitError`` → the add-credits message; a message containing
      ``Overloaded`` → "Provider is overloaded"; otherwise the message;
    - anything else whose message parses as a JSON object (or array):
      ``{type:"error", error:{type:"too_many_requests"}}`` → "Too Many Requests";
      a ``code`` containing ``exhausted``/``unavailable`` → "Provider is
      overloaded"; ``error.code`` containing ``rate_limit`` → "Rate Limited";
      a non-string ``error.code`` → ``None`` (upstream's ``.includes`` throws);
      any other JSON → retried with the compact JSON text;
    - a non-JSON message → ``None``.
    """
    if isinstance(err, ContextOverflowError):
        return None
    if isinstance(err, ProviderError):
        if not err.retryable:
            return None
        if isinstance(err.body, str) and "FreeUsageLimitError" in err.body:
            return FREE_USAGE
        message = err.message or str(err)
        return OVERLOADED if "Overloaded" in message else message
    if isinstance(err, ConnectionResetError):
        # fromError's ECONNRESET mapping, for a socket error that escaped wrapping
        return "Connection reset by server"

    raw = getattr(err, "message", None)
    if not isinstance(raw, str):
        raw = str(err)
    try:
        data = json.loads(raw)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, (dict, list)):
        return None  # null and scalars are not error objects
    if isinstance(data, list):
        return _js_json(data)  # an array is an "object" upstream: retried as text

    code = data.get("code")
    code = code if isinstance(code, str) else ""
    inner = data.get("error")
    if (
        data.get("type") == "error"
        and isinstance(inner, Mapping)
        and inner.get("type") == "too_many_requests"
    ):
        return "Too Many Requests"
    if "exhausted" in code or "unavailable" in code:
        return OVERLOADED
    if data.get("type") == "error" and isinstance(inner, Mapping) and inner.get("code") is not None:
        inner_code = inner.get("code")
        if isinstance(inner_code, list):
            if "rate_limit" in inner_code:
                return "Rate Limited"
        elif not isinstance(inner_code, str):
            return None  # upstream: `123.includes` throws → undefined
        elif "rate_limit" in inner_code:
            return "Rate Limited"
    return _js_json(data)


# --------------------------------------------------------------------------
# delay

_JS_FLOAT = re.compile(r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _parse_float(text: str) -> float | None:
    """JavaScript ``Number.parseFloat``: the longest numeric prefix, else None."""
    match = _JS_FLOAT.match(text)
    if not match:
        stripped = text.strip()
        if stripped.startswith(("Infinity", "+Infinity")):
            return math.inf
        return None
    return float(match.group(0))


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    for key, value in headers.items():
        if str(key).lower() == name and value not in (None, ""):
            return str(value)
    return None


def _hinted_ms(headers: Mapping[str, Any], now: float) -> float | None:
    """The server's wait hint in ms, or None when absent, invalid or past."""
    retry_after_ms = _header(headers, "retry-after-ms")
    if retry_after_ms is not None:
        parsed = _parse_float(retry_after_ms)
        # Negative/infinite hints are garbage: fall through to the next source.
        if parsed is not None and 0 <= parsed < math.inf:
            return parsed
    retry_after = _header(headers, "retry-after")
    if retry_after is not None:
        seconds = _parse_float(retry_after)
        if seconds is not None and 0 <= seconds < math.inf:
            return float(math.ceil(seconds * 1000))
        try:
            when = email.utils.parsedate_to_datetime(retry_after)
        except (TypeError, ValueError, IndexError, OverflowError):
            when = None
        if when is not None:
            if when.tzinfo is None:  # "-0000" parses naive; HTTP dates are GMT
                when = when.replace(tzinfo=_dt.UTC)
            delta_ms = when.timestamp() * 1000 - now * 1000
            if delta_ms > 0:
                return float(math.ceil(delta_ms))
    return None


def retry_delay(
    attempt: int, err: BaseException | None = None, *, now: float | None = None
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    With response headers on ``err`` (``err.headers``, as on
    :class:`ProviderError`): ``retry-after-ms`` (float ms), else
    ``retry-after`` seconds (ceil to ms), else ``retry-after`` as an HTTP date
    in the future; a server's hint is honoured however large. No usable hint →
    ``2 s * 2^(attempt-1)`` capped at 30 s. OpenCode v1.2.16 leaves that backoff
    uncapped whenever the response had headers (every HTTP error has some),
    which its users reported as endless waits; upstream later capped it too.
    Everything is capped at 2^31−1 ms.
    ``now`` (epoch seconds) is for tests.
    """
    attempt = max(1, int(attempt))
    base = RETRY_INITIAL_DELAY * RETRY_BACKOFF_FACTOR ** (attempt - 1)
    headers = getattr(err, "headers", None) if err is not None else None
    hinted = None
    if isinstance(headers, Mapping) and headers:
        hinted = _hinted_ms(headers, time.time() if now is None else now)
    ms = hinted if hinted is not None else min(base, RETRY_MAX_DELAY_NO_HEADERS)
    return min(ms, RETRY_MAX_DELAY) / 1000


# --------------------------------------------------------------------------
# bounded waits


class RetryWaitError(ProviderError):
    """The server asked to wait longer than ``max_retry_wait`` allows: no retry."""


def server_wait(err: BaseException | None, *, now: float | None = None) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after`` seconds or HTTP
    date), or None when it gave no usable hint."""
    headers = getattr(err, "headers", None) if err is not None else None
    if not isinstance(headers, Mapping) or not headers:
        return None
    hinted = _hinted_ms(headers, time.time() if now is None else now)
    return None if hinted is None else min(hinted, RETRY_MAX_DELAY) / 1000


def human_seconds(seconds: float) -> str:
    """``3600`` → "1 h", ``90`` → "1 min 30 s", ``2.5`` → "2.5 s" (for one-line messages)."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    whole = int(math.ceil(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    shown = [f"{n} {unit}" for n, unit in units if n][:2]
    return " ".join(shown)


def next_wait(
    attempt: int, err: BaseException, *, max_wait: float, now: float | None = None
) -> float:
    """Seconds to wait before retry ``attempt``, never more than ``max_wait``.

    The server's own hint is honoured up to ``max_wait``; a longer one raises
    :class:`RetryWaitError` (status, headers and body of ``err`` kept) whose message says
    how long the server asked to wait and which setting allows it. Without a hint, the
    backoff of :func:`retry_delay` is capped at ``max_wait``.
    """
    asked = server_wait(err, now=now)
    if asked is None:
        return min(retry_delay(attempt, err, now=now), max(0.0, max_wait))
    if asked > max_wait:
        reason = _one_line(getattr(err, "message", None) or str(err))
        raise RetryWaitError(
            f"{reason} — the server asks to wait {human_seconds(asked)} before a retry, "
            f"more than max_retry_wait allows ({max_wait:g} s): try again later, or raise "
            f"%config AgentMagics.max_retry_wait = {int(math.ceil(asked))}",
            status=getattr(err, "status", None),
            retryable=False,
            headers=getattr(err, "headers", None),
            body=getattr(err, "body", None),
        )
    return asked


def with_retries(
    attempt_once: Callable[[], T],
    *,
    retries: int,
    max_wait: float,
    wait: Callable[[int, ProviderError, float, str], Any],
) -> T:
    """The one retry loop: ``attempt_once()`` until it returns, at most ``retries`` more times.

    A :class:`ProviderError` that :func:`retry_message` calls retryable is retried after
    :func:`next_wait` seconds (which raises when the server asks for more than ``max_wait``);
    ``wait(attempt, err, delay, reason)`` does the waiting (a plain sleep, or the loop's
    countdown with a retry part). Anything else, or the last failure, is raised unchanged.
    """
    attempt = 0
    while True:
        try:
            return attempt_once()
        except ProviderError as err:
            reason = retry_message(err)
            if reason is None or attempt >= retries:
                raise
            attempt += 1
            wait(attempt, err, next_wait(attempt, err, max_wait=max_wait), reason)


def _one_line(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
