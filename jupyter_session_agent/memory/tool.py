"""``recall``: the agent's search over what earlier sessions learned.

Offered only when memory is on (``%config AgentMagics.memory = {"enabled": True}``),
so small local models keep a short tool list. Searches the project's memory
notes and history (BM25, see :mod:`.search`), leaving out the session that
asks. Built by the session API (like ``task``), not one of ``builtin_tools()``.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ToolFailure
from ..tools.base import ToolContext, ToolResult
from . import recall

MAX_K = 20


class RecallTool:
    name = "recall"
    description = (
        "Search what earlier sessions in this project learned: decisions, the user's preferences and "
        "constraints, facts, open tasks, and what was said. Use it when the user refers to earlier work "
        "or you need a fact you were not given. Returns dated snippets with their session/message ids; "
        "when two disagree, the newer one is right. Returns nothing when no earlier session covered it."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What to look for, as keywords (e.g. 'staging database port')",
            },
            "k": {
                "type": "integer",
                "description": f"How many results (default 5, at most {MAX_K})",
            },
        },
        "required": ["query"],
    }

    def __init__(self, store: Any, settings: Any, directory: str):
        self.store = store
        self.settings = settings
        self.directory = directory

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        query = args["query"].strip()
        if not query:
            raise ToolFailure(
                "recall: query is empty — give keywords, e.g. 'staging database port'"
            )
        k = max(1, min(MAX_K, int(args.get("k") or 0) or 5))
        hits = recall(
            self.store,
            self.settings,
            query,
            directory=self.directory or str(ctx.directory),
            k=k,
            exclude_session=ctx.session_id,
        )
        if not hits:
            return ToolResult(
                output=f'No earlier session matches "{query}". Nothing is known about it from past sessions.',
                title=f"recall: {query} (no match)",
                metadata={"hits": []},
            )
        lines = [
            f'{len(hits)} result(s) for "{query}", best first (newer statements replace older ones):'
        ]
        lines += [f"{i}. {hit.line()}" for i, hit in enumerate(hits, 1)]
        return ToolResult(
            output="\n".join(lines),
            title=f"recall: {query} ({len(hits)})",
            metadata={"hits": [h.to_data() for h in hits]},
        )
