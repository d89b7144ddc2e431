"""Every module, file and folder the docs name exists; so does every module a docstring's
cross-reference (``:mod:`.truncation```) names.

The docs (``docs/*.md``, ``README.md``) name code three ways: a file path (``loop/step.py``,
``tests/test_store.py``, ``benchmarks/loadbench.py``), a folder (``loop/compaction/``), or a
dotted name (``jupyter_session_agent.session.lifecycle.fork``, or short from a layer folder:
``core.chat.filter_compacted``). A path is read from the
repository root, from the package folder, or from the doc's own folder; a bare file name must be
some file of the repository; a dotted name must be a module, optionally followed by a name that
module defines or imports. A name that moved in a restructure then fails here, not in a
reader's hands.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "jupyter_session_agent"
DOCS = sorted([*REPO.glob("docs/*.md"), REPO / "README.md"])

FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|ipynb|ts|toml|md))\b")
FOLDER = re.compile(r"`((?:[\w-]+/)+)`")  # `loop/compaction/`
DOTTED = re.compile(rf"\b({PACKAGE}(?:\.\w+)+)")
SHORT = re.compile(r"`(\w+\.\w+\.\w+)[`(.]")
# Files a doc names that are not ours: the user's, OpenCode's, or written at run time (the
# git-ignored artifacts/: the quickstart makes the folder, the browser suite its jupyterlab/).
NOT_OURS = re.compile(
    r"(^|/)(MEMORY|AGENTS|CLAUDE|CONTEXT|README|CHANGELOG)\.md$|\.ts$|^src/|^test/|^packages/"
    r"|^artifacts/"
)


@cache
def _built() -> tuple[str, ...]:
    """Paths the repository makes at build or run time rather than holds: the anchored entries
    of ``.gitignore`` (``/jupyter_session_agent/labextension/``, written by the extension's
    build). A fresh clone has none of them, so a doc may name them before they exist."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return tuple(ln.strip().strip("/") for ln in lines if ln.startswith("/") and "*" not in ln)


def is_built(token: str) -> bool:
    path = token.strip("/")
    return any(path == b or path.startswith(b + "/") for b in _built())


def _roots(doc: Path) -> list[Path]:
    return [REPO, REPO / PACKAGE, doc.parent]


@cache
def _basenames() -> frozenset[str]:
    skip = {".venv", "node_modules", ".git", ".mcp-node", ".opencode-node"}
    names = set()
    for path in REPO.rglob("*"):
        if not skip.intersection(path.relative_to(REPO).parts):
            names.add(path.name)
    return frozenset(names)


