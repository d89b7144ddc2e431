"""Rules files: the project's ``AGENTS.md`` files (its ``CLAUDE.md`` files when it has none)
and the user's global one, added to the system prompt as OpenCode adds them.

Found from the session folder upward to the project root (the first folder holding ``.git``;
without one, the walk stops at the home folder or at ``/``), nearest first: the files of the
first name found in any folder of the walk, never both names (a project that has ``AGENTS.md``
keeps ``CLAUDE.md`` for Claude Code, often a copy of the same rules), then the global
file (``$XDG_CONFIG_HOME/jupyter-session-agent/AGENTS.md``, ``~/.config/…`` by default). Each
is framed as OpenCode frames it (``Instructions from: <path>`` then its text) after the system
prompt. A file is cut at :data:`MAX_CHARS` (the prompt says so in one line); a file that cannot
be read (permission, binary, not UTF-8) is left out with one line; a file that is a symbolic
link leaving the project (the global one: leaving its folder), or to a sensitive file (a
``.env``, a key), is read only where the permission rules let ``read`` read its target without
asking (``core.asks.resolve_path``, the one path resolution of the tools). Only regular files
are read (never a FIFO or a device, which could block the turn), and never a file another user
owns in a folder anyone may write (``/tmp``): it could have been put there for us.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..core.asks import resolve_path
from ..core.sensitive import sensitive_path

NAMES = ("AGENTS.md", "CLAUDE.md")  # the first found in the walk is used, in every folder
MAX_CHARS = 16_000  # per file (about 4,000 tokens): a huge file must not eat the window
CONFIG_ENV = "XDG_CONFIG_HOME"


def config_dir() -> Path:
    """The product's folder of the user's own configuration: the global rules file is there."""
    base = os.environ.get(CONFIG_ENV) or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "jupyter-session-agent"


@dataclass(frozen=True)
class RulesFile:
    """One rules file found: its path, its text as sent (None: not used) and why not, or
    whether it was cut."""

    path: str
    text: str | None
    size: int = 0  # the file's size in bytes
    note: str = ""  # why it was not used, or that it was cut

    @property
    def used(self) -> bool:
        return self.text is not None

    def to_data(self) -> dict:
        return {"path": self.path, "used": self.used, "bytes": self.size, "note": self.note}


@dataclass(frozen=True)
class RulesUsed:
    """The rules files a session's first turn found, as stored (journal kind ``event``, type
    ``rules``; the ``rules_file`` view lists them)."""

    JOURNAL_KIND: ClassVar[str] = "event"
    TYPE: ClassVar[str] = "rules"

    id: str
    session_id: str
    time_created: int
    files: tuple[RulesFile, ...]

    def to_data(self) -> dict:
        return {
            "id": self.id,
            "sessionID": self.session_id,
            "type": self.TYPE,
            "files": [f.to_data() for f in self.files],
            "time": {"created": self.time_created},
        }


def project_folders(directory: str) -> list[Path]:
    """The session folder and its parents up to the project root, nearest first."""
    here = Path(resolve_path("/", directory))
    home = Path(resolve_path("/", os.path.expanduser("~")))
    folders = []
    for folder in (here, *here.parents):
        folders.append(folder)
        if (folder / ".git").exists() or folder == home:
            break
    return folders


def find(directory: str, global_dir: Path | None = None) -> list[tuple[Path, Path]]:
    """(file, the folder it must stay in) of every rules file, in the order they are sent."""
    folders = project_folders(directory)
    root = folders[-1]
    found: list[tuple[Path, Path]] = []
    for name in NAMES:
        found = [(f / name, root) for f in folders if os.path.lexists(f / name)]
        if found:
            break
    glob = (global_dir or config_dir()) / "AGENTS.md"
    if os.path.lexists(glob):
        found.append((glob, glob.parent))
    return found


def load(
    directory: str,
    *,
    may_read: Callable[[str], bool] | None = None,
    global_dir: Path | None = None,
) -> tuple[RulesFile, ...]:
    """The rules files for a session working in ``directory`` (see the module docstring);
    ``may_read(path)``: whether the permission rules let ``read`` read a path without asking."""
    return tuple(_read(path, stay, may_read) for path, stay in find(directory, global_dir))


def _read(path: Path, stay: Path, may_read: Callable[[str], bool] | None) -> RulesFile:
    shown = str(path)
    real = resolve_path(str(path.parent), path.name)
    inside = real == str(stay) or real.startswith(str(stay).rstrip("/") + "/")
    if not inside and (may_read is None or not may_read(real)):
        return RulesFile(
            shown,
            None,
            note=f"a link to {real}, outside {stay}: not used (a rule allowing read of it would)",
        )
    if real != shown and sensitive_path(real) and (may_read is None or not may_read(real)):
        return RulesFile(  # a link to a credential inside the project (.env, a key)
            shown, None, note=f"a link to {real}, a sensitive file: not used (read asks for it)"
        )
    try:  # never blocks: a FIFO or a device is refused before anything is read
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        return RulesFile(shown, None, note=f"cannot be read ({err.strerror or err}): not used")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a folder, a FIFO, a device (/dev/zero, /dev/stdin)
        os.close(fd)
        return RulesFile(shown, None, note="not a regular file: not used")
    with os.fdopen(fd, "rb") as f:
        if _planted(st, path.parent, Path(real).parent):
            return RulesFile(
                shown,
                None,
                note="owned by another user, in a folder or a file anyone may write: not used",
            )
        try:
            data = f.read(MAX_CHARS * 4 + 4)
        except OSError as err:
            return RulesFile(shown, None, note=f"cannot be read ({err.strerror or err}): not used")
        size = st.st_size
    if b"\0" in data:
        return RulesFile(shown, None, note="binary, not text: not used")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(data) - 3 or size <= len(data):  # not a character cut by the read
            return RulesFile(shown, None, note="not UTF-8 text: not used")
        text = data[: err.start].decode("utf-8")
    text = text.removeprefix("\ufeff")  # a byte order mark is not part of the text
    if not text.strip():  # as OpenCode: an empty file adds no block
        return RulesFile(shown, None, size, note="empty: not used")
    if size > len(data) or len(text) > MAX_CHARS:
        return RulesFile(
            shown,
            text[:MAX_CHARS],
            size,
            note=f"cut to its first {MAX_CHARS:,} characters (the file has {size:,} bytes)",
        )
    return RulesFile(shown, text, size)


def _planted(st: os.stat_result, *folders: Path) -> bool:
    """Whether another user (not root) may have put the file there for us: it is theirs, and
    it or a folder holding it (``/tmp``, a shared folder) is writable by anyone."""
    if st.st_uid in (os.getuid(), 0):
        return False
    if st.st_mode & stat.S_IWOTH:
        return True
    for folder in folders:
        try:
            if os.stat(folder).st_mode & stat.S_IWOTH:
                return True
        except OSError:
            return True
    return False


def system_text(files: tuple[RulesFile, ...]) -> str:
    """What the system prompt gains: each file used, as OpenCode frames it; a cut file says so."""
    blocks = []
    for f in files:
        if f.used:
            cut = f"\n[{f.path} was {f.note}]" if f.note else ""
            blocks.append(f"Instructions from: {f.path}\n{f.text}{cut}")
    return "\n\n".join(blocks)


def with_rules(prompt: str, files: tuple[RulesFile, ...]) -> str:
    """``prompt`` followed by the rules files' text (unchanged when none is used)."""
    extra = system_text(files)
    return f"{prompt}\n\n{extra}" if extra else prompt


def line(files: tuple[RulesFile, ...]) -> str:
    """The one line a first turn shows: the files used, and any left out or cut (and why)."""
    used = [f.path for f in files if f.used]
    text = "rules files: " + (", ".join(used) if used else "none used")
    problems = [f"{f.path} {f.note}" for f in files if f.note]
    return text + ("; " + "; ".join(problems) if problems else "")
