"""Code actions: a small model writes a fenced ``python`` block instead of a JSON tool call.

One module: the text protocol's two directions (history → text with its worked examples;
streamed text → blocks) and the checks and repairs of a block are one contract, used as one
by the embedded server and by the kernel-side provider; split, each half would have to mirror
the other's fences and wording.

Tiny local models (SmolLM2-135M) write short code far more reliably than JSON function
calls. With code actions on, the model answers in plain text; a fenced ```` ```python ````
block in its reply becomes a call of the ``python`` tool (the same tool part, permission
check, output and history as a native call), and a reply without one is the answer. The
loop, the store, the display and compaction never see the difference.

Who translates:

* the embedded model: the ``jsa-chatml-tools`` handler in the llama.cpp server
  (:mod:`..providers.llama_handler`), asked for it by the model name ``smollm2+code``
  (:data:`CODE_SUFFIX`); it streams the block as an OpenAI tool call while it is generated,
  stops generating when the block closes, and answers in one line (no code) after a
  successful run or after a second failure in a row;
* any other model (``%config AgentMagics.code_actions = ["ollama/*"]``):
  ``providers.codeactions.CodeActionProvider``, on the kernel side, over any
  OpenAI-compatible server.

Both use the same pieces: :func:`code_messages` (history → text protocol, with the worked
examples nearest the request, :func:`examples_for`), :class:`BlockParser` (streamed text →
text / block events) and :func:`system_prompt` (the short prompt). The embedded server also
checks each block before it sends it (:func:`problem`: written again when it cannot run) and
repairs what a small model forgets (:func:`quote_names`, :func:`add_imports`). Pure: no I/O,
no third-party imports.

Rules of the protocol: a block opens with a line ```` ```python ```` (also ``py``,
``python3``, ``ipython``; up to three spaces of indent) and closes with a line ```` ``` ````.
Blocks in another language or without one stay text. Each python block is one call, in
order; the embedded server stops after the first (the model sees its output before it
writes more). A block still open when the reply ends is a call if the model ended it
(``finish_reason`` stop) and an error the model can read if the output limit cut it.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import fnmatch
import importlib
import io
import json
import re
import tokenize
from collections.abc import Iterable
from typing import Any

from .chat import MAX_STEPS_TEXT

CODE_SUFFIX = "+code"  # appended to the embedded server's model name: "use code actions"
TOOL = "python"
LANGUAGES = frozenset({"python", "py", "python3", "ipython"})
CUT_TEXT = (
    "the code block was cut off at the output limit before its closing ``` — write shorter code"
)
VARIABLES_HEAD = "Variables in the kernel:"
FILES_HEAD = "Files in the working folder:"
FUNCTIONS_HEAD = "Short functions of the notebook:"
_HEADS = (VARIABLES_HEAD, FILES_HEAD, FUNCTIONS_HEAD)
MAX_RESULT_CHARS = 1500
HUGE_RANGE = 10**8  # a range this long would hold the kernel for minutes (a C loop: no interrupt)
HOURS = "would run for hours"
EMPTY = "the block has no code (only comments)"
ASKS_USER = frozenset({"input", "breakpoint"})  # calls that wait for someone to type
NO_OUTPUT = "(no output)"  # what the python tool returns for code that shows nothing
RAN_SILENTLY = "(nothing printed: the code ran without an error)"
STOP_TEXT = "Stop running code now: answer in one short sentence."  # the max-steps step

_FENCE = re.compile(r"^ {0,3}```[ \t]*([\w+.-]*)[ \t]*$")

PROMPT = (
    "You are a helpful assistant inside a Jupyter notebook. Answer in one short sentence. "
    "To compute something or to set a variable, reply with one ```python code block instead; "
    "it runs in the user's kernel and you will see its output. A question about the user's "
    "variables, DataFrames, functions, files or errors is answered by running code first, "
    "never from memory."
)
#: Added to the request when it depends on the kernel's state (:func:`needs_code`).
NEEDS_CODE = "(This depends on what the kernel holds: run code first.)"

#: Worked examples (question, code, output, answer), sent after the system prompt as earlier
#: turns. Each is self-contained: its code reads no kernel variable (only what it builds from
#: the literals its question gives, builtins and imports), its output is exactly what that
#: code prints, and its answer names no variable its question did not name — so a model that
#: copies an example neither reports a value about the user's data nor names a variable the
#: user does not have. ``tests/test_code_action.py`` checks every example for this, and that
#: no example's value answers a task of the benchmark suites.
EXAMPLES: tuple[tuple[str, str, str, str], ...] = (
    ("Use python to compute 123 + 456.", "123 + 456", "579", "123 + 456 is 579."),
    (
        "Use python to make 'abc' upper case.",
        "'abc'.upper()",
        "'ABC'",
        "'abc' in upper case is 'ABC'.",
    ),
    (
        "Use python to count the spaces in 'a b c d e f g h i j'.",
        "'a b c d e f g h i j'.count(' ')",
        "9",
        "'a b c d e f g h i j' has 9 spaces.",
    ),
    ("Set name to 'Ada' in python.", "name = 'Ada'\nname", "'Ada'", "name is now 'Ada'."),
    (
        "Make a DataFrame t with a column x holding 3, 6 and 18, and give the mean of x.",
        "import pandas as pd\nt = pd.DataFrame({'x': [3, 6, 18]})\nprint(t['x'].mean())",
        "9.0",
        "The mean of x in t is 9.0.",
    ),
    (
        "Build a DataFrame t from {'k': ['p', 'q', 'p']}; which value of k is most common?",
        "import pandas as pd\nt = pd.DataFrame({'k': ['p', 'q', 'p']})\n"
        "print(t['k'].value_counts().idxmax())",
        "p",
        "The most common value of k is 'p'.",
    ),
    (
        "Explain the cause of this error and propose a fix.\n\nint('13.75') raised\n"
        "ValueError: invalid literal for int() with base 10: '13.75'",
        "print(int(float('13.75')))",
        "13",
        "int() cannot read a decimal string like '13.75'; convert it with float() first: "
        "int(float('13.75')) gives 13.",
    ),
    (
        "Use python to compute two times pi.",
        "import math\n2 * math.pi",
        "6.283185307179586",
        "Two times pi is 6.283185307179586.",
    ),
)

#: More worked examples in the same style; :func:`examples_for` picks :data:`SHOWN` of
#: ``EXAMPLES + MORE_EXAMPLES``, those nearest the request last.
MORE_EXAMPLES: tuple[tuple[str, str, str, str], ...] = (
    (
        "Use python to make 'Good Morning' lower case.",
        "'Good Morning'.lower()",
        "'good morning'",
        "'Good Morning' in lower case is 'good morning'.",
    ),
    (
        "Use python to check whether 'racecar' starts with 'race'.",
        "'racecar'.startswith('race')",
        "True",
        "Yes, 'racecar' starts with 'race'.",
    ),
    (
        "How many items are in the list [4, 8, 15, 16, 23, 42, 50, 61, 77]? Use python.",
        "len([4, 8, 15, 16, 23, 42, 50, 61, 77])",
        "9",
        "The list has 9 items.",
    ),
    (
        "Print the cubes of 5 to 8 with python.",
        "for n in range(5, 9):\n    print(n ** 3)",
        "125\n216\n343\n512",
        "The cubes of 5 to 8 are 125, 216, 343 and 512.",
    ),
    (
        "Use python to add up the numbers from 5 to 15.",
        "sum(range(5, 16))",
        "110",
        "The numbers from 5 to 15 add up to 110.",
    ),
    (
        "Make a DataFrame t with a column v of 1, 11 and 13; keep the rows where v is over 5 "
        "in a variable big.",
        "import pandas as pd\nt = pd.DataFrame({'v': [1, 11, 13]})\nbig = t[t['v'] > 5]\n"
        "print(big['v'].tolist())",
        "[11, 13]",
        "big now holds the rows of t where v is over 5 (v is 11 and 13).",
    ),
    (
        "Write the numbers 1 to 9 to the file demo.txt, one per line, then count its lines "
        "with python.",
        "with open('demo.txt', 'w') as f:\n    for i in range(1, 10):\n        print(i, file=f)\n"
        "with open('demo.txt') as f:\n    print(len(f.readlines()))",
        "9",
        "demo.txt now has 9 lines.",
    ),
    (
        "Define a python function greet(name) that returns 'Hi ' plus the name.",
        "def greet(name):\n    return 'Hi ' + name\n\ngreet('Bo')",
        "'Hi Bo'",
        "greet(name) is defined; greet('Bo') returns 'Hi Bo'.",
    ),
    (
        "In python, set area to 6 times 11.",
        "area = 6 * 11\narea",
        "66",
        "area is now 66.",
    ),
)
SHOWN = 8  # worked examples in one request
SELECT_EXAMPLES = True  # pick them by the request (False: always EXAMPLES)
_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "the",
        "of",
        "to",
        "in",
        "on",
        "with",
        "is",
        "are",
        "use",
        "python",
        "what",
        "how",
        "many",
        "do",
        "does",
        "it",
        "its",
        "by",
        "for",
        "into",
        "as",
        "be",
        "this",
        "that",
        "called",
    ]
)


_PATH = re.compile(
    r"[\w./~-]+\.(?:csv|tsv|json|jsonl|txt|parquet|xlsx?|py|ipynb|md|log|yaml|yml|toml)\b"
)
_ERROR = re.compile(r"\b(?:error|exception|traceback|fails?|failing|raised?|bug|fix)\b", re.I)


def kernel_words(messages: list[dict]) -> set[str]:
    """The names the kernel holds (:func:`known_names`) and the columns of its DataFrames as
    the system prompt's variables line describes them (``columns name, age, city``)."""
    words = known_names(messages)
    if messages and messages[0].get("role") == "system":
        for line in _text(messages[0].get("content")).splitlines():
            if line.startswith(VARIABLES_HEAD):
                for match in re.finditer(r"columns ([^()]*)\)", line):
                    words |= {
                        c.split(":")[0].strip()
                        for c in match.group(1).split(", ")
                        if c.split(":")[0].strip()
                    }
    return words


