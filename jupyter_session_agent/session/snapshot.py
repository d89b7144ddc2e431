"""File snapshots for revert: one shadow git repository per SESSION.

OpenCode keeps one shadow repo per project and only for git
projects; undo in one session can then undo another session's changes
(#33940) and non-git folders get no undo at all (#4704). Here every session
has its own repository, ``<data_dir>/snapshot/<session_id>``, used with
``--git-dir`` on it and ``--work-tree`` on the session's directory, whether
or not that directory is a git repository itself. Nothing is committed:
:meth:`Snapshot.track` stages the directory and returns a tree hash.

Keeping a step cheap:

* only what changed is restaged: ``git ls-files --others --modified
  --deleted`` uses the index's stat cache, so unchanged files are never read;
* a file larger than ``max_file_size`` is never hashed: it is added to the
  shadow repo's ``info/exclude`` (and listed in ``large.json``, re-checked at
  every track so a file that shrinks is tracked again). Such files are not
  restored by revert; the revert output names them;
* ``.gitignore`` files and the real repository's ``info/exclude`` are
  respected, and so are the configured ``exclude`` patterns (notebooks and
  caches by default: Jupyter autosaves the notebook being edited, and
  restoring it under the open editor would fight the user);
* a directory with more than ``max_files`` files to track on first sight
  (a home directory, ``/``) disables snapshots for the session, with the
  reason kept in ``<repo>/disabled``;
* the data directory is never tracked: excluded when it lies inside the
  session directory, and snapshots are off when the session directory is the
  data directory or inside it.

Every failure here is contained: :meth:`track` returns ``None`` and the turn
goes on without a snapshot. Kernel state (variables) is never part of a
snapshot.

Nothing in the work tree can make git run a command or change what it stores
(:func:`git_env`): no system or global configuration and no ``GIT_*`` variable
from the environment, ``HOME`` pointed into the shadow repo, hooks and
fsmonitor off, an empty template at ``init``, its own ``GIT_DIR`` and
``GIT_WORK_TREE`` (a ``.git`` folder or file in the work tree is never read as a
repository), and ``info/attributes`` unsetting every attribute that could
convert or filter a file, so a ``.gitattributes`` filter driver never runs and
a restored file is byte for byte what was saved. A revert restores only from
trees this repository produced (listed in ``<repo>/trees``; an imported
session's ``patch`` parts name trees made elsewhere) and only paths that stay
inside the work tree.

One module: every function here drives the same shadow repository with the same
hardened git environment, and its safety rules hold only if they all live together.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import ids
from ..core.errors import UsageError
from ..core.settings import SnapshotSettings

DEFAULTS = SnapshotSettings()  # enabled, max_file_size, max_files, exclude
GIT_TIMEOUT = 300.0
DIFF_LIMIT = 200_000  # characters of revert.diff kept on the session
# -c options on every git call: no configuration anywhere may run a command or read user files
ISOLATION = (
    f"core.hooksPath={os.devnull}",
    "core.fsmonitor=false",
    f"core.attributesFile={os.devnull}",
    f"core.excludesFile={os.devnull}",
    "core.pager=cat",
    "submodule.recurse=false",
    "protocol.allow=never",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.useReplaceRefs=false",
    "diff.external=",
)
# $GIT_DIR/info/attributes has the highest precedence: every work-tree .gitattributes is
# neutralised (no filter, textconv, eol or encoding conversion; diff/merge as git's defaults)
ATTRIBUTES = (
    "# written by jupyter-session-agent: work-tree .gitattributes must not convert\n"
    "* !text !eol !crlf !filter !ident !diff !merge !working-tree-encoding"
    " !export-subst\n"
)


class SnapshotError(RuntimeError):
    """A git command failed (the message is git's first line)."""


@dataclass
class RestoreResult:
    restored: list[str] = field(default_factory=list)  # absolute paths written back
    deleted: list[str] = field(default_factory=list)  # created after the point: removed
    skipped: list[str] = field(default_factory=list)  # large or unreadable: left alone


@functools.cache
def git_executable() -> str | None:
    """The absolute path of ``git`` from the absolute ``PATH`` entries only: a ``git`` file in the
    current folder (an empty or relative ``PATH`` entry) is never run."""
    found = shutil.which("git", path=os.pathsep.join(_absolute_path()))
    return os.path.abspath(found) if found else None


def git_available() -> bool:
    return git_executable() is not None


def _absolute_path() -> list[str]:
    entries = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return [d for d in entries if d and os.path.isabs(d)]


def git_env(git_dir: Path, work_tree: Path) -> dict[str, str]:
    """The environment of every snapshot git call: the process's minus ``GIT_*``, ``HOME`` and
    ``XDG_CONFIG_HOME``, with no system or global configuration and its own repository."""
    dropped = ("HOME", "XDG_CONFIG_HOME", "PAGER", "PATH")
    env = {
        k: v for k, v in os.environ.items() if not k.upper().startswith("GIT_") and k not in dropped
    }
    ceiling = dict.fromkeys((str(work_tree), str(work_tree.parent)))
    env.update(
        {
            "PATH": os.pathsep.join(_absolute_path()),
            "HOME": str(git_dir),
            "XDG_CONFIG_HOME": str(git_dir / "xdg"),  # neither holds a config
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_SYSTEM": os.devnull,
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(work_tree),
            "GIT_CEILING_DIRECTORIES": os.pathsep.join(ceiling),
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PROTOCOL_FROM_USER": "0",
            "LC_ALL": "C",
        }
    )
    return env


class Snapshot:
    """The shadow repository of one session over its working directory."""

    def __init__(
        self,
        git_dir: str | os.PathLike,
        work_tree: str | os.PathLike,
        *,
        max_file_size: int = DEFAULTS.max_file_size,
        max_files: int = DEFAULTS.max_files,
        exclude: Iterable[str] = DEFAULTS.exclude,
        private: Iterable[str | os.PathLike] = (),
        refused: str | None = None,
    ) -> None:
        self.refused = refused  # why no repository may be used (its path left the data directory)
        self.git_dir = Path(git_dir).absolute()
        self.work_tree = Path(work_tree).resolve()
        self.max_file_size = int(max_file_size)
        self.max_files = int(max_files)
        self.exclude = tuple(exclude)
        # folders inside the work tree that hold our own data (the history, this repo): never tracked
        self.private = tuple(Path(p).resolve() for p in private)
        self._last: tuple[tuple, str] | None = (
            None  # (index file stat, its tree): skips a write-tree
        )
        self._hardened = False
        self._trees: set[str] | None = None  # the trees listed in <repo>/trees

    @classmethod
    def for_session(
        cls,
        data_dir: str | os.PathLike,
        session_id: str,
        directory: str | os.PathLike,
        options: SnapshotSettings | None = None,
    ) -> Snapshot:
        opts = options or DEFAULTS
        data_dir = Path(data_dir)
        try:
            git_dir, refused = repo_path(data_dir, session_id), None
        except UsageError as err:  # contained like every snapshot failure: off, with the reason
            git_dir, refused = data_dir / "snapshot", str(err)
        return cls(
            git_dir,
            directory,
            max_file_size=opts.max_file_size,
            max_files=opts.max_files,
            exclude=opts.exclude,
            private=(data_dir,),
            refused=refused,
        )

    # -- state -----------------------------------------------------------------

    @property
    def disabled_reason(self) -> str | None:
        if self.refused:
            return self.refused
        if not git_available():
            return "git is not installed"
        if not self.work_tree.is_dir():
            return f"{self.work_tree} is not a directory"
        for private in self.private:  # never snapshot (nor ever restore) our own history
            if self.work_tree == private or private in self.work_tree.parents:
                return f"the session directory is inside the data directory {private}"
        try:
            return (self.git_dir / "disabled").read_text().strip() or "disabled"
        except FileNotFoundError:
            return None

    @property
    def large_files(self) -> dict[str, int]:
        """Relative path → size of the files left out for being larger than ``max_file_size``."""
        try:
            return json.loads((self.git_dir / "large.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    # -- git -------------------------------------------------------------------

    def _git(self, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
        git = git_executable()
        if git is None:
            raise SnapshotError("git is not installed")
        options = [x for pair in (("-c", o) for o in ISOLATION) for x in pair]
        try:
            proc = subprocess.run(
                [git, "--no-pager", *options, *args],
                input=input,
                capture_output=True,
                env=git_env(self.git_dir, self.work_tree),
                cwd=self.work_tree,
                timeout=GIT_TIMEOUT,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SnapshotError(f"git {args[0]}: {err}") from None
        if check and proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            raise SnapshotError(
                f"git {args[0]}: {lines[0] if lines else f'exit {proc.returncode}'}"
            )
        return proc.stdout

    def init(self) -> None:
        if (self.git_dir / "HEAD").exists():
            self._harden()
            return
        self.git_dir.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "--template=")  # no hooks or info/ copied from a template
        for key, value in (
            ("core.autocrlf", "false"),
            ("core.longpaths", "true"),
            ("core.symlinks", "true"),
            ("core.fsmonitor", "false"),
            ("core.quotepath", "false"),
            ("gc.auto", "0"),
            ("core.untrackedCache", "true"),
            ("advice.addEmbeddedRepo", "false"),
            ("core.hooksPath", os.devnull),
        ):
            self._git("config", key, value)
        (self.git_dir / TREES).touch()  # a new repository: only trees listed there are restored
        self._write_exclude(self.large_files)
        self._harden()

    def _harden(self) -> None:
        """Write ``info/attributes`` (older repositories lack it); once per object."""
        if self._hardened:
            return
        path = self.git_dir / "info" / "attributes"
        try:
            current = path.read_text()
        except OSError:
            current = None
        if current != ATTRIBUTES:
            path.parent.mkdir(exist_ok=True)
            path.write_text(ATTRIBUTES)
        self._hardened = True

    # -- the trees this repository produced ----------------------------------------

    def took(self, tree: str) -> bool:
        """Whether ``tree`` is a snapshot this repository produced (what a revert may restore)."""
        if self.refused or not ids.is_hash(tree):
            return False
        return tree in self._tree_list() or LEGACY in self._tree_list()

    def _tree_list(self) -> set[str]:
        if self._trees is None:
            path = self.git_dir / TREES
            try:
                self._trees = set(path.read_text(encoding="ascii", errors="replace").split())
            except FileNotFoundError:
                self._trees = set()
                if (self.git_dir / "HEAD").exists():  # made before lists were kept: all its own
                    path.write_text(LEGACY + "\n")
                    self._trees.add(LEGACY)
        return self._trees

    def _taken(self, tree: str) -> None:
        trees = self._tree_list()
        if tree in trees:
            return
        with open(self.git_dir / TREES, "a", encoding="ascii") as fh:
            fh.write(tree + "\n")
        trees.add(tree)

    def _write_exclude(self, large: Mapping[str, int]) -> None:
        lines = ["# written by jupyter-session-agent; rewritten on every change", *self.exclude]
        for private in (*self.private, self.git_dir):
            try:
                rel = private.resolve().relative_to(self.work_tree)
            except ValueError:
                continue
            if str(rel) != ".":
                lines.append(_anchored(rel.as_posix()) + "/")
        real = (
            self.work_tree / ".git" / "info" / "exclude"
        )  # OpenCode copies the real repo's excludes too
        if real.is_file():
            lines.append(real.read_text(errors="replace"))
        lines += [_anchored(path) for path in sorted(large)]
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "exclude").write_text("\n".join(lines) + "\n")

    def _disable(self, reason: str) -> None:
        (self.git_dir / "disabled").write_text(reason + "\n")

    # -- the three operations ----------------------------------------------------

    def track(self) -> str | None:
        """Stage the work tree and return its tree hash; ``None`` when disabled."""
        if self.disabled_reason:
            return None
        self.init()
        large = self.large_files
        # a large file that shrank or disappeared is tracked (or forgotten) again
        kept = {p: s for p, s in large.items() if _size(self.work_tree / p) > self.max_file_size}
        if kept != large:
            self._save_large(kept)
            large = kept
        out = self._git(
            "ls-files", "-z", "--others", "--modified", "--deleted", "--exclude-standard"
        )
        # "dir/" is a nested repository: its files are its own (not snapshotted, not even as a
        # gitlink: one without a commit would fail `git add`)
        listed = out.decode("utf-8", "surrogateescape").split("\0")
        candidates = sorted({p for p in listed if p and p[-1] != "/"})
        first = not (self.git_dir / "index").exists()
        if first and len(candidates) > self.max_files:
            self._disable(
                f"{self.work_tree} holds {len(candidates):,} files to track (more than max_files="
                f"{self.max_files:,}); snapshots are off for this session"
            )
            return None
        small, big = [], {}
        for path in candidates:
            size = _size(self.work_tree / path)
            if size > self.max_file_size:
                big[path] = size
            else:
                small.append(path)
        if big:
            self._save_large({**large, **big})
            # a tracked file that grew past the limit leaves the index (its old content stays in old trees)
            self._git(
                "rm",
                "-q",
                "-f",
                "--cached",
                "--ignore-unmatch",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=_nul(big),
            )
        if small:
            # --ignore-errors: a file that cannot be read (unreadable, or rewritten by another
            # process while git reads it) is left out and the others are snapshotted; git still
            # exits 1 then, which must not lose the whole snapshot (and the step's attribution)
            self._git(
                "add",
                "-A",
                "-f",
                "--ignore-errors",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=_nul(small),
                check=False,
            )
        key = self._index_key()
        if self._last is not None and self._last[0] == key and key:
            return self._last[1]  # nothing staged, index untouched since: the same tree
        tree = self._git("write-tree").decode().strip()
        self._taken(tree)
        self._last = (self._index_key(), tree)
        return tree

    def _index_key(self) -> tuple:
        try:
            st = os.stat(self.git_dir / "index")
        except FileNotFoundError:
            return ()
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _save_large(self, large: Mapping[str, int]) -> None:
        (self.git_dir / "large.json").write_text(json.dumps(dict(large), indent=0, sort_keys=True))
        self._write_exclude(large)

    def changed(self, before: str, after: str) -> list[str]:
        """Absolute paths that differ between two trees (added, modified or deleted)."""
        if before == after:
            return []
        out = self._git("diff-tree", "-r", "-z", "--name-only", "--no-renames", before, after)
        return [
            str(self.work_tree / p) for p in out.decode("utf-8", "surrogateescape").split("\0") if p
        ]

    def diff(self, before: str, after: str) -> str:
        """The unified diff between two trees, cut at :data:`DIFF_LIMIT` characters."""
        if before == after:
            return ""
        out = self._git(
            "diff", "--no-color", "--no-ext-diff", "--no-textconv", before, after, check=False
        )
        text = out.decode("utf-8", "replace")
        return text if len(text) <= DIFF_LIMIT else text[:DIFF_LIMIT] + "\n… (diff cut)\n"

    def restore(self, tree: str, files: Iterable[str]) -> RestoreResult:
        """Put ``files`` (absolute paths) back as they are in ``tree``; delete those it lacks.

        A file that is currently excluded for its size is left alone (it was
        never snapshotted, so overwriting it could not be undone).
        """
        if not self.took(tree):
            raise SnapshotError(
                f"tree {ids.shown(tree, 20)} is not a snapshot taken here for this session"
            )
        self._harden()
        result = RestoreResult()
        rels = {}
        for path in files:
            rel = self._inside(path)
            if rel is None:
                result.skipped.append(path)
            else:
                rels[rel] = path
        if not rels:
            return result
        present = set(
            self._git("ls-tree", "-r", "-z", "--name-only", tree)
            .decode("utf-8", "surrogateescape")
            .split("\0")
        ) - {""}
        large = self.large_files
        checkout = []
        for rel, path in sorted(rels.items()):
            if rel in large or _size(self.work_tree / rel) > self.max_file_size:
                result.skipped.append(path)
            elif rel in present:
                checkout.append(rel)
                result.restored.append(path)
            else:
                try:
                    (self.work_tree / rel).unlink()
                    result.deleted.append(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    result.skipped.append(path)
        if checkout:
            self._git(
                "checkout",
                "-q",
                "-f",
                tree,
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=_nul(checkout),
            )
        return result

    def _inside(self, path: str) -> str | None:
        """``path`` relative to the work tree, or None when it is outside (after ``..`` and
        symlinked folders are resolved), the work tree itself, or inside a ``.git`` folder."""
        if not isinstance(path, str) or "\0" in path:
            return None
        full = Path(os.path.normpath(os.path.join(self.work_tree, path)))
        try:
            rel = full.relative_to(self.work_tree)
        except ValueError:
            return None
        if not rel.parts or ".git" in rel.parts:
            return None
        parent = full.parent.resolve()
        if parent != self.work_tree and self.work_tree not in parent.parents:
            return None
        return rel.as_posix()


TREES = "trees"  # in the shadow repo: the tree hashes track() returned, one a line
LEGACY = "*"  # the list of a repository made before lists were kept: every tree in it is its own


def repo_path(data_dir: str | os.PathLike, session_id: str) -> Path:
    """``<data_dir>/snapshot/<session_id>``; a session id that is not one, or a path that would
    leave the data directory, is refused (one line)."""
    ids.check(session_id, "session")
    return ids.safe_child(data_dir, "snapshot", session_id, what="the snapshot folder of session")


def copy_repo(data_dir: str | os.PathLike, source_id: str, target_id: str) -> None:
    """Give a fork its source's objects (hard links: git objects never change), so
    the trees that copied ``patch`` parts name resolve in the fork's own repo."""
    try:
        src, dst = repo_path(data_dir, source_id), repo_path(data_dir, target_id)
    except UsageError:  # a path that would leave the data directory is never copied from or to
        return
    if not (src / "HEAD").exists() or dst.exists():
        return
    shutil.copytree(
        src, dst, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("index.lock")
    )


def remove_repo(data_dir: str | os.PathLike, session_id: str) -> None:
    try:
        path = repo_path(data_dir, session_id)
    except UsageError:  # never removes anything outside the data directory
        return
    shutil.rmtree(path, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    if "/objects/" in src.replace(os.sep, "/"):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)


def _size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return -1
    return st.st_size if not os.path.islink(path) else 0


def _nul(paths: Iterable[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _anchored(rel: str) -> str:
    """A gitignore pattern that matches exactly ``rel`` (relative to the work tree)."""
    escaped = "".join("\\" + c if c in "\\*?[!#" else c for c in rel)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped
