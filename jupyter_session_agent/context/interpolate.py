"""``{var}`` in a ``%%agent`` prompt: the notebook's values put into the text.

A field is a *reference*: a name, then any number of ``.attr`` and ``[index]`` lookups, then
optionally ``!r``/``!s``/``!a`` and a format spec (``{x:.3f}``) — ``{df.shape}``,
``{In[3]}``, ``{Out[3]}``, ``{Err[3]}`` (the error text of cell 3), ``{cfg['path']}``. As with
``str.format_map``, resolving one only looks names up in the user's namespace and does
attribute and index lookups — nothing is evaluated: ``{x + 1}``, ``{f()}`` and ``{x[y]}``
(a name as an index is a string key, as in ``str.format``) are not code. Private attributes
(``{x._y}``, ``{x.__class__}``) are refused.

Doubled braces around a reference are its escape: ``{{x}}`` sends ``{x}``. Other braces are
sent as typed (``{"a": {"b": 1}}``, ``{}``, ``{ x }``, ``{a: 1}``: not references), and code in
the prompt (fenced blocks, inline code spans) is never touched. A reference to a name that does
not exist, a cell that did not run, an output or error a cell did not have, is a
:class:`ContextError` naming it: nothing is sent. Each value is ``str()``-ed (or formatted) and
capped at :data:`MAX_VALUE_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import ContextError
from .markdown import outside_code

MAX_VALUE_CHARS = 20_000
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# a format spec, without the " " sign: "{a: 1}" reads as text, not as a field with a spec
_SPEC = r"(?:.?[<>=^])?[+\-]?z?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?"
_REF = _NAME + r"(?:\." + _NAME + r"|\[[^\[\]{}\n]*\])*"
_TAIL = r"(?:![rsa])?(?::" + _SPEC + r")?"
_FIELD = re.compile(
    r"\{\{(?P<escaped>" + _REF + _TAIL + r")\}\}"
    r"|\{(?P<ref>" + _REF + r")(?:!(?P<conv>[rsa]))?(?::(?P<spec>" + _SPEC + r"))?\}"
)
_STEP = re.compile(r"\.(" + _NAME + r")|\[([^\[\]]*)\]")
FIX = "write {{name}} to send the braces as typed, or add --no-interpolate"


@dataclass(frozen=True)
class Interpolated:
    """The text to send, the template it came from and the references filled in."""

    text: str
    template: str
    fields: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.text != self.template


def fields(template: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each reference field in ``template`` (outside code), for callers that
    must not read inside them (``@path`` mentions)."""
    spans = []
    for offset, piece in outside_code(template):
        for match in _FIELD.finditer(piece):
            if match.group("ref"):
                spans.append((offset + match.start(), offset + match.end()))
    return spans


def interpolate(
    template: str,
    namespace: Mapping[str, Any],
    *,
    extra: Mapping[str, Any] | None = None,
    max_chars: int = MAX_VALUE_CHARS,
) -> Interpolated:
    """``template`` with its references filled in from ``extra`` (``Err``: it wins) then
    ``namespace``; see the module docstring. Raises :class:`ContextError`."""
    extra = extra or {}
    out: list[str] = []
    used: list[str] = []
    pos = 0
    for offset, piece in outside_code(template):
        out.append(template[pos:offset])
        out.append(_fill(piece, namespace, extra, max_chars, used))
        pos = offset + len(piece)
    out.append(template[pos:])
    return Interpolated("".join(out), template, tuple(dict.fromkeys(used)))


