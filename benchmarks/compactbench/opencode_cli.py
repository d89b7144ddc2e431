"""The real OpenCode CLI (npm ``opencode-ai``), installed, isolated and driven.

Used by CompactBench's "real OpenCode" column and by ``benchmarks/opencode_fixture.py``
(which writes the import tests' fixture). Nothing here is imported by the package.

* :func:`ensure_opencode` finds the binary (``$OPENCODE_BIN``, the cache folder, or
  ``tests/.opencode-node`` where ``.ci/run`` puts it) and otherwise installs
  ``opencode-ai@VERSION`` with npm into the cache folder (``$COMPACTBENCH_CACHE``, default
  ``~/.cache/jupyter-session-agent``), saying so on stderr. The npm package pulls its
  platform binary (``opencode-linux-x64`` …) as an optional dependency.
* :class:`Sandbox` is one isolated OpenCode: its own ``HOME`` and ``XDG_*`` folders, a
  project folder, ``OPENCODE_DISABLE_AUTOUPDATE`` / ``_SHARE`` / ``_MODELS_FETCH`` /
  ``_LSP_DOWNLOAD`` (and ``_CLAUDE_CODE``, ``_EXTERNAL_SKILLS``) set, and an
  ``opencode.json`` whose only provider is ``@ai-sdk/openai-compatible`` (bundled in the
  binary: nothing is downloaded) with ``options.baseURL`` at a scripted server and one
  model whose ``limit.context`` / ``limit.output`` are the scenario's and ``limit.input``
  their difference (what the server enforces: without it OpenCode 1.18 triggers only at the
  hard limit).
* :meth:`Sandbox.run` is ``opencode run`` (the message goes on stdin: as an argument,
  ``opencode run`` wraps text with spaces in quotes). :meth:`Sandbox.serve` starts
  ``opencode serve``; :class:`Serve` posts prompts (``POST /session/<id>/message``, what
  ``opencode run`` sends to its own in-process server) and manual compactions
  (``POST /session/<id>/summarize``; ``opencode run --command compact`` does not work).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "1.18.33"
PACKAGE = "opencode-ai"
PROVIDER, MODEL = "scripted", "bench"
REPO = Path(__file__).resolve().parents[2]
DISABLE = ("AUTOUPDATE", "SHARE", "MODELS_FETCH", "LSP_DOWNLOAD", "CLAUDE_CODE", "EXTERNAL_SKILLS")


class OpenCodeUnavailable(RuntimeError):
    """The CLI is not installed and cannot be installed here (one line: why, and the fix)."""


def cache_dir() -> Path:
    base = os.environ.get("COMPACTBENCH_CACHE")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "jupyter-session-agent"


def _prefixes(version: str) -> list[Path]:
    return [cache_dir() / f"{PACKAGE}-{version}", REPO / "tests" / ".opencode-node"]


def _binaries(prefix: Path) -> list[Path]:
    """The platform binaries npm put under ``prefix`` (``node_modules/opencode-<platform>/bin/
    opencode``; the ``-baseline`` builds, for CPUs without AVX2, last), then npm's ``.bin`` link:
    the binary itself is run, so no node wrapper sits between us and the process we stop."""
    found = sorted(
        (prefix / "node_modules").glob("opencode-*/bin/opencode"),
        key=lambda p: ("baseline" in p.parent.parent.name, p.parent.parent.name),
    )
    link = prefix / "node_modules" / ".bin" / "opencode"
    return [p for p in [*found, link] if p.exists() and os.access(p, os.X_OK)]


@functools.cache
def version_of(binary: Path) -> str:
    """``opencode --version`` ("" when the binary does not run here)."""
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **{f"OPENCODE_DISABLE_{k}": "1" for k in DISABLE}},
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""


def find_opencode(version: str = VERSION) -> Path | None:
    """An installed binary of ``version`` (``$OPENCODE_BIN`` is taken as it is), else None."""
    if os.environ.get("OPENCODE_BIN"):
        return Path(os.environ["OPENCODE_BIN"])
    for prefix in _prefixes(version):
        for binary in _binaries(prefix):
            if version_of(binary) == version:
                return binary
    return None


def ensure_opencode(version: str = VERSION, *, log=None) -> Path:
    """The binary, installed with npm into the cache folder when missing (and said so)."""
    found = find_opencode(version)
    if found is not None:
        return found
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    npm = shutil.which("npm")
    if npm is None:
        raise OpenCodeUnavailable(
            f"{PACKAGE}@{version} is not installed and npm is missing — install "
            f"Node.js, or set OPENCODE_BIN to an opencode {version} binary"
        )
    prefix = _prefixes(version)[0]
    prefix.mkdir(parents=True, exist_ok=True)
    log(f"installing {PACKAGE}@{version} with npm into {prefix} (about 100 MB, once)")
    started = time.monotonic()
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"{PACKAGE}@{version}",
        ],
        capture_output=True,
        text=True,
    )
    binary = next((b for b in _binaries(prefix) if version_of(b) == version), None)
    if done.returncode != 0 or binary is None:
        why = (done.stderr.strip().splitlines() or ["no platform binary runs here"])[-1]
        raise OpenCodeUnavailable(f"npm could not install {PACKAGE}@{version}: {why[:200]}")
    log(f"installed {PACKAGE}@{version} in {time.monotonic() - started:.0f} s: {binary}")
    return binary


# --------------------------------------------------------------------------
# one isolated OpenCode


@dataclass
class Sandbox:
    """An isolated OpenCode (home, XDG folders, project, config) pointed at ``base_url``."""

    root: Path
    binary: Path
    base_url: str
    context: int
    output: int
    auto: bool = True
    prune: bool = True
    tools: tuple[str, ...] | None = None  # the tools the model gets (None: all of OpenCode's)
    instructions: str | None = (
        None  # written to the project's AGENTS.md (part of the system prompt)
    )
    prices: tuple[float, float] = (1.0, 4.0)  # USD per million input / output tokens
    extra_config: dict = field(default_factory=dict)
    models: dict = field(
        default_factory=dict
    )  # more models of the provider: name → (context, output)

    ALL_TOOLS = (
        "bash",
        "edit",
        "glob",
        "grep",
        "list",
        "read",
        "skill",
        "task",
        "todowrite",
        "todoread",
        "webfetch",
        "websearch",
        "write",
        "patch",
        "multiedit",
        "question",
    )

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        for sub in (".config", ".local/share", ".cache", ".local/state"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.write_config()

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def data_dir(self) -> Path:
        return self.home / ".local" / "share" / "opencode"

    @property
    def db(self) -> Path:
        return self.data_dir / "opencode.db"

    @property
    def model(self) -> str:
        return f"{PROVIDER}/{MODEL}"

    def env(self) -> dict[str, str]:
        keep = {
            k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")
        }
        home = str(self.home)
        return {
            **keep,
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "NO_COLOR": "1",
            **{f"OPENCODE_DISABLE_{k}": "1" for k in DISABLE},
        }

    def config(self) -> dict[str, Any]:
        def model(name: str, context: int, output: int) -> dict[str, Any]:
            return {
                "name": name,
                # input = context − output, as the server enforces: OpenCode 1.18 subtracts its
                # reserve (its early trigger) only when ``limit.input`` is set
                "limit": {"context": context, "input": context - output, "output": output},
                "cost": {"input": self.prices[0], "output": self.prices[1]},
                "tool_call": True,
                "attachment": True,
                "modalities": {"input": ["text", "image"], "output": ["text"]},
            }

        models = {
            MODEL: model(MODEL, self.context, self.output),
            **{name: model(name, *limits) for name, limits in self.models.items()},
        }
        permission: dict[str, Any] = {"*": "allow", "external_directory": "allow"}
        if self.tools is not None:
            permission.update({t: "deny" for t in self.ALL_TOOLS if t not in self.tools})
        return {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "compaction": {"auto": self.auto, "prune": self.prune},
            "permission": permission,
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted",
                    "options": {"baseURL": self.base_url, "apiKey": "sk-scripted"},
                    "models": models,
                }
            },
            "model": self.model,
            "small_model": self.model,
            **self.extra_config,
        }

    def write_config(self) -> None:
        (self.project / "opencode.json").write_text(json.dumps(self.config(), indent=1))
        if self.instructions:
            (self.project / "AGENTS.md").write_text(self.instructions)

    def run(
        self,
        text: str,
        *,
        session: str | None = None,
        attach: str | None = None,
        files: tuple[str, ...] = (),
        model: str | None = None,
        title: str | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess:
        """``opencode run`` with ``text`` on stdin (as an argument it would be quoted)."""
        model = f"{PROVIDER}/{model}" if model else self.model
        args = [str(self.binary), "run", "--pure", "-m", model, "--format", "json"]
        if session:
            args += ["-s", session]
        if title:
            args += ["--title", title]
        if attach:
            args += ["--attach", attach, "--dir", str(self.project)]
        for f in files:
            args += ["-f", f]
        return subprocess.run(
            args,
            input=text,
            capture_output=True,
            text=True,
            cwd=self.project,
            env=self.env(),
            timeout=timeout,
        )

    def serve(self) -> Serve:
        return Serve(self).start()


def session_of(run: subprocess.CompletedProcess) -> str | None:
    """The session id in ``opencode run --format json`` output."""
    found = re.search(r'"sessionID"\s*:\s*"(ses_[\w-]+)"', run.stdout)
    return found.group(1) if found else None


class Serve:
    """``opencode serve`` on a free port, and its HTTP API."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log: list[str] = []

    def start(self, timeout: float = 60) -> Serve:
        sb = self.sandbox
        self.proc = subprocess.Popen(
            [str(sb.binary), "serve", "--pure", "--port", "0"],
            cwd=sb.project,
            env=sb.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line.rstrip())
            found = re.search(r"listening on (http://[\d.:]+)", line)
            if found:
                self.url = found.group(1)
                return self
        self.stop()
        raise OpenCodeUnavailable("opencode serve did not start: " + " / ".join(self.log[-3:]))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def call(self, method: str, path: str, body: Any = None, timeout: float = 900) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise RuntimeError(
                f"opencode serve: {method} {path} → {err.code}: "
                f"{err.read()[:300].decode(errors='replace')}"
            ) from None
        return json.loads(raw) if raw.strip() else None

    def new_session(self, title: str | None = None) -> str:
        return self.call("POST", "/session", {"title": title} if title else {})["id"]

    def prompt(
        self,
        session: str,
        text: str,
        files: tuple[dict, ...] = (),
        agent: str | None = None,
        model: str = MODEL,
    ) -> Any:
        parts: list[dict] = [
            {"type": "text", "text": text},
            *({"type": "file", **f} for f in files),
        ]
        body: dict[str, Any] = {"parts": parts, "model": {"providerID": PROVIDER, "modelID": model}}
        if agent:
            body["agent"] = agent
        return self.call("POST", f"/session/{session}/message", body)

    def summarize(self, session: str, model: str = MODEL) -> Any:
        return self.call(
            "POST", f"/session/{session}/summarize", {"providerID": PROVIDER, "modelID": model}
        )
