"""Passage vectors on disk, shared by every kernel, computed in the background.

One module: the file format, its locking and the background worker that appends to it are one
protocol; the worker is the file's only writer.

One file per embedding model, ``<data_dir>/memory/.embeddings/<model>.vec``:
a 32-byte header (magic, dimension, hash of the model name) and fixed-size
records ``sha1(text) · crc32 · float32[dim]``. A vector is keyed by the hash
of the text it embeds, so it is computed once whatever session, kernel or
process needs it, and an edited text simply gets a new key.

Concurrency: writers append whole records under an exclusive ``flock`` (and
first cut a torn record left by a writer that died); readers read under a
shared lock from where they stopped, so a kernel sees the vectors another one
added without rereading the file. A file whose header is wrong (another
model's dimension, not ours, garbage) is set aside as ``.corrupt`` with one
warning and started afresh; a record whose checksum fails is skipped, with
one warning.

:class:`Worker` embeds missing passages in small batches on a daemon thread,
so a turn never waits for them; a search waits for its own missing vectors
only up to ``memory.embeddings_wait`` seconds and ranks the rest by BM25.
"""

from __future__ import annotations

import atexit
import fcntl  # POSIX only, as the store's journals are
import hashlib
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .embed import Embedder, warn_once

MAGIC = b"JSAVEC1\n"
HEADER = struct.Struct("<8sI20s")  # magic, dimension, sha1(model name)
KEY = 20
BATCH = 8  # passages per call into the model: a query waits for at most one batch


def text_key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


class VectorFile:
    """The vectors of one model: in memory, and appended to the shared file."""

    def __init__(self, folder: Path, model: str, dim: int):
        self.model, self.dim = model, int(dim)
        self.path = Path(folder) / (re.sub(r"[^\w.-]+", "_", model) + ".vec")
        self._header = HEADER.pack(MAGIC, self.dim, hashlib.sha1(model.encode()).digest())
        self._record = KEY + 4 + 4 * self.dim
        self._vectors: dict[bytes, Any] = {}
        self._offset = 0
        self._inode: tuple | None = None
        self._lock = threading.Lock()
        self.version = 0  # bumped whenever vectors are added

    def __contains__(self, key: bytes) -> bool:
        return key in self._vectors

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, key: bytes):
        return self._vectors.get(key)

    # -- reading --------------------------------------------------------------------

    def sync(self) -> None:
        """Read what other writers appended since the last call (or the whole file, if new)."""
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                _lock(fd, shared=True)
                st = os.fstat(fd)
                inode = (st.st_dev, st.st_ino)
                if inode != self._inode:
                    self._offset, self._inode = 0, inode
                if st.st_size <= self._offset:
                    return
                if self._offset == 0:
                    head = os.pread(fd, HEADER.size, 0)
                    if len(head) < HEADER.size:
                        return  # being created: its header is not there yet
                    if head != self._header:
                        self._set_aside(fd, "its header is not this model's")
                        return
                    self._offset = HEADER.size
                usable = (st.st_size - self._offset) // self._record * self._record
                data = os.pread(fd, usable, self._offset) if usable else b""
            finally:
                _unlock(fd)
                os.close(fd)
            self._offset += len(data)
            self._load(data)

    def _load(self, data: bytes) -> None:
        import numpy as np

        bad = 0
        for start in range(0, len(data) - self._record + 1, self._record):
            record = data[start : start + self._record]
            key, crc, body = record[:KEY], record[KEY : KEY + 4], record[KEY + 4 :]
            if struct.unpack("<I", crc)[0] != zlib.crc32(key + body):
                bad += 1
                continue
            vector = np.frombuffer(body, dtype="<f4")
            if not np.isfinite(vector).all():
                bad += 1
                continue
            self._vectors[key] = vector
        if bad:
            warn_once(
                ("records", str(self.path)),
                f"memory: skipped {bad} damaged vector(s) in {self.path} (they are computed again)",
            )
        if data:
            self.version += 1

    def _set_aside(self, fd: int, why: str) -> None:
        """Move a file that is not ours out of the way (once), keeping it for inspection."""
        warn_once(
            ("corrupt", str(self.path)),
            f"memory: ignoring the embedding cache {self.path} ({why}); it is kept as "
            f"{self.path.name}.corrupt and the vectors are computed again",
        )
        try:
            st = os.fstat(fd)
            now = os.stat(self.path)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.replace(self.path, self.path.with_name(self.path.name + ".corrupt"))
        except OSError:
            pass
        self._offset, self._inode = 0, None

    # -- writing ----------------------------------------------------------------------

    def add(self, keys: list[bytes], vectors) -> None:
        """Keep ``vectors`` (rows, unit length) and append them to the shared file."""
        import numpy as np

        vectors = np.asarray(vectors, dtype="<f4")
        records = []
        with self._lock:
            for key, vector in zip(keys, vectors):
                if vector.shape != (self.dim,):
                    raise ValueError(
                        f"the model returned {vector.shape[0]} dimensions, not {self.dim}"
                    )
                body = vector.tobytes()
                records.append(key + struct.pack("<I", zlib.crc32(key + body)) + body)
                self._vectors[key] = np.frombuffer(body, dtype="<f4")
            self.version += 1
        if records:
            self._append(b"".join(records))

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                _lock(fd, shared=False)
                size = os.fstat(fd).st_size
                if size == 0:
                    os.write(fd, self._header)
                    size = HEADER.size
                elif os.pread(fd, HEADER.size, 0) != self._header:
                    self._set_aside(fd, "its header is not this model's")
                    continue  # start a new file
                torn = (size - HEADER.size) % self._record
                if torn:  # a writer died mid-record: cut it, or every later record is misread
                    os.ftruncate(fd, size - torn)
                os.write(fd, data)
                return
            finally:
                _unlock(fd)
                os.close(fd)