def needs_code(request: str, known: Iterable[str] = ()) -> bool:
    """Whether answering ``request`` depends on the kernel's state, so the first step must be
    code: it names a variable, function or DataFrame column the kernel holds (``known``, e.g.
    :func:`kernel_words`), a file, or an error."""
    text = request or ""
    words = set(re.findall(r"[A-Za-z_]\w*", _PATH.sub(" ", text)))  # a file's name is no variable
    return bool(words & set(known)) or bool(_PATH.search(text)) or bool(_ERROR.search(text))


def examples_for(request: str) -> tuple[tuple[str, str, str, str], ...]:
    """The worked examples for a request: :data:`SHOWN` of the bank that share the most words
    with it, the nearest last (a small model copies the nearest pattern); ties keep the bank's
    order. Without :data:`SELECT_EXAMPLES`, :data:`EXAMPLES`."""
    if not SELECT_EXAMPLES:
        return EXAMPLES
    bank = EXAMPLES + MORE_EXAMPLES

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]+|\d+", text.lower())) - _STOP_WORDS

    wanted = words(request)
    ranked = sorted(range(len(bank)), key=lambda i: (-len(words(bank[i][0]) & wanted), i))
    chosen = sorted(ranked[:SHOWN], key=lambda i: (len(words(bank[i][0]) & wanted), i))
    return tuple(bank[i] for i in chosen)


# ---------------------------------------------------------------------------
# which models


def enabled(setting: Any, provider_id: str, model_id: str) -> bool:
    """Whether ``provider_id/model_id`` uses code actions under the ``code_actions`` setting.

    ``"auto"`` (default): the embedded model only (``local/*``); ``True``/``"on"``: every
    model; ``False``/``"off"``: none; a list of ``provider/model`` patterns
    (``fnmatch``: ``"ollama/*"``): exactly those.
    """
    spec = f"{provider_id}/{model_id}"
    if setting is None or setting == "auto":
        return provider_id == "local"
    if setting is True or setting == "on":
        return True
    if setting is False or setting == "off":
        return False
    if isinstance(setting, str):
        setting = [setting]
    return any(fnmatch.fnmatchcase(spec, str(p)) for p in setting)


# ---------------------------------------------------------------------------
# the prompt


