"""Keeping API keys out of the history, the model's context and the notebook.

One module: what counts as a secret (names, formats, values seen) and the one function that
replaces it everywhere must agree, or a secret found in one place would leak through another.

:func:`redact` replaces what looks like a credential with ``[REDACTED:<kind>]``:

- well-known key formats: OpenAI ``sk-…`` / ``sk-proj-…``, Anthropic
  ``sk-ant-…``, AWS access key ids ``AKIA…``/``ASIA…``, GitHub ``ghp_…`` (and
  ``gho_``/``ghu_``/``ghs_``/``ghr_``) and ``github_pat_…``, Slack ``xox?-…``,
  Google ``AIza…``, and the token of ``Bearer <token>``;
- Hugging Face ``hf_…``, Stripe ``sk_live_…``/``rk_live_…``, GitLab ``glpat-…``, npm and
  PyPI tokens, JWTs, PEM private-key blocks, the password of a URL
  (``postgres://user:PASSWORD@host``), and the value of a secret-named query parameter
  (``?api_key=…``) or command-line option (``--api-key …``), Stripe webhook secrets
  ``whsec_…``, the path of a Slack, Discord or Teams webhook URL, the key of a connection
  string (``AccountKey=…;``, ``Password=…;``) and the password of a URL-encoded URL
  (``https%3A%2F%2Fuser%3APASSWORD%40host``), Groq ``gsk_…`` and Replicate ``r8_…`` keys,
  a base64-encoded PEM block (split across lines too), ``Authorization: Basic …``,
  ``x-api-key:`` headers and an AWS ``secret_access_key = …``;
- the exact values of environment variables whose names look secret (:func:`secret_name`:
  ``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASS*``, ``*CREDENTIAL*``, ``*CREDS*``,
  ``*WEBHOOK*``, ``*CONNECTION_STRING*``, ``*PRIVATE*``, ``*SIGNING*``, ``*AUTH*``, ``*PWD``,
  ``*DSN``, …; values of 8+ characters with a letter in them; paths are left alone) and the
  password of any variable holding a URL with credentials (``DATABASE_URL``), as
  ``[REDACTED:<NAME>]``, and of keys handed to :func:`remember` (the provider registers
  the key it sends).
  Also their forms inside JSON, HTML, a Python ``repr`` and a URL.

Known secrets only accumulate: the environment is read when this module is
imported (at ``%load_ext``) and again on every ``refresh=True`` call (or
after a second, or when the number of variables changed), and a value once
seen stays known for the life of the process, so code that removes a key from
``os.environ`` before printing it is still redacted.

:func:`clean` is what every outbound path applies — :func:`redact`, then
:func:`~.text.safe_text` (no lone surrogates, ``core/text.py``): the journal
encoder (``store/codec.py``), tool results (``tools.run_tool``), the display
bundles (``ui/display.py``), what the ``python`` tool shows in the cell
(``tools/python.py``), exports (``exchange/transfer.py``), model requests
(``providers/openai_provider.py``), and every ``AgentError``'s text (``core/errors.py``). The
replacements contain no quotes or backslashes, so redacting serialised JSON
keeps it valid JSON. Cheap when there is nothing to find: a few substring
tests decide whether any regular expression runs at all.
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
import time
from typing import Any
from urllib.parse import quote

from .text import map_strings, safe_text

SECRET_NAME_WORDS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "CREDENTIAL",
    "CREDS",
    "COOKIE",
    "WEBHOOK",
    "CONNECTION_STRING",
    "CONN_STR",
    "PRIVATE",
    "SIGNING",
)
SECRET_NAME_ENDINGS = ("PWD", "DSN", "_PW", "_AUTH")  # MYSQL_PWD, SENTRY_DSN, NPM_AUTH
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "KEYMAP", "PASSENGER_APP_ENV"})
MIN_SECRET_LENGTH = 8
_ENV_TTL = 1.0  # seconds an environment scan is reused without refresh=True
_NOT_SECRETS = ("true", "false", "none", "null", "disabled", "enabled")

# (kind, quick substring test, pattern); the pattern's group "secret" (or all of it) is replaced.
_FORMATS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("anthropic", ("sk-ant-",), r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai", ("sk-",), r"(?<![\w-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("aws", ("AKIA", "ASIA"), r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    (
        "github",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"(?<![\w])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    ),
    ("slack", ("xox",), r"(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google", ("AIza",), r"(?<![\w-])AIza[0-9A-Za-z_-]{35}"),
    ("bearer", ("earer",), r"(?<=[Bb]earer )[A-Za-z0-9._~+/-]{16,}=*"),
    ("huggingface", ("hf_",), r"(?<![\w-])hf_[A-Za-z0-9]{30,}"),
    ("stripe", ("_live_", "_test_"), r"(?<![\w-])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("gitlab", ("glpat-",), r"(?<![\w-])glpat-[A-Za-z0-9_-]{20,}"),
    ("npm", ("npm_",), r"(?<![\w-])npm_[A-Za-z0-9]{36}"),
    ("pypi", ("pypi-",), r"(?<![\w-])pypi-AgE[A-Za-z0-9_-]{50,}"),
    (
        "jwt",
        ("eyJ",),
        r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "private-key",
        ("PRIVATE KEY",),
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----"
        r"|[\s\S]*)",
    ),
    ("groq", ("gsk_",), r"(?<![\w-])gsk_[A-Za-z0-9]{40,}"),
    ("replicate", ("r8_",), r"(?<![\w-])r8_[A-Za-z0-9]{30,}"),
    # a PEM block base64-encoded (a Kubernetes secret, an env var): "-----BEGIN" encoded
    (
        "private-key",
        ("LS0tLS1CRUdJTi",),
        r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*(?:\r?\n[A-Za-z0-9+/=]+(?=\r?\n|$))*",
    ),
    (
        "basic-auth",
        ("Basic ", "basic "),
        r"(?i)(?<=authorization: basic )(?P<secret>[A-Za-z0-9+/]{8,}=*)",
    ),
    (
        "header-secret",
        ("api-key", "API-KEY", "Api-Key", "auth-token", "Auth-Token"),
        r"(?i)\bx-(?:api-key|auth-token)\s*:\s*(?P<secret>[^\s\"']{8,})",
    ),
    (
        "aws",
        ("secret_access_key", "SECRET_ACCESS_KEY", "SecretAccessKey"),
        r"(?i)(?:secret_access_key|SecretAccessKey)[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
    ),
    ("stripe-webhook", ("whsec_",), r"(?<![\w-])whsec_[A-Za-z0-9+/=]{20,}"),
    # a webhook URL is its own credential: the path after the host
    (
        "webhook",
        ("hooks.slack.com", "discord", "webhook.office.com"),
        r"(?i)(?:hooks\.slack\.com/(?:services|workflows|triggers)|discord(?:app)?\.com/api/"
        r"webhooks|webhook\.office\.com/webhookb2)/(?P<secret>[A-Za-z0-9/_@.+=-]{16,})",
    ),
    # a key in a connection string (Azure: AccountKey=…;, SharedAccessKey=…; Pwd=…;)
    (
        "connection-string",
        ("Key=", "KEY=", "key=", "Pwd=", "PWD=", "pwd=", "Password=", "PASSWORD=", "password="),
        r"(?i)(?:^|(?<=[;\s\"'{]))(?:AccountKey|SharedAccessKey|SharedAccessSignature|Password|"
        r"Pwd)=(?P<secret>[^;\s\"'/][^;\s\"']{5,})",
    ),
    # a URL with credentials, URL-encoded (https%3A%2F%2Fuser%3APASSWORD%40host)
    (
        "url-password",
        ("%3A%2F%2F", "%3a%2f%2f"),
        r"(?i)(?<=%3A%2F%2F)[^/\s:@%]+%3A(?P<secret>[^/\s@'\"]+?)(?=%40)",
    ),
    # a password in a URL (postgres://user:PASSWORD@host): the password only
    ("url-password", ("://",), r"(?<=://)[^/\s:@'\"]+:(?P<secret>[^/\s@'\"]+)(?=@)"),
    # a key in a query string or a command-line option: the value only
    (
        "query-secret",
        ("key=", "KEY=", "token=", "TOKEN=", "secret=", "SECRET=", "pass", "PASS", "sig="),
        r"(?i)[?&;](?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|"
        r"password|passwd|key|sig|signature|client[_-]?secret)=(?P<secret>[^&\s\"'#]{6,})",
    ),
    (
        "option-secret",
        (
            "--api",
            "--API",
            "--token",
            "--TOKEN",
            "--secret",
            "--pass",
            "--access",
            "--auth",
            "--client",
        ),
        r"(?i)--(?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|"
        r"client[_-]?secret)(?:=|\s+)(?P<secret>[^\s\"'-][^\s\"']{5,})",
    ),
)
_COMPILED = tuple((kind, probes, re.compile(pattern)) for kind, probes, pattern in _FORMATS)

_lock = threading.Lock()
_known: dict[str, str] = {}  # secret value (and each escaped form) → label; never shrinks
_ordered: tuple[tuple[str, str], ...] = ()  # _known's items, longest value first
_scanned: tuple[float, int] = (0.0, -1)  # (monotonic time, len(os.environ)) of the last scan


def _label(name: str) -> str:
    """``NAME`` as it appears in ``[REDACTED:NAME]``: no quote or backslash can break JSON."""
    return re.sub(r"[^\w.-]", "_", name)[:64] or "secret"


def _forms(value: str) -> set[str]:
    """``value`` and how it looks inside JSON, HTML, a Python repr and a URL."""
    forms = {
        value,
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
        repr(value)[1:-1],
    }
    try:
        forms.add(quote(value, safe=""))
    except UnicodeEncodeError:  # a lone surrogate: no URL holds it as it is
        pass
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def _add(pairs: list[tuple[str, str]]) -> None:
    global _ordered
    with _lock:
        before = len(_known)
        for value, name in pairs:
            for form in _forms(value) | _forms(safe_text(value)):
                _known.setdefault(form, _label(name))
        if len(_known) != before:
            _ordered = tuple(sorted(_known.items(), key=lambda item: -len(item[0])))


def _plausible(value: str) -> bool:
    return (
        len(value) >= MIN_SECRET_LENGTH
        and not value.startswith(("/", "~", "."))
        and re.search(r"[A-Za-z]", value) is not None
        and value.lower() not in _NOT_SECRETS
    )


def remember(value: str | None, name: str = "secret") -> None:
    """Redact ``value`` from now on, for the life of the process (e.g. the key a provider sends)."""
    if isinstance(value, str) and _plausible(value.strip()):
        _add([(value.strip(), name)])


def secret_name(name: str) -> bool:
    """Does an environment variable called ``name`` look like it holds a secret
    (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASS*``, ``*PWD``, ``*DSN``, …)?"""
    upper = name.upper()
    if upper in NOT_SECRET_NAMES:
        return False
    return any(word in upper for word in SECRET_NAME_WORDS) or upper.endswith(SECRET_NAME_ENDINGS)


_URL_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@")


def _scan() -> None:
    global _scanned
    found = []
    for name, value in list(os.environ.items()):
        value = value.strip()
        if secret_name(name) and _plausible(value):
            found.append((value, name))
        password = _URL_PASSWORD.match(value)  # DATABASE_URL=postgres://u:PASSWORD@h/db
        if password and len(password.group(1)) >= 4:
            found.append((password.group(1), name))
    _add(found)
    _scanned = (time.monotonic(), len(os.environ))


def secret_env_values(*, refresh: bool = False) -> tuple[tuple[str, str], ...]:
    """``(value, NAME)`` of every secret known so far (read from the environment now, at
    import, or since; removed variables included), longest value first."""
    stamp, size = _scanned
    if refresh or time.monotonic() - stamp >= _ENV_TTL or size != len(os.environ):
        _scan()
    return _ordered


def redact(text: str, *, refresh: bool = False) -> str:
    """``text`` with secrets replaced by ``[REDACTED:<kind>]``."""
    if not text or not isinstance(text, str):
        return text
    for value, name in secret_env_values(refresh=refresh):
        if value in text:
            text = text.replace(value, f"[REDACTED:{name}]")
    for kind, probes, pattern in _COMPILED:
        if any(probe in text for probe in probes):
            text = pattern.sub(_replacer(kind), text)
    return text


def before_cut(text: str, limit: int) -> str:
    """``text`` ready to be cut at ``limit`` characters: redacted first when it is longer, so
    a cut never leaves the start of a secret, too short to be recognised, in what is shown."""
    return text if len(text) <= limit else redact(text)


def _replacer(kind: str) -> Any:
    label = f"[REDACTED:{kind}]"

    def replace(match: re.Match[str]) -> str:
        if "secret" not in match.re.groupindex:
            return label
        whole, start = match.group(0), match.start()
        return whole[: match.start("secret") - start] + label + whole[match.end("secret") - start :]

    return replace


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


# --------------------------------------------------------------------------
# clean: redacted and encodable, for everything that leaves the process or is shown


def clean(text: str, *, refresh: bool = False) -> str:
    """``text`` redacted and encodable (:func:`redact`, then ``text.safe_text``)."""
    if not text or not isinstance(text, str):
        return text
    return redact(safe_text(text), refresh=refresh)


def clean_value(value: Any, *, refresh: bool = False) -> Any:
    """:func:`clean` on every string inside dicts (keys too), lists and tuples; bytes that
    are UTF-8 text too. Returns ``value`` itself (the same object) when nothing changed."""
    if refresh:
        secret_env_values(refresh=True)
    return map_strings(value, clean, utf8_bytes=True)


def clean_record(value: Any) -> Any:
    """A stored value (session, message, part: ``to_data``/``from_data``) with every string
    cleaned; ``value`` itself when nothing needed it, so that what a process keeps in
    memory and shows is what its journal holds."""
    to_data = getattr(value, "to_data", None)
    if to_data is None:
        return value
    data = to_data()
    cleaned = clean_value(data)
    return value if cleaned is data else type(value).from_data(cleaned)


_scan()  # at import (``%load_ext``): what the kernel started with is known from the start

__all__ = [
    "redact",
    "redact_value",
    "secret_env_values",
    "contains_secret",
    "remember",
    "clean",
    "clean_value",
    "clean_record",
    "SECRET_NAME_WORDS",
    "secret_name",
]
