"""Record a notebook's agent turns with the scripted server standing in for a model.

``python -m jupyter_session_agent.testing.record NOTEBOOK [REPLIES]`` executes ``NOTEBOOK`` in a
fresh kernel whose model server is a :class:`~.scripted_server.ScriptedServer` loaded with
``REPLIES`` (a JSON list of replies; default ``<notebook>.replies.json``), with a private
history, and saves the notebook with its outputs. A notebook that runs ``%agent record FILE``
leaves its record next to it (docs/replay.md). The answers are the script's, not a model's:
say so in the notebook.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .scripted_server import ScriptedServer


@contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """``os.environ`` with ``values`` set (None: removed) while the kernel starts and runs."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def record_notebook(
    notebook: str | os.PathLike, replies: Sequence[Any], *, timeout: float = 300.0
) -> Any:
    """Execute ``notebook`` against the scripted server answering ``replies`` in order, save it
    with its outputs and return it (an ``nbformat`` notebook). Every reply must be used."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(notebook)
    nb = nbformat.read(path, as_version=4)
    with (
        ScriptedServer() as server,
        tempfile.TemporaryDirectory(prefix="jsa-record-") as history,
    ):
        server.enqueue(*replies)
        with _environment(
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-scripted-record-not-a-real-key",
            JUPYTER_SESSION_AGENT_DIR=history,
            JUPYTER_SESSION_AGENT_REPLAY=None,
        ):
            client = NotebookClient(
                nb,
                timeout=timeout,
                record_timing=False,
                resources={"metadata": {"path": str(path.parent)}},
            )
            client.execute()
        if server.pending:
            raise RuntimeError(f"{path.name} left {server.pending} scripted replies unused")
    nbformat.write(nb, path)
    return nb


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not 1 <= len(args) <= 2:
        print(
            "usage: python -m jupyter_session_agent.testing.record NOTEBOOK [REPLIES]",
            file=sys.stderr,
        )
        return 2
    notebook = Path(args[0])
    replies = Path(args[1]) if len(args) == 2 else notebook.with_suffix(".replies.json")
    record_notebook(notebook, json.loads(replies.read_text(encoding="utf-8")))
    print(f"recorded {notebook}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
