"""The kernel as context: its cells (source, output, error) and its variables.

One module: the kernel as the model reads it, answered together by the ``notebook`` tool and
held to one constraint (standard library only, every read defensive).

IPython keeps each cell's source (``In[n]``) and displayed result (``Out[n]``) but not its
error. :class:`CellLog` keeps that: ``install(shell)`` (called at ``%load_ext``) registers a
``post_run_cell`` hook that records, for every numbered cell that raised, the exception's
class, message and traceback as plain text (no colours; IPython's own frames left out; cell
file names shown as ``Cell In[n]``). ``uninstall`` removes it. :func:`cell_log` finds the log
of a shell.

:func:`describe` is how one value reads to the model (``-a VAR`` and the ``notebook`` tool):
a DataFrame as its schema, shape and first rows, an array as its shape and dtype, anything
else as a capped ``repr``. :func:`variables` lists the user's variables (name, type, shape,
dtypes, size, short repr), leaving out modules, functions, classes, private names and
IPython's own (``In``, ``Out``, ``_``, ``_i3``, ``exit`` …). Every value is read defensively:
a ``repr`` or property that raises shows as ``<unavailable: …>``, never breaks a call.

Standard library only (pandas and numpy values are recognised by their class, never
imported), so ``%load_ext`` stays cheap.
"""

from __future__ import annotations

import ast
import csv
import inspect
import io
import json
import os
import re
import reprlib
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.codeaction import request_stems, stem
from ..core.redact import before_cut

MAX_ERRORS = 500  # cells whose error is kept (the oldest are forgotten first)
MAX_TRACEBACK_CHARS = 20_000  # per error
MAX_REPR_CHARS = 80  # the short repr of a variables listing
MAX_VALUE_CHARS = 20_000  # what describe() gives for one value
HEAD_ROWS = 5  # first rows of a DataFrame
MAX_COLUMNS = 50  # columns listed in a DataFrame's schema

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_IPYTHON_INPUT = re.compile(r"<ipython-input-(\d+)-[0-9a-f]+>")


# --------------------------------------------------------------------------
# cells


@dataclass(frozen=True)
class CellError:
    """What cell ``number`` raised: class, message, traceback (plain text) and its source."""

    number: int
    name: str
    message: str
    traceback: str
    source: str

    @property
    def text(self) -> str:
        """What ``{Err[n]}`` gives: the traceback (it ends with ``Name: message``)."""
        return self.traceback


