"""A replay server: recorded HTTP responses of real model servers, served byte for byte.

One module: loading a recording (a vcrpy cassette interaction) and serving it over real
HTTP on loopback make one tool for provider-fidelity tests.

A :class:`Recorded` response is a status, the recorded ``content-type`` and the body bytes.
:func:`load_cassette` reads one interaction of a vcrpy cassette (YAML; PyYAML is imported
only here): a body recorded as text (``body.string``, how vcrpy keeps streams) is served
exactly (a binary one, e.g. gzip, with its recorded ``content-encoding``); a body some
recorders store decoded (``parsed_body``) is served as its compact JSON encoding, the
closest the recording allows. :func:`load_slice` reads a response quoted
in some other file (a vendor's documentation, a curl transcript): the bytes between two
offsets, served unchanged.

:class:`ReplayServer` answers the n-th ``POST`` (any path) with the n-th response given,
and every later one with the last; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["Recorded", "ReplayServer", "load_cassette", "load_slice"]


@dataclass(frozen=True)
class Recorded:
    """One recorded response: what the server sent, as it sent it."""

    status: int
    content_type: str
    body: bytes
    # the recorded ``content-encoding`` (``gzip``: the body is sent compressed, as recorded)
    content_encoding: str | None = None


def load_cassette(path: str | Path, interaction: int = 0) -> Recorded:
    """The response of ``interaction`` (0-based) in the vcrpy cassette at ``path``."""
    import yaml  # the test extra's PyYAML; never needed outside tests

    data = yaml.safe_load(Path(path).read_bytes())
    response = data["interactions"][interaction]["response"]
    headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
    kind = headers.get("content-type") or ["application/json"]
    content_type = kind[0] if isinstance(kind, list) else str(kind)
    encoding = headers.get("content-encoding")
    encoding = (encoding[0] if isinstance(encoding, list) else encoding) or None
    body = response.get("body")
    if isinstance(body, dict) and "string" in body:
        raw = body["string"]
        payload = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw or b"")
        if isinstance(raw, str):
            encoding = None  # a body vcrpy kept as text was stored decoded
    else:
        payload = json.dumps(response.get("parsed_body"), separators=(",", ":")).encode("utf-8")
        encoding = None
    return Recorded(int(response["status"]["code"]), content_type, payload, encoding)


def load_slice(
    path: str | Path,
    start: int,
    end: int,
    status: int = 200,
    content_type: str = "application/json",
) -> Recorded:
    """The bytes ``[start, end)`` of the file at ``path`` as a response body, as they are."""
    data = Path(path).read_bytes()
    if not 0 <= start < end <= len(data):
        raise ValueError(f"{path}: no bytes {start}..{end} in a file of {len(data)}")
    return Recorded(status, content_type, data[start:end])


class ReplayServer:
    """Serves ``responses`` in order on ``127.0.0.1`` (the last one repeats)."""

    def __init__(self, responses: list[Recorded], host: str = "127.0.0.1") -> None:
        if not responses:
            raise ValueError("a replay server needs at least one recorded response")
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    n = len(server.requests)
                    server.requests.append({"path": self.path, "body": body})
                    reply = server.responses[min(n, len(server.responses) - 1)]
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                if reply.content_encoding:
                    self.send_header("content-encoding", reply.content_encoding)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                self.wfile.flush()

            def do_GET(self) -> None:  # noqa: N802
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    def start(self) -> ReplayServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
