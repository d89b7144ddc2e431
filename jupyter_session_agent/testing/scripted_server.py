"""A scripted OpenAI-compatible chat-completions server on loopback (stdlib only).

One module: the reply script, the wire format and its faults make one fake server, which
also runs alone as ``python -m`` in another process (tests, the real OpenCode CLI).

It speaks the real wire protocol (HTTP/1.1, chunked ``text/event-stream`` SSE, OpenAI
JSON shapes), so the official ``openai`` SDK talks to it unmodified. Each request to
``/v1/chat/completions`` pops the next queued :class:`Reply` (in arrival order, under a
lock); an empty queue yields ``"(scripted) " + <last user text[:200]>``. Replies can
inject faults: HTTP errors, dropped or malformed streams, stalls, delays. The real OpenCode
CLI can be pointed at it too: its title requests get a short title without taking a queued
reply (:func:`is_title_request`).

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``; control API for scripting a
server in another process: ``POST /_script`` (JSON list of reply dicts, appended),
``GET /_requests`` (JSON list of request bodies), ``POST /_reset``. Anything else: 404.

CLI: ``python -m jupyter_session_agent.testing.scripted_server [--host H] [--port P]
[--script replies.json]`` prints the base URL as its first stdout line and serves until
SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedServer", "is_title_request", "main"]

# (type, code) of OpenAI's error bodies by status; others: server_error (5xx) / invalid_request_error
_ERRORS = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass(frozen=True)
class Reply:
    """One scripted response. Content is streamed as: role chunk, ``reasoning`` deltas
    (``delta.reasoning_content``), ``text`` deltas, each tool call (a header chunk with
    index/id/type/name and ``arguments: ""``, then argument fragments), a finish chunk,
    then (see ``usage``) a usage chunk, then ``data: [DONE]``.

    ``tool_calls`` items: ``{"name", "arguments": dict | str, "id"?: str}``; a str is
    sent verbatim (may be invalid JSON). ``usage``: ``"auto"`` = estimated, sent only when
    the request sets ``stream_options.include_usage`` (always for non-streaming); a dict
    is sent verbatim, even without ``include_usage``; ``None`` never.

    Faults: ``status`` (+``headers``, ``error_body``) answers with that HTTP error
    instead (``echo_authorization``: its message quotes the request's Authorization
    header, as some proxies do); ``drop_after=N`` closes the connection after N chunks, without ``[DONE]`` or
    the chunked terminator; ``malformed_after=N`` sends ``data: {not json`` after N
    chunks and ends the body; ``stall=S`` pauses S seconds after the first chunk. Chunk
    counts include the role chunk. Non-streaming: ``drop_after`` closes without any
    response, ``malformed_after`` sends a ``{not json`` body, ``stall`` delays it.

    ``hang`` never finishes the response (until the server stops or the client hangs up):
    ``"accept"`` reads the request and never answers, ``"headers"`` sends the response's
    head and then nothing, ``"chunk"`` stops after the first chunk (streaming only).
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[dict, ...] = ()
    usage: dict | None | str = "auto"
    finish_reason: str | None = None
    chunk_chars: int = 8
    delay: float = 0.0
    first_delay: float = 0.0
    status: int | None = None
    headers: dict = field(default_factory=dict)
    error_body: dict | str | None = None
    drop_after: int | None = None
    malformed_after: int | None = None
    stall: float | None = None
    hang: str | None = None  # "accept" | "headers" | "chunk": see above
    echo_authorization: bool = False  # the error message quotes the request's Authorization

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.chunk_chars < 1:
            raise ValueError("chunk_chars must be >= 1")
        if self.hang not in (None, "accept", "headers", "chunk"):
            raise ValueError("hang must be 'accept', 'headers' or 'chunk'")

    @classmethod
    def from_dict(cls, data: dict) -> Reply:
        """Build from a dict with the field names; unknown keys raise ``ValueError``."""
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown Reply keys: {sorted(unknown)}")
        return cls(**data)


def _as_reply(value: Reply | dict | str) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    return Reply.from_dict(value)


def _user_text(messages: list | None) -> str:
    """Text of the last user message (content string or joined text parts)."""
    for msg in reversed(messages or []):
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


OPENCODE_TITLE_SYSTEM = "You are a title generator."  # how OpenCode's title call begins


def is_title_request(body: dict) -> bool:
    """OpenCode's title call: its system prompt, then the user's first message."""
    msgs = body.get("messages") or []
    first = msgs[0] if msgs and isinstance(msgs[0], dict) else {}
    content = first.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return first.get("role") == "system" and str(content or "").startswith(OPENCODE_TITLE_SYSTEM)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _calls(reply: Reply, n: int) -> list[tuple[str, str, str]]:
    """(id, name, arguments string) per tool call."""
    out = []
    for i, call in enumerate(reply.tool_calls):
        args = call.get("arguments", {})
        args = args if isinstance(args, str) else json.dumps(args)
        out.append((call.get("id") or f"call_{n}_{i}", call["name"], args))
    return out


def _usage(reply: Reply, body: dict, calls: list) -> dict:
    if isinstance(reply.usage, dict):
        return reply.usage
    prompt = math.ceil(
        len(json.dumps([*(body.get("messages") or []), *(body.get("tools") or [])])) / 4
    )
    generated = len(reply.reasoning) + len(reply.text) + sum(len(a) for _, _, a in calls)
    completion = math.ceil(generated / 4)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.reasoning:
        usage["completion_tokens_details"] = {
            "reasoning_tokens": math.ceil(len(reply.reasoning) / 4)
        }
    return usage


def _error_json(status: int, message: str) -> dict:
    """OpenAI's error body shape: ``{"error": {"message", "type", "param", "code"}}``."""
    etype, code = _ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


def _chunks(reply: Reply, body: dict, base: dict, n: int) -> list[dict]:
    """The ``chat.completion.chunk`` objects of a streamed reply, in order."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    calls, size = _calls(reply, n), reply.chunk_chars

    def chunk(delta: dict, finish_reason: str | None = None) -> dict:
        obj = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        return {**obj, "usage": None} if include_usage else obj  # as OpenAI does

    out = [chunk({"role": "assistant", "content": "" if reply.text else None})]
    out += [
        chunk({"content": None, "reasoning_content": p}) for p in _pieces(reply.reasoning, size)
    ]
    out += [chunk({"content": p}) for p in _pieces(reply.text, size)]
    for i, (cid, name, args) in enumerate(calls):
        head = {
            "index": i,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append(chunk({"tool_calls": [head]}))
        out += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in _pieces(args, size)
        ]
    out.append(chunk({}, reply.finish_reason or ("tool_calls" if calls else "stop")))
    if reply.usage is not None and (include_usage or isinstance(reply.usage, dict)):
        out.append(
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": _usage(reply, body, calls),
            }
        )
    return out


def _completion(reply: Reply, body: dict, base: dict, n: int) -> dict:
    """The ``chat.completion`` object of a non-streamed reply (usage unless ``None``)."""
    calls = _calls(reply, n)
    message: dict = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ]
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    obj = {
        **base,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
    }
    if reply.usage is not None:
        obj["usage"] = _usage(reply, body, calls)
    return obj


def _dumps(obj: Any) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (scripted on purpose): sent as a \\ud800 escape
        return json.dumps(obj, separators=(",", ":")).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr access log
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )  # no Nagle stalls per chunk
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        self.server.owner._track(self.connection, add=False)
        super().finish()

    # -- plumbing ---------------------------------------------------------------------
    def _body(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return json.loads(raw or b"null")

    def _send(
        self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None
    ):
        """A complete (Content-Length) response; ``headers`` override the defaults."""
        self.send_response(status)
        merged = {"Content-Type": ctype, "Content-Length": str(len(body)), **(headers or {})}
        for key, value in merged.items():
            self.send_header(key, str(value))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, status: int = 200) -> None:
        self._send(status, _dumps(obj))

    def _hang(self) -> None:
        """Send nothing more until the server stops or the client closes the connection."""
        stopping = self.server.owner._stopping
        with contextlib.suppress(OSError):
            self.wfile.flush()
        while not stopping.wait(0.05):
            try:
                if self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    break  # the client hung up
            except BlockingIOError:
                continue
            except OSError:
                break
        self._abort()

    def _abort(self) -> None:
        """Close the connection abruptly (FIN mid-body)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # -- routes -----------------------------------------------------------------------
    def do_GET(self) -> None:
        owner = self.server.owner
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "scripted"}
            self._json({"object": "list", "data": [model]})
        elif self.path == "/_requests":
            self._json(owner.requests)
        else:
            self._json(_error_json(404, f"Unknown path: GET {self.path}"), 404)

    def do_POST(self) -> None:
        owner = self.server.owner
        try:
            body = self._body()
        except (ValueError, UnicodeDecodeError):
            return self._json(_error_json(400, "Request body is not valid JSON"), 400)
        path = self.path.rstrip("/")
        if path in ("/v1/chat/completions", "/chat/completions"):
            if not isinstance(body, dict):
                return self._json(_error_json(400, "Request body must be a JSON object"), 400)
            n, reply = owner._take(body)
            try:
                return self._complete(body, reply, n)
            finally:
                owner._finished(n)
        if path == "/_script":
            try:
                owner.enqueue(*(body if isinstance(body, list) else [body]))
            except (TypeError, ValueError, KeyError) as err:
                return self._json(_error_json(400, f"Bad script: {err}"), 400)
            return self._json({"queued": owner.pending})
        if path == "/_reset":
            owner.reset()
            return self._json({"ok": True})
        self._json(_error_json(404, f"Unknown path: POST {self.path}"), 404)

    # -- chat completions -------------------------------------------------------------
    def _complete(self, body: dict, reply: Reply, n: int) -> None:
        wait = self.server.owner._stopping.wait  # True when the server is stopping
        if reply.first_delay and wait(reply.first_delay):
            return self._abort()
        if reply.hang == "accept":
            return self._hang()
        if reply.status is not None:
            err = reply.error_body
            quoted = ""
            if reply.echo_authorization:
                quoted = f"; got Authorization: {self.headers.get('Authorization')}"
            if err is None:
                err = _error_json(reply.status, f"Scripted error {reply.status}{quoted}")
            elif isinstance(err, str):
                err += quoted
            if isinstance(err, str):
                return self._send(
                    reply.status, err.encode(), "text/plain; charset=utf-8", reply.headers
                )
            return self._send(reply.status, _dumps(err), headers=reply.headers)
        base = {
            "id": f"chatcmpl-{n}",
            "created": int(time.time()),
            "model": body.get("model") or "scripted",
            "system_fingerprint": "fp_scripted",
        }
        if not body.get("stream"):
            if reply.hang is not None:  # "headers"/"chunk": the head, then nothing
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                return self._hang()
            if reply.drop_after is not None or (reply.stall and wait(reply.stall)):
                return self._abort()  # non-streaming drop: no response at all
            if reply.malformed_after is not None:
                return self._send(200, b"{not json", headers=reply.headers)
            return self._send(200, _dumps(_completion(reply, body, base, n)), headers=reply.headers)

        self.send_response(200)
        for key, value in {
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            **reply.headers,
        }.items():
            self.send_header(key, str(value))
        self.end_headers()
        if reply.hang == "headers":
            return self._hang()
        write = lambda data: self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))  # noqa: E731
        events = _chunks(reply, body, base, n)
        for i, event in enumerate(events):
            if i == reply.drop_after:
                return self._abort()
            if i == reply.malformed_after:
                write(b"data: {not json\n\n")
                break
            if i and reply.delay and wait(reply.delay):
                return self._abort()
            write(b"data: " + _dumps(event) + b"\n\n")
            if i == 0 and reply.hang == "chunk":
                return self._hang()
            if i == 0 and reply.stall and wait(reply.stall):
                return self._abort()
        else:
            if reply.drop_after is not None:  # drop_after >= number of chunks: drop before [DONE]
                return self._abort()
            write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients vanish (timeouts, aborted streams); that is expected here


