"""``python``: run code in the user's kernel, like a notebook cell the model writes.

One module: running the code and capturing and cleaning what it prints or shows are one
operation: every stream, descriptor and shell hook swapped for a call is restored by it.

Contract:

* The code runs in ``ctx.shell.user_ns``, so variables persist across calls
  and are shared with the user's cells. Without a shell, each session gets a
  private namespace kept for the life of the process.
* Statements run in order; if the last one is an expression its ``repr`` is
  the result (skipped when ``None`` or when the code ends with ``;``), as in
  a notebook cell. Code is plain Python: no ``%magics`` or ``!shell`` lines.
* ``sys.stdout``/``sys.stderr`` are captured into the output, and so are file
  descriptors 1 and 2 (subprocesses, C code, ``sys.__stdout__``). ``display(...)``
  and inline matplotlib figures still reach the notebook cell, but cleaned: while
  the code runs, everything it can show there (display data of every MIME type,
  display updates, the display hook, tracebacks sent to the front end, writes to
  the kernel's own streams) passes ``redact.clean``: no API key, no unencodable
  text. The kernel's cwd is user state: no chdir.
* An exception in the user's code (including ``SyntaxError`` and
  ``SystemExit``) does NOT fail the tool: the call completes, its output holds
  whatever was printed plus the traceback (our own frames removed), and
  ``metadata["error"]`` is the exception class name. Running code that
  raises is a normal outcome the model must read and react to, and the
  prints before the error matter; an ``error`` state would lose them.
  ``KeyboardInterrupt`` propagates untouched.
* Capture swaps the process-wide ``sys.stdout``, so prints from other threads
  during the call land in the output too.
"""

from __future__ import annotations

import ast
import codecs
import io
import linecache
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout, suppress
from typing import Any

from ..core.redact import before_cut, clean, clean_value
from ..core.text import decode
from .base import ToolContext, ToolResult

TITLE_LENGTH = 60
MAX_FD_BYTES = 8 * 1024 * 1024  # per descriptor: output written below sys.stdout that is kept
FD_DRAIN_TIMEOUT = 10.0  # seconds to wait for the last of it after the code returned

# session id → namespace, for contexts without an IPython shell.
_PRIVATE_NAMESPACES: dict[str, dict[str, Any]] = {}


