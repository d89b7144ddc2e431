"""The Store is composed of parts that own their state: no part assigns another's attributes;
what the composition added to the Store's surface (``journal_path``, ``tidy``) behaves."""

from __future__ import annotations

import ast
import fcntl
import subprocess
import sys
from pathlib import Path

from jupyter_session_agent.core.messages import Session
from jupyter_session_agent.store import Store

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "jupyter_session_agent" / "store"


def _foreign_targets(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, target) of every assignment to an attribute of something other than ``self``,
    or to an item of such an attribute (``other.x = …``, ``other.items[k] = …``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for assigned, owner in _owners(target):
                if not (isinstance(owner, ast.Name) and owner.id == "self"):
                    found.append((node.lineno, ast.unparse(assigned)))
    return found


def _owners(target: ast.expr):
    """(target, the object whose state it changes) for an attribute or an attribute's item."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _owners(element)
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
        yield target, target.value.value
    elif isinstance(target, ast.Attribute):
        yield target, target.value


def test_no_store_module_assigns_another_objects_attributes():
    wrong = []
    for path in sorted(STORE.glob("*.py")):
        for line, target in _foreign_targets(ast.parse(path.read_text(encoding="utf-8"))):
            wrong.append(f"{path.relative_to(ROOT)}:{line}: {target} = …")
    assert not wrong, "state assigned from outside the object that owns it:\n" + "\n".join(wrong)


def test_the_check_finds_an_assignment_to_another_objects_state():
    code = (
        "def f(self, other, d, part):\n"
        "    other.x = 1\n"
        "    self.y, other.buf[1] = 2, 3\n"
        "    d[part.id] = self.z = self.w[1] = 4\n"
    )
    assert [t for _, t in _foreign_targets(ast.parse(code))] == ["other.x", "other.buf[1]"]


def test_the_journal_path_appears_with_the_first_put_and_names_the_writer(tmp_path):
    store = Store(tmp_path)
    assert store.journal_path is None
    store.sessions()  # a read writes nothing
    assert store.journal_path is None
    store.put(Session(id="ses_1", directory="/", title="t", time_created=1, time_updated=1))
    store.flush()
    path = store.journal_path
    assert path is not None and path.exists() and path.parent.name == "live"
    assert store.sql("SELECT writer FROM _store.session").writer.tolist() == [path.stem]
    store.close()
    assert not path.exists()  # turned into Parquet at close
    assert (tmp_path / "history" / "parquet" / f"{path.stem}.parquet").exists()


def test_tidy_turns_a_finished_writers_journal_into_parquet_at_once(tmp_path):
    code = (
        "import os, sys; from jupyter_session_agent.store import Store; "
        "from jupyter_session_agent.core.messages import Session; "
        f"s = Store({str(tmp_path)!r}); s.put(Session(id='ses_dead', directory='/', title='t', "
        "time_created=1, time_updated=1)); s.flush(); print(s.journal_path.stem); os._exit(0)"
    )
    dead = subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    journal = tmp_path / "history" / "live" / f"{dead}.jsonl"
    reader = Store(tmp_path)
    with open(journal) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as if its writer still ran while the reader reads
        assert reader.session("ses_dead").title == "t"  # the reader's upkeep: not for this one
    assert journal.exists()  # exited without close(); the next upkeep is 10 s away
    reader.tidy()
    assert not journal.exists()
    assert (tmp_path / "history" / "parquet" / f"{dead}.parquet").exists()
    assert reader.session("ses_dead").title == "t"
