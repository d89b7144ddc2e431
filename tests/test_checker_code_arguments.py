# ruff: noqa: F811  (the fixtures of test_sandbox.py, imported to be used by name)
"""Commands whose arguments are code: the checker (which decides ask vs allow when bash runs
unconfined) must not read them as plain words.

``sed`` scripts run commands (``e``), write files (``w``, ``W``, the ``w`` flag of ``s``) and
read them (``r``, ``R``); ``awk`` programs call ``system``, pipe, redirect and ``getline``;
``find`` runs a command on each file it finds (``-exec … {}``: names no one sees beforehand)
and writes or deletes (``-fprint``, ``-fls``, ``-delete``). Under a ``sed *`` / ``awk *`` /
``find *`` allow, each of these asks; plain uses still run without asking.
"""

from __future__ import annotations

import itertools

import pytest

from jupyter_session_agent.core import permission as P
from tests.test_sandbox import _asks, area, bash, home, run, tools_of  # noqa: F401

RULES = P.merge(
    P.defaults(),
    P.from_config({"bash": {"*": "ask", **{f"{c} *": "allow" for c in ("sed", "awk", "find")}}}),
)
TARGETS = ["../F", "/etc/F", "~/F", ".env"]
SED = [
    "sed -n 'w {t}' in.txt",
    "sed 's/a/b/w {t}' in.txt",
    "sed 's|a|b|gw {t}' in.txt",
    "sed -e p -e 'W {t}' in.txt",
    "sed --expression='1e touch {t}' in.txt",
    "sed -n '$e cat {t}' in.txt",
    "sed 's/.*/touch {t}/e' in.txt",
    "sed -n 'r {t}' in.txt",
    "sed '1R {t}' in.txt",
    "sed -nf {t} in.txt",
    "sed --file={t} in.txt",
    "sed -n '/x/{{w {t}\n}}' in.txt",
]
AWK = [
    "awk 'BEGIN{{system(\"touch {t}\")}}'",
    "awk '{{print > \"{t}\"}}' in.txt",
    "awk '{{print >> \"{t}\"}}' in.txt",
    "awk '{{print | \"tee {t}\"}}' in.txt",
    "awk 'BEGIN{{while((getline l < \"{t}\")>0) print l}}'",
    "awk -f {t} in.txt",
    "gawk '@load \"filefuncs\"; BEGIN{{print}}' {t}",
]
FIND = [
    "find . -maxdepth 0 -fprint {t}",
    "find . -fls {t}",
    "find . -name 'in*' -delete",
    "find . -name '.e*' -exec cat {{}} +",
    "find . -type f -execdir cp {{}} {t} \\;",
]
PLAIN = [
    "sed -n 's/a/b/gp' in.txt",
    "sed -i.bak 's/e/w/g' in.txt",
    "sed -E 's/x/y/;2d' in.txt",
    "awk -F, '{print $1}' in.txt",
    "awk 'NR > 1 {print $2}' in.txt",
    "find . -name '*.txt' -type f",
]


@pytest.mark.parametrize(
    "command",
    [t.format(t=x) for t, x in itertools.product(SED + AWK + FIND, TARGETS)],
)
def test_code_in_arguments_asks(tmp_path, command):
    (tmp_path / "in.txt").write_text("a\n")
    (tmp_path / ".env").write_text("A=1\n")
    assert _asks(command, str(tmp_path), RULES)


@pytest.mark.parametrize("command", PLAIN)
def test_plain_uses_still_run_without_asking(tmp_path, command):
    (tmp_path / "in.txt").write_text("a\n")
    assert not _asks(command, str(tmp_path), RULES)


def test_through_agent_a_sed_e_asks_and_writes_nothing(ip, server, store, magics, home, area):
    magics.sandbox = "off"
    magics.permission = {"bash": {"*": "ask", "sed *": "allow", "awk *": "allow"}}
    (area / "proj" / "in.txt").write_text("a\n")
    bash(
        server,
        "sed -n 's/a/b/p' in.txt",
        "sed -e '1e touch ../SEDF' in.txt",
    )
    run(ip, "edit")
    parts = tools_of(store, magics.session.info.id)
    assert [p.state.status for p in parts] == ["completed", "error"]
    assert parts[0].state.output.splitlines()[0] == "b"  # the plain use ran
    assert parts[1].state.metadata["permission"]["outcome"] == "unavailable"  # it asked
    assert not (area / "SEDF").exists()
