"""The notebook as a document: read it whole or one cell, propose cell edits, run a cell.

One module: the three tools share one reading of the notebook (the live model or the saved
file, cells found by id or index), so what the model reads is what it edits and runs.

Three tools share one reading of the notebook:

* ``notebook`` with ``action: "read"`` (in :mod:`.notebook`) gives the cells in order — index,
  id, type, execution count, source and a size-capped summary of the outputs — or one cell
  (``cell``: its id or index). It asks the ``read`` permission (allowed by default).
* ``notebook_edit`` proposes edits (``insert`` / ``replace`` / ``delete``, code or Markdown,
  several in one call). It asks like ``edit`` does, for the notebook's path relative to the
  session directory: the question is the review itself — the JupyterLab extension shows each
  change in place as a diff with Accept / Reject (with feedback) and Accept all, and applies
  the accepted ones to the open notebook model (never to the ``.ipynb`` on the disk), so the
  notebook's own undo takes them back. When a rule allows ``edit`` for the notebook, the
  edits are applied without waiting, and still shown. A rule that denies it denies the call.
* ``notebook_run`` runs a cell's current source (asks like ``python``; the approval shows the
  cell) through the ``python`` tool's execution path and returns its outputs; the cell itself
  is not re-executed by the front end, its outputs stay as they were (the transcript names
  the cell that ran).

Where the live notebook comes from: the extension answers on the kernel's stdin channel
(:mod:`.frontend`). Without it, reading falls back to the saved ``.ipynb`` the kernel serves
(``__session__``, set by ipykernel from the server's ``JPY_SESSION_NAME``), said in one line;
editing and running then fail with one line naming the fallback (``%%agent -c`` puts the
answer's code into the next cell for the user to run).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import ToolFailure
from . import frontend
from .base import ToolContext, ToolResult
from .python import PythonTool

MAX_SOURCE_CHARS = 8_000  # per cell, shown to the model
MAX_OUTPUT_CHARS = 1_500  # per cell, the outputs' summary
MAX_DOCUMENT_CHARS = 60_000  # the whole notebook as the model reads it
MAX_DOCUMENT_LINES = 1_500  # … and its lines (under the tools' 2,000-line truncation)
CELL_LINES = 60  # lines of one cell's source in the whole notebook (one cell read: all)
MAX_EDITS = 20  # per notebook_edit call
MAX_EDIT_SOURCE = 100_000  # characters of one proposed cell
CELL_TYPES = ("code", "markdown")
OPS = ("insert", "replace", "delete")
SAVED_NOTE = "(the saved {name} on the disk: the JupyterLab extension did not answer — {why})"


# -- where the notebook is -----------------------------------------------------------------


def notebook_path(shell: Any) -> str | None:
    """The ``.ipynb`` this kernel serves (JupyterLab's ``__session__``), or ``None``."""
    namespace = getattr(shell, "user_ns", None)
    path = namespace.get("__session__") if isinstance(namespace, dict) else None
    path = path or os.environ.get("JPY_SESSION_NAME")
    return str(path) if path and str(path).endswith(".ipynb") else None


def edit_pattern(directory: str) -> str:
    """What an edit of the open notebook asks ``edit`` for: its path relative to ``directory``
    (the server's ``JPY_SESSION_NAME``), ``notebook.ipynb`` when the kernel does not know it."""
    path = os.environ.get("JPY_SESSION_NAME") or ""
    if not path.endswith(".ipynb"):
        return "notebook.ipynb"
    full = os.path.realpath(os.path.join(directory, path))
    base = os.path.realpath(directory)
    return os.path.relpath(full, base) if full.startswith(base + os.sep) else full


# -- reading ----------------------------------------------------------------------------------


def read_cells(shell: Any) -> tuple[list[dict], str]:
    """The notebook's cells (``{id, cell_type, source, execution_count, outputs}``, outputs
    already summarised as text) and a note on where they came from (``""``: the live model)."""
    try:
        answer = frontend.ask(shell, {"action": "read"}, "The agent reads this notebook")
        cells = answer.get("cells")
        if not isinstance(cells, list):
            raise ToolFailure("notebook: the extension's answer has no cells")
        return [_cell(c) for c in cells if isinstance(c, Mapping)], ""
    except frontend.Unavailable as err:
        why = str(err)
    path = notebook_path(shell)
    if path is None:
        raise ToolFailure(
            f"notebook: no notebook to read — {why}, and the kernel does not know its "
            "notebook file (__session__ is not set)"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as err:
        raise ToolFailure(f"notebook: cannot read {path} ({type(err).__name__}) — {why}") from None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise ToolFailure(f"notebook: {path} is not a notebook (no cells)")
    note = SAVED_NOTE.format(name=os.path.basename(path), why=why)
    return [_cell(_saved(c)) for c in cells if isinstance(c, Mapping)], note


def _saved(cell: Mapping) -> dict:
    """A cell of a saved ``.ipynb`` as the extension sends one (outputs summarised)."""
    return {
        "id": cell.get("id"),
        "cell_type": cell.get("cell_type"),
        "source": cell.get("source"),
        "execution_count": cell.get("execution_count"),
        "outputs": output_text(cell.get("outputs") or []),
    }


def _cell(cell: Mapping) -> dict:
    source = cell.get("source")
    if isinstance(source, list):
        source = "".join(str(s) for s in source)
    outputs = cell.get("outputs")
    if isinstance(outputs, list):
        outputs = output_text(outputs)
    count = cell.get("execution_count")
    return {
        "id": str(cell.get("id") or ""),
        "cell_type": str(cell.get("cell_type") or "code"),
        "source": str(source or ""),
        "execution_count": count if isinstance(count, int) else None,
        "outputs": _cap(str(outputs or ""), MAX_OUTPUT_CHARS),
    }


def output_text(outputs: Sequence[Any]) -> str:
    """Cell outputs (nbformat) as short text: streams and ``text/plain`` as written, errors as
    ``Name: message``, other data by MIME type and size; capped."""
    lines: list[str] = []
    for output in outputs[:50]:
        if not isinstance(output, Mapping):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            lines.append(_text(output.get("text")))
        elif kind == "error":
            lines.append(f"{output.get('ename')}: {output.get('evalue')}")
        elif kind in ("execute_result", "display_data"):
            raw_data = output.get("data")
            data: Mapping[str, Any] = raw_data if isinstance(raw_data, Mapping) else {}
            if "text/plain" in data:
                lines.append(_text(data["text/plain"]))
            others = [m for m in data if m != "text/plain"]
            # the extension sends big values as their size (jsa_sizes), not the value
            raw_sizes = output.get("jsa_sizes")
            known: Mapping[str, Any] = raw_sizes if isinstance(raw_sizes, Mapping) else {}
            if others:
                sizes = ", ".join(
                    f"{m} ({int(known.get(m) or len(_text(data[m]))):,} chars)" for m in others[:5]
                )
                lines.append(f"[{sizes}]")
        if sum(len(line) for line in lines) > MAX_OUTPUT_CHARS:
            break
    return _cap("\n".join(line.rstrip("\n") for line in lines), MAX_OUTPUT_CHARS)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)[:MAX_OUTPUT_CHARS]


def find(cells: Sequence[dict], ref: Any) -> int:
    """The index of the cell ``ref`` names: its id, or its index (``3``, ``"3"``, ``-1``)."""
    text = str(ref).strip()
    for index, cell in enumerate(cells):
        if text and cell["id"] == text:
            return index
    # an index is ASCII digits with an optional minus, exactly what the extension takes (its
    # approval shows the cell that would run): Python's int() would also take "+1", "1_0"
    # and other scripts' digits, and run a cell the question could not show
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ToolFailure(
            f"notebook: no cell {text!r} — give a cell id or index (0–{len(cells) - 1})"
        )
    index = int(text)
    if -len(cells) <= index < len(cells):
        return index % len(cells)
    raise ToolFailure(f"notebook: no cell {index} — the notebook has {len(cells)} cells")


def describe(cells: Sequence[dict], note: str, only: int | None = None) -> str:
    """The notebook (or cell ``only``) as the model reads it."""
    chosen = range(len(cells)) if only is None else [only]
    blocks = [note] if note else []
    blocks.append(f"{len(cells)} cells" if only is None else f"cell {only} of {len(cells)}")
    used = lines = 0
    for index in chosen:
        cell = cells[index]
        count = cell["execution_count"]
        ran = f", In [{count}]" if count is not None else ""
        head = f"--- cell {index} · id {cell['id']} · {cell['cell_type']}{ran}"
        source, output = _cap(cell["source"], MAX_SOURCE_CHARS), cell["outputs"]
        if only is None:  # the whole notebook: each cell's first lines (one cell: all of it)
            source, output = _head(source, CELL_LINES), _head(output, CELL_LINES // 3)
        parts = [head, source]
        if output:
            parts += ["--- output", output]
        block = "\n".join(parts)
        used += len(block)
        lines += block.count("\n") + 1
        if (used > MAX_DOCUMENT_CHARS or lines > MAX_DOCUMENT_LINES) and only is None:
            blocks.append(
                f"… {len(cells) - index} more cells not shown (the notebook is long): "
                "read them one at a time with cell"
            )
            break
        blocks.append(block)
    return "\n".join(blocks)


def _head(text: str, lines: int) -> str:
    kept = text.split("\n")
    if len(kept) <= lines:
        return text
    return "\n".join(kept[:lines]) + f"\n… [{len(kept) - lines:,} more lines: read this cell]"


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"


def read(shell: Any, ref: Any = None) -> ToolResult:
    """``notebook`` ``action: "read"``: the whole notebook, or the cell ``ref``."""
    cells, note = read_cells(shell)
    if not cells:
        return ToolResult(
            output=(note + "\n" if note else "") + "The notebook has no cells.",
            title="notebook (0 cells)",
            metadata={"cells": 0},
        )
    only = None if ref is None or str(ref) == "" else find(cells, ref)
    title = f"notebook ({len(cells)} cells)" if only is None else f"cell {only}"
    metadata = {"cells": len(cells), "saved": bool(note)}
    return ToolResult(output=describe(cells, note, only), title=title, metadata=metadata)


# -- editing ----------------------------------------------------------------------------------


def check_edits(edits: Any) -> list[dict]:
    """The proposed edits, checked: ``op``, ``cell`` (the target; for ``insert`` the cell to
    insert after, ``-1``/absent: at the end, ``"start"``: first), ``cell_type``, ``source``."""
    if not isinstance(edits, list) or not edits:
        raise ToolFailure("notebook_edit: edits must be a non-empty list")
    if len(edits) > MAX_EDITS:
        raise ToolFailure(f"notebook_edit: at most {MAX_EDITS} edits in one call")
    out = []
    for number, edit in enumerate(edits):
        if not isinstance(edit, Mapping):
            raise ToolFailure(f"notebook_edit: edit {number} is not an object")
        op = str(edit.get("op") or "")
        if op not in OPS:
            raise ToolFailure(f"notebook_edit: edit {number}: op must be one of {', '.join(OPS)}")
        cell_type = str(edit.get("cell_type") or "code")
        if cell_type not in CELL_TYPES:
            raise ToolFailure(f"notebook_edit: edit {number}: cell_type is code or markdown")
        source = edit.get("source")
        if op != "delete" and not isinstance(source, str):
            raise ToolFailure(f"notebook_edit: edit {number}: {op} needs the cell's source")
        if isinstance(source, str) and len(source) > MAX_EDIT_SOURCE:
            raise ToolFailure(f"notebook_edit: edit {number}: source over {MAX_EDIT_SOURCE:,}")
        ref = edit.get("cell")
        if op != "insert" and (ref is None or str(ref).strip() == ""):
            raise ToolFailure(f"notebook_edit: edit {number}: {op} needs the target cell")
        item: dict[str, Any] = {"op": op, "cell_type": cell_type}
        item["cell"] = None if ref is None else str(ref)
        if op != "delete":
            item["source"] = source
        out.append(item)
    return out


class NotebookEditTool:
    name = "notebook_edit"
    description = (
        "Propose edits to the open notebook's cells: insert, replace or delete code or Markdown "
        "cells (several in one call). The user reviews each as a diff and accepts or rejects "
        "it (with feedback); the result says which. cell: the target's id or index (read the "
        "notebook first); for insert, the cell to insert after ('start' for the top, absent "
        "for the end). Edits never run a cell: use notebook_run for that."
    )
    parameters = {
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": list(OPS)},
                        "cell": {"type": "string", "description": "cell id or index"},
                        "cell_type": {"type": "string", "enum": list(CELL_TYPES)},
                        "source": {"type": "string", "description": "the new cell's source"},
                    },
                    "required": ["op"],
                },
            },
        },
        "required": ["edits"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        edits = check_edits(args.get("edits"))
        decide = ctx.decide or (lambda permission, pattern: "ask")
        pattern = edit_pattern(str(ctx.directory))
        said = decide("edit", pattern)
        if said == "deny":
            raise ToolFailure(f"notebook_edit: the user's rules deny edit {pattern!r}")
        allowed = said == "allow"
        why = frontend.front_end(ctx.shell)
        if why:
            raise ToolFailure(
                f"notebook_edit: this front end cannot apply edits — {why}; give the code in "
                "your answer as a ```python block instead (%%agent -c puts it in the next cell)"
            )
        verb = "applies" if allowed else "proposes"
        answer = frontend.ask(
            ctx.shell,
            {"action": "edit", "edits": edits, "allowed": allowed},
            f"The agent {verb} {len(edits)} notebook edit{'s' * (len(edits) != 1)}",
        )
        return edit_result(edits, answer.get("results"), allowed)


def edit_result(edits: list[dict], results: Any, allowed: bool) -> ToolResult:
    """What the model reads of the review: each edit accepted or rejected, with feedback."""
    results = results if isinstance(results, list) else []
    lines, accepted = [], 0
    for number, edit in enumerate(edits):
        got = (
            results[number]
            if number < len(results) and isinstance(results[number], Mapping)
            else {}
        )
        status = str(got.get("status") or "rejected")
        target = f" cell {edit['cell']}" if edit.get("cell") is not None else " at the end"
        line = f"edit {number} ({edit['op']}{target}): {status}"
        if got.get("cell_id"):
            line += f" — now cell id {got['cell_id']}"
        if got.get("feedback"):
            line += f" — the user says: {str(got['feedback'])[:2000]}"
        if got.get("error"):
            line += f" — {str(got['error'])[:300]}"
        accepted += status == "accepted"
        lines.append(line)
    how = "applied (a rule allows edits)" if allowed else "reviewed by the user"
    head = f"{accepted} of {len(edits)} edits accepted, {how}; none of them ran."
    return ToolResult(
        output="\n".join([head, *lines]),
        title=f"{accepted}/{len(edits)} edits accepted",
        metadata={"edits": len(edits), "accepted": accepted, "results": results[:MAX_EDITS]},
    )


# -- running ----------------------------------------------------------------------------------


class NotebookRunTool:
    name = "notebook_run"
    description = (
        "Run one cell of the open notebook (its current source, as the notebook shows it) in "
        "the kernel and return its output. Asks the user like the python tool. cell: the "
        "cell's id or index."
    )
    parameters = {
        "type": "object",
        "properties": {"cell": {"type": "string", "description": "cell id or index"}},
        "required": ["cell"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        cells, note = read_cells(ctx.shell)
        if note:
            raise ToolFailure(
                "notebook_run: the live notebook cannot be read — "
                f"{note.strip('()')}; run the code with the python tool instead"
            )
        if not cells:
            raise ToolFailure("notebook_run: the notebook has no cells")
        index = find(cells, args.get("cell"))
        cell = cells[index]
        if cell["cell_type"] != "code":
            raise ToolFailure(f"notebook_run: cell {index} is a {cell['cell_type']} cell")
        source = cell["source"]
        if source.lstrip().startswith(("%%agent", "%agent")):
            raise ToolFailure(f"notebook_run: cell {index} is an agent cell; it is not run")
        # the question named the cell; the rules about python code are about its code: a
        # pattern the user denies (``python "*subprocess*" deny``) stops this run as it stops
        # the python tool
        if ctx.decide is not None and ctx.decide("python", source) == "deny":
            raise ToolFailure(
                f"notebook_run: the user's rules deny python for cell {index}'s code; "
                "it did not run"
            )
        ran = PythonTool().run({"code": source}, ctx)
        metadata = {**ran.metadata, "cell": index, "cell_id": cell["id"], "code": source}
        return ToolResult(
            output=f"ran cell {index} (id {cell['id']}):\n{ran.output}",
            title=f"ran cell {index}",
            metadata=metadata,
        )
