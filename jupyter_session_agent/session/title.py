"""Session titles from the first prompt (OpenCode's ``ensureTitle``, spec §4.5).

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
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

from ..core.messages import TextPart, UserMessage, now_ms, replace
from ..core.redact import clean_record

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
RETRIES = 2
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def clean_title(text: str) -> str:
    """§4.5 post-processing: drop ``<think>…</think>``, first non-empty line, at most 100 characters."""
    text = _THINK.sub("", text or "")
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:97] + "..." if len(line) > 100 else line


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
    """One title call; returns (cleaned title, usage record). Raises ProviderError."""
    from ..core import budget, retry
    from ..core.errors import ProviderError
    from ..core.stream import Finish, TextDelta
    from ..providers import presets
    from ..providers.openai_provider import ChatRequest
    from ..providers.registry import resolve

    # read the session's provider cache, never write it: the main thread may be iterating it
    cached = session.providers.peek(model)
    provider, info, resolved = cached or resolve(
        model or presets.default_model(os.environ), session.settings
    )
    request = ChatRequest(
        model=resolved.model_id,
        messages=[
            {"role": "system", "content": TITLE_PROMPT},
            {"role": "user", "content": f"{ASK}\n\n{text[:INPUT_LIMIT]}"},
        ],
        temperature=0.5,
        # a tiny local model may ramble until its context is full; a title needs a few tokens
        max_tokens=64 if resolved.provider_id == "local" else None,
    )
    attempt = 0
    while True:
        chunks, tokens = [], None
        try:
            for event in provider.stream(request):
                if isinstance(event, TextDelta):
                    chunks.append(event.text)
                elif isinstance(event, Finish):
                    tokens = event.tokens
            break
        except ProviderError as err:
            if attempt >= RETRIES or retry.retry_message(err) is None:
                raise
            attempt += 1
            time.sleep(min(retry.retry_delay(attempt, err), 10.0))
    usage = {"model": f"{info.provider_id}/{info.model_id}", "cost": 0.0, "time": now_ms()}
    if tokens is not None:
        usage["tokens"] = tokens.to_data()
        usage["cost"] = budget.cost(tokens, info)
    return clean_title("".join(chunks)), usage


def apply(session, title: str, usage: dict) -> None:
    """Store the title (if the session still has its default one) and the call's usage."""
    with session._info_lock:
        info = session.info
        changes: dict[str, Any] = {"title_usage": usage, "time_updated": now_ms()}
        if title and info.has_default_title:
            changes["title"] = title
        session.info = clean_record(
            replace(info, **changes)
        )  # as the journal keeps it (core/redact.py)
        session.store.put(session.info)
        session.store.flush(sync=True)


def start(session, model: str) -> threading.Thread | None:
    """Start the title call in the background when one is due; returns the thread."""
    text = due(session)
    if text is None:
        return None
    model = session.settings.title_model or model

    def work() -> None:
        try:
            title, usage = generate(session, text, model)
            apply(session, title, usage)
        except BaseException as err:  # never let a title break anything; keep why for debugging
            session.title_error = f"{type(err).__name__}: {err}"

    thread = threading.Thread(target=work, name=f"title-{session.info.id}", daemon=True)
    thread.start()
    return thread
