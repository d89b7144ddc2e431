"""Files and notebook values attached to a prompt, as OpenCode's ``file`` parts.

One module: the three ways in make the same :class:`Attachment` under one set of size limits
and one way of inlining text, images and PDFs; each way is a few lines over that.

Three ways in: ``%%agent -f PATH`` (repeatable; ``*``/``?``/``[…]``/``**`` globs), ``@path``
mentions in the prompt, ``-a VAR`` (a value of the namespace). Each becomes an
:class:`Attachment`, stored as a ``file`` part (``mime``, ``filename``, ``url``, ``source``)
and, when the model reads it as text, a synthetic text part before it:

- a text file: its content inlined in ``<file path="…">`` (at most :data:`MAX_TEXT_BYTES` /
  :data:`MAX_TEXT_LINES`, with a note saying how much was cut), ``mime`` ``text/plain``,
  ``url`` ``file://…`` (the history sends the text, not the file part);
- an image (PNG, JPEG, GIF, WebP by their bytes): a ``data:`` URL sent as image content to a
  model that accepts images, as ``[Attached image/png: name]`` to one that does not;
- a PDF: its text (``pypdf``), page by page, capped like a text file;
- ``-a VAR``: a DataFrame as its schema, shape and first rows, any value as its description
  (``kernel.describe``); a matplotlib figure (or axes) or a PIL image as a PNG image.

A mention is ``@`` at the start of the prompt or after a space or an opening bracket or
quote, followed by a path that holds a ``/`` or a ``.`` (``@data/x.csv``, ``@notes.md``,
``@"my file.txt"`` for spaces), outside code spans and ``{…}`` fields, naming a file that
exists (trailing punctuation is not part of it). So e-mail addresses (``me@example.com``: no
space before the ``@``), decorators (``@property``, ``@app.route`` — no such file) and
handles stay text. ``-f`` is explicit: a path that does not exist, a glob that matches
nothing, a folder, a binary file, a file over :data:`MAX_FILE_BYTES` (checked before
reading), an image over :data:`MAX_IMAGE_BYTES`, an unreadable or encrypted PDF, more than
:data:`MAX_FILES` attachments — each a one-line :class:`ContextError`.
"""

from __future__ import annotations

import base64
import glob
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ToolFailure
from ..core.redact import clean
from ..tools import kernel
from ..tools.kernel import human
from ..tools.paths import is_binary, open_regular
from . import ContextError
from .interpolate import is_reference, resolve
from .markdown import code_spans

MAX_FILES = 20  # attachments per prompt
MAX_FILE_BYTES = 20 * 1024 * 1024  # a file larger than this is refused before it is read
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # an image is sent whole, in every request of the session
MAX_TEXT_BYTES = 50 * 1024  # text inlined per attachment (the tools' output limit)
MAX_TEXT_LINES = 2000
_IMAGES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_MENTION = re.compile(
    r"""(?<![^\s(\[<"'])@"""  # "@" at the start or after a space, "(" …
    r"""(?:"(?P<quoted>[^"\n]+)"|(?P<bare>[^\s"'`<>()\[\]{},;]+))"""
)
_TRAILING = ".,:;!?"


@dataclass(frozen=True)
class Attachment:
    """One attached file or value: what its ``file`` part holds, and what the model reads
    (``text``; ``None`` for an image, sent as image content)."""

    mime: str
    filename: str
    url: str
    text: str | None
    source: Mapping[str, Any] = field(default_factory=dict)
    size: int = 0  # bytes of the file (of the PNG, of the description)

    @property
    def key(self) -> str:
        """What makes two attachments the same (a file's real path, a value's name)."""
        return str(self.source.get("path") or self.source.get("name") or self.url)


# --------------------------------------------------------------------------
# files


def from_patterns(patterns: list[str], cwd: Path) -> list[Attachment]:
    """``-f`` arguments (paths or globs, relative to ``cwd``) as attachments, in order."""
    found: list[Attachment] = []
    for pattern in patterns:
        for path in _expand(pattern, cwd):
            found.append(from_path(path, cwd, given=f"-f {pattern}"))
    return found


