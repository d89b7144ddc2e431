"""``task``: hand a self-contained job to a subagent (OpenCode's task tool).

The subagent is a child session (``parentID`` = the caller's session) that
runs through the same session API with its own context, so the caller's
context only grows by the final answer. The tool is offered only when
``%config AgentMagics.subagents = True`` (small local models do better with
short tool lists). The session API builds it with ``run_child``, so this
module does not import the session layer:

    run_child(description, prompt, model, task_id) -> (child_id, final_text, child_cost)

Permissions: the child starts from the caller's effective rules (defaults, config, session
and cell rules, the answers given so far) and every call it makes must also pass them, so a
subagent can only narrow what its parent may do (``permission.Gate.child_bounds``).

Output: ``task_id: <id>\\n\\n<task_result>\\n<final text>\\n</task_result>``;
``metadata`` holds ``sessionId``, ``model`` and the child's ``cost`` (its own
children and title included). The caller's cost totals include the child's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import ToolFailure
from .base import ToolContext, ToolResult

RunChild = Callable[[str, str, str | None, str | None], tuple[str, str, float, str]]


@dataclass
class TaskTool:
    run_child: RunChild
    name: str = "task"
    description: str = (
        "Start a subagent: a separate assistant with its own fresh context and the same tools, "
        "which works on `prompt` alone and returns its final answer. Use it for a self-contained "
        "job (a search, an analysis, a multi-step change) to keep this conversation short. The "
        "prompt must say everything the subagent needs, and what to report back. To continue an "
        "earlier task, pass its task_id."
    )
    parameters: dict = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "description": "a short (3-5 words) label for the task",
                },
                "prompt": {"type": "string", "description": "the full task for the subagent"},
                "model": {
                    "type": "string",
                    "description": "optional provider/model id for the subagent",
                },
                "task_id": {
                    "type": "string",
                    "description": "optional: continue this earlier task",
                },
            },
            "required": ["description", "prompt"],
        }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        description = str(args.get("description") or "").strip() or "task"
        prompt = str(args.get("prompt") or "").strip()
        if not prompt:
            raise ToolFailure("task: `prompt` is empty — say what the subagent should do")
        child_id, text, cost, model = self.run_child(
            description, prompt, args.get("model") or None, args.get("task_id") or None
        )
        output = f"task_id: {child_id}\n\n<task_result>\n{text}\n</task_result>"
        return ToolResult(
            output=output,
            title=description,
            metadata={"sessionId": child_id, "model": model, "cost": cost},
        )


def task_tool(run_child: RunChild) -> Any:
    return TaskTool(run_child)
