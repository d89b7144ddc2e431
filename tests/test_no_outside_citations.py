"""No file of the repository cites notes that are not in it.

A maintainer reading a section number of such notes, or a notes file's name, cannot follow it: the notes the design
was written from live outside the repository. State the rule itself in a sentence (what
OpenCode does, what we do instead), or link a page under ``docs/``. This scans every file git
knows (tracked, and new files not ignored) for a section sign, a numbered "spec"/"section"
reference, a path into a notes folder, and a notes file's name that is not a file here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("node_modules/", ".venv/", "tests/.mcp-node/", "tests/.opencode-node/")

# The names are built from pieces so that this file does not match itself.
SECTION_SIGN = re.compile("\u00a7")
NUMBERED = re.compile(r"\b(?:spec|specification|section|sec\.)\s+\d+(?:\.\d+)+", re.IGNORECASE)
NOTE_NAMES = ("opencode", "compaction", "storage", "jupyter", "aesthetics", "PRODUCT", "issue\\d+")
NOTE_FILE = re.compile(
    r"[\w./-]*\b(?:" + "|".join(NOTE_NAMES) + r")\.md\b|[\w./-]*\bopencode-[\d.]+-schema\.sql\b"
)
NOTES_FOLDER = re.compile(r"[\w./-]*\b(?:reference|seeds)/[\w./-]*|/work/" + "shared\\b")


def _files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout", allow_module_level=True)
    return sorted({f for f in out.splitlines() if f and not f.startswith(SKIP)})


FILES = _files()
TRACKED = set(FILES)


def _exists_here(token: str, where: str) -> bool:
    """A path written in ``where`` that names a file of the repository (from the root or from
    ``where``'s folder) is a link of ours, not a citation."""
    token = token.rstrip(".")
    token = token[2:] if token.startswith("./") else token
    folder = Path(where).parent
    for candidate in (Path(token), folder / token):
        name = candidate.as_posix()
        if name in TRACKED or any(f.startswith(name.rstrip("/") + "/") for f in TRACKED):
            return True
    return False


def citations(text: str, where: str) -> list[str]:
    """``line: text`` for each citation of an outside note in ``text`` (the file ``where``)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        hits = [m.group(0) for m in SECTION_SIGN.finditer(line)]
        hits += [m.group(0) for m in NUMBERED.finditer(line)]
        for pattern in (NOTE_FILE, NOTES_FOLDER):
            hits += [
                m.group(0) for m in pattern.finditer(line) if not _exists_here(m.group(0), where)
            ]
        if hits:
            found.append(f"{where}:{number}: {', '.join(hits)}: {line.strip()[:120]}")
    return found


def test_no_file_cites_notes_outside_the_repository():
    wrong = []
    for name in FILES:
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the working tree
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (screenshots)
        wrong += citations(text, name)
    assert not wrong, (
        "citations of notes that are not in the repository: state the rule itself, or link a "
        "docs/ page:\n" + "\n".join(wrong)
    )


# Example lines are joined from pieces so that this file does not cite anything itself.
@pytest.mark.parametrize(
    "line",
    [
        "as OpenCode does (\u00a74.2)",
        "as OpenCode does (\u00a7 4.2, \u00a7\u00a76)",
        "see spec" + " 3.1 for the patterns",
        "Section" + " 4.8 of the notes",
        "(refer" + "ence/open" + "code.md)",
        "the tail, " + NOTE_NAMES[2] + ".md",
        "the schema (opencode-1.18" + "-schema.sql)",
        "from /work/" + "shared/the-brief",
        "the targets (PRODUCT" + ".md)",
        "as issue" + "14.md asks",
        "seeds" + "/issue.md",
    ],
)
def test_a_citation_is_found(line):
    assert citations(line, "docs/x.md")


@pytest.mark.parametrize(
    "line",
    [
        "see docs/compaction.md",
        "the design is in [compaction](compaction" + ".md)",  # relative to docs/
        "a spec like `openai/gpt-4o` names a model",
        "revert restores the files (docs/lifecycle.md)",
    ],
)
def test_a_link_of_ours_is_not_a_citation(line):
    assert not citations(line, "docs/x.md")
