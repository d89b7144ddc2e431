"""What the history cannot use, reported once: stray files, unreadable rows, failed writes.

A bad file (a folder named ``*.jsonl``, a Parquet file cut short by an interrupted copy, a file
DuckDB cannot read) is left out of every read; a row that cannot be decoded is left out of the
session it belongs to (a part of a type this version does not know is kept, see
``messages.UnknownPart``). Each is reported by ONE :class:`HistoryWarning` per process, which
names the file or row and the fix, and everything else stays readable and writable.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from pathlib import Path

from ..core.errors import AgentError


class HistoryWarning(UserWarning):
    """Something in the history folder was left out; the rest of the history is read."""


class HistoryWriteError(AgentError):
    """The journal could not be written (disk full, read-only folder); nothing was lost in
    memory: the unsaved rows stay buffered and the next successful flush writes them."""


class BadFile(Exception):
    """A file of the history that a read cannot use: ``path`` is left out, ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason


def one_line(err: BaseException) -> str:
    """The first line of an error's text (its type's name if it has none; a corrupt file's
    error text may not even decode)."""
    try:
        text = str(err)
    except Exception:  # noqa: BLE001
        text = ""
    return (text.strip().splitlines() or [type(err).__name__])[0]


_reported: set = set()
_lock = threading.Lock()


def report(key, message: str) -> None:
    """Warn once per process for ``key``."""
    with _lock:
        if key in _reported:
            return
        _reported.add(key)
    warnings.warn(message, HistoryWarning, stacklevel=3)


def report_file(root: Path, path: str, reason: str) -> None:
    """One warning for a file of the history left out of every read."""
    name = os.path.relpath(path, root)
    report(
        ("file", path, reason),
        f"history: skipped {name} ({reason}) — move it out of {root} to silence this; "
        "the rest of the history is read",
    )


def report_row(kind: str, id: str, session_id: str | None, reason: str) -> None:
    """One warning for a row left out of what it belongs to."""
    where = f" of session {session_id}" if session_id and session_id != id else ""
    report(
        ("row", id, reason),
        f"history: skipped {kind} {id}{where} ({reason}) — it was written by a newer version "
        "or edited by hand; it stays in the history unchanged",
    )


def write_error(err: OSError, history: Path) -> HistoryWriteError:
    """The one line for a failed journal write, naming the fix."""
    what = os.strerror(err.errno) if err.errno else str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free disk space on the drive of {history}"
    elif err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = (
            f"make {history} writable, or move the history with "
            "JUPYTER_SESSION_AGENT_DIR / %config AgentMagics.data_dir"
        )
    else:
        fix = f"check the drive of {history}"
    return HistoryWriteError(
        f"the history could not be saved ({what}) — {fix}; the unsaved "
        "work is kept in memory and written by the next successful save"
    )