def system_prompt(
    variables: str = "", files: Iterable[str] = (), functions: Iterable[str] = ()
) -> str:
    """The short system prompt, plus one line naming the user's kernel variables (``variables``
    as ``tools.kernel.variables_line`` writes it; none when empty), one naming the files of
    the working folder (``files``; none when empty) and one giving the one-line functions of
    the notebook with what they return (``functions``, as ``tools.kernel.function_lines``
    writes them: what ``f??`` shows; none when empty)."""
    names = ", ".join(files)
    bodies = "; ".join(functions)
    return (
        PROMPT
        + (f"\n{VARIABLES_HEAD} {variables}." if variables else "")
        + (f"\n{FILES_HEAD} {names}." if names else "")
        + (f"\n{FUNCTIONS_HEAD} {bodies}." if bodies else "")
    )


def _kernel_lines(messages: list[dict]) -> list[str]:
    """The system message's lines about the kernel (variables, files)."""
    if not messages or messages[0].get("role") != "system":
        return []
    lines = _text(messages[0].get("content")).splitlines()
    return [ln for ln in lines if ln.startswith(_HEADS)]


_FUNCTION = " (a function)"
_FILE = " is a file here"


def described(messages: list[dict]) -> dict[str, str]:
    """Each variable the variables line describes, and functions by their parameters, as
    ``{name: "orders (DataFrame, 20 × 7, columns …)"}``."""
    out: dict[str, str] = {}
    bodies: dict[str, str] = {}
    for line in _kernel_lines(messages):
        if line.startswith(FUNCTIONS_HEAD):  # ``f(x) returns 2 * x; g(s) returns s.strip()``
            body = line[len(FUNCTIONS_HEAD) :].strip().rstrip(".")
            for entry in re.split(r"; (?=[A-Za-z_]\w*\([^()]*\) returns )", body):
                match = re.match(r"([A-Za-z_]\w*)(\([^()]*\)) returns (.+)", entry)
                if match:
                    bodies[match.group(1)] = f"{match.group(1)}{match.group(2)}{_FUNCTION}: "
                    bodies[match.group(1)] += f"it returns {match.group(3)}"
            continue
        if line.startswith(FILES_HEAD):  # files: ``name.csv (columns a, b)``
            body = line[len(FILES_HEAD) :].strip().rstrip(".")
            for match in re.finditer(r"(?:^|, )([^\s,()]+\.\w+)( \([^()]*\))?", body):
                facts = (match.group(2) or "")[2:-1]
                out.setdefault(
                    match.group(1), match.group(1) + _FILE + (f": {facts}" if facts else "")
                )
            continue
        body = line[len(VARIABLES_HEAD) :].strip().rstrip(".")
        data, _, older = body.partition("; also ")
        starts = [m for m in re.finditer(r"(?:^|(?<=\), ))([A-Za-z_]\w*) \(", data)]
        for i, match in enumerate(starts):
            end = starts[i + 1].start() - 2 if i + 1 < len(starts) else len(data)
            out[match.group(1)] = data[match.start() : end].strip()
        for match in re.finditer(r"([A-Za-z_]\w*)(\([^()]*\))?", older):
            if match.group(2):  # a function, with its parameters
                out.setdefault(match.group(1), match.group(0) + _FUNCTION)
    out.update(bodies)  # a one-line function with what it returns
    return out


_READERS = frozenset(
    {"read_csv", "read_table", "read_json", "read_excel", "read_parquet", "open", "loadtxt"}
    | {"genfromtxt", "load"}
)


def folder_names(messages: list[dict]) -> set[str] | None:
    """The files of the working folder as the files line lists them; ``None`` when there is
    no such line or it is cut (``…``): then nothing is known about a file's absence."""
    for line in _kernel_lines(messages):
        if line.startswith(FILES_HEAD):
            body = re.sub(r"\s*\([^()]*\)", "", line[len(FILES_HEAD) :].strip().rstrip("."))
            names = {n.strip() for n in body.split(", ") if n.strip()}
            return None if "…" in names else names
    return None


def missing_file(code: str, messages: list[dict]) -> str:
    """Why ``code`` would fail on a file: it reads (``pd.read_csv('x.csv')``, ``open('x.txt')``)
    a file the working folder does not hold, going by the files line ("" when it reads none,
    or when the folder is not known); a file the code writes itself is not missing."""
    here = folder_names(messages)
    if here is None:
        return ""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return ""
    written = set()
    read: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        mode = node.args[1] if len(node.args) > 1 else None
        mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
        writes = isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax")
        if name in _READERS and not writes:
            read.append(first.value)
        else:
            written.add(first.value)
    for path in read:
        if "/" not in path and path not in here and path not in written:
            return f"FileNotFoundError: {path!r} is not in the working folder"
    return ""


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)): .*$")


def reported_error(request: str) -> tuple[list[str], str]:
    """What a request about an error (``%agent fix``) quotes: its python blocks (the code that
    failed) and the error's last line (``KeyError: 'amout'``); ``([], "")`` when it reports
    none."""
    lines = [m.group(0).strip() for m in map(_ERROR_LINE.match, (request or "").splitlines()) if m]
    if not lines:
        return [], ""
    parser = BlockParser()
    events = parser.feed(request) + parser.end()
    return [text for kind, text in events if kind == "close"], lines[-1][:200]


def last_error(output: str) -> str:
    """The last ``SomeError: message`` line of a run's output (a traceback), else ``""``."""
    lines = [m.group(0).strip() for m in map(_ERROR_LINE.match, (output or "").splitlines()) if m]
    return lines[-1][:200] if lines else ""


_MISSED = re.compile(r"^(?:KeyError|NameError|AttributeError|\w*UndefinedVariableError)\b")


