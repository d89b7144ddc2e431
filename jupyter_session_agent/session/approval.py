"""Asking the user while a ``%%agent`` cell runs.

An :class:`Approver` gets a pending :class:`~..core.permission.Request` and returns
``(reply, message)``: ``("once", None)``, ``("always", None)``,
``("reject", None)`` or ``("reject", feedback)``. It raises
:class:`~..core.permission.ApprovalUnavailable` when there is nobody to ask.

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
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..core.permission import ApprovalUnavailable, Request, how_to_allow
from ..core.redact import before_cut
from ..core.text import visible

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


SHORT = 100  # code up to this long, on one line and plain, is shown in the question itself


def code_of(request: Request) -> str | None:
    """The complete code or command a request would run (python, bash), or ``None``."""
    for key in ("code", "command"):
        value = request.metadata.get(key)
        if isinstance(value, str):
            return value
    return None


def shown_in_full(request: Request) -> str | None:
    """The code to show above the question: the whole of it, made :func:`visible`;
    ``None`` when the question line shows it whole already (one short plain line)."""
    code = code_of(request)
    if code is None:
        return None
    shown = visible(code.strip("\n"))
    if "\n" in shown or len(shown) > SHORT or shown != code.strip("\n") or "\t" in shown:
        return shown
    return None


def preamble(request: Request) -> str | None:
    """What is printed above the question: the full code, when the question cannot hold it."""
    block = shown_in_full(request)
    if block is None:
        return None
    tool = request.metadata.get("tool") or request.permission
    return f"{tool} wants to run:\n{block}"


def prompt_text(request: Request) -> str:
    """Everything the user sees before answering: the full code (when it does not fit the
    question), then the one-line question."""
    above = preamble(request)
    line = prompt_line(request)
    return f"{above}\n{line}" if above is not None else line


def prompt_line(request: Request) -> str:
    """One compact line: what wants to run, and the choices."""
    tool = request.metadata.get("tool") or request.permission
    code = code_of(request)
    if code is not None and shown_in_full(request) is not None:
        count = len(code.strip("\n").splitlines()) or 1
        kind = "code" if tool == "python" else "command"
        what = f"the {count}-line {tool} {kind} above" if count > 1 else f"the {kind} above"
        if request.permission != tool:
            what += f" ({_one_line(visible(str(request.metadata.get('summary') or '')), 60)})"
    else:
        summary = request.metadata.get("summary") or ", ".join(request.patterns)
        what = _one_line(visible(str(summary)))
    if request.unsure:
        what += f" [the checker {_one_line(visible(request.unsure), 120)}]"
    label = (
        tool if request.permission in (tool, "edit", "read") else f"{request.permission} · {tool}"
    )
    always = ", ".join(request.always)
    scope = ""
    if always and always != "*":
        scope = f" (always allows {request.permission} {_one_line(visible(always), 40)})"
    return f"Allow {label}: {what} — {CHOICES}{scope}: "  # words, not emoji: any font


def pending(request: Request) -> dict[str, Any]:
    """What a front end shows of a request waiting for an answer (the live view's ``asking``):
    the tool, the complete code or command made :func:`visible` and its language, or a
    one-line summary; what "always" would allow; what the checker could not account for;
    and the one-line question the stdin prompt asks."""
    tool = str(request.metadata.get("tool") or request.permission)
    code = code_of(request)
    always = ", ".join(request.always)
    data: dict[str, Any] = {
        "tool": tool,
        "permission": request.permission,
        "call_id": request.call_id,
        "summary": _one_line(
            visible(str(request.metadata.get("summary") or ", ".join(request.patterns)))
        ),
        "always": f"{request.permission} {_one_line(visible(always), 60)}"
        if always and always != "*"
        else f"every {request.permission} call",
        "question": prompt_line(request),
    }
    if code is not None:
        data["code"] = visible(code.strip("\n"))
        data["language"] = "python" if "code" in request.metadata else "bash"
    if request.unsure:
        data["unsure"] = _one_line(visible(request.unsure), 160)
    return data


def _one_line(text: str, limit: int = 100) -> str:
    text = before_cut(" ".join(text.split()), limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StdinApprover:
    """Asks with ``input()``; ``shell`` is the IPython shell (``None`` outside IPython)."""

    def __init__(
        self,
        shell: Any = None,
        read: Callable[[str], str] | None = None,
        *,
        show_code: bool = True,
    ):
        self.shell = shell
        self.read = read
        self.show_code = show_code  # False: the live view shows the code, the prompt only asks

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
        above = preamble(request) if self.show_code else None
        try:
            if above is not None:
                print(above, flush=True)
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
        self.shown: list[str] = []  # all the user would see: the full code, then the question

    def __call__(self, request: Request) -> tuple[str, str | None]:
        self.asked.append(request)
        self.prompts.append(prompt_line(request))
        self.shown.append(prompt_text(request))
        if not self.answers:
            raise ApprovalUnavailable(how_to_allow(request))
        return parse_answer(self.answers.pop(0))


def default_approver(shell: Any = None) -> Approver:
    return StdinApprover(shell)


__all__ = [
    "Approver",
    "StdinApprover",
    "ScriptedApprover",
    "parse_answer",
    "pending",
    "prompt_line",
    "prompt_text",
    "preamble",
    "shown_in_full",
    "visible",
    "default_approver",
    "CHOICES",
]
