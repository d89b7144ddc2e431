"""Record and replay (docs/replay.md): ``%agent record FILE``, ``%agent replay [FILE|on|off]``."""

from __future__ import annotations

from pathlib import Path

from ...core.errors import UsageError
from ...session.record import Replayer
from ...session.replay import NotebookRecord
from . import subcommand


def records(magics):
    """The magics' ``session.replay.NotebookRecord`` (made on first use)."""
    magics.records = magics.records or NotebookRecord()
    return magics.records


@subcommand(
    "record",
    "record FILE",
    "keep this notebook's agent turns in FILE (rewritten after each %%agent cell); replayed "
    "from it when replay is on",
)
def record(magics, args, raw):
    if len(args) != 1:
        raise UsageError("usage: %agent record FILE — e.g. %agent record analysis.replay.json")
    path = Path(args[0]).expanduser().absolute()
    if path.is_dir():
        raise UsageError(
            f"{path} is a folder — give a file name, e.g. {path / 'notebook.replay.json'}"
        )
    records(magics).name(path)
    if magics.settings().replay:
        print(f"replay is on: %%agent cells answer from {path.name}, no model is called")
    else:
        print(f"recording: each %%agent cell's turn is written to {path.name}")


@subcommand(
    "replay",
    "replay [FILE|on|off]",
    "answer %%agent cells from a record instead of a model (FILE, or on: the %agent record "
    "file); off: call the model again",
)
def replay(magics, args, raw):
    if len(args) > 1:
        raise UsageError("usage: %agent replay [FILE|on|off] — one file at most")
    if args:
        word = args[0]
        opened = None  # a fresh match: the record's first session is next
        if word.lower() == "off":
            magics.replay = "off"
        elif word.lower() == "on":
            magics.replay = "on"
        else:
            path = Path(word).expanduser().absolute()
            opened = Replayer.open(path)  # a missing or broken record is one line now
            magics.replay = str(path)
        records(magics).replayer = opened  # read once, matched from the record's start
    mode = magics.settings().replay
    source = records(magics).path if mode == "on" else Path(mode) if mode else None
    if not mode:
        print("replay is off: %%agent cells call the model")
    elif source is None:
        print("replay is on, but no record is named yet — %agent record FILE names it")
    else:
        print(f"replay is on: %%agent cells answer from {source.name}, no model is called")
