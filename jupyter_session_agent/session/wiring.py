"""What one turn of a session is run with: its tools, permission gate, requests, system
prompt and compactor (``loop.turn.TurnSetup``), built from the session's settings and state.

The session calls :func:`turn_setup` before each turn and :func:`compactor` for ``%agent
compact``; both only read the session (its public attributes and methods) and return values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.errors import ToolFailure
from ..core.settings import Settings
from ..loop.turn import TurnSetup, system_prompt


def turn_setup(
    session: Any, provider: Any, info: Any, spec: Any, permission: Any, state: dict
) -> tuple[TurnSetup, Any]:
    """(the ``TurnSetup`` of the next turn, its permission ``Gate``). ``state``: the
    session's compaction state, kept between turns."""
    from ..core import codeaction
    from ..core import permission as P
    from ..core.redact import redact, redact_value
    from ..providers.openai_provider import ChatRequest
    from ..tools import builtin_tools, run_tool
    from .approval import default_approver

    settings = session.settings
    tools = builtin_tools()
    if settings.subagents:
        from ..tools.task import task_tool
        from .subagents import subagent_runner

        tools["task"] = task_tool(subagent_runner(session))
    if memory_option(settings, "tool"):  # cross-session memory (docs/memory.md)
        from ..memory.tool import RecallTool

        tools["recall"] = RecallTool(session.store, settings, session.info.directory)
    if settings.mcp or settings.mcp_opencode:  # MCP servers' tools (docs/mcp.md)
        from ..tools.mcp_client import mcp_tools

        tools.update(mcp_tools(settings, session.info.directory, taken=set(tools)))
    if settings.tools is not None:
        tools = {k: v for k, v in tools.items() if k in settings.tools}
    cell_rules = tuple(P.Rule.of(r) for r in permission or ())
    # A subagent stays within its parent's rules (subagents.subagent_runner sets the bounds).
    bounds = session.permission_bounds
    # A tool whose last rule is a "*" deny is not offered to the model at all.
    hidden = P.disabled(tools, session.ruleset(cell_rules), *(bound() for bound in bounds))
    tools = {k: v for k, v in tools.items() if k not in hidden}

    summary_provider = provider
    code = codeaction.enabled(settings.code_actions, spec.provider_id, spec.model_id)
    if code:  # the model writes ```python blocks (core/codeaction.py): python is its only tool
        tools = {k: v for k, v in tools.items() if k == codeaction.TOOL}
        provider = codeaction.CodeActionProvider(provider, server_side=spec.provider_id == "local")
    gate = P.Gate(
        session_id=session.info.id,
        directory=session.info.directory,
        ruleset=lambda: session.ruleset(cell_rules),
        approver=session.approver or default_approver(session.shell),
        on_always=session.allow,
        bounds=bounds,
        contained=("bash",) if session.sandboxed else (),
    )
    tool_list = list(tools.values())
    schemas = [schema(t) for t in tool_list]
    directory = Path(session.info.directory)
    max_tokens = info.max_output_tokens if info.output else None

    def request_factory(chat: list[dict], last_step: bool) -> ChatRequest:
        return ChatRequest(
            model=spec.model_id,
            messages=chat,
            tools=schemas,
            max_tokens=max_tokens,
            temperature=settings.temperature,
            max_answer_chars=settings.max_answer_chars,
            reasoning_effort=settings.reasoning_effort,
        )

    def call_tool(tool: Any, args: dict, call: Any):
        from ..tools import ToolContext

        ctx = ToolContext(
            session_id=session.info.id,
            message_id=session.history[-1].info.id,
            call_id=call.call_id,
            directory=directory,
            data_dir=settings.data_dir,
            shell=session.shell,
            may_read=gate.reader(),
            sandbox=confinement(settings, gate) if tool.name == "bash" else None,
        )
        try:
            return run_tool(tool, args, ctx)
        except ToolFailure as err:  # error texts reach the model and the history: no keys in them
            failure = ToolFailure(redact(str(err), refresh=True))
            if isinstance(getattr(err, "metadata", None), dict):  # e.g. an MCP call's server
                failure.metadata = redact_value(err.metadata, refresh=True)
            raise failure from None
        except Exception as err:
            raise ToolFailure(redact(f"{type(err).__name__}: {err}", refresh=True)) from None

    compaction = settings.compaction
    prompt_text = turn_prompt(session, code, list(tools), gate)
    setup = TurnSetup(
        store=session.store,
        provider=provider,
        request_factory=request_factory,
        model=info,
        tools=tools,
        run_tool=call_tool,
        system_prompt=prompt_text,
        max_steps=settings.max_steps,
        max_retries=settings.max_retries,
        max_retry_wait=settings.max_retry_wait,
        auto_compact=bool(compaction.get("auto", True)),
        reserved=compaction.get("reserved"),
        cwd=str(directory),
        permit=gate,
        snapshot=session.snapshot(),
        compactor=compactor(session, (summary_provider, info, spec), prompt_text, schemas, state),
    )
    return setup, gate