def _module_path(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _defined(path: Path) -> frozenset[str]:
    """Top-level names a module defines or imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def dotted_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    module = None
    for i in range(len(parts), 0, -1):
        if _module_path(".".join(parts[:i])):
            module = i
            break
    if module is None:
        return False
    if module == len(parts):
        return True
    path = _module_path(".".join(parts[:module]))
    assert path is not None
    return parts[module] in _defined(path)


@cache
def _ours() -> frozenset[str]:
    """Folder names a path of ours starts with: the repository's top level and every folder of
    the package, at any depth (so ``compaction/`` written for ``loop/compaction/`` is checked,
    and fails). Another path (``storage/session``, ``history/live/``) is OpenCode's or a data
    directory's, made at run time; a ``.py`` path is always ours."""
    tops = {p.name for p in REPO.iterdir()}
    folders = {p.name for p in (REPO / PACKAGE).rglob("*") if p.is_dir()}
    return frozenset(tops | folders - {"__pycache__"})


def missing(text: str, doc: Path) -> list[str]:
    """What ``text`` (the doc ``doc``) names that does not exist, one entry per name."""
    out = []
    for token in dict.fromkeys(FILE.findall(text)):
        if NOT_OURS.search(token) or token.startswith(("~", "/")) or is_built(token):
            continue
        if "/" not in token:
            if token not in _basenames():
                out.append(token)
        elif not token.endswith(".py") and token.split("/")[0] not in _ours():
            continue
        elif not any((root / token).exists() for root in _roots(doc)):
            out.append(token)
    for token in dict.fromkeys(FOLDER.findall(text)):
        if token.split("/")[0] not in _ours() or NOT_OURS.search(token) or is_built(token):
            continue
        if not any((root / token).is_dir() for root in _roots(doc)):
            out.append(token)
    for token in dict.fromkeys(DOTTED.findall(text)):
        if not dotted_exists(token):
            out.append(token)
    # `core.chat.filter_compacted`: a name under a module of a layer folder, written short
    for token in dict.fromkeys(SHORT.findall(text)):
        parts = token.split(".")
        if _module_path(f"{PACKAGE}.{parts[0]}.{parts[1]}") and not dotted_exists(
            f"{PACKAGE}.{token}"
        ):
            out.append(token)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_a_doc_names_exists(doc):
    gone = missing(doc.read_text(encoding="utf-8"), doc)
    assert not gone, f"{doc.relative_to(REPO)} names what does not exist: {gone}"


def test_the_architecture_names_every_module():
    """docs/ARCHITECTURE.md's module table stays current: a new module gets a row (a folder's
    ``__init__.py`` is described by its folder's paragraph)."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    root = REPO / PACKAGE
    absent = [
        rel
        for rel in (p.relative_to(root).as_posix() for p in sorted(root.rglob("*.py")))
        if not rel.endswith("/__init__.py") and f"`{rel}`" not in text
    ]
    assert not absent, f"modules without a row in docs/ARCHITECTURE.md: {absent}"


def test_a_built_path_is_named_before_the_build():
    """A fresh clone has no built labextension; naming it is not a moved name, but a path
    beside it still is."""
    doc = REPO / "docs" / "ARCHITECTURE.md"
    assert is_built("jupyter_session_agent/labextension/")
    assert missing("`jupyter_session_agent/labextension/`", doc) == []
    assert missing("`jupyter_session_agent/labextensions/`", doc) == [
        "jupyter_session_agent/labextensions/"
    ]


def test_a_moved_name_is_found():
    doc = REPO / "docs" / "ARCHITECTURE.md"
    text = (
        "`loop/nowhere.py`, `compaction/` (moved under loop/), `jupyter_session_agent.nowhere`, "
        "`jupyter_session_agent.core.permission.no_such_name`, `no_such_file.py`, "
        "`compaction/events.py`, `core.chat.no_such_function(history)`"
    )
    assert missing(text, doc) == [
        "loop/nowhere.py",
        "no_such_file.py",
        "compaction/events.py",
        "compaction/",
        "jupyter_session_agent.nowhere",
        "jupyter_session_agent.core.permission.no_such_name",
        "core.chat.no_such_function",
    ]
    ok = (
        "`loop/step.py`, `loop/compaction/`, `jupyter_session_agent.core.permission.evaluate`, "
        "`storage/session` (OpenCode's), `history/live/` (a data directory's), `docs/mcp.md`, "
        "[providers](providers.md)"
    )
    assert missing(ok, doc) == []


# Cross-references in the package's docstrings: ``:mod:`.truncation```, ``:class:`~.x.Y```,
# ``:func:`jupyter_session_agent.a.b```. A relative one is read from the module's package; a
# bare ``:mod:`name``` from the module's package or the package root.
ROLE = re.compile(r":(mod|func|class|data|meth|exc|attr):`~?([.\w]+)`")


def references(text: str, package: list[str]) -> list[str]:
    """The cross-references in ``text`` (a module of ``package``) that name nothing."""
    out = []
    for role, ref in ROLE.findall(text):
        if ref.startswith("."):
            up = len(ref) - len(ref.lstrip("."))
            base = package[: len(package) - (up - 1)]
            candidates = [".".join(base + [ref.lstrip(".")])]
        elif ref.startswith(PACKAGE + "."):
            candidates = [ref]
        elif role == "mod":
            candidates = [".".join(package + [ref]), f"{PACKAGE}.{ref}"]
        else:
            continue  # a name of the module itself: ``:func:`evaluate```
        if not any(dotted_exists(c) for c in candidates):
            out.append(f":{role}:`{ref}`")
    return out


def test_every_cross_reference_in_a_docstring_exists():
    wrong = []
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        package = list(path.relative_to(REPO).with_suffix("").parts[:-1])
        text = path.read_text(encoding="utf-8")
        wrong += [f"{path.relative_to(REPO)}: {r}" for r in references(text, package)]
    assert not wrong, "docstrings refer to modules or names that do not exist:\n" + "\n".join(wrong)


def test_a_stale_cross_reference_is_found():
    tools = [PACKAGE, "tools"]
    text = (
        ":mod:`.truncation` :func:`.truncation.truncate` :class:`~..core.messages.ToolPart` "
        ":mod:`.messages` :func:`~.truncation.gone` :mod:`events` :mod:`core.errors` :func:`local`"
    )
    assert references(text, tools) == [
        ":mod:`.messages`",
        ":func:`.truncation.gone`",
        ":mod:`events`",
    ]
