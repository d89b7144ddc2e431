"""MCP servers for this process: started on first use, shared by its sessions, restarted once
when they die, stopped at exit.

One module: the only importer of the ``mcp`` SDK; a :class:`Server`'s owner task and calls
run on the :class:`Hub`'s event loop and share its lifecycle, so neither reads alone.

The ``mcp`` SDK is asyncio-based and a kernel runs its own event loop, so every client
session lives on one background thread with its own event loop (:class:`Hub`); the
tools call into it synchronously with timeouts. Each :class:`Server` has one owner task
on that loop, which enters the SDK's transport and ``Client`` and leaves them when the
server is stopped or its connection ends (the SDK's stdio shutdown closes stdin, then
terminates and kills the process); calls run as other tasks on the same loop.

Bounds: each call waits at most the server's ``timeout`` and a stuck call is cancelled;
starting (spawn or connect, handshake, list tools) waits the same, but at least 10 s. A
server that exits mid-call fails that call with a tool error and is restarted at the next
use, once: if it dies again before a call succeeds it stays failed until ``%agent mcp
restart NAME`` (a server found dead before a call was sent is restarted and the call sent).
A server that fails to start is not retried by later turns (same command). Every server
writes its stderr (stdio) or connection errors (remote) to ``<data_dir>/mcp/<name>.log``,
named in every failure.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..core.errors import AgentError
from ..core.mcp_config import McpFailure, ServerConfig, sanitise
from ..core.redact import redact
from .mcp import McpTool, resolve, tools_of

LOG_DIR = "mcp"
MAX_LOG_BYTES = 5 * 1024 * 1024  # a larger log is moved to <name>.log.1 at the next start
MIN_START_TIMEOUT = 10.0  # seconds a start may take even when the call timeout is shorter
GRACE = 5.0  # seconds the caller waits beyond a timeout for the loop itself to answer
STOP_TIMEOUT = 8.0  # the SDK's stdio shutdown: 2 s after closing stdin, 2 s after SIGTERM
MAX_PAGES = 100  # tools/list pages at most


class McpStartError(AgentError):
    """A server could not be started; one line naming the server and its log.
    ``first``: this failure was just found (later turns do not repeat the line)."""

    def __init__(self, message: str, *, first: bool = True):
        super().__init__(message)
        self.first = first


class _Dead(Exception):
    """The server's connection ended (it exited) before the call answered; ``before``: the
    call was not even sent (safe to send again)."""

    def __init__(self, detail: str = "", *, before: bool = False):
        super().__init__(detail)
        self.before = before


class _Timeout(Exception):
    """The call did not answer within the server's timeout."""


