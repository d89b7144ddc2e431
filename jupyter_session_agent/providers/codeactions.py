"""The code-action provider: ``core/codeaction.py``'s protocol spoken over another provider.

A provider (``providers.base.Provider``) that wraps an ``OpenAIProvider``: for the embedded
server, which translates code actions itself, it only asks for them (the ``+code`` model
name); for any other model it rewrites the request into the text protocol here and parses the
streamed reply into the same events a native tool call gives (the first python block is the
step's one call).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from ..core.codeaction import (
    CODE_SUFFIX,
    CUT_TEXT,
    EMPTY,
    TOOL,
    BlockParser,
    code_messages,
    is_empty,
    offers_python,
)
from ..core.stream import Finish, TextDelta, ToolCall, ToolInputStart


class CodeActionProvider:
    """A provider (``providers.base.Provider``: ``stream``, ``complete``, ``embed``) speaking
    the code-action protocol over ``inner`` (an ``OpenAIProvider``).

    ``server_side`` (the embedded server): requests go out unchanged but for the model name
    (``+code``) and temperature 0 when unset; the server translates. Otherwise requests are
    rewritten here (:func:`code_messages`, no ``tools``) and the streamed text is parsed
    (:class:`BlockParser`) into the same events a native tool call gives. Either way a block
    cut by the output limit becomes an invalid call naming :data:`CUT_TEXT`.
    """

    def __init__(self, inner: Any, *, server_side: bool) -> None:
        self.inner = inner
        self.server_side = server_side

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CodeActionProvider({self.inner!r}, server_side={self.server_side})"

    def stream(self, request: Any) -> Iterator[Any]:
        temperature = 0.0 if request.temperature is None else request.temperature
        if self.server_side:
            request = replace(request, model=request.model + CODE_SUFFIX, temperature=temperature)
            yield from _mark_cut(self.inner.stream(request))
            return
        python = offers_python(request.tools, request.messages)
        request = replace(
            request, messages=code_messages(request.messages), tools=(), temperature=temperature
        )
        if not python:  # the max-steps step (or python denied): text only, nothing runs
            yield from self.inner.stream(request)
            return
        yield from _translate(self.inner.stream(request))

    def complete(self, request: Any) -> str:
        return self.inner.complete(request)

    def embed(self, texts: list[str], *, model: str) -> list[list[float]]:
        return self.inner.embed(texts, model=model)


def _mark_cut(events: Iterable[Any]) -> Iterator[Any]:
    """Hold tool calls until ``Finish``; a python call the output limit cut is invalid (and
    the step goes on: the model reads the error)."""
    held: list[ToolCall] = []
    for event in events:
        if isinstance(event, ToolCall):
            held.append(event)
            continue
        if isinstance(event, Finish):
            for call in held:
                if event.reason == "length" and call.name == TOOL:
                    call = replace(call, input={}, invalid=CUT_TEXT)
                yield call
            if held and event.reason == "length":
                event = replace(event, reason="tool-calls")  # the model reads the error and goes on
            held = []
        yield event
    yield from held


def _translate(events: Iterable[Any]) -> Iterator[Any]:
    """Streamed text → text and ONE python call: the first block is the step's call, as on
    the embedded server (the model sees its output before it writes more); what the reply
    says after it is read to its end (for the usage) and dropped."""
    parser = BlockParser()
    call_id = ""
    calls = 0
    for event in events:
        if calls and not isinstance(event, Finish):
            continue  # after the first block: nothing more is shown or run
        if isinstance(event, TextDelta):
            out = parser.feed(event.text)
        elif isinstance(event, Finish):
            out = parser.end(cut=event.reason == "length") if not calls else []
        else:
            yield event  # reasoning deltas
            continue
        for kind, text in out:
            if calls:
                break  # a second block in the same piece of text
            if kind == "text":
                yield TextDelta(text)
            elif kind == "open":
                call_id = "call_" + uuid.uuid4().hex[:24]
                yield ToolInputStart(call_id, TOOL)
            elif kind == "close" and is_empty(text):  # only comments: nothing to run
                calls += 1
                yield ToolCall(call_id, TOOL, {}, json.dumps({"code": text}), invalid=EMPTY)
            elif kind == "close":
                calls += 1
                yield ToolCall(call_id, TOOL, {"code": text}, json.dumps({"code": text}))
            elif kind == "cut":
                calls += 1
                yield ToolCall(call_id, TOOL, {}, json.dumps({"code": text}), invalid=CUT_TEXT)
        if isinstance(event, Finish):
            reason = event.reason
            if calls and reason in ("stop", "unknown", "length"):
                reason = "tool-calls"  # a cut block too: the model reads the error and goes on
            yield replace(event, reason=reason)
            return
