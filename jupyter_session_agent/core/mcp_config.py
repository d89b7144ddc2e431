"""MCP server configuration in OpenCode's shape (``%config AgentMagics.mcp``): one
validated :class:`ServerConfig` per server, its secrets kept out of every output, and
OpenCode's tool-name sanitising. Settings validate with it; ``tools/mcp.py`` runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import redact
from .errors import ConfigError, ToolFailure

DEFAULT_TIMEOUT = 30.0  # seconds: starting a server (connect + list tools) and each call
MAX_TIMEOUT = 3600.0  # more than this in %config is taken for milliseconds (OpenCode's unit)


LOCAL_KEYS = ("type", "command", "environment", "enabled", "timeout")
REMOTE_KEYS = ("type", "url", "headers", "enabled", "timeout", "oauth")
# environment names whose values are secrets (as redact.py reads the process environment)
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL", "COOKIE")
PLAIN_HEADERS = ("accept", "content-type", "user-agent", "mcp-protocol-version", "accept-language")
EXAMPLE = (
    '%config AgentMagics.mcp = {"time": {"type": "local", '
    '"command": ["python", "-m", "mcp_server_time"]}}'
)


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server, validated; ``timeout`` in seconds; ``{env:VAR}`` already substituted."""

    name: str
    type: str  # "local" (stdio) | "remote" (streamable HTTP)
    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout: float = DEFAULT_TIMEOUT
    source: str = "%config"  # or the opencode.json it came from

    def fingerprint(self) -> str:
        """Changes when anything that the running server depends on changes."""
        data = [
            self.type,
            list(self.command),
            sorted(self.environment.items()),
            self.url,
            sorted(self.headers.items()),
            self.timeout,
        ]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]

    def secrets(self) -> list[tuple[str, str]]:
        """``(value, label)`` of the values to keep out of every output and the history:
        environment values whose names look secret, and every header value (and the token
        of ``Bearer <token>``) except a few plain headers such as ``Accept``."""
        found: list[tuple[str, str]] = []
        for key, value in self.environment.items():
            if any(word in key.upper() for word in SECRET_WORDS):
                found.append((value, f"mcp.{self.name}.{key}"))
        for key, value in self.headers.items():
            if key.lower() in PLAIN_HEADERS:
                continue
            found.append((value, f"mcp.{self.name}.{key}"))
            scheme, _, token = value.partition(" ")
            if token and scheme.isalpha():
                found.append((token.strip(), f"mcp.{self.name}.{key}"))
        return [(v, label) for v, label in found if len(v.strip()) >= 8]

    def describe(self) -> str:
        """The command or URL, for listings and logs, redacted (``?api_key=…``,
        ``--api-key …``, known token formats: ``core/redact.py``)."""
        if self.type == "local":
            return redact.redact(" ".join(self.command))
        return redact.redact(self.url)