def _expand(pattern: str, cwd: Path) -> list[Path]:
    if "\x00" in pattern:
        raise ContextError(f"-f {pattern!r}: the path holds a NUL character — remove it")
    text = os.path.expanduser(pattern)
    full = text if os.path.isabs(text) else os.path.join(cwd, text)
    if glob.has_magic(text):
        matches = [Path(p) for p in sorted(glob.glob(full, recursive=True))]
        files = [p for p in matches if p.is_file()]
        if not files:
            what = "only folders" if matches else "nothing"
            raise ContextError(
                f"-f {pattern}: the pattern matches {what} in {cwd} — check it "
                "(e.g. -f 'data/*.csv')"
            )
        if len(files) > MAX_FILES:
            raise ContextError(
                f"-f {pattern}: the pattern matches {len(files):,} files; at most "
                f"{MAX_FILES} can be attached — narrow the pattern"
            )
        return files
    path = Path(full)
    if not path.exists():
        raise ContextError(f"-f {pattern}: no such file in {cwd} — check the path")
    if path.is_dir():
        raise ContextError(
            f"-f {pattern}: that is a folder — attach its files with a glob, "
            f"e.g. -f '{pattern.rstrip('/')}/*'"
        )
    return [path]


def from_path(
    path: Path, cwd: Path, *, given: str | None = None, mention: Mapping[str, Any] | None = None
) -> Attachment:
    """The attachment for one existing file (its kind found from its bytes)."""
    real = Path(os.path.realpath(path))
    shown = _shown(path, cwd)
    given = given or f"@{shown}"
    try:
        size = os.stat(real).st_size
        if size > MAX_FILE_BYTES:
            raise ContextError(
                f"{given}: the file is {human(size)}; attachments are limited to "
                f"{human(MAX_FILE_BYTES)} — attach a smaller file or an extract "
                "of it"
            )
        with open_regular(real, "attach") as fh:  # a FIFO or a device: refused, never read
            head = fh.read(1024) or b""
    except ToolFailure as err:
        raise ContextError(f"{given}: {err} — attach a regular file") from None
    except OSError as err:
        raise ContextError(
            f"{given}: {err.strerror or err} — check the path and its permissions"
        ) from None
    source: dict[str, Any] = {"type": "file", "path": str(real), "size": size}
    if mention:
        source["text"] = dict(mention)
    image = _image_type(head)
    if image:
        if size > MAX_IMAGE_BYTES:
            raise ContextError(
                f"{given}: the image is {human(size)}; images are limited to "
                f"{human(MAX_IMAGE_BYTES)} — resize it or save it smaller"
            )
        data = _read(real, given)
        return Attachment(image, path.name, _data_url(image, data), None, source, size)
    if head.startswith(b"%PDF-") or real.suffix.lower() == ".pdf":
        text, pages = _pdf_text(real, given)
        header = (
            f"Attached PDF {shown} ({pages:,} page{'s' if pages != 1 else ''}, "
            f"{human(size)}); its text:"
        )
        return Attachment(
            "application/pdf",
            path.name,
            real.as_uri(),
            _file_block(header, real, text),
            {**source, "pages": pages},
            size,
        )
    if is_binary(real):
        raise ContextError(
            f"{given}: a binary file (not text, an image or a PDF) — attach a text "
            "file, a PNG/JPEG/GIF/WebP image or a PDF"
        )
    raw = _read(real, given)
    text = raw.decode("utf-8", errors="replace")
    header = f"Attached file {shown} ({human(size)}):"
    return Attachment(
        "text/plain", path.name, real.as_uri(), _file_block(header, real, text), source, size
    )


def _read(path: Path, given: str) -> bytes:
    try:
        with open_regular(path, "attach") as fh:
            return fh.read(MAX_FILE_BYTES + 1) or b""
    except OSError as err:
        raise ContextError(
            f"{given}: {err.strerror or err} — check the path and its permissions"
        ) from None


def _shown(path: Path, cwd: Path) -> str:
    try:
        return str(Path(os.path.abspath(path)).relative_to(os.path.abspath(cwd)))
    except ValueError:
        return str(path)


def _image_type(head: bytes) -> str | None:
    for magic, mime in _IMAGES:
        if head.startswith(magic):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _file_block(header: str, path: Path, text: str) -> str:
    """``header``, then ``text`` (capped) in ``<file path="…">``, with a note when cut."""
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    for line in lines[:MAX_TEXT_LINES]:
        cost = len(line.encode("utf-8", errors="replace")) + 1
        if used + cost > MAX_TEXT_BYTES:
            break
        kept.append(line)
        used += cost
    body = "\n".join(kept)
    if len(kept) < len(lines):
        body += (
            f"\n\n(Cut: {len(kept):,} of {len(lines):,} lines shown, at most "
            f"{MAX_TEXT_LINES:,} lines / {MAX_TEXT_BYTES // 1024} KB are attached; the read "
            "tool reads the rest)"
        )
    return f'{header}\n<file path="{path}">\n{body}\n</file>'