def error_hint(error: str, messages: list[dict]) -> str:
    """What a data scientist sees at once beside an error that names a missing column, name
    or file (``KeyError: 'amout'``, ``NameError: name 'sale' is not defined``,
    ``AttributeError: 'DataFrame' object has no attribute 'totl'``, ``FileNotFoundError: …
    'sales.cvs'``): the DataFrame or file that has that column (`` ('region' is a column of
    regions)``), else the nearest column or name of the kernel, or file of the folder (`` (did
    you mean 'amount'?)``); ``""`` when there is none."""
    if (error or "").startswith("FileNotFoundError"):
        quoted = re.findall(r"'([^']+)'", error)
        files = [n for n, text in described(messages).items() if _FILE in text]
        near = difflib.get_close_matches(quoted[-1], files, n=1, cutoff=0.75) if quoted else []
        return f" (did you mean {near[0]!r}?)" if near and near[0] != quoted[-1] else ""
    if not _MISSED.match(error or ""):
        return ""
    quoted = re.findall(r"'([^']+)'", error)
    if not quoted:
        return ""
    missing = quoted[-1] if error.startswith("AttributeError") else quoted[0]
    owners: dict[str, list[str]] = {}
    names = []
    for name, text in described(messages).items():
        if _FILE not in text:
            names.append(name)
        columns = re.search(r"columns ([^();]*)", text) if _FUNCTION not in text else None
        for column in (columns.group(1) if columns else "").split(", "):
            column = column.split(":")[0].strip()
            if column and not column.startswith("…"):
                owners.setdefault(column, []).append(name)
    if missing in owners:
        return f" ({missing!r} is a column of {' and '.join(owners[missing])})"
    near = difflib.get_close_matches(missing, list(owners) + names, n=1, cutoff=0.75)
    return f" (did you mean {near[0]!r}?)" if near and near[0] != missing else ""


_FRAME = re.compile(r'^  File "([^"]+)", line \d+, in [^\n]*(?:\n    ([^\n]+))?$', re.M)


def raised_line(output: str) -> str:
    """The block's line that raised, stripped: the last frame of a run's traceback in the block
    itself (``File "<python-tool …>"``) when every frame after it is a library's (a ``.py``
    file outside the notebook: the line misused it); ``""`` when the error came from a
    notebook function (a cell's frame follows: the line only called it) or there is no
    traceback."""
    frames = _FRAME.findall(output or "")
    own = [i for i, (name, _) in enumerate(frames) if name.startswith("<python-tool")]
    if not own:
        return ""
    after = [name for name, _ in frames[own[-1] + 1 :]]
    if any(name.startswith("<") or "ipykernel_" in name for name in after):
        return ""
    return frames[own[-1]][1].strip()


def repeats_failure(code: str, line: str) -> bool:
    """``code`` runs ``line`` (a line that raised: :func:`raised_line`) again unchanged, and no
    statement before it binds a name the line reads: the same error again (the failing block
    sent again with small changes elsewhere). Binding the name first (``records =
    pd.DataFrame(records)`` above ``records.groupby(…)``) is a fix, not a repeat."""
    if not line:
        return False
    try:
        tree = ast.parse(code)
        reads = {n.id for n in ast.walk(ast.parse(line)) if isinstance(n, ast.Name)}
    except (SyntaxError, ValueError):
        return False
    lines = code.split("\n")
    for node in tree.body:
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno or node.lineno]).strip()
        if line in {text, *(ln.strip() for ln in text.split("\n"))}:
            return True
        if reads & _bound(ast.Module(body=[node], type_ignores=[])):
            return False
    return False


