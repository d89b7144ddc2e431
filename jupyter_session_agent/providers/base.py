"""What a model provider is (:class:`Provider`), and one model call made through one.

:class:`Provider` is the protocol every provider satisfies: ``stream`` (one completion as
``core.stream`` events), ``complete`` (its text, not streamed) and ``embed``. The OpenAI
provider implements it, and so does the code-action wrapper (``core.codeaction``), which
wraps one.

:func:`call` is the one retry loop of the calls made beside a turn (titles, memory
extraction): one streamed request retried as the loop's policy says (``core.retry``:
what is retryable, how long to wait, a wait longer than ``max_wait`` refused), returning
the text and a :class:`ModelCall` with its tokens and cost. :class:`ModelCall` is also what
the history stores for such a call (journal kind ``event``, SQL view ``llm_call``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..core import budget, ids, retry
from ..core.messages import Tokens, now_ms
from ..core.stream import Finish, ReasoningDelta, StreamEvent, TextDelta
from .openai_provider import ChatRequest

# Calls beside a turn (titles, memory extraction) are not worth a long wait: this many retries,
# at most this many seconds apart (a server asking for longer is refused at once).
AUX_RETRIES = 2
AUX_MAX_WAIT = 10.0


@runtime_checkable
class Provider(Protocol):
    """A model server: ``stream`` one chat request, ``complete`` it, ``embed`` texts."""

    def stream(self, request: Any) -> Iterator[StreamEvent]:
        """One completion as events, ``Finish`` last; never retries."""
        ...

    def complete(self, request: Any) -> str:
        """The text of one completion, not streamed; never retries."""
        ...

    def embed(self, texts: list[str], *, model: str) -> list[list[float]]:
        """One vector per text."""
        ...


@dataclass(frozen=True)
class ModelCall:
    """One model call beside a turn (``purpose``: ``title``, ``memory``), as stored.

    ``tokens`` is what the server reported (``Tokens.to_data()``; None when the call failed
    before usage arrived), ``cost`` in USD from the model's prices.
    """

    JOURNAL_KIND: ClassVar[str] = "event"
    TYPE: ClassVar[str] = "llm_call"

    id: str
    session_id: str
    purpose: str
    model: str  # provider/model
    time_created: int
    duration_ms: int = 0
    attempts: int = 1
    tokens: Mapping[str, Any] | None = None
    cost: float = 0.0

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.TYPE,
            "sessionID": self.session_id,
            "purpose": self.purpose,
            "model": self.model,
            "durationMs": self.duration_ms,
            "attempts": self.attempts,
            "cost": self.cost,
        }
        if self.tokens is not None:
            out["tokens"] = dict(self.tokens)
        return out

    def usage(self) -> dict[str, Any]:
        """``{"model", "cost", "time"[, "tokens"]}``: the shape a session's ``titleUsage`` has."""
        out: dict[str, Any] = {"model": self.model, "cost": self.cost, "time": self.time_created}
        if self.tokens is not None:
            out["tokens"] = dict(self.tokens)
        return out


def call(
    provider: Any,
    request: Any,
    info: budget.ModelInfo,
    *,
    session_id: str,
    purpose: str,
    retries: int,
    max_wait: float,
    sleep: Callable[[float], Any] = time.sleep,
) -> tuple[str, ModelCall]:
    """Stream ``request`` through ``provider``; (the text, the call's record).

    Retries at most ``retries`` times, as ``core.retry`` decides and waits; what is not
    retryable, or the last failure, is raised (a ``ProviderError``).
    """
    started = time.monotonic()
    attempts = 0
    tokens: Tokens | None = None

    def attempt_once() -> str:
        nonlocal attempts, tokens
        attempts += 1
        chunks: list[str] = []
        tokens = None
        for event in provider.stream(request):
            if isinstance(event, TextDelta):
                chunks.append(event.text)
            elif isinstance(event, ReasoningDelta) and event.reclaim:
                chunks = []  # what came before a bare </think> was the model's reasoning
            elif isinstance(event, Finish):
                tokens = event.tokens
        return "".join(chunks)

    text = retry.with_retries(
        attempt_once,
        retries=retries,
        max_wait=max_wait,
        wait=lambda attempt, err, delay, reason: sleep(delay),
    )
    record = ModelCall(
        id=ids.ascending("event"),
        session_id=session_id,
        purpose=purpose,
        model=f"{info.provider_id}/{info.model_id}",
        time_created=now_ms(),
        duration_ms=int((time.monotonic() - started) * 1000),
        attempts=attempts,
        tokens=tokens.to_data() if tokens is not None else None,
        cost=budget.cost(tokens, info) if tokens is not None else 0.0,
    )
    return text, record


def chat_call(
    provider: Provider,
    info: budget.ModelInfo,
    model_id: str,
    messages: list[dict],
    *,
    session_id: str,
    purpose: str,
    temperature: float | None = None,
    max_tokens: int | None = None,
    retries: int = AUX_RETRIES,
    max_wait: float = AUX_MAX_WAIT,
    store: Any = None,
) -> tuple[str, ModelCall]:
    """One chat call beside a turn (no tools): ``messages`` to ``model_id`` (the server's
    name) through ``provider``, retried as :func:`call` does; (its text, its record). With a
    ``store``, the record is stored for ``session_id`` (an ``llm_call`` row in SQL). The one
    implementation behind ``AgentSession.call_model`` and memory extraction's calls."""
    request = ChatRequest(
        model=model_id, messages=messages, temperature=temperature, max_tokens=max_tokens
    )
    text, record = call(
        provider,
        request,
        info,
        session_id=session_id,
        purpose=purpose,
        retries=retries,
        max_wait=max_wait,
    )
    if store is not None:
        store.put(record)
        store.flush(sync=False)
    return text, record
