"""Keeping API keys out of the history, the model's context and the notebook.

:func:`redact` replaces what looks like a credential with ``[REDACTED:<kind>]``:

- well-known key formats: OpenAI ``sk-…`` / ``sk-proj-…``, Anthropic
  ``sk-ant-…``, AWS access key ids ``AKIA…``/``ASIA…``, GitHub ``ghp_…`` (and
  ``gho_``/``ghu_``/``ghs_``/``ghr_``) and ``github_pat_…``, Slack ``xox?-…``,
  Google ``AIza…``, and the token of ``Bearer <token>``;
- the exact values of environment variables whose names contain ``KEY``,
  ``TOKEN``, ``SECRET``, ``PASSWORD`` or ``PASSWD`` (values of 8+ characters
  with a letter in them; paths are left alone), as ``[REDACTED:<NAME>]``.

Where it is applied: tool outputs before they are saved, truncated or sent
to the model (``tools.run_tool``, and the session for tool errors), user
prompts, and — as the last line of defence — every line the store appends to
a journal (:func:`redact`'s replacements contain no quotes or backslashes, so
redacting serialised JSON keeps it valid JSON).

Cheap when there is nothing to find: a few substring tests decide whether
any regular expression runs at all.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any

SECRET_NAME_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
MIN_SECRET_LENGTH = 8
_ENV_TTL = 1.0  # seconds an environment scan is reused by the store's safety net

# (kind, quick substring test, pattern); the pattern's group "secret" (or all of it) is replaced.
_FORMATS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("anthropic", ("sk-ant-",), r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai", ("sk-",), r"(?<![\w-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("aws", ("AKIA", "ASIA"), r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     r"(?<![\w])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("slack", ("xox",), r"(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google", ("AIza",), r"(?<![\w-])AIza[0-9A-Za-z_-]{35}"),
    ("bearer", ("earer",), r"(?<=[Bb]earer )[A-Za-z0-9._~+/-]{16,}=*"),
)
_COMPILED = tuple((kind, probes, re.compile(pattern)) for kind, probes, pattern in _FORMATS)

_lock = threading.Lock()
_env_cache: tuple[float, int, tuple[tuple[str, str], ...]] = (0.0, -1, ())


def secret_env_values(*, refresh: bool = False) -> tuple[tuple[str, str], ...]:
    """``(value, NAME)`` of environment variables that hold secrets, longest value first."""
    global _env_cache
    now = time.monotonic()
    stamp, size, values = _env_cache
    if not refresh and now - stamp < _ENV_TTL and size == len(os.environ):
        return values
    found: dict[str, str] = {}
    for name, value in os.environ.items():
        upper = name.upper()
        if not any(word in upper for word in SECRET_NAME_WORDS):
            continue
        value = value.strip()
        if len(value) < MIN_SECRET_LENGTH or value.startswith(("/", "~", ".")) or not re.search(r"[A-Za-z]", value):
            continue
        if value.lower() in ("true", "false", "none", "null", "disabled", "enabled"):
            continue
        found.setdefault(value, name)
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]
        if escaped != value:  # its form inside serialised JSON
            found.setdefault(escaped, name)
    values = tuple(sorted(found.items(), key=lambda item: -len(item[0])))
    with _lock:
        _env_cache = (now, len(os.environ), values)
    return values


def redact(text: str, *, refresh: bool = False) -> str:
    """``text`` with secrets replaced by ``[REDACTED:<kind>]``."""
    if not text or not isinstance(text, str):
        return text
    for value, name in secret_env_values(refresh=refresh):
        if value in text:
            text = text.replace(value, f"[REDACTED:{name}]")
    for kind, probes, pattern in _COMPILED:
        if any(probe in text for probe in probes):
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def redact_value(value: Any, *, refresh: bool = False) -> Any:
    """``redact`` applied to every string inside lists, tuples and dicts (keys too)."""
    if isinstance(value, str):
        return redact(value, refresh=refresh)
    if isinstance(value, dict):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value


def contains_secret(text: str) -> bool:
    return redact(text, refresh=True) != text


__all__ = ["redact", "redact_value", "secret_env_values", "contains_secret", "SECRET_NAME_WORDS"]
