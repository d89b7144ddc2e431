"""retry.py against OpenCode's retry.test.ts, fromError cases and its context-overflow patterns."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

from jupyter_session_agent.core import retry
from jupyter_session_agent.core.errors import AuthError, ContextOverflowError, ProviderError


def api_error(headers: dict | None = None, **kw) -> ProviderError:
    """retry.test.ts's ``apiError``: message "boom", retryable, optional headers."""
    return ProviderError("boom", retryable=True, headers=headers, **kw)


def http_date(offset_s: float) -> str:
    return email.utils.formatdate(time.time() + offset_s, usegmt=True)


# --------------------------------------------------------------------------
# delay (ms in OpenCode, seconds here)


def test_delays_without_headers_cap_at_30s():
    err = api_error()
    assert [retry.retry_delay(i + 1, err) for i in range(10)] == [
        2,
        4,
        8,
        16,
        30,
        30,
        30,
        30,
        30,
        30,
    ]


def test_delays_without_error_cap_at_30s():
    assert [retry.retry_delay(i, None) for i in (1, 2, 5, 20)] == [2, 4, 30, 30]


@pytest.mark.parametrize(
    ("headers", "attempt", "expected"),
    [
        ({"retry-after-ms": "1500"}, 4, 1.5),  # prefers retry-after-ms, even shorter than backoff
        ({"retry-after": "30"}, 3, 30.0),  # seconds
        ({"retry-after": "0.25"}, 1, 0.25),  # ceil to ms
        ({"retry-after": "not-a-number"}, 1, 2.0),  # invalid → base
        ({"retry-after": "Invalid Date String"}, 1, 2.0),  # malformed date → base
        ({"retry-after": "50"}, 1, 50.0),  # honoured beyond any cap
        ({"retry-after-ms": "700000"}, 1, 700.0),
        ({"Retry-After": "7"}, 1, 7.0),  # header names are case-insensitive
        ({"retry-after-ms": "-5", "retry-after": "3"}, 1, 3.0),  # negative ms hint is garbage
        ({"retry-after-ms": "abc", "retry-after": "4"}, 1, 4.0),
        ({"retry-after": "12abc"}, 1, 12.0),  # JS parseFloat takes the numeric prefix
        ({"content-type": "application/json"}, 1, 2.0),
        # headers but no hint: capped at 30 s (v1.2.16 left this uncapped; users hit endless waits)
        ({"content-type": "application/json"}, 6, 30.0),
        ({"content-type": "application/json"}, 40, 30.0),
        ({"retry-after-ms": "1e12"}, 1, 2_147_483.647),
    ],
)
def test_delay_with_headers(headers, attempt, expected):
    assert retry.retry_delay(attempt, api_error(headers)) == pytest.approx(expected)


def test_http_date_retry_after():
    d = retry.retry_delay(1, api_error({"retry-after": http_date(20)}))
    assert 19.0 <= d <= 20.0


def test_past_http_date_is_ignored():
    assert retry.retry_delay(1, api_error({"retry-after": http_date(-5)})) == 2.0


def test_now_is_injectable_for_dates():
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 90, usegmt=True)
    assert retry.retry_delay(1, api_error({"retry-after": date}), now=now) == 90.0


def test_delay_reads_headers_from_any_error_with_headers():
    class Other(Exception):
        headers = {"retry-after": "9"}

    assert retry.retry_delay(1, Other()) == 9.0


# --------------------------------------------------------------------------
# retryable


