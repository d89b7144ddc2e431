"""The summary of a summary compaction and what follows it: the request (a user message
with a ``compaction`` part), the summary call (assistant, ``summary: true``, agent
``compaction``) with its fallbacks (a request that does not fit is shrunk: shorter tool
outputs, then the oldest head turns dropped), a rejected or failed summary, and the
synthetic continue message (auto only) or the replayed request after an overflow error."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ...core import budget as B
from ...core import ids
from ...core.chat import attached_placeholder, to_chat_messages
from ...core.compaction_config import SUMMARY_AGENT, TOOL_OUTPUT_MAX_CHARS
from ...core.messages import (
    AssistantMessage,
    CompactionPart,
    FilePart,
    TextPart,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
    error_data,
    now_ms,
    replace,
)
from ..step import StepProcessor, run_step
from .items import is_real_user, put_back, user_text
from .prompts import (
    CONTINUE_TEXT,
    OVERFLOW_NOTE,
    PINNED_NOTE,
    PREVIOUS_INTRO,
    RESTATE_TEXT,
    SUMMARY_SYSTEM,
    SUMMARY_TEMPLATE,
    TRANSCRIPT_INTRO,
)
from .transcribe import transcript


class SummaryMixin:
    """The summary pieces of :class:`~.compactor.Compactor` (one of its bases)."""

    # -- pieces ------------------------------------------------------------------

    def _request(self, last_user: UserMessage, *, auto: bool, overflow: bool) -> WithParts:
        info = UserMessage(
            id=ids.ascending("message"),
            session_id=last_user.session_id,
            time_created=now_ms(),
            model=last_user.model,
            agent=last_user.agent,
        )
        part = CompactionPart(
            ids.ascending("part"), info.session_id, info.id, auto=auto, overflow=overflow or None
        )
        self.store.put(info, part)
        self.store.flush(sync=False)
        return WithParts(info, (part,))

    def _replay_target(self, items: Sequence[WithParts]) -> WithParts | None:
        """The newest real user message; ours only replays it when the overflow hit the turn's
        first step (everything after it is the failed step), since replaying a turn that had
        already run tools would run them again and overflow again."""
        users = [i for i, m in enumerate(items) if is_real_user(m)]
        if not users:
            return None
        idx = users[-1]
        if self.config.smart_replay:
            after = items[idx + 1 :]
            if any(isinstance(m.info, AssistantMessage) and not m.info.error for m in after):
                return None
        return items[idx]

    def _summary_model(self) -> B.ModelInfo:
        return self.summary_model or self.model

    def _summarise(
        self, history, added, request, previous, pair, head, replay, instructions, target, observer
    ) -> tuple[WithParts | None, list[dict], str | None]:
        cfg = self.config
        model = self._summary_model()
        limit = B.budget(model, None).usable if model.context else 0
        levels = self._levels(head) if cfg.fallbacks else [(head, TOOL_OUTPUT_MAX_CHARS)]
        attempts: list[dict] = []
        for level, (part_head, chars) in enumerate(levels):
            chat = self._summary_chat(
                request, previous, pair, part_head, replay, chars, instructions, target
            )
            est = B.estimate(json.dumps(chat, ensure_ascii=False))
            if cfg.fallbacks and limit and est >= limit and level < len(levels) - 1:
                attempts.append(
                    {"level": level, "estimatedTokens": est, "outcome": "skipped", "sent": False}
                )
                continue
            item, outcome = self._summary_call(history, added, request, chat, target, observer)
            tokens = item.info.tokens
            attempts.append(
                {
                    "level": level,
                    "estimatedTokens": est,
                    "inputTokens": tokens.prompt,
                    "outputTokens": tokens.output,
                    "outcome": outcome,
                    "sent": True,
                }
            )
            if outcome == "ok":
                return item, attempts, None
            if outcome != "overflow" or not cfg.fallbacks:
                err = item.info.error or {}
                what = err.get("data", {}).get("message", outcome)
                return (
                    None,
                    attempts,
                    (f"compaction failed: {what}" if outcome != "overflow" else None),
                )
        return None, attempts, None

    def _levels(self, head: list[WithParts]) -> list[tuple[list[WithParts], int]]:
        """Ever smaller summary inputs: full; short tool outputs; the oldest half of the head dropped (×3)."""
        levels = [(head, TOOL_OUTPUT_MAX_CHARS), (head, 300)]
        part = head
        for _ in range(3):
            starts = [i for i, m in enumerate(part) if is_real_user(m)]
            if len(part) < 2:
                break
            mid = len(part) // 2
            cut = next((s for s in starts if s >= mid), mid)
            part = part[cut:] or part[-1:]
            levels.append((part, 300))
        return levels

    def _summary_chat(
        self, request, previous, pair, head, replay, chars, instructions, target
    ) -> list[dict]:
        cfg = self.config
        prompt = SUMMARY_TEMPLATE
        if cfg.pin:
            prompt += "\n\n" + PINNED_NOTE.format(tokens=target)
        if instructions:
            prompt += f"\n\nAdditional instructions from the user: {instructions}"
        system = {"role": "system", "content": SUMMARY_SYSTEM}
        if cfg.summary_input == "messages":
            # v1.2.16: the filtered history (earlier request and summary included), media stripped,
            # the request itself ("What did we do so far?") unless replaying, then the prompt.
            msgs = [*pair, *head, *([] if replay is not None else [request])]
            if chars < TOOL_OUTPUT_MAX_CHARS:
                msgs = [_short_outputs(m, chars) for m in msgs]
            return [
                system,
                *to_chat_messages(msgs, strip_media=True),
                {"role": "user", "content": prompt},
            ]
        blocks = []
        if previous is not None:
            text = "\n\n".join(
                p.text
                for p in previous.parts
                if isinstance(p, TextPart) and not p.synthetic and p.text
            )
            blocks.append(f"{PREVIOUS_INTRO}\n\n<previous-summary>\n{text}\n</previous-summary>")
        blocks.append(
            f"{TRANSCRIPT_INTRO}\n\n<transcript>\n{transcript(head, tool_chars=chars)}\n</transcript>"
        )
        blocks.append(prompt)
        return [system, {"role": "user", "content": "\n\n".join(blocks)}]

    def _summary_call(
        self, history, added, request, chat, target, observer
    ) -> tuple[WithParts, str]:
        model = self._summary_model()
        info = AssistantMessage(
            id=ids.ascending("message"),
            session_id=request.info.session_id,
            parent_id=request.info.id,
            time_created=now_ms(),
            provider_id=model.provider_id,
            model_id=model.model_id,
            agent=SUMMARY_AGENT,
            mode=SUMMARY_AGENT,
            path={"cwd": self.cwd, "root": self.cwd},
            summary=True,
        )
        max_tokens = None
        if self.config.pin and model.output:
            max_tokens = min(model.max_output_tokens, max(1_024, target * 2))
        chat_request = self.summary_request(chat, max_tokens)
        processor = StepProcessor(
            store=self.store,
            stream=lambda: self.summary_provider.stream(chat_request),
            model=model,
            tools={},
            run_tool=_no_tool,
            observer=observer,
            max_retries=self.max_retries,
            auto_compact=False,
            sleep=self.sleep,
        )
        result = run_step(processor, info, history, added)
        item = history[-1]
        if result.outcome == "compact":
            return item, "overflow"
        message = result.message
        text = "".join(p.text for p in item.parts if isinstance(p, TextPart)).strip()
        problem = None
        if message.error:
            problem = message.error.get("data", {}).get("message", "error")
        elif result.tool_calls:
            problem = "the summariser called a tool"
        elif not text:
            problem = "the summary was empty"
        if problem:
            if not message.error:
                self._reject(history, item, problem, name="CompactionFailedError")
            return item, "failed"
        return item, "ok"

    def _reject(
        self, history, item: WithParts, why: str, name: str = "CompactionRejectedError"
    ) -> None:
        info = replace(item.info, error=error_data(name, why))
        self.store.put(info)
        self.store.flush(sync=False)
        put_back(history, WithParts(info, next(m.parts for m in history if m.info.id == info.id)))

    def _continue(self, request: UserMessage, history, tail, *, overflow: bool) -> WithParts | None:
        cfg = self.config
        latest = next((m for m in reversed(history) if is_real_user(m)), None)
        latest_in_tail = latest is not None and any(m.info.id == latest.info.id for m in tail)
        if (
            cfg.skip_turn_end_continue
            and latest_in_tail
            and tail
            and tail[-1].info.id == latest.info.id
        ):
            return None  # the tail already ends with the unanswered request: the model answers it
        text = CONTINUE_TEXT
        if overflow:
            text = OVERFLOW_NOTE + "\n\n" + text
        if cfg.restate and latest is not None and not latest_in_tail:
            text += "\n\n" + RESTATE_TEXT.format(text=user_text(latest))
        info = UserMessage(
            id=ids.ascending("message"),
            session_id=request.session_id,
            time_created=now_ms(),
            model=request.model,
            agent=request.agent,
        )
        part = TextPart(
            ids.ascending("part"),
            info.session_id,
            info.id,
            text=text,
            synthetic=True,
            metadata={"compaction_continue": True},
        )
        self.store.put(info, part)
        return WithParts(info, (part,))

    def _replay(self, original: WithParts, request: UserMessage) -> WithParts:
        src = original.info
        info = UserMessage(
            id=ids.ascending("message"),
            session_id=src.session_id,
            time_created=now_ms(),
            model=src.model,
            agent=src.agent,
            system=src.system,
            variant=src.variant,
            format=src.format,
        )
        parts = []
        for p in original.parts:
            if isinstance(p, CompactionPart):
                continue
            if isinstance(p, FilePart) and p.mime.startswith(("image/", "application/pdf")):
                parts.append(
                    TextPart(
                        ids.ascending("part"),
                        info.session_id,
                        info.id,
                        text=attached_placeholder(p),
                    )
                )
            else:
                parts.append(replace(p, id=ids.ascending("part"), message_id=info.id))
        self.store.put(info, *parts)
        return WithParts(info, tuple(parts))


def _no_tool(tool, args, call):  # pragma: no cover - the summariser gets no tools
    raise RuntimeError("the compaction agent has no tools")


def _short_outputs(item: WithParts, chars: int) -> WithParts:
    parts = []
    for p in item.parts:
        if (
            isinstance(p, ToolPart)
            and isinstance(p.state, ToolCompleted)
            and len(p.state.output) > chars
        ):
            p = replace(p, state=replace(p.state, output=p.state.output[:chars] + "\n[truncated]"))
        parts.append(p)
    return WithParts(item.info, tuple(parts))