def turn_prompt(session: Any, code: bool, tool_names: list[str], gate: Any) -> str:
    """The system prompt of a turn (and what ``%agent compact`` sizes the next request with):
    the setting's, code mode's or the tools' prompt, then the rules files (``rules``)."""
    from ..core import codeaction
    from ..tools import kernel

    settings = session.settings
    prompt_text = settings.system_prompt or (
        codeaction.system_prompt(
            kernel.variables_line(
                getattr(session.shell, "user_ns", None) or {},
                getattr(session.shell, "user_ns_hidden", ()),
            )
        )
        if code
        else system_prompt(str(session.info.directory), tool_names)
    )
    if settings.rules:  # AGENTS.md files (context/rules.py)
        prompt_text = rules_prompt(session, prompt_text, gate)
    return prompt_text


def reading_gate(session: Any) -> Any:
    """A permission ``Gate`` of the session's rules, for what reads outside a turn (the rules
    files of ``%agent compact``): it never asks."""
    from ..core import permission as P

    def refuse(request: Any) -> tuple[str, str | None]:
        return "reject", None

    return P.Gate(
        session_id=session.info.id,
        directory=session.info.directory,
        ruleset=lambda: session.ruleset(()),
        approver=refuse,
        bounds=session.permission_bounds,
    )


def rules_prompt(session: Any, prompt_text: str, gate: Any) -> str:
    """The system prompt with the rules files; at a root session's first turn, one line says
    which were used and the history keeps it (a ``rules`` event)."""
    from ..context import rules

    found = rules.load(session.info.directory, may_read=lambda path: gate.reader()(path))
    if found and len(session.history) <= 1 and session.info.parent_id is None:
        from ..core import ids
        from ..core.messages import now_ms

        print(rules.line(found), flush=True)
        record = rules.RulesUsed(ids.ascending("event"), session.info.id, now_ms(), found)
        session.store.put(record)
    return rules.with_rules(prompt_text, found)


def confinement(settings: Settings, gate: Any) -> Any:
    """How the next bash call runs (``tools/sandbox.py``): writable are the session folder
    and the folders the user allowed (``external_directory`` allow rules; the saved tool
    outputs excluded), network only when the ``network`` permission allows it."""
    import os

    from ..tools.sandbox import confinement_for, writable_from_rules

    outputs = os.path.realpath(os.path.join(os.path.abspath(settings.data_dir), "tool-output"))
    writable = tuple(
        w for w in writable_from_rules(gate.effective()) if os.path.realpath(w) != outputs
    )
    return confinement_for(settings.sandbox, writable, gate.allows("network"))


def compactor(
    session: Any,
    main: Any,
    prompt_text: str,
    schemas: Any,
    state: dict,
    tool_names: Any = None,
):
    """A ``compaction.Compactor`` for one turn; ``main`` is the turn's (provider, ModelInfo,
    spec); ``schemas`` None: those of the builtin tools named in ``tool_names``."""
    from ..core import budget as B
    from ..core.compaction_config import CompactionConfig
    from ..loop.compaction import Compactor
    from ..providers.openai_provider import ChatRequest

    settings = session.settings
    info = main[1]
    config = CompactionConfig.from_settings(settings.compaction, info)
    summary_provider, summary_info, summary_spec = (
        session.provider(config.model) if config.model else main
    )
    default_max = summary_info.max_output_tokens if summary_info.output else None

    def summary_request(chat: list[dict], max_tokens: int | None) -> ChatRequest:
        return ChatRequest(
            model=summary_spec.model_id,
            messages=chat,
            max_tokens=max_tokens or default_max,
            temperature=settings.temperature,
        )

    if schemas is None:
        from ..tools import builtin_tools

        schemas = [schema(t) for name, t in builtin_tools().items() if name in (tool_names or ())]
    return Compactor(
        config=config,
        store=session.store,
        model=info,
        data_dir=Path(settings.data_dir),
        system_prompt=prompt_text,
        tools_tokens=B.estimate(json.dumps(schemas)) if schemas else 0,
        summary_provider=summary_provider,
        summary_model=summary_info,
        summary_request=summary_request,
        max_retries=settings.max_retries,
        cwd=session.info.directory,
        state=state,
    )


def schema(tool: Any) -> dict:
    from ..tools import openai_schema

    return openai_schema(tool)


def tool_names(settings: Settings) -> list[str]:
    from ..tools import BUILTIN_NAMES

    return [n for n in BUILTIN_NAMES if settings.tools is None or n in settings.tools]


def memory_option(settings: Settings, name: str) -> bool:
    """Whether cross-session memory's ``tool``/``inject`` is on (each follows ``enabled`` unless set)."""
    memory = getattr(settings, "memory", None) or {}
    value = memory.get(name)
    return bool(memory.get("enabled") if value is None else value)


def memory_parts(session: Any, message_id: str, prompt: str) -> tuple:
    """The memory injected into a new session's first user message (a synthetic text part), if any."""
    if session.history or not memory_option(session.settings, "inject"):
        return ()
    from ..memory import injection_part

    part = injection_part(
        session.store,
        session.settings,
        prompt,
        directory=session.info.directory,
        session_id=session.info.id,
        message_id=message_id,
    )
    return (part,) if part is not None else ()


def memory_after_turn(session: Any) -> None:
    """Remember the session (``auto_remember``); embed the turn's passages (memory on)."""
    if (getattr(session.settings, "memory", None) or {}).get("auto_remember") or any(
        memory_option(session.settings, name) for name in ("tool", "inject")
    ):
        from ..memory import after_turn

        after_turn(session)
