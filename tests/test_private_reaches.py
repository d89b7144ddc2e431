"""Tests use the package's public names: a test that reaches a private attribute
(``obj._x``, ``module._f``, ``monkeypatch.setattr(obj, "_x", …)``, ``from m import _f``) pins
an implementation detail and says nothing a user could rely on.

Counted in every file under ``tests/``: an attribute or imported name with one leading
underscore that does not also end with one (``_repr_mimebundle_``, ``_render_traceback_`` and
the other IPython/Jupyter protocol names are public), read on anything but ``self``/``cls``.
The reaches that remain are listed below, per test file and reach, with their count: the list
may only shrink. A new reach fails here (give the code a public name a user could also want,
or test through the public path); a reach removed fails too, until its entry is lowered.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = "jupyter_session_agent"
SKIP = {".mcp-node", ".opencode-node", "fixtures", "node_modules"}

# (test file, reach) → count. Each remains because the file it reaches into belongs to
# another piece of work (the local server, the session's snapshot, the budget tally, the
# shell tool's notices); it goes when that code gets a public way.
ALLOWED: dict[tuple[str, str], int] = {
    ("test_flat_turn.py", "BudgetTally._fold"): 2,
    ("test_harden_ids.py", "magics.session._snapshot"): 1,
    ("test_local.py", "local._log_tail"): 2,
    ("test_local.py", "local._pid_alive"): 1,
    ("test_local.py", "s._read_state"): 4,
    ("test_local.py", "s._write_state"): 3,
    ("test_local.py", "srv._read_state"): 1,
    ("test_local_lifecycle.py", "local._pid_alive"): 3,
    ("test_local_models.py", "local._free_port"): 1,
    ("test_local_models.py", "local._package_dir"): 1,
    ("test_local_quickstart.py", "local._package_dir"): 1,
    ("test_sandbox.py", "shell._told"): 1,
}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_")


def reaches(source: str) -> Counter[str]:
    """``owner._name`` for every private reach in a test module's source."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found[f"{ast.unparse(node.value)}.{node.attr}"] += 1
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            for alias in node.names:
                if private(alias.name):
                    found[f"{node.module}.{alias.name}"] += 1
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            # setattr(obj, "_x", …), monkeypatch.setattr(obj, "_x", …), getattr(obj, "_x")
            name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            name = node.func.id if isinstance(node.func, ast.Name) else name
            text = node.args[1]
            if (
                name in ("setattr", "getattr", "delattr", "hasattr")
                and isinstance(text, ast.Constant)
                and isinstance(text.value, str)
                and private(text.value)
            ):
                found[f"{ast.unparse(node.args[0])}.{text.value}"] += 1
    return found


def all_reaches() -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for path in sorted(TESTS.rglob("*.py")):
        if SKIP.intersection(path.relative_to(TESTS).parts):
            continue
        for reach, n in reaches(path.read_text(encoding="utf-8")).items():
            out[(path.name, reach)] += n
    return out


def test_tests_reach_no_new_private_name():
    found = all_reaches()
    new = {k: n for k, n in found.items() if n > ALLOWED.get(k, 0)}
    assert not new, (
        "tests reach private names (use or add a public name a user could also want, or test "
        "through the public path):\n" + "\n".join(f"{f}: {r} ×{n}" for (f, r), n in new.items())
    )


def test_the_allowed_private_reaches_only_shrink():
    found = all_reaches()
    stale = {k: (n, found.get(k, 0)) for k, n in ALLOWED.items() if found.get(k, 0) < n}
    assert not stale, "lower or remove these entries of ALLOWED (fewer reaches now):\n" + "\n".join(
        f"{f}: {r} listed ×{n}, found ×{m}" for (f, r), (n, m) in stale.items()
    )


def test_a_private_reach_is_found_and_a_protocol_name_is_not():
    source = (
        "from jupyter_session_agent.core.text import _RUN\n"
        "x = store._rows\n"
        "monkeypatch.setattr(shell, '_told', set())\n"
        "view._repr_mimebundle_()\n"
        "err._render_traceback_()\n"
        "self._cache = 1\n"
        "ns.__dict__\n"
    )
    assert reaches(source) == Counter(
        {"jupyter_session_agent.core.text._RUN": 1, "store._rows": 1, "shell._told": 1}
    )
