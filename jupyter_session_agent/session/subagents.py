"""Subagents: the child sessions the ``task`` tool runs (docs/lifecycle.md), and what they cost.

A child is built by the session API with what it takes from its parent, an
:class:`Inheritance`: the parent's provider cache, approver and permission rules (the child
starts from the parent's effective rules and stays within them). One level deep: a child
has no ``task`` tool and no title call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..core import ids
from ..core.errors import AgentError, ToolFailure
from ..core.messages import ToolCompleted, ToolPart, WithParts, replace
from . import snapshot


@dataclass(frozen=True)
class Inheritance:
    """What a subagent session takes from its parent when it is built."""

    providers: Any  # the parent's ProviderCache: one provider (and local server) per model
    approver: Any  # who is asked when a call's permission is "ask"
    rules: Callable[[], list]  # the parent's effective rules: where the child's ruleset starts
    bounds: tuple[Callable[[], list], ...]  # rules the child's calls must also pass


def subagent_runner(parent: Any):
    """The ``run_child`` callback of the parent's ``task`` tool (see tools/task.py)."""

    def run_child(description: str, prompt: str, model: str | None, task_id: str | None):
        settings = replace(parent.settings, subagents=False, titles=False)  # one level deep
        # The child starts from the parent's effective rules (defaults, config, session, cell,
        # answers so far) and stays within them and the parent's own bounds: its own rules can
        # only narrow them, never widen.
        gate = parent.gate
        bounds = gate.child_bounds() if gate is not None else (lambda: parent.ruleset(),)
        inherit = Inheritance(parent.providers, parent.approver, bounds[0], tuple(bounds))
        options: dict[str, Any] = {"store": parent.store, "shell": parent.shell, "inherit": inherit}
        if task_id:
            if not ids.valid(task_id, "session"):
                raise ToolFailure(
                    f"task: {ids.shown(task_id)} is not a task id — omit task_id to start one"
                )
            try:
                child = type(parent).open(task_id, settings, **options)
            except AgentError:
                raise ToolFailure(
                    f"task: no task {task_id!r} to continue — omit task_id to start one"
                ) from None
            if child.info.parent_id != parent.info.id:
                raise ToolFailure(f"task: {task_id!r} is not a task of this session")
        else:
            child = type(parent).create(
                settings,
                directory=parent.info.directory,
                title=f"{description} (@general subagent)",
                parent_id=parent.info.id,
                **options,
            )
            # the parent's snapshot index and objects: the child's first snapshot re-hashes nothing
            snapshot.copy_repo(parent.settings.data_dir, parent.info.id, child.info.id)
        parent.child_started()
        spec = (
            model or parent.settings.subagent_model or parent.last_model() or parent.settings.model
        )
        try:
            result = child.prompt(prompt, model=spec or None)
        except AgentError as err:
            raise ToolFailure(f"task {child.info.id} failed: {err}") from None
        return child.info.id, result.text, child.cost, spec

    return run_child


def turn_children_cost(added: Iterable[WithParts]) -> float:
    """The child-session cost reported by the ``task`` calls of one turn."""
    total = 0.0
    for item in added:
        for part in item.parts:
            if (
                isinstance(part, ToolPart)
                and part.tool == "task"
                and isinstance(part.state, ToolCompleted)
            ):
                total += float((part.state.metadata or {}).get("cost") or 0.0)
    return total