class Server:
    """One configured MCP server and its state (``status``: not started, connected, exited,
    failed, stopped, disabled)."""

    def __init__(self, hub: Hub, config: ServerConfig, log_path: Path, cwd: str | None):
        self.hub = hub
        self.config = config
        self.name = config.name
        self.log_path = log_path
        self.cwd = cwd
        self.status = "not started" if config.enabled else "disabled"
        self.tools: list[dict] = []
        self.last_error: str | None = None
        self.starts = 0
        self.calls = 0
        self._lock = threading.RLock()
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._dead: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._restarts_left = 1

    # -- what the tools and commands call (any thread but the loop's) -------------

    def ensure(self) -> list[dict]:
        """The server's tools, starting it when it is not running. Raises McpStartError."""
        with self._lock:
            if self.status == "connected" and self._dead is not None and self._dead.is_set():
                self._exited("exited")
            if self.status == "connected":
                return self.tools
            if self.status == "disabled":
                raise McpStartError(
                    f"mcp server '{self.name}' is disabled (\"enabled\": false)", first=False
                )
            if self.status == "failed":
                raise McpStartError(self._line("is not running", self.last_error), first=False)
            if self.status == "exited":
                if self._restarts_left <= 0:
                    self.status = "failed"
                    raise McpStartError(self._line("exited again after a restart", self.last_error))
                self._restarts_left -= 1
            self._start()
            return self.tools

    @property
    def state(self) -> str:
        """``status``, with a connection that ended since the last use shown as ``exited``."""
        if self.status == "connected" and self._dead is not None and self._dead.is_set():
            return "exited"
        return self.status

    def restart(self) -> list[dict]:
        """Stop (if running) and start again, with a fresh restart allowance."""
        with self._lock:
            self.stop()
            self.status = "not started" if self.config.enabled else "disabled"
            self._restarts_left = 1
            return self.ensure()

    def call(self, tool: str, args: dict, meta: dict) -> dict:
        """``tools/call`` → the ``CallToolResult`` as JSON; failures are McpFailure."""
        timeout = self.config.timeout
        for attempt in (1, 2):
            try:
                self.ensure()
            except McpStartError as err:
                raise McpFailure(str(err), meta) from None
            try:
                result = self.hub.submit(self._call(tool, args), timeout + GRACE)
                break
            except _Dead as err:
                self._exited(f"exited during a call to {tool}")
                if not err.before or attempt == 2:
                    raise self._died(tool, str(err), meta) from None
            except (_Timeout, TimeoutError, concurrent.futures.TimeoutError):
                self.last_error = f"{tool}: no answer within {timeout:g} s"
                raise McpFailure(
                    f"mcp server '{self.name}': {tool} did not answer within {timeout:g} s (its "
                    'timeout) and was cancelled — set a larger "timeout" (seconds) in its '
                    f"settings if it needs longer; log: {self.log_path}",
                    meta,
                ) from None
            except Exception as err:  # a protocol error (unknown tool, invalid params, …)
                raise McpFailure(
                    f"mcp server '{self.name}': {tool} failed: {_describe(err)}", meta
                ) from None
        self._restarts_left = 1  # a call answered: the next death may be restarted again
        self.calls += 1
        return result

    def _died(self, tool: str, detail: str, meta: dict) -> McpFailure:
        return McpFailure(
            f"mcp server '{self.name}' exited during the call to {tool}"
            f"{_detail(detail or self._tail())} — log: {self.log_path}; "
            "it is restarted at the next call",
            meta,
        )

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        with self._lock:
            if self._task is not None and self.hub.running():
                with contextlib.suppress(Exception):
                    self.hub.submit(self._close(timeout - 1.0), timeout)
            self._task = self._client = None
            if self.status in ("connected", "exited", "starting"):
                self.status = "stopped"

    # -- internals --------------------------------------------------------------

    @property
    def start_timeout(self) -> float:
        """Starting (spawn or connect, handshake, tools/list) waits the server's timeout, but at
        least MIN_START_TIMEOUT: an interpreter's imports are no slow answer to a request."""
        return max(self.config.timeout, MIN_START_TIMEOUT)

    def _start(self) -> None:
        self.status = "starting"
        self.starts += 1
        self._rotate_log()
        try:
            self.tools = self.hub.submit(self._open(), self.start_timeout + GRACE)
        except KeyboardInterrupt:  # the next turn tries again
            self.status, self.last_error = "not started", "interrupted while starting"
            raise
        except (
            BaseException
        ) as err:  # its owner task may still be stopping the process: stop() waits
            self.status = "failed"
            self.last_error = _describe(err)
            raise McpStartError(self._line("failed to start", self.last_error)) from None
        self.status, self.last_error = "connected", None

    def _exited(self, what: str) -> None:
        self.status = "exited"
        self.last_error = what + _detail(self._tail())
        self._client = None

    def _line(self, what: str, error: str | None) -> str:
        reason = f": {redact(error)}" if error else ""
        return (
            f"mcp server '{self.name}' {what}{reason} — log: {self.log_path}; "
            f"%agent mcp restart {self.name} starts it again"
        )

    def _tail(self) -> str:
        """The last non-empty line the server wrote since its latest start (redacted), or ""."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 4096))
                lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
        except OSError:
            return ""
        starts = [i for i, ln in enumerate(lines) if ln.startswith("--- ") and " start " in ln]
        lines = [
            ln
            for ln in lines[starts[-1] + 1 if starts else 0 :]
            if ln and not ln.startswith("--- ")
        ]
        return redact(lines[-1][:300]) if lines else ""

    def _rotate_log(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size > MAX_LOG_BYTES:
                os.replace(self.log_path, self.log_path.with_suffix(".log.1"))

    # -- on the loop --------------------------------------------------------------

    async def _open(self) -> list[dict]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        self._stop, self._dead = asyncio.Event(), asyncio.Event()
        self._task = loop.create_task(self._own(ready, self._stop, self._dead))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
        except TimeoutError:
            self._task.cancel()
            raise TimeoutError(f"no answer within {self.start_timeout:g} s") from None
        except BaseException:
            self._task.cancel()
            raise

    async def _own(self, ready: asyncio.Future, stop: asyncio.Event, dead: asyncio.Event) -> None:
        """The owner task: connect, list the tools, then hold the session until stopped or dead."""
        log = open(self.log_path, "a", encoding="utf-8", buffering=1)
        log.write(
            f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} start {self.config.type}: "
            f"{redact(self.config.describe())}\n"
        )
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await _connect(stack, self.config, log, self.cwd, dead)
                tools = await _list_tools(client)
                self._client = client
                if not ready.done():
                    ready.set_result(tools)
                waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(dead.wait())}
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waits:
                        waiter.cancel()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as err:  # noqa: BLE001 - reported through `ready` or the log
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else RuntimeError(str(err)))
            log.write(f"--- error: {redact(_describe(err))}\n")
        finally:
            self._client = None
            dead.set()
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} stopped\n")
            log.close()

    async def _call(self, tool: str, args: dict) -> dict:
        client, dead = self._client, self._dead
        if client is None or dead is None or dead.is_set():
            raise _Dead("it was not running", before=True)
        call = asyncio.ensure_future(client.call_tool(tool, args))
        ended = asyncio.ensure_future(dead.wait())
        try:
            done, _ = await asyncio.wait(
                {call, ended}, timeout=self.config.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if call in done:
                try:
                    result = call.result()
                except Exception:
                    await asyncio.sleep(0.05)  # a closed connection sets `dead` a moment later
                    if dead.is_set():
                        raise _Dead("") from None
                    raise
                return result.model_dump(by_alias=True, exclude_none=True, mode="json")
            if ended in done:
                raise _Dead("")
            raise _Timeout()
        finally:
            for future in (call, ended):
                if not future.done():
                    future.cancel()

    async def _close(self, timeout: float) -> None:
        await _close_all([self], timeout)


async def _close_all(servers: list[Server], timeout: float) -> None:
    """Ask every owner task to stop, wait for them together (bounded), cancel the rest."""
    for server in servers:
        if server._stop is not None:
            server._stop.set()
    tasks = {s._task for s in servers if s._task is not None and not s._task.done()}
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(0.5, timeout))
        for task in pending:
            task.cancel()


async def _connect(
    stack: contextlib.AsyncExitStack,
    config: ServerConfig,
    log: Any,
    cwd: str | None,
    dead: asyncio.Event,
) -> Any:
    try:
        from mcp import Client, Implementation
    except ImportError:
        raise RuntimeError(
            "the mcp package is not installed — pip install 'jupyter-session-agent[mcp]'"
        ) from None
    if config.type == "local":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=config.command[0],
            args=list(config.command[1:]),
            env={**os.environ, **config.environment},
            cwd=cwd if cwd and os.path.isdir(cwd) else None,
        )
        transport = stdio_client(params, errlog=log)
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0)
            )
        )
        transport = streamable_http_client(config.url, http_client=http)
    client = Client(
        _watched(transport, dead),
        client_info=Implementation(name="jupyter-session-agent", version=_version()),
    )
    return await stack.enter_async_context(client)


@contextlib.asynccontextmanager
async def _watched(transport: Any, dead: asyncio.Event):
    """The transport's streams, with ``dead`` set when the server's side ends (it exited,
    or the connection closed): calls in flight then fail at once instead of timing out."""
    import anyio

    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass
            finally:
                dead.set()

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()


def _version() -> str:
    try:
        return version("jupyter-session-agent")
    except PackageNotFoundError:
        return "0"


async def _list_tools(client: Any) -> list[dict]:
    tools: list[dict] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(err: BaseException) -> str:
    """One line for an exception, exception groups unwrapped to their first leaf."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    text = " ".join(str(err).split())
    if isinstance(err, FileNotFoundError) and err.filename:
        text = f"command not found: {err.filename}"
    elif not text or isinstance(err, OSError) and not isinstance(err, TimeoutError):
        text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text[:300]


