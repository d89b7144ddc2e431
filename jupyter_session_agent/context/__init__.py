"""Notebook-native context: what a ``%%agent`` prompt can refer to and carry.

- the kernel itself as context (each cell's error, values described for the model) is
  ``tools/kernel.py``, one layer down, since the ``notebook`` tool reads it too.
- :mod:`.markdown` — where the code is in a prompt (fenced blocks and inline code spans: sent
  as typed, neither interpolated nor searched for ``@path`` mentions), and the last python
  block of an answer (``%%agent -c``).
- :mod:`.interpolate` — ``{var}``, ``{var.attr}``, ``{In[n]}``, ``{Out[n]}``, ``{Err[n]}``,
  ``{{``: lookups only (attributes and indexes, as ``str.format_map``), never evaluation.
- :mod:`.attach` — ``-f PATH`` (globs), ``@path`` mentions and ``-a VAR`` as OpenCode's
  ``file`` parts: text inlined (capped), images as image content, PDFs as their text.
- :mod:`.prompt` — :func:`~.prompt.build`: the prompt a cell sends (text, template,
  attachments), checked whole before anything is sent; and the parts it is stored as.

Every problem with the input is a :class:`ContextError`: one line naming the fix, raised
before a session is created or a request sent. Importing this package imports nothing.
"""

from __future__ import annotations

from ..core.errors import UsageError


class ContextError(UsageError):
    """A prompt's notebook context could not be built (a name, a file, a cell): nothing was sent."""


__all__ = ["ContextError"]