def is_empty(code: str, request: str = "") -> bool:
    """``code`` does nothing a user could see: only comments, blank lines, imports, ``pass``,
    bare strings and prose assigned to a name (``fix = "The error is caused by …"``: a
    sentence of six words or more that ``request`` does not hold; a block that explains in
    prose runs and "succeeds")."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    idle = (ast.Import, ast.ImportFrom, ast.Pass)
    return all(
        isinstance(node, idle)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        or (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and len(node.value.value.split()) >= PROSE_WORDS
            and node.value.value.strip() not in (request or "")
        )
        for node in tree.body
    )


PROSE_WORDS = 6  # a string constant of this many words assigned to a name is prose, not data


_DATA_CALLS = frozenset({"DataFrame", "Series", "array", "dict", "list", "tuple", "set"})


def _literal_data(node: Any) -> list[Any] | None:
    """The constants of ``node`` when it is data typed into the code (``[3, 5]``, ``{'a': [1]}``,
    ``pd.DataFrame({'city': ['Lyon']})``) holding at least one container; else ``None``."""
    values: list[Any] = []

    def walk(n: Any) -> bool:
        if isinstance(n, ast.Constant):
            values.append(n.value)
            return True
        if isinstance(n, ast.UnaryOp) and isinstance(n.operand, ast.Constant):
            values.append(n.operand.value)
            return True
        if isinstance(n, (ast.List, ast.Tuple, ast.Set)):
            return all(walk(e) for e in n.elts)
        if isinstance(n, ast.Dict):
            return all(k is not None and walk(k) for k in n.keys) and all(walk(v) for v in n.values)
        if isinstance(n, ast.Call):
            func = n.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            return (
                name in _DATA_CALLS
                and all(walk(a) for a in n.args)
                and all(walk(k.value) for k in n.keywords)
            )
        return False

    if isinstance(node, ast.Constant) or not walk(node):
        return None
    return values


def _typed_by_user(values: list[Any], request: str) -> bool:
    """Every constant of typed data is in the request (the user gave the data)."""
    words = set(re.findall(r"[\w.$%-]+", request.lower()))
    for value in values:
        if isinstance(value, bool) or value is None:
            continue
        text = str(value).lower()
        if isinstance(value, (int, float)):
            if text not in words and f"{value:g}" not in words:
                return False
        elif text not in request.lower():
            return False
    return True


_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,_]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


def _numbers(text: str) -> list[tuple[float, int]]:
    """Every number written in ``text`` with its count of decimals (``1,024.50`` → (1024.5, 2))."""
    out = []
    for match in _NUMBER.findall(text or ""):
        try:
            value = float(match.replace(",", "").replace("_", ""))
        except ValueError:
            continue
        decimals = len(match.partition(".")[2]) if "e" not in match.lower() else 6
        out.append((value, decimals))
    return out


def grounded_answer(answer: str, output: str, request: str = "") -> str:
    """The one-line answer after a run, stating only numbers the run's ``output`` holds (or
    the request gives): a number the output does not hold, even rounded, is made up, and the
    answer becomes the output's last line. An error output, or an answer with no number,
    comes back unchanged."""
    if is_error(output) or not output.strip():
        return answer
    held = [v for v, _ in _numbers(output) + _numbers(request)]

    def shown(value: float, decimals: int) -> bool:
        return any(
            abs(v - value) <= 1e-9 * max(1.0, abs(v))
            or round(v, decimals) == value
            or round(v * 100, decimals) == value  # a share as a percentage
            for v in held
        )

    if all(shown(v, d) for v, d in _numbers(answer)):
        return answer
    lines = [re.sub(r"^\[\w+\]\s*", "", ln.strip()) for ln in output.strip().splitlines()]
    lines = [ln for ln in lines if ln and ln != NO_OUTPUT]
    return f"The output says: {lines[-1][:200]}" if lines else answer


def drop_reloads(code: str, messages: list[dict], known: Iterable[str] = ()) -> str:
    """``code`` without the statements that build again a variable the kernel holds (or an
    earlier run of the conversation bound) from a file the folder does not hold (``orders =
    pd.read_csv('orders.csv')`` when ``orders`` is a DataFrame in the kernel and there is no
    ``orders.csv``), or from data typed into the code that the request does not give
    (``orders = pd.DataFrame({'city': ['Paris', …]})`` over the user's ``orders``; ``config =
    {'model': {'lr': 0.001}}`` over the ``config`` a run read from a file): the value the
    kernel holds is the one the user means. Anything else comes back unchanged."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    held = set(known)
    request = next(
        (plain(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id in held):
            continue
        segment = ast.get_source_segment(code, node) or ""
        typed = _literal_data(node.value)
        if missing_file(segment, messages) or (
            typed is not None and not _typed_by_user(typed, request)
        ):
            drop.append((node.lineno, node.end_lineno or node.lineno))
    if not drop:
        return code
    lines = code.split("\n")
    kept = [ln for i, ln in enumerate(lines, 1) if not any(a <= i <= b for a, b in drop)]
    return "\n".join(kept)


def stem(word: str) -> str:
    """A word as a name or column matches it: lower case, a plural's ``s`` or ``ies`` undone
    (``orders`` → ``order``, ``categories`` → ``category``)."""
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def request_stems(request: str) -> set[str]:
    """The stems of a request's words that could name a variable or a column (no stop words,
    no file names)."""
    words = re.findall(r"[A-Za-z_]\w*", _PATH.sub(" ", request or ""))
    return {stem(w) for w in words if len(w) > 2} - {stem(w) for w in _STOP_WORDS}


def in_kernel(description: str) -> str:
    """``orders (DataFrame, 20 × 7, columns …)`` as ``orders is in the kernel already:
    DataFrame, 20 × 7, columns …`` (a comment above the code: use it, do not build it)."""
    name, _, rest = description.partition(" (")
    if _FILE in description:
        return description + _reader(description)
    if _FUNCTION in description:
        signature, _, returns = description.partition(_FUNCTION)
        return f"{signature} is a function defined in the notebook{returns}"
    if not rest.endswith(")"):
        return description
    said = f"{name} is in the kernel already: {rest[:-1]}"
    for column in re.findall(r"(?:columns |, )([^\s:,]+): \w+ of numbers", rest):
        said += (
            f"\n# {column} as numbers: {name}[{column!r}]"
            ".str.replace(r'[^0-9.-]', '', regex=True).astype(float)"
        )
    for column in re.findall(r"(?:columns |, )([^\s:,]+): \w+ of dates", rest):
        said += f"\n# {column} as dates: pd.to_datetime({name}[{column!r}])"
    return said


def _reader(description: str) -> str:
    """How a data file the kernel description names is read (a comment line to follow):
    ``pd.read_csv('visits.csv', parse_dates=['day'])`` for a CSV whose first row holds dates,
    the loader of its kind otherwise; ``""`` for other files."""
    path = description.split(_FILE)[0]
    kind = path.rsplit(".", 1)[-1].lower()
    if kind not in _LOADERS:
        return ""
    reader = _LOADERS[kind].format(path)
    dates = re.search(r"; dates in ([^;]+)$", description)
    if dates and reader.startswith("pd.read_csv("):
        columns = [c.strip() for c in dates.group(1).split(",") if c.strip()]
        reader = reader[:-1] + f", parse_dates={columns!r})"
    return f"\n# read it with {reader}"


def relevant(request: str, messages: list[dict]) -> list[str]:
    """The kernel's variables a request is about, described: those it names (``orders``,
    ``clean_name``), else those whose name or columns its words name (``order`` for
    ``orders``, ``amount`` for a column of ``orders``). What a data scientist looks at before
    writing the code, put where the model writes it."""
    table = described(messages)
    if not table:
        return []

    text = request or ""
    words = set(re.findall(r"[A-Za-z_]\w*", _PATH.sub(" ", text)))  # a file's name is no variable

    def named(name: str) -> bool:  # a function named like a word ("average") is named as one
        if _FILE in table[name]:
            return bool(re.search(rf"(?<![\w.]){re.escape(name)}\b", text))
        if name not in words:
            return False
        if _FUNCTION not in table[name]:
            return True
        return "_" in name or bool(re.search(rf"\b{name}\s*\(|\bfunction", text))

    chosen = [n for n in table if named(n)]
    files = [n for n in table if _FILE in table[n]]
    for path in _PATH.findall(text):  # a file that is not here: the nearest one that is
        if path not in table:
            chosen += difflib.get_close_matches(path, files, n=1, cutoff=0.75)
    if chosen:
        return [table[n] for n in dict.fromkeys(chosen)]
    stems = request_stems(text)
    scored = []  # the data variables sharing the most words with the request
    for name, text in table.items():
        if _FUNCTION in text or _FILE in text:
            continue
        columns = re.search(r"columns ([^()]*)", text)
        keys = {stem(name)} | {
            stem(c.split(":")[0].strip()) for c in (columns.group(1) if columns else "").split(", ")
        }
        if keys & stems:
            scored.append((len(keys & stems), text))
    best = max((n for n, _ in scored), default=0)
    return [text for n, text in scored if n == best][:2]


def known_names(messages: list[dict]) -> set[str]:
    """Names the kernel holds as far as the conversation shows: the variables line of the
    system prompt and every name bound by code already sent as a python call."""
    known: set[str] = set()
    if messages and messages[0].get("role") == "system":
        for line in _text(messages[0].get("content")).splitlines():
            if line.startswith(VARIABLES_HEAD):
                body = line[len(VARIABLES_HEAD) :].strip().rstrip(".")
                described, _, older = body.partition("; also ")
                known |= set(re.findall(r"(?:^|\), )([A-Za-z_]\w*) \(", described))
                older = re.sub(r"\([^()]*\)", "", older)  # a function's parameters
                known |= {n.strip() for n in older.split(",") if n.strip().isidentifier()}
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            code = _args((call.get("function") or {}).get("arguments")).get("code")
            if isinstance(code, str):
                try:
                    known |= _bound(ast.parse(code))
                except (SyntaxError, ValueError):
                    pass
    return known


def problem(code: str, known: Iterable[str] = (), request: str = "") -> str:
    """Why ``code`` cannot run, found without running it ("" when none is seen): a syntax
    error, no statement at all, a name it reads that nothing defines (not a builtin, not
    bound in the code, not in ``known``), or a ``range`` of ``HUGE_RANGE`` or more (``max(range(
    10**12))`` loops in C for hours and no interrupt stops it), or a call that waits for the
    user to type (``input()``: :data:`ASKS_USER`; the task already gives the data).
    Flow-insensitive and lenient: a name bound anywhere counts as defined."""
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        return f"SyntaxError: {err.msg}"
    except ValueError as err:  # null bytes
        return f"ValueError: {err}"
    if is_empty(code, request):
        return EMPTY
    defined = _bound(tree) | set(known) | set(dir(builtins))
    defined |= {"display", "get_ipython", "In", "Out"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in defined:
            return f"NameError: name '{node.id}' is not defined"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "range"
        ):
            sizes = [_constant(a) for a in node.args]
            if any(n is not None and abs(n) >= HUGE_RANGE for n in sizes):
                return f"range({max(abs(n) for n in sizes if n is not None):,}) {HOURS}"
    own = _bound(tree) | set(known)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ASKS_USER
            and node.func.id not in own
        ):
            return f"{node.func.id}() would wait for the user to type (the task gives the data)"
    return ""


#: Modules a small model uses without importing them, by the name it writes.
MODULES = {
    **{m: m for m in ("math", "statistics", "random", "re", "string", "itertools", "json")},
    **{m: m for m in ("collections", "datetime", "functools", "operator", "fractions")},
    "pd": "pandas",
    "np": "numpy",
}
#: Modules whose public functions a small model calls bare (``factorial(6)``, ``sqrt(2)``).
FROM_MODULES = ("math", "statistics")


_ASKED_NAME = re.compile(  # overlapping: "in a variable called x" is found at "called"
    r"(?=\b(?:called|named|call it|name it|save it as|store it as|keep it as|as a variable|"
    r"in a variable|into a variable|variable)\s+[`'\"]?([A-Za-z_]\w*))"
)
_NOT_NAMES = frozenset({"a", "an", "the", "it", "called", "named", "as", "in", "to", "of"})


def bind_asked(code: str, request: str, known: Iterable[str] = ()) -> str:
    """``code`` binding the variable the request names (``… in a dataframe called lyon``): when
    the request asks for a name the code never binds, and the code binds exactly one new name at
    its top level (``lyon_orders = …``), that name is renamed to the asked one everywhere in the
    code. Anything else (unparsable code, several candidates) comes back unchanged."""
    asked = {m.group(1) for m in _ASKED_NAME.finditer(request or "")} - _NOT_NAMES
    if len(asked) != 1:
        return code
    (want,) = asked
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    if want in _bound(tree):
        return code
    top = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            top |= {t.id for t in targets if isinstance(t, ast.Name)}
    new = top - set(known)
    if len(new) != 1:
        return code
    (old,) = new
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code
    out = [
        t._replace(string=want) if t.type == tokenize.NAME and t.string == old else t
        for t in tokens
    ]
    return tokenize.untokenize(out)


_LOADERS = {
    "csv": "pd.read_csv({!r})",
    "tsv": "pd.read_csv({!r}, sep='\\t')",
    "json": "json.load(open({!r}))",
    "parquet": "pd.read_parquet({!r})",
    "xlsx": "pd.read_excel({!r})",
}


def load_files(code: str, messages: list[dict], known: Iterable[str] = ()) -> str:
    """``code`` with the files it names as if they were variables read: ``len(events.json)``
    where nothing defines ``events`` and ``events.json`` is in the working folder becomes
    ``len(json.load(open('events.json')))`` (a CSV is ``pd.read_csv``, a text file its
    text); the quotes and the reader a small model forgets. Unparsable code, or code that
    names no file of the folder, comes back unchanged."""
    here = folder_names(messages) or set()
    parsed = _with_defined(code, known) if here else None
    if parsed is None:
        return code
    tree, defined = parsed
    spots = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id not in defined
            and f"{node.value.id}.{node.attr}" in here
            and node.end_lineno == node.lineno
        ):
            path = f"{node.value.id}.{node.attr}"
            reader = _LOADERS.get(node.attr.lower(), "open({!r}).read()").format(path)
            spots.append((node.lineno, node.col_offset, node.end_col_offset or 0, reader))
    return _splice(code, spots)