def _detail(text: str) -> str:
    return f" ({text})" if text else ""


class Hub:
    """The process's MCP servers, by name, and the event-loop thread they run on."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # server() may stop a server, which submits to the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.servers: dict[str, Server] = {}

    def server(self, config: ServerConfig, *, data_dir: Path, cwd: str | None = None) -> Server:
        """The server for ``config.name``: the running one when its settings are unchanged,
        else a new one (the old one is stopped)."""
        with self._lock:
            current = self.servers.get(config.name)
            if current is not None and current.config.fingerprint() == config.fingerprint():
                if not config.enabled and current.status != "disabled":
                    current.stop()
                    current.status = "disabled"
                elif config.enabled and current.status == "disabled":
                    current.status = "not started"
                current.config = config
                return current
            if current is not None:
                current.stop()
            log_path = Path(data_dir).expanduser() / LOG_DIR / f"{sanitise(config.name)}.log"
            server = self.servers[config.name] = Server(self, config, log_path, cwd)
            return server

    def running(self) -> bool:
        return self._loop is not None and self._thread is not None and self._thread.is_alive()

    def submit(self, coro: Any, timeout: float) -> Any:
        """Run ``coro`` on the loop and wait at most ``timeout`` seconds; on a timeout or an
        interrupt the coroutine is cancelled."""
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # (the builtin TimeoutError since Python 3.11)
            if future.done() and not future.cancelled():
                raise  # the coroutine's own TimeoutError
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from None
        except BaseException:
            future.cancel()
            raise

    def stop_all(self) -> None:
        """Stop every server (together, bounded) and forget them, then stop the loop thread."""
        servers = list(self.servers.values())
        if self.running():
            with contextlib.suppress(Exception):
                self.submit(_close_all(servers, STOP_TIMEOUT - 1.0), STOP_TIMEOUT)
        for server in servers:
            server._task = server._client = None
            if server.status in ("connected", "exited", "starting"):
                server.status = "stopped"
        with self._lock:
            self.servers.clear()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(2.0)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if not self.running():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_run_loop, args=(loop,), name="jupyter-session-agent-mcp", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            assert self._loop is not None  # started above when it was not running
            return self._loop


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):
            loop.run_until_complete(
                asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 3.0)
            )
        loop.close()


# --------------------------------------------------------------------------
# what the session calls

_SAID: set[str] = set()  # opencode.json problems already reported in this process


def mcp_tools(
    settings: Any, directory: str | os.PathLike, taken: set[str], report: Any = None
) -> dict[str, McpTool]:
    """The tools of every enabled server for a session in ``directory``, starting the servers
    not running yet (each bounded by its timeout); names in ``taken`` (the built-in tools)
    are not offered again. A server that cannot start is left out and reported as one line
    (``report(line)``; default: stderr) naming the server and its log — once, not at every
    turn (``%agent mcp`` shows it); the turn goes on."""
    configs, problems = resolve(settings, directory)
    say = report or (lambda line: print(line, file=sys.stderr))
    for line in problems:
        if line not in _SAID:
            _SAID.add(line)
            say(line)
    tools: dict[str, McpTool] = {}
    for config in configs.values():
        server = hub().server(config, data_dir=Path(settings.data_dir), cwd=str(directory))
        if not config.enabled:
            continue
        try:
            listing = server.ensure()
        except McpStartError as err:
            if err.first:
                say(str(err))
            continue
        tools.update(tools_of(server, listing, taken | set(tools)))
    return tools


_HUB: Hub | None = None
_HUB_LOCK = threading.Lock()


def hub() -> Hub:
    """The process's Hub (created on first use; its servers are stopped at exit)."""
    global _HUB
    with _HUB_LOCK:
        if _HUB is None:
            _HUB = Hub()
            atexit.register(shutdown)
        return _HUB


def current() -> Hub | None:
    """The Hub if one was created (nothing is started by asking)."""
    return _HUB


def shutdown() -> None:
    """Stop every MCP server of this process (at exit, and when the extension is unloaded)."""
    if _HUB is not None:
        _HUB.stop_all()


__all__ = ["Hub", "Server", "McpStartError", "mcp_tools", "hub", "current", "shutdown"]
