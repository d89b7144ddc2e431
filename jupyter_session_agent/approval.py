"""Asking the user while a ``%%agent`` cell runs.

An :class:`Approver` gets a pending :class:`~.permission.Request` and returns
``(reply, message)``: ``("once", None)``, ``("always", None)``,
``("reject", None)`` or ``("reject", feedback)``. It raises
:class:`~.permission.ApprovalUnavailable` when there is nobody to ask.

:class:`StdinApprover` asks on the kernel's stdin: ``input()`` works in a busy
Jupyter cell when the front end allows stdin (ipykernel sends an
``input_request``). Front ends without stdin make ipykernel raise
``StdinNotImplementedError``; a plain script or terminal without a tty would
block or hit EOF — both become a clear denial instead of a hang.
:class:`ScriptedApprover` answers from a list, for tests and demos.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any, Callable, Iterable, Protocol

from .permission import ApprovalUnavailable, Request, how_to_allow

CHOICES = "[o]nce, [a]lways, [r]eject, or type feedback to reject with it"

_ONCE = {"o", "once", "y", "yes", "1"}
_ALWAYS = {"a", "always", "2"}
_REJECT = {"", "r", "reject", "n", "no", "3"}


class Approver(Protocol):
    def __call__(self, request: Request) -> tuple[str, str | None]: ...


def parse_answer(text: str | None) -> tuple[str, str | None]:
    """``o``/``once``/``y`` → once; ``a``/``always`` → always; ``r``/``n``/empty → reject;
    anything else → reject with that text as feedback for the model."""
    answer = (text or "").strip()
    word = answer.lower()
    if word in _ONCE:
        return "once", None
    if word in _ALWAYS:
        return "always", None
    if word in _REJECT:
        return "reject", None
    return "reject", answer


def prompt_line(request: Request) -> str:
    """One compact line: what wants to run, and the choices."""
    tool = request.metadata.get("tool") or request.permission
    what = _one_line(str(request.metadata.get("summary") or ", ".join(request.patterns)))
    label = tool if request.permission in (tool, "edit", "read") else f"{request.permission} · {tool}"
    always = ", ".join(request.always)
    scope = f" (always allows {request.permission} {_one_line(always, 40)})" if always and always != "*" else ""
    return f"🔐 {label}: {what} — {CHOICES}{scope}: "


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StdinApprover:
    """Asks with ``input()``; ``shell`` is the IPython shell (``None`` outside IPython)."""

    def __init__(self, shell: Any = None, read: Callable[[str], str] | None = None):
        self.shell = shell
        self.read = read

    def can_ask(self) -> bool:
        if self.read is not None:
            return True
        if type(self.shell).__name__ == "ZMQInteractiveShell":
            return True  # ipykernel: input() asks the front end, or raises StdinNotImplementedError
        stdin = sys.stdin
        try:
            return stdin is not None and not stdin.closed and stdin.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    def __call__(self, request: Request) -> tuple[str, str | None]:
        if not self.can_ask():
            raise ApprovalUnavailable(how_to_allow(request))
        read = self.read or builtins.input
        try:
            answer = read(prompt_line(request))
        except (EOFError, NotImplementedError, OSError, RuntimeError):
            # StdinNotImplementedError is a NotImplementedError; pytest's capture raises OSError.
            raise ApprovalUnavailable(how_to_allow(request)) from None
        return parse_answer(answer)


class ScriptedApprover:
    """Answers from a list of strings (as a user would type them); records the prompts."""

    def __init__(self, answers: Iterable[str]):
        self.answers = list(answers)
        self.asked: list[Request] = []
        self.prompts: list[str] = []

    def __call__(self, request: Request) -> tuple[str, str | None]:
        self.asked.append(request)
        self.prompts.append(prompt_line(request))
        if not self.answers:
            raise ApprovalUnavailable(how_to_allow(request))
        return parse_answer(self.answers.pop(0))


def default_approver(shell: Any = None) -> Approver:
    return StdinApprover(shell)


__all__ = ["Approver", "StdinApprover", "ScriptedApprover", "parse_answer", "prompt_line", "default_approver", "CHOICES"]