def _with_defined(code: str, known: Iterable[str]) -> tuple[ast.Module, set[str]] | None:
    """``code``'s tree and the names defined for it (bound in it, ``known``, builtins), or
    ``None`` when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    return tree, _bound(tree) | set(known) | set(dir(builtins))


def _splice(code: str, spots: Iterable[tuple[int, int, int, str]]) -> str:
    """``code`` with each one-line span ``(line, start, end, text)`` replaced by ``text``
    (``start`` and ``end`` count UTF-8 bytes, as ast offsets do)."""
    lines = code.split("\n")
    for lineno, start, end, text in sorted(spots, reverse=True):  # earlier offsets stay valid
        line = lines[lineno - 1].encode("utf-8")
        lines[lineno - 1] = (line[:start] + text.encode("utf-8") + line[end:]).decode("utf-8")
    return "\n".join(lines)


def print_returns(code: str) -> str:
    """``code`` with each ``return`` that no function encloses written as ``print(...)``: a
    model that writes a function's body as the block (``with open(f) as fh: ... return n``)
    means the value to be shown, and Python refuses the whole block for that one word. A
    ``return`` inside a ``def`` stays; unparsable code comes back unchanged."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    spots: list[tuple[int, int, int, int, str]] = []

    def walk(node: Any) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Return):
                value = ast.get_source_segment(code, child.value) if child.value else None
                text = f"print({value})" if value else "pass"
                spots.append(
                    (
                        child.lineno,
                        child.col_offset,
                        child.end_lineno or 0,
                        child.end_col_offset or 0,
                        text,
                    )
                )
            walk(child)

    walk(tree)
    if not spots:
        return code
    lines = code.split("\n")
    for lineno, start, end_line, end, text in sorted(spots, reverse=True):
        first = lines[lineno - 1].encode("utf-8")  # ast offsets count UTF-8 bytes
        last = lines[end_line - 1].encode("utf-8")
        lines[lineno - 1 : end_line] = [(first[:start] + text.encode() + last[end:]).decode()]
    return "\n".join(lines)