def _pdf_text(path: Path, given: str) -> tuple[str, int]:
    """The text of each page (``--- page N ---``), stopping once enough is kept; the count."""
    try:
        from pypdf import PdfReader
    except ImportError:  # pragma: no cover - a dependency
        raise ContextError(f"{given}: reading PDFs needs pypdf — pip install pypdf") from None
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ContextError(
                f"{given}: the PDF is encrypted — attach a decrypted copy, or its text"
            )
        pages = len(reader.pages)
        texts = []
        total = 0
        for number, page in enumerate(reader.pages, 1):
            text = (page.extract_text() or "").strip()
            texts.append(f"--- page {number} ---\n{text}")
            total += len(text)
            if total > MAX_TEXT_BYTES:
                break
    except ContextError:
        raise
    except Exception as err:  # pypdf raises many kinds for a damaged file
        raise ContextError(
            f"{given}: not a readable PDF ({type(err).__name__}: {err}) — check "
            "the file, or attach its text"
        ) from None
    if not any(t.split("\n", 1)[1].strip() for t in texts):
        raise ContextError(
            f"{given}: the PDF has no text to extract (scanned pages?) — attach "
            "its pages as images, or its text"
        )
    return "\n\n".join(texts), pages


# --------------------------------------------------------------------------
# @path mentions


def mentions(template: str, cwd: Path, skip: Sequence[tuple[int, int]] = ()) -> list[Attachment]:
    """The files ``@path`` mentions in ``template`` name (see the module docstring); spans in
    ``skip`` (interpolation fields) and code are not read."""
    blocked = sorted([*code_spans(template), *skip])
    found = []
    for match in _MENTION.finditer(template):
        if any(start <= match.start() < end for start, end in blocked):
            continue
        quoted = match.group("quoted")
        token = quoted if quoted is not None else match.group("bare")
        hit = _mentioned(token, cwd, quoted is not None)
        if hit is None:
            continue
        path, used = hit
        value = f"@{used}" if quoted is None else match.group(0)
        end = match.start() + len(value)
        found.append(
            from_path(
                path, cwd, given=value, mention={"value": value, "start": match.start(), "end": end}
            )
        )
    return found


def _mentioned(token: str, cwd: Path, quoted: bool) -> tuple[Path, str] | None:
    """The file a mention names and the text naming it (trailing punctuation dropped)."""
    candidates = [token]
    if not quoted:
        if "/" not in token and "." not in token:
            return None  # @property, @username: a word, not a path
        while token and token[-1] in _TRAILING:
            token = token[:-1]
            candidates.append(token)
    for candidate in candidates:
        if not candidate or "\x00" in candidate:
            continue
        text = os.path.expanduser(candidate)
        path = Path(text if os.path.isabs(text) else os.path.join(cwd, text))
        try:
            if path.is_file():
                return path, candidate
        except OSError:
            continue
    return None


# --------------------------------------------------------------------------
# -a VAR


def from_value(
    ref: str, namespace: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> Attachment:
    """``-a ref``: the value ``ref`` names (a name, ``.attr``/``[index]`` lookups) as an
    attachment: a figure or an image as a PNG, anything else as its description."""
    if not is_reference(ref):
        raise ContextError(
            f"-a takes a variable name (or name.attr, name[0]), not {ref!r} — e.g. %%agent -a df"
        )
    value = resolve(
        ref,
        namespace,
        extra,
        where=f"-a {ref}",
        fix="or check the spelling (%agent -a takes a variable of this notebook)",
    )
    source = {"type": "variable", "name": ref, "kind": kernel.kind(value)}
    if kernel.is_figure(value) or kernel.is_pil_image(value):
        try:
            data = kernel.png(value)
        except Exception as err:
            raise ContextError(
                f"-a {ref}: the {kernel.kind(value)} could not be saved as PNG "
                f"({type(err).__name__}: {err}) — check it draws"
            ) from None
        if len(data) > MAX_IMAGE_BYTES:
            raise ContextError(
                f"-a {ref}: the image is {human(len(data))} as PNG; images are "
                f"limited to {human(MAX_IMAGE_BYTES)} — make it smaller"
            )
        return Attachment(
            "image/png",
            f"{ref}.png",
            _data_url("image/png", data),
            None,
            {**source, "size": len(data)},
            len(data),
        )
    text = f"Attached notebook value `{ref}`:\n" + kernel.describe(ref, value)
    # the URL holds the text too: redacted first, as every stored text is (base64 would hide a
    # key from the journal's redaction)
    data = clean(text, refresh=True).encode("utf-8", errors="replace")
    return Attachment(
        "text/plain",
        ref,
        _data_url("text/plain", data),
        text,
        {**source, "size": len(data)},
        len(data),
    )