class CellLog:
    """The errors of a shell's numbered cells, recorded as they happen (see the module doc)."""

    def __init__(self, shell: Any):
        self.shell = shell
        self._errors: dict[int, CellError] = {}
        self._lock = threading.Lock()
        self._running = 0  # cells running now (pre_run_cell seen, post_run_cell not yet)

    # -- recording -------------------------------------------------------------

    def pre_run_cell(self, info: Any = None) -> None:
        """IPython's ``pre_run_cell`` event: a cell starts (its input is already in ``In``)."""
        self._running += 1

    def post_run_cell(self, result: Any) -> None:
        """IPython's ``post_run_cell`` event: keep the error of a numbered cell that raised."""
        self._running = max(0, self._running - 1)
        try:
            error = result.error_before_exec or result.error_in_exec
            number = result.execution_count
            if error is None or not isinstance(number, int):
                return
            source = getattr(getattr(result, "info", None), "raw_cell", None) or ""
            self.record(number, error, source)
        except Exception:  # a hook must never break the user's cell
            pass

    def record(self, number: int, error: BaseException, source: str = "") -> CellError:
        entry = CellError(
            number=number,
            name=type(error).__name__,
            message=_message(error),
            traceback=self._format(error),
            source=source or self.source(number) or "",
        )
        with self._lock:
            self._errors[number] = entry
            while len(self._errors) > MAX_ERRORS:
                self._errors.pop(min(self._errors))
        return entry

    def _format(self, error: BaseException) -> str:
        render = getattr(error, "_render_traceback_", None)
        if callable(render):  # the package's one-line errors: the line the user saw
            try:
                return _ANSI.sub("", "\n".join(render()))[:MAX_TRACEBACK_CHARS]
            except Exception:
                pass
        try:
            exc = traceback.TracebackException.from_exception(error)
            _drop_ipython_frames(exc)
            text = "".join(exc.format())
        except Exception:
            text = f"{type(error).__name__}: {_message(error)}"
        text = _IPYTHON_INPUT.sub(lambda m: f"Cell In[{m.group(1)}]", _ANSI.sub("", text))
        names = getattr(getattr(self.shell, "compile", None), "_filename_map", None)
        if isinstance(names, Mapping):  # ipykernel's cell files (/tmp/ipykernel_…/….py)
            for filename, number in list(names.items()):
                if isinstance(filename, str) and filename in text:
                    text = text.replace(f'"{filename}"', f'"Cell In[{number}]"')
        if len(text) > MAX_TRACEBACK_CHARS:
            keep = MAX_TRACEBACK_CHARS // 2
            text = f"{text[:keep]}\n… [{len(text) - 2 * keep:,} characters cut] …\n{text[-keep:]}"
        return text

    # -- reading ------------------------------------------------------------------

    def error(self, number: int) -> CellError | None:
        with self._lock:
            return self._errors.get(number)

    def errors(self) -> list[CellError]:
        """Every recorded error, oldest first."""
        with self._lock:
            return [self._errors[n] for n in sorted(self._errors)]

    def last_error(self) -> CellError | None:
        """The newest recorded error (only finished cells have one)."""
        with self._lock:
            return self._errors[max(self._errors)] if self._errors else None

    @property
    def current(self) -> int | None:
        """The number of the cell running now: the newest input while a cell runs (IPython
        stores a cell's input before running it), ``None`` when called outside a cell."""
        return len(self._inputs()) - 1 if self._running else None

    def numbers(self) -> list[int]:
        """The numbers of the cells that ran before the running one (1 …)."""
        last = len(self._inputs()) - (2 if self._running else 1)
        return list(range(1, last + 1))

    def source(self, number: int) -> str | None:
        inputs = self._inputs()
        return inputs[number] if 0 < number < len(inputs) else None

    def output(self, number: int) -> tuple[bool, Any]:
        """``(True, Out[n])`` when cell ``number`` displayed a result, else ``(False, None)``."""
        outputs = getattr(self.shell, "user_ns", {}).get("Out")
        if isinstance(outputs, Mapping) and number in outputs:
            return True, outputs[number]
        return False, None

    def _inputs(self) -> list[str]:
        inputs = getattr(getattr(self.shell, "history_manager", None), "input_hist_raw", None)
        if not isinstance(inputs, list):
            inputs = getattr(self.shell, "user_ns", {}).get("In")
        return inputs if isinstance(inputs, list) else []

    def missing_cell(self, number: int) -> str:
        """Why cell ``number`` cannot be read, in words with the cells that can."""
        ran = self.numbers()
        span = f"cells 1–{ran[-1]} ran" if ran else "no cell has run yet"
        return f"there is no cell {number} in this kernel ({span})"


class ErrorTable(Mapping):
    """``Err`` for interpolation: cell number → its error text (``{Err[3]}``)."""

    def __init__(self, log: CellLog):
        self.log = log

    def __getitem__(self, number: Any) -> str:
        entry = self.log.error(number) if isinstance(number, int) else None
        if entry is None:
            raise KeyError(number)
        return entry.text

    def __iter__(self):
        return iter([e.number for e in self.log.errors()])

    def __len__(self) -> int:
        return len(self.log.errors())


_LOGS: weakref.WeakKeyDictionary[Any, CellLog] = weakref.WeakKeyDictionary()