class ScriptedServer:
    """Loopback OpenAI-compatible server. ``start()`` binds ``host:port`` (0 = free port)
    and serves in a daemon thread; ``stop()`` shuts down, wakes stalled handlers and
    closes open connections. Usable as a context manager. Thread-safe."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, replies: Iterable[Reply | dict] = ()
    ) -> None:
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._queue: collections.deque[Reply] = collections.deque(_as_reply(r) for r in replies)
        self._requests: list[dict] = []
        self._count = 0
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``; only valid once started."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not running; call start()")
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[dict]:
        """Snapshot of the chat-completion request bodies received, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Number of queued replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    def enqueue(self, *replies: Reply | dict | str) -> None:
        """Append replies (``Reply``, dict for ``Reply.from_dict``, or plain text)."""
        parsed = [_as_reply(r) for r in replies]
        with self._lock:
            self._queue.extend(parsed)

    def reset(self) -> None:
        """Clear the reply queue and the recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    def start(self) -> ScriptedServer:
        """Bind and serve in a daemon thread; idempotent. Returns ``self``."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="scripted-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed/stalled handlers, close open connections; idempotent."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:  # idle keep-alive and stalled connections
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- used by the handler ----------------------------------------------------------
    def _take(self, body: dict) -> tuple[int, Reply]:
        """Record the request and pop its reply (or the default), atomically. OpenCode's own
        title requests (sent beside a session's first turn, in no fixed order) get a short title
        and leave the queue alone."""
        with self._lock:
            self._count += 1
            self._requests.append(body)
            if is_title_request(body):
                return self._count, Reply(
                    text=" ".join(_user_text(body.get("messages")).split()[:6]) or "Session"
                )
            if self._queue:
                return self._count, self._queue.popleft()
        return self._count, Reply(text="(scripted) " + _user_text(body.get("messages"))[:200])

    def _finished(self, n: int) -> None:
        """Request ``n``'s response is written (or abandoned); a hook for subclasses."""

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)


def main(argv: list[str] | None = None) -> None:
    """CLI entry point: print the base URL (flushed), serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m jupyter_session_agent.testing.scripted_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON file with a list of reply dicts")
    args = parser.parse_args(argv)
    replies = []
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            replies = json.load(fh)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server = ScriptedServer(args.host, args.port, replies).start()
    try:
        print(server.base_url, flush=True)
        while not done.wait(0.2):
            pass
    finally:
        server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
