"""The open notebook as the tools reach it while a ``%%agent`` cell runs: one question on the
kernel's stdin channel, answered by the JupyterLab extension.

The kernel is busy running the ``%%agent`` cell, so a message the front end sends on the shell
channel (a comm message, an execute request) is read only after the cell ends. The stdin
channel works during the cell: ipykernel sends an ``input_request`` and blocks until the front
end replies. The approval buttons use it already (the live view shows the pending call, the
buttons type the answer into JupyterLab's stdin box); the notebook tools extend that same
protocol:

1. the live view of the running cell (``ui/display.py`` registers itself here with
   :func:`register`) shows a ``frontend`` request — ``{"protocol", "nonce", "action", …}`` —
   in its ``application/vnd.jupyter.session-agent+json`` data;
2. the kernel asks on stdin, as a password question (JupyterLab echoes it as dots, and the
   view clears the echo), with a prompt that ends with ``[jsa-frontend/1 <nonce>]``;
3. the extension's renderer sees the request, does it on the live notebook model (reads it,
   shows proposed edits as diffs and waits for Accept / Reject), and types one line of JSON
   ``{"nonce": …, …}`` into the stdin box of its own output area — only when that box's prompt
   names the same nonce. A fresh nonce per request: a cell whose source holds the marker, or a
   user's own ``input()`` that imitates it, is never answered.

Without the extension the prompt is a plain question a person can answer: Enter continues
without it, and this kernel does not ask again (:func:`ask` raises :class:`Unavailable` at
once from then on). Front ends that do not answer stdin (nbclient, nbval, ``allow_stdin``
off) and plain IPython raise :class:`Unavailable` without asking.
"""

from __future__ import annotations

import json
import secrets
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..core.errors import ToolFailure

PROTOCOL = "jsa-frontend/1"
MAX_ANSWER_CHARS = 8_000_000  # a notebook model larger than this is cut by the extension first

# shell → the live view's channel: ``channel(request, read)`` shows ``request`` in the view,
# calls ``read()`` (the stdin question) and clears the request again; returns what read gave.
_CHANNELS: weakref.WeakKeyDictionary[Any, Callable[[dict, Callable[[], str]], str]] = (
    weakref.WeakKeyDictionary()
)
_SILENT: weakref.WeakSet[Any] = weakref.WeakSet()  # kernels whose front end did not answer


class Unavailable(ToolFailure):
    """The front end cannot do it; the message is one line saying why."""


def register(shell: Any, channel: Callable[[dict, Callable[[], str]], str]) -> None:
    """While a live ``%%agent`` cell runs, requests for ``shell`` go through ``channel``."""
    if shell is not None:
        _CHANNELS[shell] = channel


def unregister(shell: Any, channel: Any = None) -> None:
    if shell is not None and (channel is None or _CHANNELS.get(shell) is channel):
        _CHANNELS.pop(shell, None)


def front_end(shell: Any) -> str:
    """Why the extension cannot be asked in ``shell``, in one line; ``""`` when it can."""
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return "this is not a Jupyter kernel (plain IPython or a script)"
    kernel = getattr(shell, "kernel", None)
    if not getattr(kernel, "_allow_stdin", False):
        return (
            "this front end does not answer the kernel's questions (nbclient, nbval, "
            "or a client with stdin off)"
        )
    if shell not in _CHANNELS:
        return "the live view is off (a replay, or %agent config live false)"
    if shell in _SILENT:
        return "the jupyter-session-agent JupyterLab extension did not answer in this kernel"
    return ""


def ask(shell: Any, request: dict, question: str) -> dict:
    """Send ``request`` (``{"action": …, …}``) to the extension and return its answer (a
    dict). Raises :class:`Unavailable` (one line) when it cannot be asked or did not answer."""
    why = front_end(shell)
    if why:
        raise Unavailable(why)
    nonce = secrets.token_hex(12)
    # ``sent``: when the kernel asked (epoch ms), for the latency the extension measures
    payload = {"protocol": PROTOCOL, "nonce": nonce, "sent": int(time.time() * 1000), **request}
    prompt = (
        f"{question} (the jupyter-session-agent JupyterLab extension answers this; "
        f"without it press Enter to go on) [{PROTOCOL} {nonce}]: "
    )
    kernel = shell.kernel
    channel = _CHANNELS[shell]
    try:
        text = channel(payload, lambda: kernel.getpass(prompt))
    except (EOFError, NotImplementedError, OSError, RuntimeError) as err:
        raise Unavailable(f"the front end cannot be asked ({type(err).__name__})") from None
    return parse(shell, text, nonce)


def parse(shell: Any, text: str | None, nonce: str) -> dict:
    """The extension's answer to the request ``nonce``; an empty answer (Enter, no extension)
    marks this kernel as one whose front end does not answer."""
    text = (text or "").strip()
    if not text:
        _SILENT.add(shell)
        raise Unavailable("no JupyterLab extension answered (Enter was pressed)")
    if len(text) > MAX_ANSWER_CHARS:
        raise Unavailable(f"the front end's answer is over {MAX_ANSWER_CHARS:,} characters")
    try:
        answer = json.loads(text)
    except ValueError:
        raise Unavailable("the answer typed is not the extension's (not JSON)") from None
    if not isinstance(answer, dict) or answer.get("nonce") != nonce:
        raise Unavailable("the answer typed is not the extension's (another request's)")
    if answer.get("error"):
        raise ToolFailure(f"notebook: {str(answer['error'])[:300]}")
    return answer
