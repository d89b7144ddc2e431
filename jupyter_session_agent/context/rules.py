"""Rules files: the project's ``AGENTS.md`` (``CLAUDE.md`` where a folder has none) and the
user's global one, added to the system prompt as OpenCode adds them.

Found from the session folder upward to the project root (the first folder holding ``.git``;
without one, the walk stops at the home folder or at ``/``), nearest first, then the global
file (``$XDG_CONFIG_HOME/jupyter-session-agent/AGENTS.md``, ``~/.config/…`` by default). Each
is framed as OpenCode frames it (``Instructions from: <path>`` then its text) after the system
prompt. A file is cut at :data:`MAX_CHARS` (the prompt says so in one line); a file that cannot
be read (permission, binary, not UTF-8) is left out with one line; a file that is a symbolic
link leaving the project (the global one: leaving its folder) is read only where the
permission rules let ``read`` read its target without asking (``core.asks.resolve_path``, the
one path resolution of the tools).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..core.asks import resolve_path

NAMES = ("AGENTS.md", "CLAUDE.md")  # in a folder, the first that exists is used
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
    found = []
    for folder in folders:
        for name in NAMES:
            path = folder / name
            if os.path.lexists(path):
                found.append((path, root))
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
    try:
        with open(real, "rb") as f:
            data = f.read(MAX_CHARS * 4 + 4)
            size = os.fstat(f.fileno()).st_size
    except OSError as err:
        return RulesFile(shown, None, note=f"cannot be read ({err.strerror or err}): not used")
    if b"\0" in data:
        return RulesFile(shown, None, note="binary, not text: not used")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(data) - 3 or size <= len(data):  # not a character cut by the read
            return RulesFile(shown, None, note="not UTF-8 text: not used")
        text = data[: err.start].decode("utf-8")
    if size > len(data) or len(text) > MAX_CHARS:
        return RulesFile(
            shown,
            text[:MAX_CHARS],
            size,
            note=f"cut to its first {MAX_CHARS:,} characters (the file has {size:,} bytes)",
        )
    return RulesFile(shown, text, size)


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