def parse_servers(
    config: Any,
    *,
    source: str = "%config",
    milliseconds: bool = False,
    env: Mapping[str, str] | None = None,
) -> dict[str, ServerConfig | bool]:
    """``{name: {...}}`` → ``{name: ServerConfig}``; a bare ``{"enabled": bool}`` entry (OpenCode's
    way to switch off a server defined elsewhere) becomes that bool. Raises a one-line
    :class:`ConfigError`. ``milliseconds``: ``timeout`` is in ms (opencode.json)."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"mcp must be a dict of server name → settings, not {type(config).__name__} — "
            + EXAMPLE
        )
    environ = os.environ if env is None else env
    out: dict[str, ServerConfig | bool] = {}
    for name, entry in config.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                f"a server name must be a non-empty string, not {name!r} — " + EXAMPLE
            )
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"server {name!r}: use a dict of settings, not {type(entry).__name__} — " + EXAMPLE
            )
        if set(entry) == {"enabled"}:
            out[name] = _bool(name, "enabled", entry["enabled"])
            continue
        out[name] = _server(name, entry, source=source, milliseconds=milliseconds, env=environ)
    return out


def _server(
    name: str, entry: Mapping[str, Any], *, source: str, milliseconds: bool, env: Mapping[str, str]
) -> ServerConfig:
    kind = entry.get("type")
    if kind not in ("local", "remote"):
        raise ConfigError(
            f'server {name!r}: type must be "local" (a command) or "remote" (a URL), '
            f"not {kind!r} — " + EXAMPLE
        )
    allowed = LOCAL_KEYS if kind == "local" else REMOTE_KEYS
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ConfigError(
            f"server {name!r}: unknown setting(s) {unknown} for a {kind} server; "
            f"valid: {list(allowed)}"
        )
    enabled = _bool(name, "enabled", entry.get("enabled", True))
    timeout = _timeout(name, entry.get("timeout"), milliseconds)
    if kind == "local":
        command = entry.get("command")
        if (
            not isinstance(command, (list, tuple))
            or not command
            or not all(isinstance(c, str) and c for c in command)
        ):
            raise ConfigError(
                f"server {name!r}: command must be a non-empty list of strings such as "
                f'["python", "-m", "mcp_server_time"], not {command!r}'
            )
        environment = _strings(name, "environment", entry.get("environment"))
        return ServerConfig(
            name,
            "local",
            tuple(substitute(c, env) for c in command),
            {k: substitute(v, env) for k, v in environment.items()},
            enabled=enabled,
            timeout=timeout,
            source=source,
        )
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", substitute(url, env)):
        raise ConfigError(f"server {name!r}: url must be an http:// or https:// URL, not {url!r}")
    oauth = entry.get("oauth", False)
    if oauth is not False:
        raise ConfigError(
            f"server {name!r}: OAuth sign-in is not supported here — put a token in headers, "
            'e.g. "headers": {"Authorization": "Bearer {env:MY_TOKEN}"}'
        )
    headers = _strings(name, "headers", entry.get("headers"))
    return ServerConfig(
        name,
        "remote",
        url=substitute(url, env),
        headers={k: substitute(v, env) for k, v in headers.items()},
        enabled=enabled,
        timeout=timeout,
        source=source,
    )


def _bool(name: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"server {name!r}: {key} must be true or false, not {value!r}")
    return value


def _timeout(name: str, value: Any, milliseconds: bool) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(
            f"server {name!r}: timeout must be a positive number of seconds, not {value!r}"
        )
    if milliseconds:
        return float(value) / 1000.0
    if value > MAX_TIMEOUT:
        raise ConfigError(
            f"server {name!r}: timeout is in seconds here (opencode.json's is in milliseconds): "
            f'{value!r} s is more than an hour — e.g. "timeout": {value / 1000:g}'
        )
    return float(value)


def _strings(name: str, key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(
            f'server {name!r}: {key} must be a dict of strings, e.g. {{"NAME": "value"}}'
        )
    return dict(value)


_ENV_REF = re.compile(r"\{env:([^}]+)\}")


def substitute(text: str, env: Mapping[str, str] | None = None) -> str:
    """OpenCode's ``{env:VAR}`` substitution: the variable's value, or "" when unset."""
    environ = os.environ if env is None else env
    return _ENV_REF.sub(lambda m: environ.get(m.group(1).strip(), ""), text)


def register_secrets(configs: Any) -> None:
    """Keep every server's secrets out of outputs, errors, listings and the history."""
    for config in configs:
        for value, label in config.secrets():
            redact.remember(value, label)


def check_config(config: Any) -> None:
    """Validate ``%config AgentMagics.mcp`` (a :class:`ConfigError` now, not mid-turn)."""
    register_secrets(v for v in parse_servers(config).values() if isinstance(v, ServerConfig))


def sanitise(name: str) -> str:
    """OpenCode's sanitising: every character outside ``[a-zA-Z0-9_-]`` becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)


class McpFailure(ToolFailure):
    """A failed MCP call; ``metadata`` (server, tool) goes on the part's error state."""

    def __init__(self, message: str, metadata: Mapping[str, Any] | None = None):
        super().__init__(message, dict(metadata or {}))