class PythonTool:
    name = "python"
    description = (
        "Run Python code in the user's Jupyter kernel. Variables persist between calls and are "
        "shared with the notebook. Printed output is returned, and the value of the last "
        "expression is shown like a notebook cell. Plain Python only: no %magics or !commands "
        "(use bash for shell commands)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python code to run"},
        },
        "required": ["code"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        code = args["code"]
        namespace = _namespace(ctx)
        filename = f"<python-tool {ctx.call_id}>"
        # Registered so tracebacks show the model's source lines; mtime None
        # keeps linecache.checkcache from evicting it.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)

        out, err = io.StringIO(), io.StringIO()
        result, error = "", None
        with (
            _cleaned_outputs(ctx.shell),
            _captured_fds() as fds,
            redirect_stdout(out),
            redirect_stderr(err),
        ):
            try:
                value = _execute(code, filename, namespace)
                if value is not None and not code.rstrip().endswith(";"):
                    result = _safe_repr(value)
            except (Exception, SystemExit) as exc:  # user code; KeyboardInterrupt passes
                error = exc
        sections = [
            ("stdout", out.getvalue() + fds.get(1, "")),
            ("stderr", err.getvalue() + fds.get(2, "")),
        ]
        if error is not None:
            sections.append(("error", _format_error(error, filename)))
        else:
            sections.append(("result", result))
        return ToolResult(
            output=_join(sections),
            title=_title(code),
            metadata={"error": type(error).__name__} if error is not None else {},
        )


# --------------------------------------------------------------------------
# what the code shows in the cell: cleaned (redacted, encodable) for the duration of the call


@contextmanager
def _cleaned_outputs(shell: Any) -> Iterator[None]:
    """Every way code shows something in the notebook passes ``redact.clean`` while it runs.

    The display publisher (``display``, ``update_display``, every MIME type, nested JSON
    values and metadata), the display hook (``sys.displayhook``), the shell's traceback
    sink (formatter errors reach the front end through it, not through stdout) and the
    ``write`` of the streams in place before the call (code or a logging handler holding
    the kernel's own ``sys.stdout``/``sys.stderr`` or ``sys.__stdout__`` bypasses the
    capture). Each is wrapped on its instance and restored afterwards, so nested calls
    and ``capture_output()`` (which swaps the publisher) keep working.
    """
    shells = [shell] if shell is not None else []
    try:
        from IPython.core.interactiveshell import InteractiveShell

        if InteractiveShell.initialized() and InteractiveShell.instance() is not shell:
            shells.append(InteractiveShell.instance())  # display() publishes through this one
    except ImportError:
        pass
    with ExitStack() as stack:
        for sh in shells:
            stack.enter_context(
                _wrapped(getattr(sh, "display_pub", None), "publish", _clean_publish)
            )
            stack.enter_context(
                _wrapped(getattr(sh, "displayhook", None), "write_format_data", _clean_format_data)
            )
            stack.enter_context(_wrapped(sh, "_showtraceback", _clean_showtraceback))
        streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
        for stream in {id(s): s for s in streams if s is not None}.values():
            stack.enter_context(_wrapped(stream, "write", _clean_write))
        stack.enter_context(_cleaned_log_records())
        yield


@contextmanager
def _cleaned_log_records() -> Iterator[None]:
    """Log records made while the code runs carry cleaned text (message, exception, stack), so
    no handler (a file, the notebook's, a test's) gets a key from them."""
    original = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = original(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format: logging reports that itself
            return record
        if clean(message) != message:
            record.msg, record.args = clean(message), ()
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            if clean(text) != text:
                record.exc_text = clean(text)
        if record.stack_info:
            record.stack_info = clean(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        if logging.getLogRecordFactory() is factory:
            logging.setLogRecordFactory(original)


@contextmanager
def _wrapped(obj: Any, name: str, wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """``obj.name`` replaced by ``wrap(obj.name)`` on the instance, then restored as it was."""
    original = getattr(obj, name, None) if obj is not None else None
    if not callable(original):
        yield
        return
    own = getattr(obj, "__dict__", {})
    had, previous = name in own, own.get(name)
    try:
        setattr(obj, name, wrap(original))
    except (AttributeError, TypeError):  # no instance attributes: its output is caught at the fd
        yield
        return
    try:
        yield
    finally:
        if had:
            setattr(obj, name, previous)
        else:
            with suppress(AttributeError):
                delattr(obj, name)


def _clean_bundle(data: Any) -> Any:
    """A MIME bundle cleaned; binary images are left as they are (no text to find)."""
    if not isinstance(data, dict):
        return clean_value(data)
    return {
        clean_value(mime): value if _binary(mime) else clean_value(value)
        for mime, value in data.items()
    }


def _binary(mime: Any) -> bool:
    media = ("image/", "audio/", "video/")
    return isinstance(mime, str) and mime.startswith(media) and "svg" not in mime


def _clean_publish(original: Callable) -> Callable:
    def publish(*args: Any, **kwargs: Any) -> Any:
        values = list(args)
        for index, key, fix in ((0, "data", _clean_bundle), (1, "metadata", clean_value)):
            if len(values) > index:
                values[index] = fix(values[index])
            elif key in kwargs:
                kwargs[key] = fix(kwargs[key])
        return original(*values, **kwargs)

    return publish


def _clean_format_data(original: Callable) -> Callable:
    def write_format_data(format_dict: Any, md_dict: Any = None) -> Any:
        return original(_clean_bundle(format_dict), clean_value(md_dict))

    return write_format_data


class _Shown(Exception):
    """Stands for an exception whose text was cleaned, where a front end is sent its text."""


def _clean_showtraceback(original: Callable) -> Callable:
    def showtraceback(etype: Any, evalue: Any, stb: Any) -> Any:
        try:
            text = str(evalue)
        except Exception:  # a broken __str__: the front end gets the class name
            text = ""
        if clean(text) != text:
            evalue = _Shown(clean(text))
        return original(etype, evalue, clean_value(list(stb or ())))

    return showtraceback


def _clean_write(original: Callable) -> Callable:
    def write(text: Any, *args: Any, **kwargs: Any) -> Any:
        return original(clean(text) if isinstance(text, str) else text, *args, **kwargs)

    return write


@contextmanager
def _captured_fds() -> Iterator[dict[int, str]]:
    """File descriptors 1 and 2 point to pipes while the code runs, so what bypasses
    ``sys.stdout`` (a subprocess, C code, ``os.write(1, …)``) joins the output (cleaned with
    it) instead of reaching the cell raw; the dict gets each descriptor's text afterwards
    (at most :data:`MAX_FD_BYTES` each; undecodable bytes become ``\\xNN``). A process the
    code started that keeps writing afterwards (a server) goes on reaching where the
    descriptor pointed before, cleaned chunk by chunk, until it closes it."""
    captured: dict[int, str] = {}
    _flush_process_streams()
    captures = [c for c in (_FdCapture.start(fd) for fd in (1, 2)) if c is not None]
    try:
        yield captured
    finally:
        _flush_process_streams()
        for capture in captures:
            captured[capture.fd] = capture.finish()


class _FdCapture:
    """One descriptor pointed at a pipe; a thread reads it until the end marker written when
    the call ends (the capture), then forwards what lingering writers send (until EOF)."""

    def __init__(self, fd: int, saved: int, read_end: int, write_end: int) -> None:
        self.fd, self.saved, self.read_end, self.write_end = fd, saved, read_end, write_end
        self.forward_to = os.dup(saved)
        self.marker = b"\0python-tool-end-" + os.urandom(8).hex().encode() + b"\0"
        self.kept: list[bytes] = []
        self.size = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._pump, name=f"python-tool-fd{fd}", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, fd: int) -> _FdCapture | None:
        try:
            saved = os.dup(fd)
        except OSError:  # no such descriptor (pythonw, a closed stdout): nothing to catch
            return None
        read_end, write_end = os.pipe()
        capture = cls(fd, saved, read_end, write_end)
        try:
            os.dup2(write_end, fd)
        except OSError:
            capture.finish()
            return None
        return capture

    def finish(self) -> str:
        """Point the descriptor back, end the capture, return its text."""
        os.dup2(self.saved, self.fd)
        os.close(self.saved)
        with suppress(OSError):
            os.write(self.write_end, self.marker)
        os.close(self.write_end)
        self.done.wait(FD_DRAIN_TIMEOUT)
        text = decode(b"".join(self.kept))
        if self.size > MAX_FD_BYTES:
            text += f"\n... {self.size - MAX_FD_BYTES:,} more bytes not kept"
        return text

    def _keep(self, data: bytes) -> None:
        room = MAX_FD_BYTES - min(self.size, MAX_FD_BYTES)
        if room:
            self.kept.append(data[:room])
        self.size += len(data)

    def _pump(self) -> None:
        pending = b""
        forward = None
        try:
            while True:
                data = os.read(self.read_end, 65536)
                if not data:
                    break
                if forward is not None:
                    forward(data)
                    continue
                pending += data
                at = pending.find(self.marker)
                if at < 0:
                    cut = max(0, len(pending) - len(self.marker) + 1)  # a marker may be split
                    self._keep(pending[:cut])
                    pending = pending[cut:]
                    continue
                self._keep(pending[:at])
                self.done.set()
                forward = self._forwarder()
                forward(pending[at + len(self.marker) :])
        except OSError:
            pass
        finally:
            if forward is None:
                self._keep(pending)
            self.done.set()
            for fd in (self.read_end, self.forward_to):
                with suppress(OSError):
                    os.close(fd)

    def _forwarder(self) -> Callable[[bytes], None]:
        decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

        def forward(data: bytes) -> None:
            if data:
                with suppress(OSError):
                    os.write(self.forward_to, clean(decoder.decode(data)).encode("utf-8"))

        return forward


def _flush_process_streams() -> None:
    for stream in filter(None, (sys.__stdout__, sys.__stderr__)):
        with suppress(Exception):
            stream.flush()


def _namespace(ctx: ToolContext) -> dict[str, Any]:
    if ctx.shell is not None:
        return ctx.shell.user_ns
    return _PRIVATE_NAMESPACES.setdefault(ctx.session_id, {"__name__": "__main__"})


def _execute(code: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Exec all statements; evaluate and return a trailing expression, else None."""
    tree = ast.parse(code, filename=filename, mode="exec")
    last = None
    if tree.body and isinstance(expr := tree.body[-1], ast.Expr):
        last = ast.Expression(expr.value)
        tree.body.pop()
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a broken __repr__ must not fail the call
        return f"<{type(value).__name__} object; repr failed: {type(exc).__name__}: {exc}>"


def _format_error(exc: BaseException, filename: str) -> str:
    """The traceback from the model's first frame on (ours are noise to it)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _join(sections: list[tuple[str, str]]) -> str:
    """Non-empty sections; labelled only when more than one (or stderr alone)."""
    present = [(label, text.rstrip("\n")) for label, text in sections if text.strip()]
    if not present:
        return "(no output)"
    if len(present) == 1 and present[0][0] != "stderr":
        return present[0][1]
    return "\n".join(f"[{label}]\n{text}" for label, text in present)


def _title(code: str) -> str:
    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
    first = before_cut(first, TITLE_LENGTH)
    return first if len(first) <= TITLE_LENGTH else first[: TITLE_LENGTH - 1] + "…"
