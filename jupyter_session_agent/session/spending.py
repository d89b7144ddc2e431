"""A session's budget and cost: the token budget now (``%agent budget``), the model's limits,
the resolved compaction settings, and what the session cost with its subagents.

:class:`Spending` owns the budget tally (a report folds only the messages new since the last)
and whether the session has children; the session composes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..core.budget import ModelInfo
from ..core.compaction_config import CompactionConfig
from ..core.messages import AssistantMessage, ModelRef, Session, ToolPart, WithParts
from ..core.settings import Settings
from ..loop.budget_report import BudgetReport, BudgetTally
from ..loop.history import History
from ..providers.registry import ProviderCache, model_info_for
from ..store.tree import children_cost

if TYPE_CHECKING:  # the store's modules load when a session opens one
    from ..store.store import Store


class SpendingHost(Protocol):
    """What the budget reads of its session (``AgentSession``)."""

    settings: Settings
    store: Store
    info: Session
    history: History
    providers: ProviderCache

    def last_model(self) -> str: ...

    def side_calls_cost(self) -> float: ...


class Spending:
    """The budget and the cost of one session."""

    def __init__(self, session: SpendingHost):
        self._session = session
        self._tally: BudgetTally | None = None
        self._has_children: bool | None = None  # None: not known yet (looked up once)

    def child_started(self) -> None:
        """A subagent session exists now (the cost includes it)."""
        self._has_children = True

    def cost(self) -> float:
        """See ``AgentSession.cost``."""
        session = self._session
        history = session.history
        own = sum(m.info.cost for m in history if isinstance(m.info, AssistantMessage))
        own += float((session.info.title_usage or {}).get("cost") or 0.0)
        own += session.side_calls_cost()
        if self._has_children is None:  # a task part (any state) means a child session may exist
            self._has_children = any(
                isinstance(p, ToolPart) and p.tool == "task" for m in history for p in m.parts
            )
        if self._has_children:
            own += children_cost(session.store, session.info.id)
        return own

    def model_info(self, model: str | None = None) -> ModelInfo:
        """Limits and prices of ``model`` (default: the next turn's), without starting a server."""
        session = self._session
        settings = session.settings
        spec = model or settings.model or session.last_model()
        ref = ModelRef.parse(spec) if spec else None
        for _, info, _ in session.providers.values():
            if ref is not None and (info.provider_id, info.model_id) == (
                ref.provider_id,
                ref.model_id,
            ):
                return info
        return model_info_for(
            spec,
            model_overrides=settings.model_overrides,
            local_context=settings.local_context,
        )

    def report(
        self,
        model: str | None = None,
        *,
        history: Sequence[WithParts] | None = None,
        info: ModelInfo | None = None,
    ) -> BudgetReport:
        """See ``AgentSession.budget_report``."""
        session = self._session
        if self._tally is None:
            self._tally = BudgetTally()
        return self._tally.report(
            session.history if history is None else history,
            info if info is not None else self.model_info(model),
            session.settings.compaction,
        )

    def compaction_config(self, model: str | None = None) -> CompactionConfig:
        """See ``AgentSession.compaction_config``."""
        return CompactionConfig.from_settings(
            self._session.settings.compaction, self.model_info(model)
        )
