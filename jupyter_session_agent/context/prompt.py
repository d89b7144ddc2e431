"""The prompt a ``%%agent`` cell sends: its text, the template it came from, its attachments.

:func:`build` does the whole job before anything is sent (so an error leaves no session,
message or request behind): interpolation of the cell body (unless off), then ``-f`` files,
``-a`` values and ``@path`` mentions (read in the template, the text the user typed: a value
put in by ``{var}`` never attaches a file), deduplicated, at most ``attach.MAX_FILES``.
:func:`parts` gives the parts a prompt adds to its user message after its text part: per
attachment, the ``file`` part and, when the model reads it as text, a synthetic text part
(``metadata.attachment`` = the file part's id). The text part's own metadata
(:meth:`Prompt.metadata`) keeps the template and the fields filled in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ids
from ..core.messages import FilePart, TextPart
from ..core.redact import clean, clean_value
from ..tools.kernel import ErrorTable, cell_log
from . import ContextError, attach
from .attach import MAX_FILES, Attachment
from .interpolate import fields
from .interpolate import interpolate as fill
from .markdown import last_python_block


@dataclass(frozen=True)
class Prompt:
    text: str  # what is sent
    template: str  # what the user typed
    fields: tuple[str, ...] = ()  # the {…} references filled in
    attachments: tuple[Attachment, ...] = ()

    def metadata(self) -> dict[str, Any] | None:
        """The text part's metadata: ``template`` and ``interpolated`` when the text differs."""
        if self.text == self.template:
            return None
        return {"template": self.template, "interpolated": list(self.fields)}


def namespace_of(shell: Any) -> tuple[dict, dict]:
    """The user's namespace and what interpolation adds: ``Err`` (the cell log's errors) and
    ``In`` (what each cell's user typed, magics as typed)."""
    if shell is None:
        return {}, {}
    log = cell_log(shell)
    extra: dict[str, Any] = {"Err": ErrorTable(log)}
    raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if isinstance(raw, list) and raw:
        extra["In"] = raw
    return shell.user_ns, extra


def build(
    template: str,
    shell: Any = None,
    *,
    files: Iterable[str] = (),
    values: Iterable[str] = (),
    interpolate: bool = True,
    mentions: bool = True,
    cwd: str | os.PathLike | None = None,
) -> Prompt:
    """The :class:`Prompt` for a cell; every problem is one :class:`ContextError` line."""
    namespace, extra = namespace_of(shell)
    where = Path(cwd or os.getcwd())
    if interpolate:
        done = fill(template, namespace, extra=extra)
        text, used = done.text, done.fields
    else:
        text, used = template, ()
    found: list[Attachment] = []
    found += attach.from_patterns([_unquote(f) for f in files], where)
    found += [attach.from_value(_unquote(ref), namespace, extra) for ref in values]
    if mentions:
        skip = fields(template) if interpolate else []
        found += attach.mentions(template, where, skip)
    seen: dict[str, Attachment] = {}
    for item in found:  # a file given twice (-f and @, two globs) is attached once
        seen.setdefault(item.key, item)
    unique = list(seen.values())
    if len(unique) > MAX_FILES:
        raise ContextError(
            f"{len(unique)} attachments; at most {MAX_FILES} can go with one "
            "prompt — attach fewer files (or narrow the -f patterns)"
        )
    return Prompt(text, template, tuple(used), tuple(unique))


def _unquote(word: str) -> str:
    """An option value as typed: IPython's argument splitting keeps the quotes around it."""
    word = str(word).strip()
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[1:-1]
    return word


def parts(prompt: Prompt | None, session_id: str, message_id: str) -> tuple:
    """The parts ``prompt``'s attachments add to its user message (after its text part)."""
    out: list = []
    for item in prompt.attachments if prompt is not None else ():
        file = FilePart(
            ids.ascending("part"),
            session_id,
            message_id,
            mime=item.mime,
            url=item.url,
            filename=clean(item.filename),
            source=clean_value(dict(item.source)),
        )
        out.append(file)
        if item.text is not None:
            out.append(
                TextPart(
                    ids.ascending("part"),
                    session_id,
                    message_id,
                    text=clean(item.text, refresh=True),
                    synthetic=True,
                    metadata={"attachment": file.id},
                )
            )
    return tuple(out)


def code_to_next_cell(shell: Any, answer: str) -> str | None:
    """Put the last python block of ``answer`` into the next cell (``set_next_input``: a new
    cell below, for the user to review and run); say so when there is none."""
    code = last_python_block(answer)
    if code is None:
        print("the answer has no python code block — nothing was put into the next cell")
        return None
    shell.set_next_input(code, replace=False)
    return code