def add_imports(code: str, known: Iterable[str] = ()) -> str:
    """``code`` with the imports it forgot: each name it reads that nothing defines and that is
    a module it means (``math``, ``pd`` for pandas: :data:`MODULES`) or a public function of
    :data:`FROM_MODULES` (``factorial`` → ``from math import factorial``) gets an import line
    at the top. Code that does not parse, or needs no import, comes back unchanged."""
    parsed = _with_defined(code, known)
    if parsed is None:
        return code
    tree, defined = parsed
    missing = sorted(
        {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id not in defined
        }
    )
    lines = []
    for name in missing:
        if name in MODULES:
            module = MODULES[name]
            lines.append(f"import {module}" + (f" as {name}" if module != name else ""))
            continue
        for module in FROM_MODULES:
            value = getattr(importlib.import_module(module), name, None)
            if not name.startswith("_") and (callable(value) or isinstance(value, float)):
                lines.append(f"from {module} import {name}")
                break
    return "\n".join(lines + [code]) if lines else code


_QUOTED = re.compile(r"""'([^'\n]{1,80})'|"([^"\n]{1,80})\"""")


def quote_names(code: str, request: str, known: Iterable[str] = ()) -> str:
    """``code`` with the quotes it forgot: a name it reads that nothing defines and that is a
    string the request quotes (``'banana'`` → ``banana``, ``'my cat'`` → ``my_cat``) becomes
    that string literal (``banana.count('a')`` → ``'banana'.count('a')``). Only names the
    code reads; formatting and comments are kept. Unparsable code comes back unchanged."""
    strings: dict[str, str] = {}
    for match in _QUOTED.finditer(request or ""):
        text = match.group(1) if match.group(1) is not None else match.group(2)
        name = re.sub(r"\W+", "_", text.strip()).strip("_")
        if name.isidentifier():
            strings.setdefault(name, text)
    parsed = _with_defined(code, known) if strings else None
    if parsed is None:
        return code
    tree, defined = parsed
    return _splice(
        code,
        (
            (node.lineno, node.col_offset, node.end_col_offset or 0, repr(strings[node.id]))
            for node in ast.walk(tree)
            if isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in strings
            and node.id not in defined
        ),
    )


def _constant(node: Any, depth: int = 0) -> int | None:
    """The value of an integer constant expression (``10**12``, ``2 * 10 ** 9``), else None."""
    if depth > 8:
        return None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _constant(node.operand, depth + 1)
        return -value if value is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow)):
        left, right = _constant(node.left, depth + 1), _constant(node.right, depth + 1)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Pow):
            return left**right if 0 <= right <= 64 and abs(left) <= 10**6 else None
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    return None


def _bound(tree: Any) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names |= set(node.names)
        elif isinstance(node, ast.MatchAs) and node.name:
            names.add(node.name)
    return names


# ---------------------------------------------------------------------------
# history → the text protocol


def code_messages(messages: list[dict], select: bool = True) -> list[dict]:
    """Chat messages (system, user, assistant with ``tool_calls``, ``tool`` results) in the
    text protocol: the worked examples follow the system message, python calls become fenced
    blocks, results become user turns (``Output:`` / ``Error:``), and the max-steps
    instruction becomes a user turn.

    ``select``: the examples nearest the request (:func:`examples_for`; what the tiniest model
    needs); else always :data:`EXAMPLES`. The kernel's variables line moves from the system
    message to the head of the request, so that with fixed examples every request of a notebook
    starts with the same prompt and a local server reuses its evaluation (llama.cpp keeps the
    longest common prefix): on a busy 2-core machine that prefix costs a minute or more."""
    out: list[dict] = []
    msgs = list(messages)
    variables: list[str] = []
    if msgs and msgs[0].get("role") == "system":
        lines = _text(msgs[0].get("content")).split("\n")
        variables = [ln for ln in lines if ln.startswith(_HEADS)]
        kept = "\n".join(ln for ln in lines if not ln.startswith(_HEADS))
        out.append({"role": "system", "content": kept})
        msgs = msgs[1:]
    at = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "user"), -1)
    request = _text(msgs[at].get("content")) if at >= 0 else ""
    if variables and at >= 0 and isinstance(msgs[at].get("content"), str):
        msgs[at] = {**msgs[at], "content": "\n".join(variables) + "\n\n" + request}
    for question, code, output, answer in examples_for(request) if select else EXAMPLES:
        out += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": fence(code)},
            {"role": "user", "content": "Output:\n" + output},
            {"role": "assistant", "content": answer},
        ]
    names: dict[str, str] = {}
    if (  # the turn's first step, on a request that depends on the kernel: code first
        msgs
        and msgs[-1].get("role") == "user"
        and isinstance(msgs[-1].get("content"), str)
        and needs_code(request, kernel_words(messages))
    ):
        msgs[-1] = {
            **msgs[-1],
            "content": _text(msgs[-1]["content"]).rstrip() + "\n\n" + NEEDS_CODE,
        }
    for msg in msgs:
        role = msg.get("role")
        content = _text(msg.get("content"))
        if role == "assistant":
            if content.strip() == MAX_STEPS_TEXT.strip():
                out.append({"role": "user", "content": STOP_TEXT})
                continue
            body = [content.rstrip()] if content.strip() else []
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                name = str(fn.get("name") or "")
                names[str(call.get("id"))] = name
                args = _args(fn.get("arguments"))
                if name == TOOL and isinstance(args.get("code"), str):
                    body.append(fence(args["code"]))
                else:  # another tool (a session that switched protocols): its call as text
                    body.append(f"(called {name} with {json.dumps(args, ensure_ascii=False)})")
            out.append({"role": "assistant", "content": "\n".join(body)})
        elif role in ("tool", "function"):
            out.append({"role": "user", "content": result_text(content)})
        elif role == "system":
            out.append({"role": "user", "content": content})
        else:
            out.append({"role": role or "user", "content": content})
    return _merge_users(out)