def _lock(fd: int, *, shared: bool) -> None:
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


_files: dict[tuple, VectorFile] = {}
_files_lock = threading.Lock()


def vector_file(data_dir: str | os.PathLike, model: str, dim: int) -> VectorFile:
    """The process-wide :class:`VectorFile` of ``model`` under ``data_dir``."""
    folder = Path(data_dir) / "memory" / ".embeddings"
    key = (str(folder.resolve()), model, int(dim))
    with _files_lock:
        found = _files.get(key)
        if found is None:
            found = _files[key] = VectorFile(folder, model, dim)
        return found


class Worker:
    """Embeds missing passages on one daemon thread, a few at a time; started on demand."""

    def __init__(self, embedder: Embedder, vectors: VectorFile):
        self.embedder, self.vectors = embedder, vectors
        self._queue: dict[bytes, str] = {}  # key → text, in arrival order
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.error: str = ""
        self.embedded = 0

    def submit(self, items: Iterable[tuple[bytes, str]]) -> int:
        """Queue the passages not cached yet; returns how many are pending."""
        with self._cond:
            for key, text in items:
                if key not in self.vectors and key not in self._queue:
                    self._queue[key] = text
            idle = self._thread is None or not self._thread.is_alive()
            if self._queue and idle and not self._stop:
                self.error = ""
                self._thread = threading.Thread(
                    target=self._run, name="memory-embeddings", daemon=True
                )
                self._thread.start()
            return len(self._queue)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def wait(self, keys: Iterable[bytes], timeout: float) -> bool:
        """Wait until ``keys`` have vectors (or the worker failed) for at most ``timeout`` s."""
        keys = list(keys)
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while True:
                if all(k in self.vectors for k in keys):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or self.error or not (self._thread and self._thread.is_alive()):
                    return all(k in self.vectors for k in keys)
                self._cond.wait(min(left, 0.5))

    def _run(self) -> None:
        while True:
            with self._cond:
                batch = list(self._queue.items())[:BATCH]
                if not batch or self._stop:
                    self._cond.notify_all()
                    return
            try:
                vectors = self.embedder.passages([text for _, text in batch])
                self.vectors.add([key for key, _ in batch], vectors)
            except Exception as err:  # an endpoint down: BM25 for what is missing, said once
                self.error = f"{type(err).__name__}: {err}"
                warn_once(
                    ("worker", self.embedder.name),
                    f"memory: embedding passages failed ({self.error}); the passages "
                    "without vectors are ranked by BM25 only",
                )
                with self._cond:
                    self._queue.clear()
                    self._cond.notify_all()
                return
            with self._cond:
                for key, _ in batch:
                    self._queue.pop(key, None)
                self.embedded += len(batch)
                self._cond.notify_all()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)


_workers: dict[tuple, Worker] = {}
_workers_lock = threading.Lock()


def worker(embedder: Embedder, vectors: VectorFile) -> Worker:
    """The process-wide worker of one embedder and vector file."""
    key = (id(embedder), str(vectors.path))
    with _workers_lock:
        found = _workers.get(key)
        if found is None or found.embedder is not embedder:
            found = _workers[key] = Worker(embedder, vectors)
        return found


@atexit.register
def _stop_workers() -> None:  # let a batch in the C engine finish instead of dying inside it
    for w in list(_workers.values()):
        w.stop(timeout=5.0)


__all__ = ["VectorFile", "Worker", "vector_file", "worker", "text_key"]
