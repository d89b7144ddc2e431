"""The live view: the running turn rendered into one cell output, updated in place.

:class:`LiveView` is the processor's observer: it keeps the running turn's messages and parts
and re-renders the transcript bundle (:mod:`.display`) into one display (display-id updates),
throttled so a fast stream does not flood the front end (:data:`MIN_INTERVAL`, slower once
the bundle is large), and waits in the background for the session's title.

One module: one observer; the turn's messages, parts and streams it keeps are read by its one
render, and the helpers below only serve that render.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..core.messages import (
    AssistantMessage,
    CompactionPart,
    Part,
    PatchPart,
    ReasoningPart,
    StepFinishPart,
    StepStartPart,
    TextPart,
    ToolPart,
    UserMessage,
    WithParts,
    replace,
)
from ..loop.step import Observer
from ..session.approval import StdinApprover, pending
from ..tools import frontend
from .display import MIME_TYPE, TranscriptView

MIN_INTERVAL = 0.1  # seconds between live re-renders of a streaming part
SLOW_INTERVAL = 0.5  # … once the bundle is large
LARGE_BUNDLE = 256_000  # characters
TITLE_WAIT = 120.0  # seconds a finished cell waits, in the background, for its session's title


class LiveView(Observer):
    """Renders the running turn into one cell output, updating it in place.

    With ``session`` (an ``AgentSession``) the view shows the whole turn — the
    prompt, every step's message and parts, compaction messages — and the
    session's budget, as the same bundle ``%agent show`` displays. The stored
    history gives what is finished; the observer's events give the step in
    flight (its text streaming, its tools changing state).
    """

    def __init__(
        self, live: bool = True, session: Any = None, detail: str = "compact", banner: str = ""
    ):
        self.live = live
        self.session = session
        self.banner = banner  # the cell's first printed line (recording), shown again after a clear
        self.detail = detail  # "compact" (the answer first) or "full" (every part inline)
        self._started = time.monotonic()
        # the turn starts after what the session holds now: an error before its prompt is
        # stored (a bad model id) shows that error alone, never the previous turn again
        self._start = len(session.history) if session is not None else 0
        self._asking: dict[str, Any] | None = None  # the call waiting for an answer
        self._frontend: dict[str, Any] | None = None  # a notebook tool's request (frontend)
        self.messages: dict[str, Any] = {}  # observed message infos by id
        self.parts: dict[str, Part] = {}  # observed parts by id, in arrival order
        self.streams: dict[str, list[str]] = {}
        self._base: int | None = None  # index of the turn's prompt in session.history
        self._model = None
        self._report = None
        self._handle = None
        self._last = 0.0
        self._interval = MIN_INTERVAL
        self._final: TranscriptView | None = None  # the last final render (see _follow_title)

    # Observer ---------------------------------------------------------------

    def on_message(self, message: AssistantMessage) -> None:
        self.messages[message.id] = message
        self._report = None
        self._render(force=True)

    def on_part(self, part: Part) -> None:
        self.parts[part.id] = part
        if isinstance(part, (TextPart, ReasoningPart)) and part.time_end:
            self.streams.pop(part.id, None)  # the stored text is final now
        streaming = isinstance(part, (TextPart, ReasoningPart))
        if not streaming:
            self._report = None
        # a step's bookkeeping parts come just after (step-start) or just before (step-finish,
        # patch) its message is saved, which renders at once: they need no render of their own
        self._render(force=not streaming and not isinstance(part, _BOOKKEEPING))

    def on_delta(self, part: Part, delta: str) -> None:
        self.parts.setdefault(part.id, part)
        self.streams.setdefault(part.id, []).append(delta)
        self._render()

    def on_part_removed(self, part_id: str) -> None:
        self.parts.pop(part_id, None)
        self.streams.pop(part_id, None)

    def on_retry(self, attempt: int, delay: float, reason: str) -> None:
        self._render(force=True)  # the retry part is already in self.parts

    # state ------------------------------------------------------------------

    def turn(self) -> list[WithParts]:
        """The running turn: stored messages from its prompt on, merged with what is streaming."""
        history = list(self.session.history) if self.session is not None else []
        if self._base is None and len(history) > self._start:
            self._base = self._start + _prompt_index(history[self._start :])
        items: dict[str, tuple[Any, dict[str, Part]]] = {}
        base = self._start if self._base is None else self._base
        for item in history[base:]:
            items[item.info.id] = (item.info, {p.id: p for p in item.parts})
        for mid, info in self.messages.items():
            stored = items.get(mid)
            items[mid] = (
                info if stored is None or _newer(info, stored[0]) else stored[0],
                stored[1] if stored else {},
            )
        for part in self.parts.values():
            if part.id in self.streams and isinstance(part, (TextPart, ReasoningPart)):
                part = replace(part, text=_settled("".join(self.streams[part.id])))
            entry = items.get(part.message_id)
            if entry is None:
                continue  # a part of a message not announced (cannot happen with the processor)
            entry[1][part.id] = part
        return [
            WithParts(info, tuple(sorted(ps.values(), key=lambda p: p.id)))
            for _, (info, ps) in sorted(items.items())
        ]

    def report(self, turn: Sequence[WithParts]):
        if self.session is None:
            return None
        if self._report is None:
            try:
                if self._model is None:
                    self._model = self.session.model_info(self.session.last_model() or None)
                # the session's tally folds the messages before the turn once, not per render
                before = self.session.history[: self._base or 0]
                self._report = self.session.budget_report(
                    history=[*before, *turn], info=self._model
                )
            except Exception:  # the budget is a view; never let it break a turn
                return None
        return self._report

    def progress(self, turn: Sequence[WithParts]) -> dict[str, Any]:
        """How long the turn has run and what it waits for: ``approval`` (the user), ``tool``
        (a call running) or ``model`` (a reply streaming or not started)."""
        elapsed = int((time.monotonic() - self._started) * 1000)
        if self._asking is not None:
            return {"elapsed": elapsed, "waiting": "approval", "detail": self._asking["tool"]}
        if self._frontend is not None:
            review = self._frontend.get("action") == "edit" and not self._frontend.get("allowed")
            return {"elapsed": elapsed, "waiting": "review" if review else "notebook"}
        running = [
            p
            for m in turn
            for p in m.parts
            if isinstance(p, ToolPart) and p.state.status == "running"
        ]
        if running:
            return {"elapsed": elapsed, "waiting": "tool", "detail": running[-1].tool}
        model = next(
            (
                f"{m.info.provider_id}/{m.info.model_id}"
                for m in reversed(turn)
                if isinstance(m.info, AssistantMessage)
            ),
            None,
        )
        return {"elapsed": elapsed, "waiting": "model", "detail": model}

    def view(self, final: bool = False) -> TranscriptView:
        turn = self.turn()
        info = self.session.info if self.session is not None else None
        unsaved: frozenset[str] = getattr(
            getattr(self.session, "store", None), "unsaved", frozenset
        )()
        view = TranscriptView(
            turn,
            session=info,
            report=self.report(turn),
            live=not final,
            omitted=self._start if self._base is None else self._base,
            unsaved=unsaved,
            detail=self.detail,
            progress=None if final else self.progress(turn),
            asking=None if final else self._asking,
        )
        view.frontend = None if final else self._frontend
        return view

    @contextlib.contextmanager
    def asking(self, session: Any) -> Iterator[None]:
        """While the turn runs, ``session`` asks through :meth:`approver` (live views only)."""
        if not self.live:
            yield
            return
        shell = getattr(session, "shell", None)
        frontend.register(shell, self.frontend)  # the notebook tools ask through this view
        try:
            with session.asking_through(self.approver):
                yield
        finally:
            frontend.unregister(shell, self.frontend)

    def frontend(self, request: dict[str, Any], read: Any) -> str:
        """A notebook tool's request to the JupyterLab extension (``tools/frontend.py``):
        shown in the view's ``frontend`` field while ``read()`` (the stdin question the
        extension answers) waits; its echo is cleared from the cell once answered."""
        self._frontend = request
        self._render(force=True)
        answered = False
        try:
            text = read()
            answered = True
            return text
        finally:
            self._frontend = None
            if answered and self._handle is not None:
                from IPython.display import clear_output

                clear_output(wait=True)
                self._handle = None
                if self.banner:
                    print(self.banner)
            self._render(force=True)

    def approver(self, inner: Any) -> Any:
        """``inner`` (an approver) wrapped so that the view shows the pending call while the
        user is asked — the code highlighted, "waiting for approval", and in JupyterLab the
        buttons that answer the stdin prompt. The stdin prompt then only asks (the code is in
        the view), and its echo (the keystroke) is cleared from the cell once answered: the
        saved output says what was decided (the tool part's ``state.metadata.approval``)."""
        stdin = isinstance(inner, StdinApprover) and self.live
        ask = StdinApprover(inner.shell, inner.read, show_code=False) if stdin else inner

        def approve(request: Any) -> tuple[str, str | None]:
            self._asking = pending(request)
            self._report = None
            self._render(force=True)
            answered = False
            try:
                decision = ask(request)
                answered = True  # a prompt was shown and answered: its echo is in the cell
                return decision
            finally:
                self._asking = None
                if answered and stdin and self._handle is not None:
                    from IPython.display import clear_output

                    clear_output(wait=True)  # the echoed answer goes; the view is shown again
                    self._handle = None
                    if self.banner:
                        print(self.banner)  # the cell's first line (recording) comes back too
                self._render(force=True)

        return approve

    def markdown(self) -> str:
        return self.view().markdown

    def finish(self) -> None:
        """Final render; shows the transcript once when live updates were off. The first turn's
        title is generated in the background after the turn (``session/title.py``): when it lands, this
        output is rendered again with it, so its header does not keep the default title."""
        self._report = None
        if self._handle is None and not self.turn():
            return  # nothing of the turn was shown or stored (it failed first): its error alone
        self._render(force=True, final=True)
        self._follow_title()

    def _follow_title(self) -> None:
        session, handle, shown = self.session, self._handle, self._final
        if not self.live or session is None or handle is None or shown is None:
            return
        if shown.session is None or not getattr(shown.session, "has_default_title", False):
            return
        wait = getattr(session, "wait_title", None)
        if wait is None:
            return

        def follow() -> None:
            wait(TITLE_WAIT)
            info = session.info
            if info.title != shown.session.title:
                shown.session = info  # only the header changes: the turn shown stays this one
                handle.update(shown._repr_mimebundle_(), raw=True, metadata=turn_metadata(shown))

        # the copied context carries the kernel's parent header: the update goes to this cell
        threading.Thread(
            target=contextvars.copy_context().run,
            args=(follow,),
            daemon=True,
            name="jsa-title-follow",
        ).start()

    def _render(self, force: bool = False, final: bool = False) -> None:
        if not self.live and not final:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        from IPython.display import display

        view = self.view(final=final)
        if final:
            self._final = view
        bundle = view._repr_mimebundle_()
        size = len(bundle["text/markdown"])
        self._interval = SLOW_INTERVAL if size > LARGE_BUNDLE else MIN_INTERVAL
        metadata = turn_metadata(view)
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True, metadata=metadata)
        else:
            self._handle.update(bundle, raw=True, metadata=metadata)