def wrap(message) -> Exception:
    """retry.test.ts's ``wrap``: an error whose message is the given text."""
    return Exception(message)


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (
            wrap(json.dumps({"type": "error", "error": {"type": "too_many_requests"}})),
            "Too Many Requests",
        ),
        (wrap(json.dumps({"code": "resource_exhausted"})), "Provider is overloaded"),
        (wrap(json.dumps({"code": "service_unavailable"})), "Provider is overloaded"),
        (
            wrap(json.dumps({"type": "error", "error": {"code": "rate_limit_exceeded"}})),
            "Rate Limited",
        ),
        (
            wrap(json.dumps({"error": {"message": "no_kv_space"}})),
            '{"error":{"message":"no_kv_space"}}',
        ),
        (wrap(json.dumps({"type": "error", "error": {"code": 123}})), None),  # numeric code
        (
            wrap(json.dumps({"type": "error", "error": {"code": "other"}})),
            '{"type":"error","error":{"code":"other"}}',
        ),
        (
            wrap(json.dumps({"msg": "ünïcode"})),
            '{"msg":"ünïcode"}',
        ),  # JSON.stringify keeps non-ASCII
        (wrap("not-json"), None),
        (wrap("123"), None),  # JSON scalar
        (wrap("null"), None),
        (wrap('"text"'), None),
        (wrap("[1,2]"), "[1,2]"),  # arrays are objects upstream
        (
            ContextOverflowError(
                "Input exceeds context window of this model",
                body='{"error":{"code":"context_length_exceeded"}}',
            ),
            None,
        ),
        (
            ContextOverflowError("x", retryable=True),
            None,
        ),  # overflow never retried, whatever the flag
        (
            ProviderError("Connection reset by server", retryable=True),
            "Connection reset by server",
        ),  # ECONNRESET
        (ProviderError("boom", retryable=False), None),
        (ProviderError("boom", retryable=True), "boom"),
        (
            ProviderError("HTTP 529: Overloaded", retryable=True, status=529),
            "Provider is overloaded",
        ),
        (
            ProviderError(
                "HTTP 429", retryable=True, body='{"error":{"type":"FreeUsageLimitError"}}'
            ),
            "Free usage exceeded, add credits https://opencode.ai/zen",
        ),
        (AuthError("HTTP 401 — check OPENAI_API_KEY", status=401), None),
        (ConnectionResetError("reset"), "Connection reset by server"),
        (ValueError("plain"), None),
    ],
)
def test_retry_message(err, expected):
    assert retry.retry_message(err) == expected


# --------------------------------------------------------------------------
# overflow (OpenCode's overflow patterns and fromError cases)

OVERFLOW_MESSAGES = [
    "prompt is too long: 210000 tokens > 200000 maximum",  # Anthropic
    "Input is too long for requested model.",  # Bedrock
    "Your input exceeds the context window of this model.",  # OpenAI
    "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",  # Gemini
    "This model's maximum prompt length is 131072 but the request contains 200000 tokens.",  # xAI
    "Please reduce the length of the messages or completion.",  # Groq
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",  # vLLM etc.
    "prompt token count of 130000 exceeds the limit of 128000",  # Copilot
    "the request exceeds the available context size, try increasing it",  # llama.cpp
    "Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context "
    "length of 4096 which is greater than the context length",  # LM Studio-ish
    "context window exceeds limit (2013)",  # MiniMax
    "Your request exceeded model token limit: 262144",  # Moonshot
    "context_length_exceeded",
    "Context Length Exceeded",  # case-insensitive, spaces
    "413 Request Entity Too Large",
    "This model's context length is only 8192 tokens",  # vLLM (later upstream)
    "Input length 9000 exceeds the context length 8192",  # vLLM (later upstream)
    "400 status code (no body)",  # Cerebras / Mistral
    "413 (no body)",
    "400 (no body)",
]


@pytest.mark.parametrize("message", OVERFLOW_MESSAGES)
def test_overflow_messages(message):
    assert retry.is_context_overflow(message)


@pytest.mark.parametrize(
    "message",
    [
        "429 status code (no body)",  # a rate limit is not an overflow
        "500 status code (no body)",
        "Rate limit exceeded",
        "invalid api key",
        "boom",
        "",
        "x 400 status code (no body)",  # the no-body form is anchored
    ],
)
def test_not_overflow(message):
    assert not retry.is_context_overflow(message)


@pytest.mark.parametrize(
    ("message", "status", "body", "expected"),
    [
        ("anything", 413, None, True),  # HTTP 413
        ("Error code: 429", 429, "", False),
        (
            "boom",
            400,
            {"error": {"code": "context_length_exceeded"}},
            True,
        ),  # fromError: response code
        ("boom", 400, '{"error":{"code":"context_length_exceeded"}}', True),  # as text
        (
            "boom",
            400,
            {"code": "context_length_exceeded", "message": "x"},
            True,
        ),  # SDK-unwrapped body
        (
            "boom",
            None,
            {"type": "error", "error": {"code": "context_length_exceeded"}},
            True,
        ),  # stream event
        ("boom", 400, {"error": {"code": "invalid_request"}}, False),
        (
            "Error code: 400",
            400,
            "maximum context length is 2048 tokens",
            True,
        ),  # explanation in body only
        ("boom", 400, "not json", False),
        ("boom", 500, {"error": {"code": 123}}, False),
    ],
)
def test_overflow_with_status_and_body(message, status, body, expected):
    assert retry.is_context_overflow(message, status, body) is expected


def test_constants_match_opencode():
    assert retry.RETRY_INITIAL_DELAY == 2000
    assert retry.RETRY_BACKOFF_FACTOR == 2
    assert retry.RETRY_MAX_DELAY_NO_HEADERS == 30_000
    assert retry.RETRY_MAX_DELAY == 2**31 - 1
