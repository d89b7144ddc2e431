"""``%agent mcp``: the MCP servers, their status, tools and last error; ``%agent mcp restart
NAME`` and ``%agent mcp stop NAME`` (docs/mcp.md). Listing starts nothing."""

from __future__ import annotations

import os

from ...core.errors import UsageError
from ...render import escape as X
from ...tools.mcp import resolve, tools_of
from ...tools.mcp_client import current, hub
from ..display import Markdown
from . import subcommand

USAGE = "mcp [restart NAME | stop NAME]"


def _directory(magics) -> str:
    return magics.session.info.directory if magics.session is not None else os.getcwd()


@subcommand("mcp", USAGE, "MCP servers: status, tools and last error; restart or stop one")
def mcp(magics, args, raw):
    settings = magics.settings()
    configs, problems = resolve(settings, _directory(magics))
    if not args:
        return _listing(configs, problems)
    if len(args) != 2 or args[0] not in ("restart", "stop"):
        raise UsageError(f"usage: %agent {USAGE}")
    action, name = args
    if name not in configs:
        known = ", ".join(sorted(configs)) or "none — set %config AgentMagics.mcp"
        raise UsageError(f"no MCP server {name!r} is configured (servers: {known})")

    server = hub().server(configs[name], data_dir=settings.data_dir, cwd=_directory(magics))
    if action == "stop":
        server.stop()
        print(f"mcp server '{name}' stopped; the next %%agent turn starts it again")
        return None
    listing = server.restart()  # McpStartError: one line naming the server and its log
    names = list(tools_of(server, listing, set()))
    shown = ", ".join(names[:12]) + (f", … ({len(names) - 12} more)" if len(names) > 12 else "")
    print(f"mcp server '{name}' restarted: {len(names)} tool(s) — {shown}")
    return None


def _listing(configs, problems):
    if not configs and not problems:
        return Markdown(
            'No MCP servers — add one with `%config AgentMagics.mcp = {"time": {"type": '
            '"local", "command": ["python", "-m", "mcp_server_time"]}}` '
            "(docs/mcp.md)."
        )
    running = current()
    lines = [
        "| server | type | command / url | status | tools | starts | last error | log |",
        "|---|---|---|---|---|---|---|---|",
    ]
    offered: list[str] = []
    for name, config in configs.items():
        server = running.servers.get(name) if running is not None else None
        if server is not None and server.config.fingerprint() != config.fingerprint():
            server = None  # settings changed since: the next turn starts it anew
        if server is None:
            status, names, error, log, starts = "not started", [], "", "", 0
            status = status if config.enabled else "disabled"
        else:
            status, error, starts = server.state, server.last_error or "", server.starts
            names = list(tools_of(server, server.tools, set())) if server.tools else []
            log = X.code(server.log_path)
        tools = str(len(names)) if names else "—"
        where = config.describe() + ("" if config.source == "%config" else f" ({config.source})")
        lines.append(
            f"| {X.code(name)} | {X.cell(config.type)} | {X.code(_clip(where, 80))} | "
            f"{X.cell(status)} | {tools} | {starts} | {X.cell(_clip(error, 160))} | {log} |"
        )
        if names:
            offered.append(f"- {X.code(name)}: " + ", ".join(X.code(n) for n in names))
    text = "\n".join(lines)
    if offered:
        text += "\n\nTools offered to the model (permission = the tool's name, e.g. "
        text += "`%agent permit time_* allow`):\n\n" + "\n".join(offered)
    text += (
        "\n\nServers start at the first `%%agent` turn that needs them; `%agent mcp restart NAME`."
    )
    if problems:
        text += "\n\n" + "\n".join(f"- {X.markdown(p, fences=False)}" for p in problems)
    return Markdown(text)


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
