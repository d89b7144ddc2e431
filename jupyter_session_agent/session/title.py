"""Session titles from the first prompt (OpenCode's ``ensureTitle``).

When: once, after the first turn of a root session whose title is still the
default and which has exactly one non-synthetic user message. Which model:
``Settings.title_model``, else the model of that first turn. The call is one
non-tool LLM request (temperature 0.5, up to two retries) run in a background
thread so the cell is not held; the next prompt (and every lifecycle
operation) waits for it first, so requests stay in order.

Unlike OpenCode (#7175), the call's usage is recorded: the session gets
``titleUsage = {"model", "tokens", "cost", "time"}`` (``data->'titleUsage'`` in
SQL), which ``AgentSession.cost`` and the ``session_cost`` view include.
A failed title call leaves the default title and records nothing; the error
is kept on ``AgentSession.title_error`` for debugging.

A title is never a made-up sentence: when the title model is the embedded one (``local/…``,
a tiny model that tends to invent a statement rather than name the topic), or when a model's
answer is not a plausible title (:func:`plausible`: a short phrase, not a sentence), the title
is taken from the prompt itself (:func:`from_prompt`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from ..core.messages import TextPart, UserMessage
from ..core.redact import before_cut

TITLE_PROMPT = """You name conversations. Reply with the title only, nothing before or after it.

Rules:
- one line, at most 50 characters;
- write in the language the user wrote in;
- name the task or topic; keep technical terms, names, file names and numbers as written;
- never mention tools, the assistant, or that this is a conversation;
- never remark on the input itself; for a greeting or small talk, give a short title in its tone;
- no quotation marks and no final full stop."""
ASK = "Generate a title for this conversation:"
INPUT_LIMIT = 4_000  # characters of the first prompt sent to the title model
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def clean_title(text: str) -> str:
    """OpenCode's post-processing: drop ``<think>…</think>``, first non-empty line, at most 100 characters."""
    text = _THINK.sub("", text or "")
    line = before_cut(next((ln.strip() for ln in text.splitlines() if ln.strip()), ""), 100)
    return line[:97] + "..." if len(line) > 100 else line


TITLE_CHARS = 50  # a title taken from the prompt: at most this many characters
TITLE_WORDS = 10  # a generated title with more words than this reads as a sentence


def from_prompt(text: str, limit: int = TITLE_CHARS) -> str:
    """A short title taken from the prompt: its first line with words, whitespace collapsed,
    cut at a word boundary within ``limit`` characters (``…`` when cut), no final full stop."""
    line = next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    words = before_cut(" ".join(line.split()), limit)
    if len(words) > limit:
        cut = words[: limit - 1]
        if " " in cut and not words[limit - 1].isspace():
            cut = cut.rsplit(" ", 1)[0]
        words = cut.rstrip(" ,;:-") + "…"
    return words.rstrip(". ") or "Untitled"


def plausible(title: str) -> bool:
    """Whether a model's answer reads as a title: one short phrase, not a sentence (at most
    :data:`TITLE_WORDS` words and 60 characters, no full stop inside or at the end, not the
    request echoed back)."""
    words = title.split()
    lowered = " ".join(words).lower()
    return (
        0 < len(words) <= TITLE_WORDS
        and "this conversation" not in lowered  # the request echoed back, not a topic
        and not title.rstrip().endswith(":")
        and len(title) <= 60
        and not title.rstrip().endswith((".", "!"))
        and ". " not in title
    )


def first_prompt(history) -> str | None:
    """The text of the only real user message, or None when a title is not due."""
    users = []
    for item in history:
        if isinstance(item.info, UserMessage):
            texts = [
                p.text for p in item.parts if isinstance(p, TextPart) and not p.synthetic and p.text
            ]
            if texts:
                users.append("\n".join(texts))
    return users[0] if len(users) == 1 else None


def due(session) -> str | None:
    """The prompt to title, when ``session`` should get a generated title now."""
    info = session.info
    if not session.settings.titles or info.parent_id or not info.has_default_title:
        return None
    return first_prompt(session.history)


def generate(session, text: str, model: str) -> tuple[str, dict]:
    """One title call through the session (its provider cache, one retry loop); returns
    (cleaned title, usage record). Raises ProviderError."""
    text, record = session.call_model(
        [
            {"role": "system", "content": TITLE_PROMPT},
            {"role": "user", "content": f"{ASK}\n\n{text[:INPUT_LIMIT]}"},
        ],
        purpose="title",
        model=model,
        temperature=0.5,
        # a tiny local model may ramble until its context is full; a title needs a few tokens
        local_max_tokens=64,
        record=False,  # stored on the session as its titleUsage (apply)
        background=True,  # the main thread may be using the provider cache: only read it
    )
    return clean_title(text), record.usage()


def apply(session, title: str, usage: dict | None) -> None:
    """Store the title (if the session still has its default one) and the call's usage
    (``None``: no call was made)."""

    def changes(info: Any) -> dict[str, Any]:
        out: dict[str, Any] = {} if usage is None else {"title_usage": usage}
        if title and info.has_default_title:
            out["title"] = title
        return out

    session.update_info(changes)


def start(session, model: str, on_error: Callable[[str], Any]) -> threading.Thread | None:
    """Start the title call in the background when one is due; returns the thread.
    ``on_error`` gets a failed call's error (one line), kept for debugging."""
    text = due(session)
    if text is None:
        return None
    model = session.settings.title_model or model

    def work() -> None:
        try:
            if model.startswith("local/"):  # the embedded model: the prompt names it better
                apply(session, from_prompt(text), None)
                return
            title, usage = generate(session, text, model)
            apply(session, title if plausible(title) else from_prompt(text), usage)
        except BaseException as err:  # never let a title break anything; keep why for debugging
            on_error(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=work, name=f"title-{session.info.id}", daemon=True)
    thread.start()
    return thread