def install(shell: Any) -> CellLog:
    """Record ``shell``'s cell errors from now on (idempotent); the shell's :class:`CellLog`."""
    log = _LOGS.get(shell)
    if log is None:
        log = _LOGS[shell] = CellLog(shell)
    events = getattr(shell, "events", None)
    if events is not None:
        for name in ("pre_run_cell", "post_run_cell"):
            if getattr(log, name) not in events.callbacks.get(name, []):
                events.register(name, getattr(log, name))
    return log


def uninstall(shell: Any) -> None:
    """Stop recording (the errors recorded so far stay readable while the shell lives)."""
    log = _LOGS.get(shell)
    events = getattr(shell, "events", None)
    if log is not None and events is not None:
        for name in ("pre_run_cell", "post_run_cell"):
            try:
                events.unregister(name, getattr(log, name))
            except ValueError:
                pass
        log._running = 0


def cell_log(shell: Any) -> CellLog:
    """The shell's :class:`CellLog` (an empty one when the extension is not loaded)."""
    log = _LOGS.get(shell) if shell is not None else None
    if log is None:
        log = CellLog(shell)
        if shell is not None:
            _LOGS[shell] = log
    return log


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return "<the message could not be read>"


def _drop_ipython_frames(exc: traceback.TracebackException, depth: int = 0) -> None:
    """Leave IPython's own frames (``run_code``, ``run_cell_async`` …) out of every exception
    of the chain: the user's frames are what explains the error."""
    file = getattr(sys.modules.get("IPython"), "__file__", None)
    root = os.path.dirname(os.path.abspath(file)) + os.sep if file else None
    if root:
        kept = [f for f in exc.stack if not (f.filename or "").startswith(root)]
        exc.stack = traceback.StackSummary.from_list(kept)
    if depth < 20:
        for nested in (exc.__cause__, exc.__context__):
            if nested is not None:
                _drop_ipython_frames(nested, depth + 1)


# --------------------------------------------------------------------------
# values


