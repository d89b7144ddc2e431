"""What one turn of a session is run with: its tools, permission gate, requests, system
prompt and compactor (``loop.turn.TurnSetup``), built from the session's settings and state.

The session calls :func:`turn_setup` before each turn and :func:`compactor` for ``%agent
compact``. Both read the session through :class:`SessionView` (what they need of it, typed)
and return values; what runs during the turn is typed objects passed whole: the model
(:class:`TurnModel`), the requests (:class:`TurnRequests`, :class:`SummaryRequests`) and the
tool calls (``tool_calls.ToolCaller``).

One module: every value a turn is built from (the model, requests, tools, gate, system prompt
with its rules files, compactor, memory's hooks), each read from the session the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..context import rules
from ..core import budget as B
from ..core import codeaction, ids
from ..core import permission as P
from ..core.budget import ModelInfo
from ..core.compaction_config import CompactionConfig
from ..core.messages import Session, now_ms
from ..core.settings import Settings
from ..loop.compaction import Compactor
from ..loop.history import History
from ..loop.step import StepSetup
from ..loop.turn import TurnSetup, system_prompt
from ..providers.base import Provider
from ..providers.codeactions import CodeActionProvider
from ..providers.openai_provider import ChatRequest
from ..providers.presets import Resolved
from ..tools import BUILTIN_NAMES, builtin_tools, kernel, openai_schema
from ..tools.base import Tool
from ..tools.task import task_tool
from .approval import Approver, default_approver
from .snapshot import Snapshot
from .subagents import subagent_runner
from .tool_calls import ToolCaller

if TYPE_CHECKING:  # the store's modules load when a session opens one
    from ..store.store import Store


class SessionView(Protocol):
    """What the wiring reads of a session (``AgentSession``); it changes nothing of it."""

    settings: Settings
    store: Store
    info: Session
    history: History
    shell: object
    approver: Approver | None

    @property
    def permission_bounds(self) -> tuple[Callable[[], list[P.Rule]], ...]: ...

    @property
    def sandboxed(self) -> bool: ...

    def provider(self, spec: str) -> tuple[Provider, ModelInfo, Resolved]: ...

    def ruleset(self, cell: Sequence[P.Rule] = ()) -> list[P.Rule]: ...

    def allow(self, rules: Sequence[P.Rule]) -> None: ...

    def snapshot(self) -> Snapshot | None: ...


@dataclass(frozen=True)
class TurnModel:
    """The model a turn runs with: who serves it (``provider``), its limits and prices
    (``limits``) and where it is (``preset``: the provider's name for it, the server)."""

    provider: Provider
    limits: ModelInfo
    preset: Resolved

    @classmethod
    def of(cls, entry: tuple[Provider, ModelInfo, Resolved]) -> TurnModel:
        """From a provider cache's ``(provider, ModelInfo, Resolved)``."""
        return cls(*entry)


@dataclass(frozen=True)
class TurnRequests:
    """The turn's ``RequestFactory``: (chat messages, last step?) → the request sent."""

    model_id: str
    tools: tuple[dict, ...]
    max_tokens: int | None
    temperature: float | None
    max_answer_chars: int | None
    reasoning_effort: str | None

    def __call__(self, chat: list[dict], last_step: bool) -> ChatRequest:
        return ChatRequest(
            model=self.model_id,
            messages=chat,
            tools=list(self.tools),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            max_answer_chars=self.max_answer_chars,
            reasoning_effort=self.reasoning_effort,
        )


@dataclass(frozen=True)
class SummaryRequests:
    """The compactor's summary requests: (chat, max tokens or None: the model's) → request."""

    model_id: str
    default_max: int | None
    temperature: float | None

    def __call__(self, chat: list[dict], max_tokens: int | None) -> ChatRequest:
        return ChatRequest(
            model=self.model_id,
            messages=chat,
            max_tokens=max_tokens or self.default_max,
            temperature=self.temperature,
        )


def turn_setup(
    session: SessionView,
    model: TurnModel,
    permission: Sequence[P.Rule | Mapping] = (),
    request: str = "",
) -> tuple[TurnSetup, P.Gate]:
    """(the ``TurnSetup`` of the next turn, its permission ``Gate``); ``permission``: the
    cell's rules; ``request``: the turn's prompt (the kernel variables it names are described
    to a code-action model whatever their age)."""
    settings = session.settings
    tools = offered_tools(session)
    cell_rules = tuple(P.Rule.of(r) for r in permission or ())
    # A subagent stays within its parent's rules (subagents.subagent_runner sets the bounds).
    bounds = session.permission_bounds
    # A tool whose last rule is a "*" deny is not offered to the model at all.
    hidden = P.disabled(tools, session.ruleset(cell_rules), *(bound() for bound in bounds))
    tools = {k: v for k, v in tools.items() if k not in hidden}

    preset = model.preset
    provider = model.provider
    code = codeaction.enabled(settings.code_actions, preset.provider_id, preset.model_id)
    if code:  # the model writes ```python blocks (core/codeaction.py): python is its only tool
        tools = {k: v for k, v in tools.items() if k == codeaction.TOOL}
        provider = CodeActionProvider(provider, server_side=preset.provider_id == "local")
    gate = P.Gate(
        session_id=session.info.id,
        directory=session.info.directory,
        ruleset=partial(session.ruleset, cell_rules),
        approver=session.approver or default_approver(session.shell),
        on_always=session.allow,
        bounds=bounds,
        contained=("bash",) if session.sandboxed else (),
    )
    schemas = [openai_schema(t) for t in tools.values()]
    directory = Path(session.info.directory)
    limits = model.limits
    prompt_text = turn_prompt(session, code, list(tools), gate, request)
    step = StepSetup(
        store=session.store,
        model=limits,
        tools=tools,
        run_tool=ToolCaller(
            session.info.id, session.history, directory, settings, session.shell, gate
        ),
        max_retries=settings.max_retries,
        max_retry_wait=settings.max_retry_wait,
        auto_compact=settings.compaction.auto,
        reserved=settings.compaction.reserved,
        permit=gate,
        snapshot=session.snapshot(),
    )
    setup = TurnSetup(
        step=step,
        provider=provider,
        request_factory=TurnRequests(
            model_id=preset.model_id,
            tools=tuple(schemas),
            max_tokens=limits.max_output_tokens if limits.output else None,
            temperature=settings.temperature,
            max_answer_chars=settings.max_answer_chars,
            reasoning_effort=settings.reasoning_effort,
        ),
        system_prompt=prompt_text,
        max_steps=settings.max_steps,
        cwd=str(directory),
        compactor=compactor(session, model, prompt_text, schemas),
    )
    return setup, gate


def turn_prompt(
    session: SessionView,
    code: bool,
    tool_names: Sequence[str],
    gate: P.Gate,
    request: str = "",
) -> str:
    """The system prompt of a turn (and what ``%agent compact`` sizes the next request with):
    the setting's, code mode's (the kernel's variables, older ones ``request`` names
    included) or the tools' prompt, then the rules files (``rules``)."""
    settings = session.settings
    directory = Path(session.info.directory)
    prompt_text = settings.system_prompt or (
        codeaction.system_prompt(
            kernel.shell_variables_line(session.shell, request),
            kernel.folder_files(directory),
            kernel.shell_function_lines(session.shell),
        )
        if code
        else system_prompt(str(directory), list(tool_names))
    )
    if settings.rules:  # AGENTS.md files (context/rules.py)
        prompt_text = rules_prompt(session, prompt_text, gate)
    return prompt_text


def reading_gate(session: SessionView) -> P.Gate:
    """A permission ``Gate`` of the session's rules, for what reads outside a turn (the rules
    files of ``%agent compact``): it never asks."""

    def refuse(request: P.Request) -> tuple[str, str | None]:
        return "reject", None

    return P.Gate(
        session_id=session.info.id,
        directory=session.info.directory,
        ruleset=lambda: session.ruleset(()),
        approver=refuse,
        bounds=session.permission_bounds,
    )


def rules_prompt(session: SessionView, prompt_text: str, gate: P.Gate) -> str:
    """The system prompt with the rules files; at a root session's first turn, one line says
    which were used and the history keeps it (a ``rules`` event)."""
    found = rules.load(session.info.directory, may_read=lambda path: gate.reader()(path))
    if found and len(session.history) <= 1 and session.info.parent_id is None:
        print(rules.line(found), flush=True)
        record = rules.RulesUsed(ids.ascending("event"), session.info.id, now_ms(), found)
        session.store.put(record)
    return rules.with_rules(prompt_text, found)


def offered_tools(session: SessionView) -> dict[str, Tool]:
    """The tools the settings offer, before the permission rules hide any."""
    settings = session.settings
    tools: dict[str, Tool] = dict(builtin_tools())
    if settings.subagents:
        tools["task"] = task_tool(subagent_runner(session))
    if settings.memory.tool_on:  # cross-session memory (docs/memory.md)
        from ..memory.tool import RecallTool  # memory's modules load only when it is on

        tools["recall"] = RecallTool(session.store, settings, session.info.directory)
    if settings.mcp or settings.mcp_opencode:  # MCP servers' tools (docs/mcp.md)
        from ..tools.mcp_client import mcp_tools  # the MCP SDK loads only when servers are set

        tools.update(mcp_tools(settings, session.info.directory, taken=set(tools)))
    if settings.tools is not None:
        tools = {k: v for k, v in tools.items() if k in settings.tools}
    return tools


def compactor(
    session: SessionView,
    main: TurnModel,
    prompt_text: str,
    schemas: Sequence[dict] | None,
    tool_names: Sequence[str] = (),
) -> Compactor:
    """A ``compaction.Compactor`` for one turn of ``main``; ``schemas`` None: those of the
    builtin tools named in ``tool_names``. The summary model is ``compaction.model`` when
    set, else the turn's (its provider before code actions wrap it)."""
    settings = session.settings
    config = CompactionConfig.from_settings(settings.compaction, main.limits)
    summary = TurnModel.of(session.provider(config.model)) if config.model else main
    if schemas is None:
        schemas = [openai_schema(t) for name, t in builtin_tools().items() if name in tool_names]
    return Compactor(
        config=config,
        store=session.store,
        model=main.limits,
        data_dir=Path(settings.data_dir),
        system_prompt=prompt_text,
        tools_tokens=B.estimate(json.dumps(schemas)) if schemas else 0,
        summary_provider=summary.provider,
        summary_model=summary.limits,
        summary_request=SummaryRequests(
            model_id=summary.preset.model_id,
            default_max=summary.limits.max_output_tokens if summary.limits.output else None,
            temperature=settings.temperature,
        ),
        max_retries=settings.max_retries,
        cwd=session.info.directory,
        calibration=session.history.calibration,
    )


def tool_names(settings: Settings) -> list[str]:
    return [n for n in BUILTIN_NAMES if settings.tools is None or n in settings.tools]


def memory_parts(session: SessionView, message_id: str, prompt: str) -> tuple:
    """The memory injected into a new session's first user message (a synthetic text part), if any."""
    if session.history or not session.settings.memory.inject_on:
        return ()
    from ..memory import injection_part  # memory's modules load only when it is on

    part = injection_part(
        session.store,
        session.settings,
        prompt,
        directory=session.info.directory,
        session_id=session.info.id,
        message_id=message_id,
    )
    return (part,) if part is not None else ()


def memory_after_turn(session: SessionView) -> None:
    """Remember the session (``auto_remember``); embed the turn's passages (memory on)."""
    memory = session.settings.memory
    if memory.auto_remember or memory.tool_on or memory.inject_on:
        from ..memory import after_turn  # memory's modules load only when it is on

        after_turn(session)