def turn_metadata(view: TranscriptView) -> dict[str, Any]:
    """The output's metadata naming the turn it shows (``{MIME_TYPE: {"turn": {"session",
    "messages"}}}``): a saved notebook says which stored messages each cell holds."""
    session = view.session.id if view.session is not None else None
    messages = [item.info.id for item in view.history]
    return {MIME_TYPE: {"turn": {"session": session, "messages": messages}}}


_BOOKKEEPING = (StepStartPart, StepFinishPart, PatchPart)


def _settled(text: str) -> str:
    """Streaming text without its unfinished last word: a key arriving in pieces is never shown
    as a prefix too short to be recognised (a secret has no whitespace in it)."""
    end = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
    return text[: end + 1]


def _prompt_index(history: Sequence[WithParts]) -> int:
    """Index of the newest prompt typed by the user (not a compaction request, not synthetic)."""
    for i in range(len(history) - 1, -1, -1):
        item = history[i]
        if (
            isinstance(item.info, UserMessage)
            and not any(isinstance(p, CompactionPart) for p in item.parts)
            and any(isinstance(p, TextPart) and not p.synthetic for p in item.parts)
        ):
            return i
    return 0


def _newer(a: Any, b: Any) -> bool:
    """The observed copy of a message wins unless the stored one is completed and it is not."""
    return not (getattr(b, "time_completed", None) and not getattr(a, "time_completed", None))