def human(size: int) -> str:
    """``1,234 bytes``, ``12.3 KB``, ``200.0 MB``."""
    if size < 1024:
        return f"{size:,} bytes"
    value, units = size / 1024, ["KB", "MB", "GB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f} {units[0]}"


_SHORT = reprlib.Repr()
_SHORT.maxstring = MAX_REPR_CHARS
_SHORT.maxother = MAX_REPR_CHARS
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxdict = 6


def kind(value: Any) -> str:
    """``DataFrame``, ``ndarray``, ``Figure``, ``Image`` … (the class name; ``module.Name`` for
    classes outside builtins, pandas, numpy, matplotlib and PIL)."""
    cls = type(value)
    module = cls.__module__.split(".")[0]
    if module in ("builtins", "pandas", "numpy", "matplotlib", "PIL"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def is_dataframe(value: Any) -> bool:
    return _module(value) == "pandas" and type(value).__name__ == "DataFrame"


def is_series(value: Any) -> bool:
    return _module(value) == "pandas" and type(value).__name__ == "Series"


def is_figure(value: Any) -> bool:
    """A matplotlib ``Figure`` (or an ``Axes``, which names its figure)."""
    return _module(value) == "matplotlib" and callable(getattr(_figure_of(value), "savefig", None))


def is_pil_image(value: Any) -> bool:
    return (
        _module(value) == "PIL"
        and callable(getattr(value, "save", None))
        and hasattr(value, "mode")
    )


def _figure_of(value: Any) -> Any:
    return value if hasattr(value, "savefig") else getattr(value, "figure", None)


def _module(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def png(value: Any) -> bytes:
    """A matplotlib figure (or axes) or a PIL image as PNG bytes."""
    buffer = io.BytesIO()
    if is_figure(value):
        _figure_of(value).savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    else:
        image = value
        if getattr(image, "mode", "RGB") not in ("1", "L", "LA", "I", "P", "RGB", "RGBA"):
            image = image.convert("RGBA")
        image.save(buffer, format="PNG")
    return buffer.getvalue()


def shape(value: Any) -> str:
    """``1,000 × 5`` for anything with a ``shape``; ``len 3`` for sized containers; ``""``."""
    got = _safe(lambda: getattr(value, "shape", None), None)
    if isinstance(got, tuple) and all(isinstance(n, int) for n in got):
        return " × ".join(f"{n:,}" for n in got) or "()"
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range)):
        return f"len {len(value):,}"
    return ""


def dtypes(value: Any, limit: int = 8) -> str:
    """A DataFrame's column dtypes (``a: int64, b: object``), an array's or series' dtype."""
    if is_dataframe(value):
        items = _safe(lambda: list(value.dtypes.items()), [])
        text = ", ".join(f"{c}: {d}" for c, d in items[:limit])
        return text + (f", … {len(items) - limit} more" if len(items) > limit else "")
    got = _safe(lambda: getattr(value, "dtype", None), None)
    return str(got) if got is not None else ""


def size(value: Any) -> int:
    """Bytes of memory: a DataFrame's or series' ``memory_usage`` (deep for object columns is
    not computed: it is slow), an array's ``nbytes``, else ``sys.getsizeof``."""
    if is_dataframe(value) or is_series(value):
        got = _safe(
            lambda: (
                int(value.memory_usage(index=True, deep=False).sum())
                if is_dataframe(value)
                else int(value.memory_usage(index=True, deep=False))
            ),
            0,
        )
        return got
    nbytes = _safe(lambda: getattr(value, "nbytes", None), None)
    if isinstance(nbytes, int):
        return nbytes
    return _safe(lambda: sys.getsizeof(value), 0)


def short_repr(value: Any, limit: int = MAX_REPR_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    if is_dataframe(value):
        columns = _safe(lambda: [str(c) for c in value.columns], [])
        text = "columns " + ", ".join(columns)
    else:
        text = _safe(lambda: _SHORT.repr(value), None)
    if text is None:
        text = "<repr unavailable>"
    text = before_cut(" ".join(str(text).split()), limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(name: str, value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """How ``value`` (called ``name`` in the notebook) reads to the model, at most ``limit``
    characters: a DataFrame's shape, schema (dtype and non-null count per column) and first
    rows; a series' or array's shape, dtype and head; anything else its ``repr``."""
    if is_dataframe(value):
        text = _describe_frame(name, value)
    elif is_series(value):
        head = _safe(lambda: value.head(HEAD_ROWS).to_string(), "<unavailable>")
        text = (
            f"Series {name}: {shape(value)} values, dtype {dtypes(value)}, "
            f"name {_safe(lambda: value.name, None)!r}\nFirst {HEAD_ROWS}:\n{head}"
        )
    elif _module(value) == "numpy" and type(value).__name__ == "ndarray":
        body = _safe(lambda: repr(value), "<repr unavailable>")
        text = f"ndarray {name}: shape {shape(value)}, dtype {dtypes(value)}\n{body}"
    else:
        body = _safe(lambda: repr(value), None)
        body = "<repr unavailable>" if body is None else body
        where = f", {shape(value)}" if shape(value) else ""
        text = f"{kind(value)} {name}{where}:\n{body}"
    return _cap(text, limit)


def _describe_frame(name: str, frame: Any) -> str:
    rows, cols = _safe(lambda: frame.shape, (0, 0))
    lines = [f"DataFrame {name}: {rows:,} rows × {cols:,} columns"]
    counts = _safe(lambda: frame.count(), None)
    items = _safe(lambda: list(frame.dtypes.items()), [])
    lines.append("Schema (column: dtype, non-null):")
    for column, dtype in items[:MAX_COLUMNS]:
        count = _safe(lambda c=column: int(counts[c]), None) if counts is not None else None
        nonnull = f", {count:,} non-null" if count is not None else ""
        lines.append(f"  {column}: {dtype}{nonnull}")
    if len(items) > MAX_COLUMNS:
        lines.append(f"  … {len(items) - MAX_COLUMNS} more columns")
    head = _safe(
        lambda: frame.head(HEAD_ROWS).to_string(max_cols=MAX_COLUMNS, max_colwidth=60),
        "<unavailable>",
    )
    lines.append(f"First {min(HEAD_ROWS, rows)} rows:\n{head}")
    return "\n".join(lines)


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters cut]"


def _safe(get, default):
    try:
        return get()
    except Exception:
        return default


# IPython's own names in a user namespace (the display hook's _, __, ___, _1, _i, _i3, _ih …).
_IPYTHON_NAMES = re.compile(r"_+|_\d+|_i+|_i\d+|_[iod]h|In|Out|exit|quit|get_ipython|open")


def visible_names(
    namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None
) -> list[str]:
    """The user's variables in ``namespace``: no private names, none of IPython's own, no
    modules, functions, methods or classes (the data a notebook works with)."""
    hidden = hidden or {}
    names = []
    for name, value in list(namespace.items()):
        if not isinstance(name, str) or name.startswith("_") or _IPYTHON_NAMES.fullmatch(name):
            continue
        if name in hidden and hidden[name] is value:
            continue
        if isinstance(
            value,
            (
                types.ModuleType,
                types.FunctionType,
                types.BuiltinFunctionType,
                types.MethodType,
                type,
                types.BuiltinMethodType,
            ),
        ):
            continue
        if callable(value) and type(value).__name__ in (
            "function",
            "builtin_function_or_method",
            "method",
            "partial",
            "cython_function_or_method",
        ):
            continue
        names.append(name)
    return names


def variables(
    namespace: Mapping[str, Any],
    names: Iterable[str] | None = None,
    hidden: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows ``{name, type, shape, dtypes, size, repr}`` for the user's variables (or ``names``)."""
    chosen = list(names) if names is not None else visible_names(namespace, hidden)
    rows = []
    for name in chosen:
        if name not in namespace:
            continue
        value = namespace[name]
        rows.append(
            {
                "name": name,
                "type": kind(value),
                "shape": shape(value),
                "dtypes": dtypes(value),
                "size": size(value),
                "repr": short_repr(value),
            }
        )
    return rows


DESCRIBED = 8  # data variables described in a short system prompt, newest first
NAMED = 40  # other user names after them, by name only


def function_lines(
    namespace: Mapping[str, Any], hidden: Any = None, limit: int = DESCRIBED
) -> list[str]:
    """``discount(price,pct) returns price * (1 - pct / 100)`` for the newest ``limit``
    functions of the notebook whose body is one ``return`` (after a docstring) of at most
    100 characters: what ``f??`` shows, so that a call passes what the function expects (a
    percentage as 25, not 0.25) and a fix sees the line that fails. Others are named by
    :func:`variables_line` with their parameters."""
    if not isinstance(hidden, Mapping):
        hidden = {name: namespace.get(name) for name in hidden or ()}
    out = []
    for name, value in list(namespace.items()):
        if (
            not isinstance(value, types.FunctionType)
            or not isinstance(name, str)
            or name.startswith("_")
            or (name in hidden and hidden[name] is value)
            or getattr(value, "__module__", None) != "__main__"
        ):
            continue
        returns = _safe(lambda v=value: _one_return(inspect.getsource(v)), "")
        if returns:
            out.append(f"{signature(name, value)} returns {returns}")
    return out[-limit:]


def _one_return(source: str) -> str:
    """The expression a function's source returns when its body is that one ``return``."""
    tree = ast.parse(inspect.cleandoc(source) if source.startswith((" ", "\t")) else source)
    func = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return ""
    text = " ".join(ast.unparse(body[0].value).split())
    return text if len(text) <= 100 and ";" not in text else ""


def shell_function_lines(shell: object) -> list[str]:
    """:func:`function_lines` of an IPython shell's user namespace ([] without a shell)."""
    namespace = getattr(shell, "user_ns", None) or {}
    return function_lines(namespace, getattr(shell, "user_ns_hidden", ()))


def shell_variables_line(shell: object, request: str = "") -> str:
    """:func:`variables_line` of an IPython shell's user namespace ("" without a shell)."""
    namespace = getattr(shell, "user_ns", None) or {}
    return variables_line(namespace, getattr(shell, "user_ns_hidden", ()), request=request)


def variables_line(
    namespace: Mapping[str, Any],
    hidden: Any = None,
    limit: int = DESCRIBED,
    names: int = NAMED,
    request: str = "",
) -> str:
    """``df (DataFrame, 4 × 3, columns name: object e.g. 'Ada', age: int64), x (int, 42); also
    f(a,b), y``: the newest ``limit`` data variables described (as :func:`variables` lists
    them; a DataFrame's columns with their dtypes, :func:`columns_text`), and before them the
    older ones ``request`` names (up to ``limit``: the variable asked about is described
    whatever its age), then up to ``names`` other user names (older variables, functions
    with their parameters, classes)."""
    if not isinstance(hidden, Mapping):
        hidden = {name: namespace.get(name) for name in hidden or ()}
    every = visible_names(namespace, hidden)
    words = set(re.findall(r"[A-Za-z_]\w*", request or ""))
    stems = request_stems(request) if request else set()

    def asked(name: str) -> bool:  # named, or a DataFrame whose columns the request names
        if name in words:
            return True
        columns = _safe(lambda: list(namespace[name].columns), []) if stems else []
        return bool(is_dataframe(namespace[name]) and stems & {stem(str(c)) for c in columns})

    data = [n for n in every[:-limit] if asked(n)][-limit:] + every[-limit:]
    described = []
    for row in variables(namespace, data):
        value = namespace[row["name"]]
        facts = [
            row["type"],
            row["shape"],
            columns_text(value) if is_dataframe(value) else row["repr"],
        ]
        described.append(f"{row['name']} ({', '.join(f for f in facts if f)})")
    others = [
        signature(name, value)
        for name, value in list(namespace.items())
        if isinstance(name, str)
        and name.isidentifier()
        and not name.startswith("_")
        and name not in data
        and not (name in hidden and hidden[name] is value)
        and name not in ("In", "Out", "exit", "quit", "get_ipython", "open")
        and type(value).__name__ != "module"
    ][-names:]
    return ", ".join(described) + (f"; also {', '.join(others)}" if others else "")


def folder_files(folder: Any, limit: int = 20) -> list[str]:
    """The files in ``folder`` (not hidden ones), sorted, at most ``limit`` (then ``…``): what
    ``ls`` shows a data scientist before reading one; a table's columns with it
    (:func:`file_facts`)."""
    try:
        entries = sorted(
            (e for e in os.scandir(folder) if e.is_file() and not e.name.startswith(".")),
            key=lambda e: e.name,
        )
    except OSError:
        return []
    names = []
    for entry in entries[:limit]:
        facts = file_facts(entry.path)
        names.append(f"{entry.name} ({facts})" if facts else entry.name)
    return names + (["…"] if len(entries) > limit else [])


def file_facts(path: str, limit: int = 160) -> str:
    """What the first look at a file shows (``head``): a CSV's or TSV's header and first row
    (``columns day, visitors; first row 2023-04-01, 120; dates in day``), a small JSON file's
    shape (``list of 7 records with keys ts, level``; ``object with keys model, params with
    keys lr/depth``), a text file's first line (``text, first line '# run log'``); else
    ``""``. Reads at most a few kilobytes (a JSON file only under 64 kB)."""
    lower = path.lower()
    try:
        if lower.endswith((".csv", ".tsv")):
            with open(path, encoding="utf-8", errors="replace", newline="") as fh:
                head = [fh.readline(2048) for _ in range(2)]
            rows = list(csv.reader(head, delimiter="\t" if lower.endswith(".tsv") else ","))
            columns = [c.strip() for c in rows[0]] if rows else []
            text = "columns " + ", ".join(columns)
            if len(rows) > 1 and rows[1]:
                values = [c.strip() for c in rows[1]]
                text += "; first row " + ", ".join(values)
                dates = [c for c, v in zip(columns, values) if text_kind([v]) == " of dates"]
                if dates:  # read_csv leaves them text
                    text += "; dates in " + ", ".join(dates)
        elif lower.endswith(".json") and os.path.getsize(path) < 65536:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if isinstance(data, list):
                keys = list(data[0]) if data and isinstance(data[0], dict) else []
                text = f"list of {len(data)} " + (
                    f"records with keys {', '.join(map(str, keys))}" if keys else "items"
                )
            elif isinstance(data, dict):  # a config: the keys of its sections too
                text = "object with keys " + ", ".join(
                    f"{k} with keys {'/'.join(map(str, list(v)[:8]))}"
                    if isinstance(v, dict) and v
                    else str(k)
                    for k, v in list(data.items())[:12]
                )
            else:
                return ""
        elif lower.endswith(_TEXT_FILES):
            with open(path, encoding="utf-8", errors="replace") as fh:
                first = next(
                    (ln.strip() for ln in iter(lambda: fh.readline(512), "") if ln.strip()), ""
                )
            text = "text, first line " + repr(before_cut(first, 70)) if first else "text, empty"
        else:
            return ""
    except (OSError, ValueError, csv.Error):
        return ""
    text = text.replace("(", "[").replace(")", "]")
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TEXT_FILES = (".txt", ".log", ".md", ".rst", ".text", ".out")


def columns_text(frame: Any, limit: int = 12) -> str:
    """A DataFrame's columns as a data scientist reads ``df.info()`` and ``df.head(1)``:
    ``columns name: object e.g. 'Ada', age: int64, score: float64 with 2 missing`` (an example
    value for text columns, which hold strings to parse; the missing values where any)."""
    counts = _safe(lambda: frame.isna().sum(), None)
    items = _safe(lambda: list(frame.dtypes.items()), [])
    parts = []
    for column, dtype in items[:limit]:
        text = f"{column}: {dtype}"
        if str(dtype) in ("object", "string", "str"):
            samples = _safe(lambda c=column: list(frame[c].dropna().iloc[:5]), [])
            if samples:
                text += text_kind(samples)
                text += " e.g. " + before_cut(" ".join(_SHORT.repr(samples[0]).split()), 30)
        missing = _safe(lambda c=column: int(counts[c]), 0) if counts is not None else 0
        if missing:
            text += f" with {missing:,} missing"
        parts.append(text)
    more = f", … {len(items) - limit} more" if len(items) > limit else ""
    return "columns " + ", ".join(parts).replace("(", "[").replace(")", "]") + more


_NUMBER_TEXT = re.compile(r"[-+]?[$€£¥]?[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?\s*%?")
_DATE_TEXT = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}:\d{2}(:\d{2})?)?|\d{1,2}/\d{1,2}/\d{2,4}"
    r"|\d{4}/\d{1,2}/\d{1,2}|\d{1,2}\.\d{1,2}\.\d{4}"
)


def text_kind(samples: list[Any]) -> str:
    """`` of numbers`` when every sample is a number written as text (``'$1,299.00'``,
    ``'12%'``, ``'3.5'``), `` of dates`` when every one is a date (``'2023-04-01'``,
    ``'4/1/2023'``), else ``""``: what a text column must be parsed into before arithmetic."""
    texts = [s.strip() for s in samples if isinstance(s, str) and s.strip()]
    if not texts or len(texts) < len(samples):
        return ""
    if all(_NUMBER_TEXT.fullmatch(t) and any(c.isdigit() for c in t) for t in texts):
        return " of numbers"
    if all(_DATE_TEXT.fullmatch(t) for t in texts):
        return " of dates"
    return ""


def signature(name: str, value: Any) -> str:
    """``name(a, b)`` for a function of the user's (what ``f?`` shows first), else ``name``."""
    if not isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return name
    got = _safe(lambda: str(inspect.signature(value)), None)
    if not got or len(got) > 60:
        return name
    return name + got.replace(", ", ",")
