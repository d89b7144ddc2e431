"""Tools from Model Context Protocol servers, offered and governed like the built-in ones.

Configuration has OpenCode's shape (``%config AgentMagics.mcp`` and, when
``%config AgentMagics.mcp_opencode`` asks for it, the ``mcp`` section of the
project's ``opencode.json`` / ``opencode.jsonc``)::

    {"time": {"type": "local", "command": ["python", "-m", "mcp_server_time"],
              "environment": {"TZ": "UTC"}, "enabled": True, "timeout": 10},
     "docs": {"type": "remote", "url": "https://example.com/mcp",
              "headers": {"Authorization": "Bearer {env:DOCS_TOKEN}"}}}

A server's tools are offered as ``<server>_<tool>``, each name with every
character outside ``[a-zA-Z0-9_-]`` replaced by ``_`` (OpenCode's naming), with
the server's JSON schema. Results become ordinary tool parts: text content is
the output (truncated and saved by ``tools.run_tool`` like every output),
images and binary resources are the state's ``attachments``, ``isError``
results and failures are error states. The permission a call asks is the
tool's name with the pattern ``*`` (``%agent permit time_* allow``); nothing
allows it by default, so it asks.

This module is cheap to import: the ``mcp`` SDK is imported by
:mod:`.mcp_client` when a server is first started.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.errors import ConfigError
from ..core.mcp_config import McpFailure, ServerConfig, parse_servers, register_secrets, sanitise
from ..core.settings import Settings
from .base import ToolContext, ToolResult
from .truncation import MAX_BYTES, OUTPUT_DIR, truncate

MAX_NAME = 64  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$
MAX_INLINE_ATTACHMENT = 1_000_000  # base64 characters kept as a data: URL; larger ones are saved


# --------------------------------------------------------------------------
# configuration


def opencode_files(directory: str | os.PathLike) -> list[Path]:
    """The project's ``opencode.jsonc`` / ``opencode.json`` files from ``directory`` up to the
    git worktree root (or the filesystem root), farthest first, so nearer files win."""
    found: list[Path] = []
    here = Path(directory).resolve()
    for folder in (here, *here.parents):
        for name in ("opencode.json", "opencode.jsonc"):  # reversed below: jsonc, then json wins
            if (folder / name).is_file():
                found.append(folder / name)
        if (folder / ".git").exists():
            break
    return list(reversed(found))


def read_opencode(path: str | os.PathLike) -> Mapping[str, Any]:
    """The ``mcp`` section of one opencode.json(c) (comments and trailing commas allowed)."""
    path = Path(path)
    try:
        data = json.loads(strip_jsonc(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(
            f"{path}: cannot read its mcp section ({err}) — fix the file or "
            "%config AgentMagics.mcp_opencode = False"
        ) from None
    section = data.get("mcp") if isinstance(data, dict) else None
    return section if isinstance(section, Mapping) else {}


def strip_jsonc(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments and trailing commas → plain JSON (strings are
    left exactly as they are)."""
    pieces: list[str] = []  # alternating: code outside strings, a string, code, …
    code: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            pieces += ["".join(code), text[i : j + 1]]
            code = []
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end == -1 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end == -1 else end + 2
        else:
            code.append(c)
            i += 1
    pieces.append("".join(code))
    trailing = re.compile(r",(\s*[}\]])")
    return "".join(trailing.sub(r"\1", p) if k % 2 == 0 else p for k, p in enumerate(pieces))


def resolve(
    settings: Settings, directory: str | os.PathLike
) -> tuple[dict[str, ServerConfig], list[str]]:
    """The servers in force for a session in ``directory``, and one line per opencode.json
    that could not be read (it is skipped; the turn goes on).

    The project's opencode.json ``mcp`` sections come first (when ``settings.mcp_opencode``
    is true, or a path), then ``settings.mcp``; a later entry replaces an earlier one of the
    same name, and a bare ``{"enabled": false}`` switches one off. The servers' secrets are
    registered for redaction."""
    layers: list[tuple[str, Any, bool]] = []
    wanted = settings.mcp_opencode
    if wanted:
        files = (
            [Path(wanted).expanduser()] if isinstance(wanted, str) else opencode_files(directory)
        )
        layers += [(str(path), path, True) for path in files]
    layers.append(("%config", settings.mcp, False))
    merged: dict[str, ServerConfig] = {}
    problems: list[str] = []
    for source, data, ms in layers:
        try:
            if isinstance(data, Path):
                data = read_opencode(data)
            parsed = parse_servers(data, source=source, milliseconds=ms)
        except ConfigError as err:
            if source == "%config":
                raise
            problems.append(
                f"mcp: {source} skipped: {err}" if source not in str(err) else f"mcp: {err}"
            )
            continue
        for name, value in parsed.items():
            if isinstance(value, bool):
                if name in merged:
                    merged[name] = _replace(merged[name], enabled=value)
            else:
                merged[name] = value
    register_secrets(merged.values())
    return merged, problems


def _replace(config: ServerConfig, **changes: Any) -> ServerConfig:
    return replace(config, **changes)


