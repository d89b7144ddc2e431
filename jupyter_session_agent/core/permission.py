"""Asking for permission: the broker that asks and records replies, and the gate the step
calls just before a tool runs (OpenCode's ``PermissionNext.ask`` / ``reply``).

One module: the broker, the gate and the errors they raise are one decision path
(evaluate → ask → reply → remember); the rules they evaluate are :mod:`.rules` (re-exported
here), what a call asks for is :mod:`.asks`.

What a tool call asks for is :func:`.asks.tool_asks` (re-exported here with the other names
of :mod:`.asks` that callers of this module use). The
in-memory :class:`Broker` holds pending requests and applies
replies exactly as OpenCode's ``PermissionNext.ask`` / ``reply`` do; the
notebook's synchronous flow (one question at a time, on stdin) is
:class:`Gate`, which the processor calls just before a tool runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from . import ids
from .asks import (
    Ask,
    bash_prefix,
    canonical_args,
    doom_loop_ask,
    permission_of,
    short_text,
    split_commands,
    tool_asks,
)
from .errors import ToolFailure, UsageError
from .rules import (
    ACTIONS,
    Action,
    Rule,
    defaults,
    disabled,
    evaluate,
    expand,
    from_config,
    from_data,
    match,
    merge,
    parse_rule,
    permission_name,
)

# --------------------------------------------------------------------------
# asking and replying (OpenCode's PermissionNext.ask / reply)


class PermissionFailure(ToolFailure):
    """Base of the permission outcomes a tool part records; ``metadata`` goes on its error state."""

    outcome = "denied"

    def __init__(
        self, message: str, *, permission: str | None = None, patterns: Sequence[str] = ()
    ):
        super().__init__(message)
        self.permission = permission
        self.patterns = tuple(patterns)
        self.approval: dict[str, Any] | None = None  # the user's answer, when one was asked

    @property
    def metadata(self) -> dict[str, Any]:
        info: dict[str, Any] = {"outcome": self.outcome}
        if self.permission:
            info["permission"] = self.permission
            info["patterns"] = [short_text(p, 200) for p in self.patterns]
        if self.approval is not None:
            return {"permission": info, "approval": self.approval}
        return {"permission": info}


class DeniedError(PermissionFailure):
    """A rule denies the call; the model sees which rules."""

    outcome = "denied"

    def __init__(
        self, permission: str, pattern: str, rules: Sequence[Rule], *, inherited: bool = False
    ):
        self.rules = tuple(rules)
        shown = ", ".join(f"{r.permission} {r.pattern!r} → {r.action}" for r in self.rules[-5:])
        whose = (
            "the rules of the session that started this subagent"
            if inherited
            else "the user's rules"
        )
        super().__init__(
            f"permission denied: {permission} {short_text(pattern)!r} is denied by {whose} "
            f"({shown}). Do not retry it; use another approach or ask the user.",
            permission=permission,
            patterns=(pattern,),
        )
        self.pattern = pattern


class RejectedError(PermissionFailure):
    """The user said no: the tool errors and the turn stops (OpenCode ``blocked``)."""

    outcome = "rejected"

    def __init__(self, message: str = "rejected by the user", **where: Any):
        super().__init__(message, **where)


class CorrectedError(PermissionFailure):
    """The user said no with feedback: the model sees it and the turn goes on."""

    outcome = "corrected"

    def __init__(self, feedback: str, **where: Any):
        self.feedback = feedback
        super().__init__(f"rejected by the user, with this feedback: {feedback}", **where)


class ApprovalUnavailable(RejectedError):
    """The call needs an answer and the front end cannot ask (no stdin): a clear denial."""

    outcome = "unavailable"


Reply = Literal["once", "always", "reject"]


@dataclass(frozen=True)
class Request:
    """A pending question: ``permission`` for every pattern in ``patterns``."""

    id: str
    session_id: str
    permission: str
    patterns: tuple[str, ...]
    always: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    ruleset: tuple[Rule, ...] = ()
    unsure: str = ""  # what the checker could not account for: asked whatever the rules say
    bounds: tuple[tuple[Rule, ...], ...] = ()  # rulesets of the sessions that started this one


class Broker:
    """Pending requests and approvals, per session, in memory (OpenCode's state)."""

    def __init__(self) -> None:
        self.pending: dict[str, Request] = {}
        self.approved: dict[str, list[Rule]] = {}  # session → rules added by "always"

    def ask(
        self,
        session_id: str,
        permission: str,
        patterns: Sequence[str],
        *,
        always: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        ruleset: Iterable[Rule | Mapping] = (),
        call_id: str | None = None,
        id: str | None = None,
        unsure: str = "",
        bounds: Iterable[Iterable[Rule | Mapping]] = (),
    ) -> Request | None:
        """``None`` when every pattern is allowed; raises :class:`DeniedError` when one is
        denied; otherwise a pending :class:`Request` to answer with :meth:`reply`.

        ``unsure``: the call holds something the checker could not account for; it asks
        unless the rules allow ``permission`` for everything. ``bounds``: rulesets of the
        sessions that started this one (a subagent's parents); each must allow too, so a
        child can only narrow what its parent may do.
        """
        rules = tuple(merge(ruleset))
        limits = tuple(tuple(merge(b)) for b in bounds)
        approved = self.approved.get(session_id, [])
        action = _decide(permission, patterns, rules, approved, limits, unsure)
        if action == "allow":
            return None
        request = Request(
            id or ids.ascending("permission"),
            session_id,
            permission,
            tuple(patterns),
            tuple(always),
            dict(metadata or {}),
            call_id,
            rules,
            unsure,
            limits,
        )
        self.pending[request.id] = request
        return request

    def list(self) -> list[Request]:
        return list(self.pending.values())

    def reply(
        self, request_id: str, reply: Reply | str, message: str | None = None
    ) -> dict[str, PermissionFailure | None]:
        """Answer a request. Returns what each request it settles must do: ``None``
        = go ahead, an exception = fail with it.

        ``once`` settles this request; ``always`` also approves its "always"
        patterns for the session and settles the session's other pending
        requests that now evaluate to allow; ``reject`` rejects this one
        (:class:`CorrectedError` when ``message`` is given) and every other
        pending request of the session (:class:`RejectedError`).
        """
        request = self.pending.pop(request_id, None)
        if request is None:
            raise UsageError(f"no pending permission request {request_id!r}")
        if reply not in ("once", "always", "reject"):
            raise UsageError(f"reply must be once, always or reject, not {reply!r}")
        outcome: dict[str, PermissionFailure | None] = {}
        same = [r for r in self.pending.values() if r.session_id == request.session_id]
        if reply == "reject":
            where: dict[str, Any] = {"permission": request.permission, "patterns": request.patterns}
            outcome[request.id] = (
                CorrectedError(message, **where) if message else RejectedError(**where)
            )
            for other in same:
                del self.pending[other.id]
                outcome[other.id] = RejectedError(
                    permission=other.permission, patterns=other.patterns
                )
            return outcome
        outcome[request.id] = None
        if reply == "always":
            approved = self.approved.setdefault(request.session_id, [])
            approved.extend(Rule(request.permission, p, "allow") for p in request.always)
            for other in same:
                try:
                    action = _decide(
                        other.permission,
                        other.patterns,
                        other.ruleset,
                        approved,
                        other.bounds,
                        other.unsure,
                    )
                except DeniedError:
                    continue
                if action == "allow":
                    del self.pending[other.id]
                    outcome[other.id] = None
        return outcome


def unrestricted(permission: str, *rulesets: Iterable[Rule | Mapping[str, Any]]) -> bool:
    """Do the rules allow ``permission`` for every pattern? (Its last rule with an all-``*``
    pattern is an allow, and no ask or deny comes after it.)"""
    for rule in reversed(merge(*rulesets)):
        if not match(permission, rule.permission):
            continue
        if rule.action != "allow":
            return False
        if set(rule.pattern) <= {"*"}:
            return True
    return False


def _decide(
    permission: str,
    patterns: Sequence[str],
    rules: Sequence[Rule],
    approved: Sequence[Rule],
    bounds: Sequence[Sequence[Rule]] = (),
    unsure: str = "",
) -> str:
    """``allow`` or ``ask`` for a call, over the session's rules and every bound; raises
    :class:`DeniedError` when any of them denies a pattern."""
    needs = False
    for index, ruleset in enumerate((rules, *bounds)):
        for pattern in patterns:
            rule = evaluate(permission, pattern, ruleset, approved)
            if rule.action == "deny":
                relevant = [r for r in merge(ruleset, approved) if match(permission, r.permission)]
                raise DeniedError(permission, pattern, relevant, inherited=index > 0)
            needs = needs or rule.action == "ask"
        if unsure and not unrestricted(permission, ruleset, approved):
            needs = True
    return "ask" if needs else "allow"


def how_to_allow(request: Request) -> str:
    """The one-line fix for a call that could not be asked about."""
    tool = request.metadata.get("tool") or request.permission
    if request.unsure and (request.permission != "external_directory" or not request.patterns):
        return (
            f"{tool}: the permission checker {short_text(request.unsure, 160)}, so it asks, and "
            f"this front end cannot ask (no stdin): write the command without it, or allow "
            f"every {request.permission} call with %agent permit {request.permission} allow, "
            f"then run the cell again"
        )
    if request.permission == "external_directory":
        pattern = request.patterns[0]
        return (
            f"{tool} needs access outside the session directory ({short_text(pattern)}) and this "
            f'front end cannot ask (no stdin): allow it with %agent permit external_directory "{pattern}" allow, '
            f"then run the cell again"
        )
    if request.permission == "doom_loop":
        return (
            f"{tool} was called 3 times in a row with the same input and this front end cannot ask "
            "(no stdin): the turn stopped; %agent permit doom_loop allow lets such loops run"
        )
    config = f'{{"{request.permission}": "allow"}}'
    return (
        f"{tool} needs your approval and this front end cannot ask (no stdin): allow it with "
        f"%agent permit {request.permission} allow (this session) or "
        f"%config AgentMagics.permission = {config}, then run the cell again"
    )


# --------------------------------------------------------------------------
# the synchronous gate the processor calls


DOOM_LOOP_THRESHOLD = 3


class Gate:
    """Checks each tool call just before it runs, for one turn of one session.

    ``ruleset()`` gives the turn's rules (defaults, user config, session rules,
    cell rules); approvals answered "always" are appended after them and
    reported through ``on_always`` so the session can persist them.
    ``approver(request)`` returns ``(reply, message)`` and may raise
    :class:`ApprovalUnavailable`. After a plain reject the turn stops; later
    questions in the same turn are rejected without asking (OpenCode rejects
    the session's other pending requests).
    """

    def __init__(
        self,
        *,
        session_id: str,
        directory: str,
        ruleset: Callable[[], Sequence[Rule]],
        approver: Callable[[Request], tuple[str, str | None]],
        on_always: Callable[[list[Rule]], None] | None = None,
        bounds: Sequence[Callable[[], Sequence[Rule]]] = (),
        contained: Iterable[str] = (),
    ) -> None:
        self.session_id = session_id
        # Tools whose effects outside the folder the OS sandbox contains (bash when confined):
        # their external_directory questions are not asked (a deny rule still denies).
        self.contained = frozenset(contained)
        self.bounds = tuple(bounds)  # the rules of the sessions that started this one (subagents)
        self.directory = directory
        self.ruleset = ruleset
        self.approver = approver
        self.on_always = on_always
        self.broker = Broker()
        self.calls: list[tuple[str, str]] = []  # (tool, canonical input) in order, this turn
        self.stopped: RejectedError | None = None
        self.decision: dict[str, Any] | None = None  # the user's answer about the current call

    def __call__(self, tool: str, args: Mapping[str, Any], call: Any = None) -> dict | None:
        """Raises when the call may not run; else returns what the user answered about it
        (``{"reply": "once"|"always", "permission": …}``, recorded as the tool part's
        ``state.metadata.approval``), or ``None`` when nobody was asked."""
        self.decision = None
        key = (tool, canonical_args(args))
        recent = self.calls[-(DOOM_LOOP_THRESHOLD - 1) :]
        self.calls.append(key)
        asks = tool_asks(tool, args, self.directory)
        if len(recent) == DOOM_LOOP_THRESHOLD - 1 and all(k == key for k in recent):
            asks.insert(0, doom_loop_ask(tool, args))
        self._deny_first(asks)
        if tool in self.contained:
            asks = [a for a in asks if a.permission != "external_directory"]
        for ask in asks:
            self._check(ask, getattr(call, "call_id", None))
        return self.decision

    def effective(self) -> list[Rule]:
        """This turn's rules and the answers given so far ("always" approvals), in order."""
        return [*merge(self.ruleset()), *self.broker.approved.get(self.session_id, [])]

    def allows(self, permission: str, pattern: str = "*") -> bool:
        """Do the rules (and the answers so far) allow ``permission`` for ``pattern`` without
        asking, within every bound? (The sandbox's ``network`` switch.)"""
        try:
            return (
                _decide(
                    permission,
                    (pattern,),
                    tuple(merge(self.ruleset())),
                    self.broker.approved.get(self.session_id, []),
                    [tuple(merge(bound())) for bound in self.bounds],
                )
                == "allow"
            )
        except DeniedError:
            return False

    def decides(self, permission: str, pattern: str = "*") -> str:
        """``"allow"``, ``"ask"`` or ``"deny"``: what the rules (and the answers so far) say
        about ``permission`` for ``pattern`` now, within every bound. A tool whose question
        is its own review (``notebook_edit``) asks this instead of the approver."""
        try:
            return _decide(
                permission,
                (pattern,),
                tuple(merge(self.ruleset())),
                self.broker.approved.get(self.session_id, []),
                [tuple(merge(bound())) for bound in self.bounds],
            )
        except DeniedError:
            return "deny"

    def _deny_first(self, asks: Sequence[Ask]) -> None:
        """A call that a rule denies is denied before any question about it is asked."""
        rules = tuple(merge(self.ruleset()))
        bounds = [tuple(merge(bound())) for bound in self.bounds]
        approved = self.broker.approved.get(self.session_id, [])
        for ask in asks:
            _decide(ask.permission, ask.patterns, rules, approved, bounds)  # raises DeniedError

    def reader(self) -> Callable[[str], bool]:
        """``may_read(path)``: would ``read`` of ``path`` pass without asking, now? A tool
        that reads many files on its own (``grep``) leaves out those that would ask or are
        denied (a ``.env``, a link to one, a file a rule denies), as ``read`` would not show
        them either."""
        rules = tuple(merge(self.ruleset()))
        bounds = [tuple(merge(bound())) for bound in self.bounds]
        approved = list(self.broker.approved.get(self.session_id, []))

        def may_read(path: str) -> bool:
            try:
                return all(
                    _decide(a.permission, a.patterns, rules, approved, bounds, a.unsure) == "allow"
                    for a in tool_asks("read", {"filePath": path}, self.directory)
                )
            except DeniedError:
                return False

        return may_read

    def child_bounds(self) -> tuple[Callable[[], Sequence[Rule]], ...]:
        """What a subagent started now must stay within: this turn's rules (defaults, config,
        session, cell), the answers given so far, and this gate's own bounds."""

        def effective() -> list[Rule]:
            return [*self.ruleset(), *self.broker.approved.get(self.session_id, [])]

        return (effective, *self.bounds)

    def _check(self, ask: Ask, call_id: str | None) -> None:
        request = self.broker.ask(
            self.session_id,
            ask.permission,
            ask.patterns,
            always=ask.always,
            metadata=ask.metadata,
            ruleset=self.ruleset(),
            call_id=call_id,
            unsure=ask.unsure,
            bounds=[bound() for bound in self.bounds],
        )
        if request is None:
            return
        if self.stopped is not None:
            self.broker.reply(request.id, "reject")
            raise RejectedError(
                "rejected: the user rejected an earlier tool call in this turn",
                permission=request.permission,
                patterns=request.patterns,
            )
        try:
            reply, message = self.approver(request)
        except RejectedError as err:  # no way to ask: a denial that stops the turn
            self.broker.pending.pop(request.id, None)
            if err.permission is None:
                err.permission, err.patterns = request.permission, request.patterns
            self.stopped = err
            raise
        except BaseException:
            self.broker.pending.pop(request.id, None)
            raise
        outcome = self.broker.reply(request.id, reply, message)
        self.decision = {"reply": reply, "permission": request.permission}
        if message:
            self.decision["feedback"] = short_text(message, 2000)
        if reply == "always" and self.on_always is not None:
            self.on_always([Rule(request.permission, p, "allow") for p in request.always])
        error = outcome.get(request.id)
        if error is not None:
            if isinstance(error, PermissionFailure):
                error.approval = self.decision
            if isinstance(error, RejectedError):
                self.stopped = error  # a plain reject ends the turn
            raise error


__all__ = [
    "ACTIONS",
    "Action",
    "permission_name",
    "Rule",
    "Ask",
    "Request",
    "Broker",
    "Gate",
    "DeniedError",
    "RejectedError",
    "CorrectedError",
    "ApprovalUnavailable",
    "match",
    "expand",
    "from_config",
    "from_data",
    "merge",
    "evaluate",
    "disabled",
    "defaults",
    "tool_asks",
    "doom_loop_ask",
    "split_commands",
    "bash_prefix",
    "unrestricted",
    "parse_rule",
    "permission_of",
    "how_to_allow",
]