def _fill(
    piece: str,
    namespace: Mapping[str, Any],
    extra: Mapping[str, Any],
    max_chars: int,
    used: list[str],
) -> str:
    def replace(match: re.Match) -> str:
        whole = match.group(0)
        if match.group("escaped") is not None:
            return "{" + match.group("escaped") + "}"
        ref = match.group("ref")
        value = resolve(ref, namespace, extra)
        conv, spec = match.group("conv"), match.group("spec")
        try:
            if conv == "r":
                value = repr(value)
            elif conv == "a":
                value = ascii(value)
            text = format(value, spec) if spec else str(value)
        except Exception as err:
            raise ContextError(
                f"{whole} in the prompt could not be formatted "
                f"({type(err).__name__}: {err}) — {FIX}"
            ) from None
        used.append(whole)
        if len(text) > max_chars:
            text = text[:max_chars] + f"… [{len(text) - max_chars:,} more characters of {whole}]"
        return text

    return _FIELD.sub(replace, piece)


def is_reference(text: str) -> bool:
    """Whether ``text`` is a reference: a name and ``.attr``/``[index]`` lookups."""
    return re.fullmatch(_REF, text or "") is not None


def resolve(
    ref: str,
    namespace: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    *,
    where: str | None = None,
    fix: str = FIX,
) -> Any:
    """The value of a reference (``df.shape``, ``In[3]``, ``cfg['a'][0]``): lookups only.
    ``where`` names it in an error (default ``{ref} in the prompt``); ``fix`` ends the line."""
    extra = extra or {}
    head = where or f"{{{ref}}} in the prompt"
    match = re.match(_NAME, ref)
    if match is None:
        raise ContextError(f"{head}: {ref!r} is not a name with lookups — {fix}")
    name = match.group(0)
    if name in extra:
        value = extra[name]
    elif name in namespace:
        value = namespace[name]
    else:
        raise ContextError(
            f"{head}: name {name!r} is not defined in the notebook — define it first, {fix}"
        )
    done = name
    for step in _STEP.finditer(ref, len(name)):
        attr, index = step.group(1), step.group(2)
        if attr is not None:
            if attr.startswith("_"):
                raise ContextError(
                    f"{head}: private attributes ({attr}) are not read — use a public one, or {fix}"
                )
            try:
                value = getattr(value, attr)
            except AttributeError:
                raise ContextError(
                    f"{head}: {done} has no attribute {attr!r} — check the name, or {fix}"
                ) from None
            except Exception as err:
                raise ContextError(
                    f"{head}: reading {done}.{attr} raised {type(err).__name__}: {err} — {fix}"
                ) from None
            done += f".{attr}"
        else:
            key = _key(index)
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError) as err:
                raise ContextError(_missing(head, fix, done, name, key, value, err)) from None
            except Exception as err:
                raise ContextError(
                    f"{head}: reading {done}[{index}] raised {type(err).__name__}: {err} — {fix}"
                ) from None
            done += f"[{index}]"
    return value


def _key(index: str) -> Any:
    text = index.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text  # as str.format: a bare word is a string key


def _missing(
    head: str, fix: str, done: str, name: str, key: Any, container: Any, err: Exception
) -> str:
    """The line for a lookup that failed; the notebook's own tables say which cells exist."""
    if done == name and name in ("In", "Out", "Err") and isinstance(key, int):
        log = getattr(container, "log", None)
        if name == "In":
            last = len(container) - 1 if isinstance(container, list) else 0
            span = f"cells 1–{last} ran" if last > 0 else "no cell has run yet"
            return f"{head}: there is no cell {key} in this kernel ({span}) — give one of them"
        if name == "Out":
            have = (
                sorted(k for k in container if isinstance(k, int))
                if isinstance(container, Mapping)
                else []
            )
            some = f"cells with an output: {_few(have)}" if have else "no cell has an output yet"
            return f"{head}: cell {key} has no output ({some}) — give one of them, or {fix}"
        have = [e.number for e in log.errors()] if log is not None else []
        some = f"cells with an error: {_few(have)}" if have else "no cell has raised an error yet"
        return f"{head}: cell {key} raised no error ({some}) — give one of them, or {fix}"
    what = "index" if isinstance(key, int) else "key"
    return f"{head}: {done} has no {what} {key!r} ({type(err).__name__}) — check it, or {fix}"


def _few(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[-10:])
    return ("…, " if len(numbers) > 10 else "") + shown