# --------------------------------------------------------------------------
# names


def tool_name(server: str, tool: str) -> str:
    """``<server>_<tool>``, sanitised; a name over 64 characters (OpenAI's limit) keeps its
    first 55 and ends with ``_`` and 8 hex digits of its hash, so it stays unique."""
    name = f"{sanitise(server)}_{sanitise(tool)}"
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9]}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


# --------------------------------------------------------------------------
# the tool


@dataclass
class McpTool:
    """One tool of one MCP server (``server`` is a :class:`.mcp_client.Server`)."""

    name: str
    description: str
    parameters: dict
    server: Any
    tool: str  # the server's own name for it

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        meta: dict[str, Any] = {"mcp": {"server": self.server.name, "tool": self.tool}}
        result = self.server.call(self.tool, args, meta)
        text, attachments = convert(result, ctx.data_dir)
        if result.get("isError"):
            message = text or f"{self.server.name}: {self.tool} failed (no message)"
            cut = truncate(message, ctx.data_dir, max_bytes=min(MAX_BYTES, 8 * 1024), max_lines=200)
            if cut.truncated:
                meta["outputPath"] = cut.output_path
            raise McpFailure(cut.content, meta)
        return ToolResult(
            output=text,
            title=f"{self.server.name}/{self.tool}",
            metadata=meta,
            attachments=tuple(attachments),
        )


def schema(tool: Mapping[str, Any]) -> dict:
    """The parameters offered to the model: the server's input schema as an object with
    ``additionalProperties: false`` (as OpenCode offers it; unknown keys are dropped)."""
    source = dict(tool.get("inputSchema") or {})
    source.pop("$schema", None)
    return {
        **source,
        "type": "object",
        "properties": dict(source.get("properties") or {}),
        "additionalProperties": False,
    }


def tools_of(
    server: Any, listing: Sequence[Mapping[str, Any]], taken: set[str]
) -> dict[str, McpTool]:
    """:class:`McpTool` per listed tool; a name already ``taken`` (a built-in or an earlier
    server's) is skipped."""
    out: dict[str, McpTool] = {}
    for item in listing:
        name = tool_name(server.name, str(item.get("name") or ""))
        if name in taken or name in out:
            continue
        description = str(item.get("description") or item.get("title") or item.get("name"))
        out[name] = McpTool(name, description, schema(item), server, str(item.get("name")))
    return out


def convert(result: Mapping[str, Any], data_dir: Path) -> tuple[str, list[dict]]:
    """A ``CallToolResult`` (JSON form) → (output text, attachments), as OpenCode: text
    content and text resources joined by blank lines; images, audio and blob resources
    become attachments ``{mime, url, filename?}`` (a ``data:`` URL, or a saved file when
    large) and a line naming each; ``structuredContent`` is the text when nothing else is."""
    texts: list[str] = []
    attachments: list[dict] = []
    for item in result.get("content") or ():
        kind = item.get("type")
        if kind == "text":
            texts.append(str(item.get("text") or ""))
        elif kind in ("image", "audio"):
            attachments.append(
                _attachment(item.get("data") or "", item.get("mimeType"), None, data_dir)
            )
        elif kind == "resource":
            resource = item.get("resource") or {}
            if resource.get("text") is not None:
                texts.append(str(resource["text"]))
            if resource.get("blob"):
                attachments.append(
                    _attachment(
                        resource["blob"], resource.get("mimeType"), resource.get("uri"), data_dir
                    )
                )
        elif kind == "resource_link":
            label = item.get("name") or item.get("uri")
            texts.append(f"[resource] {label}: {item.get('uri')}")
        else:
            texts.append(json.dumps(item, ensure_ascii=False))
    if not texts and result.get("structuredContent") is not None:
        texts.append(json.dumps(result["structuredContent"], indent=2, ensure_ascii=False))
    for attachment in attachments:
        size = attachment.pop("_size")
        name = f" {attachment['filename']}" if attachment.get("filename") else ""
        texts.append(f"[attachment{name}: {attachment['mime']}, {size} bytes]")
    return "\n\n".join(texts), attachments


def _attachment(data: str, mime: Any, filename: Any, data_dir: Path) -> dict:
    mime = str(mime or "application/octet-stream")
    size = len(data) * 3 // 4 - data[-2:].count("=")
    out: dict[str, Any] = {"mime": mime, "_size": size}
    if len(data) <= MAX_INLINE_ATTACHMENT:
        out["url"] = f"data:{mime};base64,{data}"
    else:  # too big for a journal line: saved beside the truncated outputs
        path = (
            Path(data_dir)
            / OUTPUT_DIR
            / (ids.ascending("tool") + (mimetypes.guess_extension(mime) or ""))
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data, validate=False))
        out["url"] = path.as_uri()
    if filename:
        out["filename"] = str(filename)
    return out


__all__ = [
    "resolve",
    "opencode_files",
    "read_opencode",
    "tool_name",
    "McpTool",
    "convert",
    "schema",
    "tools_of",
]