def fence(code: str) -> str:
    return f"```python\n{code.strip(chr(10))}\n```"


def result_text(content: str) -> str:
    """A tool result as the small model reads it: ``Output:`` and the text, or ``Error:`` and
    the exception's last line (a traceback is noise to it)."""
    text = (content or "").strip()
    if CUT_TEXT in text:
        return "Error: " + CUT_TEXT
    if EMPTY in text and is_error(text):  # a block of only comments, not run
        return "Error: " + EMPTY
    if is_error(text):
        head = text.split("[error]")[0] if "[error]" in text else ""
        head = head.replace("[stdout]", "").strip()
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
        return (f"Output:\n{head}\n" if head else "") + "Error: " + last
    if len(text) > MAX_RESULT_CHARS:
        half = MAX_RESULT_CHARS // 2
        text = text[:half] + "\n…\n" + text[-half:]
    if not text or text == NO_OUTPUT:  # an assignment: say it worked, not "no output"
        return "Output:\n" + RAN_SILENTLY
    return "Output:\n" + text


def is_error(content: str) -> bool:
    """Whether a ``python`` result reports an exception (or the call itself failed)."""
    text = content or ""
    return (
        'File "<python-tool' in text
        or "Traceback (most recent call last)" in text
        or text.startswith(("Invalid arguments for tool", "Error:"))
        or CUT_TEXT in text
    )


def _merge_users(messages: list[dict]) -> list[dict]:
    """Consecutive user turns (several results, a result then a note) as one turn."""
    out: list[dict] = []
    for msg in messages:
        if out and msg["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + msg["content"]}
        else:
            out.append(dict(msg))
    return out


def plain(content: Any) -> str:
    """Message content (a string, or a list of parts) as text."""
    return _text(content)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content)


def _args(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"code": str(raw)}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------
# streamed text → text and blocks


class BlockParser:
    """Incremental: ``feed(text)`` and ``end(cut)`` return events, in order:

    ``("text", s)`` — prose (held back only while a line may still become a fence);
    ``("open", "")`` — a python block starts; ``("code", s)`` — its code, streamed (a line's
    newline is sent with the next line, so the code never ends with one);
    ``("close", code)`` — the block is complete; ``("cut", code)`` — the reply ended inside it
    because of the output limit.
    """

    def __init__(self) -> None:
        self.mode = "text"  # "text" | "code" | "other" (a fenced block in another language)
        self.line = ""  # the current line so far
        self.sent = 0  # chars of self.line already emitted
        self.code: list[str] = []  # complete lines of the open python block
        self.blocks = 0

    @property
    def open(self) -> bool:
        return self.mode == "code"

    def feed(self, text: str) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        while text:
            head, newline, text = text.partition("\n")
            self.line += head + newline
            if newline:
                events += self._line(self.line)
                self.line, self.sent = "", 0
            else:
                events += self._partial()
        return _joined(events)

    def end(self, cut: bool = False) -> list[tuple[str, str]]:
        """The reply is over; ``cut``: because of the output limit."""
        events: list[tuple[str, str]] = []
        if self.line:
            events += self._line(self.line, final=True)
            self.line, self.sent = "", 0
        if self.mode == "code":
            code = "\n".join(self.code)
            self.mode, self.code = "text", []
            if not cut:
                self.blocks += 1
            events.append(("cut" if cut else "close", code))
        self.mode = "text"
        return _joined(events)

    # internals

    def _line(self, line: str, final: bool = False) -> list[tuple[str, str]]:
        bare = line.rstrip("\n").rstrip("\r")
        fence = _FENCE.match(bare)
        lang = fence.group(1).lower() if fence else ""
        if self.mode == "code":
            if fence and not lang:
                code = "\n".join(self.code)
                self.mode, self.code = "text", []
                self.blocks += 1
                return [("close", code)]
            piece = ("\n" if self.code and self.sent == 0 else "") + bare[self.sent :]
            self.code.append(bare)
            return [("code", piece)]
        if self.mode == "text" and fence and lang in LANGUAGES and not final:
            self.mode = "code"
            return [("open", "")]
        if fence and (self.mode == "text" or not lang):
            self.mode = "other" if self.mode == "text" else "text"
        return [("text", line[self.sent :])]

    def _partial(self) -> list[tuple[str, str]]:
        line = self.line
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) <= 3 and (
            "```".startswith(stripped) or stripped.startswith("```")
        ):
            return []  # may still become a fence line: wait for its end
        piece = line[self.sent :]
        if not piece:
            return []
        prefix = "\n" if self.mode == "code" and self.code and self.sent == 0 else ""
        self.sent = len(line)
        return [("code" if self.mode == "code" else "text", prefix + piece)]


def _joined(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, text in events:
        if kind in ("text", "code") and not text:
            continue
        if out and kind in ("text", "code") and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


# ---------------------------------------------------------------------------
# the kernel-side translation (models other than the embedded one)


def offers_python(tools: Any, messages: list[dict]) -> bool:
    """Whether this step may run code: the request offers ``python`` and is not the max-steps
    step (the loop ends those chats with its max-steps instruction; nothing runs then)."""
    if (
        messages
        and messages[-1].get("role") == "assistant"
        and _text(messages[-1].get("content")).strip() == MAX_STEPS_TEXT.strip()
    ):
        return False
    return any(((t or {}).get("function") or {}).get("name") == TOOL for t in tools or ())
