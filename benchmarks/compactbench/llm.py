"""The offline "models" of CompactBench, served over real HTTP by the scripted server.

* :class:`RuleAgent` plays the agent. It acts only on what the request shows it:
  it knows the turn it is in only if that turn's request (its ``[Tnn]`` marker)
  is visible; it treats a step as done only if the step's path is visible (a
  tool call, a result, or a summary line); otherwise it calls the tool again
  (counted as a duplicate). So a policy that loses the latest request or the
  record of finished work changes what the agent does next.
* :func:`extractive_summary` plays the summariser (an extractive stand-in), the same for
  every system: it reads each one's own request the same way (ours' ``<transcript>``,
  OpenCode's ``<conversation>``, v1.2.16's raw messages) and never its instructions. It
  keeps, while its budget lasts, the user's lines, then an earlier summary's lines, then
  what the assistant said, then tool-output lines with a number, ``key=value``, a path or a
  status word; a group that does not fit is sampled evenly (neither newest nor oldest
  preferred). The budget follows what it reads, as an LLM's "detailed summary" does: an
  eighth of the input (300–4,000 tokens), and never more than ``max_tokens``.
  :func:`forwarding_summariser` sends the same requests to a real model instead.
* The real OpenCode's own traffic is answered too: its title requests get a short
  title (``scripted_server.is_title_request``), its summary requests (system prompt "You are a
  context summarization agent…", the head as ``<conversation>``, an earlier summary as
  ``<prior-summary>``) go to the same summariser (the stand-in writes under its template's
  headings: Objective / Important Details / Work State / Next Move / Relevant Files).
* :class:`BenchServer` is the package's :class:`ScriptedServer` with a
  responder function instead of a queue, and a hard context limit: a request
  whose estimated prompt plus ``max_tokens`` exceeds the window gets OpenAI's
  400 ``context_length_exceeded``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from jupyter_session_agent.loop.compaction import SUMMARY_SYSTEM
from jupyter_session_agent.testing.scripted_server import Reply, ScriptedServer
from jupyter_session_agent.testing.scripted_server import (
    is_title_request as is_title_request,  # re-exported: real.py and opencode_fixture.py use it
)

CAP_SHARE, CAP_MIN, CAP_MAX = 8, 300, 4_000  # summary ≈ 1/8 of what it reads, 300–4,000 tokens
# a tool-output line worth keeping: a number, key=value, a status word or a path (no word list)
SALIENT = re.compile(
    r"(\b\d{2,}\b|\b\w+=\S+|\b(?:DONE|PENDING|BLOCKED)\b|\b[\w.-]+/[\w./-]+\.\w+)",
    re.IGNORECASE,
)
STATUS = re.compile(r"\b(DONE|PENDING|BLOCKED)\b")
PATH = re.compile(r"(?<![\w/.-])[\w.-]+(?:/[\w.-]+)+\.\w+")  # a relative path with a folder
PREFIXES = {
    "[User]: ": "user",
    "[Assistant]: ": "assistant",
    "[Assistant reasoning]: ": "assistant",
    "[Assistant tool call]: ": "call",
    "[Tool result]: ": "tool",
}
HEADINGS = {
    "## Goal": "goal",
    "## Instructions": "user",
    "## Discoveries": "fact",
    "## Accomplished": "status",
    "## Relevant files / directories": "file",
}
# OpenCode 1.18's template: heading → the class of line it holds (None: written as "(none)")
OPENCODE_HEADINGS = {
    "## Objective": "goal",
    "## Important Details": ("user", "fact"),
    "## Work State": None,
    "### Completed": "status",
    "### Active": None,
    "### Blocked": None,
    "## Next Move": None,
    "## Relevant Files": "file",
}
OPENCODE_SUMMARY_SYSTEM = "You are a context summarization agent."
CONTINUES = (
    "The conversation above was compacted",
    "Continue if you have next steps",
)  # not the goal
# OpenCode's read tool frames a file (<path>, <type>, <content>, "(End of file - total N lines)")
# and numbers its lines ("12: text"): the frame and the numbers are not facts of the file
READ_FRAME = re.compile(
    r"^(?:<path>.*</path>|<type>\w+</type>|</?content>|\(End of file - total \d+ lines\))$"
)
LINE_NUMBER = re.compile(r"^\d+: ")


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _system(body: dict) -> str:
    msgs = body.get("messages") or []
    return _content(msgs[0]) if msgs and msgs[0].get("role") == "system" else ""


def is_summary_request(body: dict) -> bool:
    """Ours (its system prompt) or the real OpenCode's (its summarisation agent)."""
    system = _system(body)
    return system == SUMMARY_SYSTEM or system.startswith(OPENCODE_SUMMARY_SYSTEM)


def _content(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") if p.get("type") == "text" else "[image]" for p in content
        )
    return content or ""


def _segments(body: dict) -> tuple[list[tuple[str, str]], str]:
    """(role, line) pairs of what was sent, oldest first, and the prompt text."""
    msgs = body["messages"]
    out: list[tuple[str, str]] = []
    last = _content(msgs[-1])
    tag = next((t for t in ("transcript", "conversation") if f"<{t}>" in last), None)
    if (
        len(msgs) == 2 and tag
    ):  # a transcript: ours (<transcript>) or OpenCode 1.18's (<conversation>)
        prev = re.search(r"<(previous-summary|prior-summary)>\n(.*?)\n</\1>", last, re.S)
        if prev:
            out += _summary_lines(prev.group(2))
        body_text = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", last, re.S)
        role = "assistant"
        for line in (body_text.group(1) if body_text else "").splitlines():
            for prefix, kind in PREFIXES.items():
                if line.startswith(prefix):
                    role, line = kind, line[len(prefix) :]
                    break
            if role == "tool":
                line = LINE_NUMBER.sub("", line)
                if READ_FRAME.match(line.strip()):
                    continue
            if line.strip():
                out.append((role, line.strip()))
        return out, last
    for m in msgs[1:-1]:  # raw messages (v1.2.16)
        role = m.get("role")
        text = _content(m)
        if role == "assistant" and text.startswith(
            ("## Goal", "## Objective")
        ):  # an earlier summary
            out += _summary_lines(text)
            continue
        for line in text.splitlines():
            if line.strip():
                out.append((role, line.strip()))
        for call in m.get("tool_calls") or ():
            out.append(("call", f"{call['function']['name']}({call['function']['arguments']})"))
    return out, last


def _summary_lines(text: str) -> list[tuple[str, str]]:
    """An earlier summary (ours or OpenCode's headings) as ("summary:<class>", line) pairs."""
    out, heading = [], "fact"
    for line in text.splitlines():
        line = line.strip()
        if line in HEADINGS:
            heading = HEADINGS[line]
        elif line in OPENCODE_HEADINGS:
            cls = OPENCODE_HEADINGS[line]
            heading = "fact" if isinstance(cls, tuple) else cls or "skip"
        elif (
            line
            and heading != "skip"
            and line not in ("- (none)", "(none)", "1. (none)", "2. (none)")
        ):
            out.append(("summary:" + heading, line.removeprefix("- ")))
    return out


def _fit_evenly(items: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    """The items that fit ``budget`` tokens, spread evenly over the list (neither the oldest
    nor the newest preferred); order kept."""
    costs = [tokens(line) + 1 for _, line in items]
    if sum(costs) <= budget:
        return list(items)
    if not items or budget <= 0:
        return []
    m = max(1, len(items) * budget // sum(costs))
    while m > 0:
        picks = sorted({(i * len(items)) // m + (len(items) // m) // 2 for i in range(m)})
        picks = [i for i in picks if i < len(items)]
        if sum(costs[i] for i in picks) <= budget:
            return [items[i] for i in picks]
        m -= 1
    return []


def extractive_summary(body: dict) -> str:
    """The stand-in summary of a summary request, read the same way whoever sent it.

    What it keeps depends on roles and on the lines themselves, never on the request's
    instructions: the user's lines first (both systems' prompts ask to carry the user's
    instructions), then an earlier summary's lines (both ask to merge into it), then what the
    assistant said, then tool-output lines with a number, ``key=value``, a path or a status
    word; each group, when it does not fit, is sampled evenly over the conversation. The size
    follows the input (an eighth, 300–4,000 tokens) and ``max_tokens``."""
    segments, prompt = _segments(body)
    sent = tokens(json.dumps(body.get("messages") or []))
    cap = min(CAP_MAX, max(CAP_MIN, sent // CAP_SHARE))
    if body.get("max_tokens"):
        cap = min(cap, int(body["max_tokens"]))
    groups: dict[str, list[tuple[str, str]]] = {
        "user": [],
        "summary": [],
        "assistant": [],
        "tool": [],
    }
    goal = None
    for role, line in segments:
        if role.startswith("summary:"):
            cls = role.split(":", 1)[1]
            if cls == "goal":
                goal = goal or line
                continue
            groups["summary"].append((cls, line))
        elif role == "user":
            if line == "What did we do so far?" or line.startswith(CONTINUES):
                continue
            goal = line[:300]
            groups["user"].append(("user", line[:300]))
        elif role == "call":
            for path in PATH.findall(line):
                groups["tool"].append(("file", path))
        elif len(line) > 300:
            continue
        elif role == "assistant" or SALIENT.search(line):
            cls = "status" if STATUS.search(line) else "fact"
            groups["assistant" if role == "assistant" else "tool"].append((cls, line))
    budget = cap - tokens(goal or "") - 40
    chosen: set[tuple[str, str]] = set()
    for name in ("user", "summary", "assistant", "tool"):
        seen: dict[tuple[str, str], int] = {}
        for i, item in enumerate(groups[name]):  # one copy of each, at its newest position
            if item not in chosen:
                seen[item] = i
        fresh = sorted(seen, key=seen.__getitem__)
        kept = _fit_evenly(fresh, budget)
        budget -= sum(tokens(line) + 1 for _, line in kept)
        chosen.update(kept)
    order = [item for name in ("summary", "user", "assistant", "tool") for item in groups[name]]
    kept_items: list[tuple[str, str]] = []
    for item in order:
        if item in chosen and item not in kept_items:
            kept_items.append(item)
    sections = []
    headings = (
        OPENCODE_HEADINGS if "## Objective" in prompt and "<template>" in prompt else HEADINGS
    )
    for heading, cls in headings.items():
        classes = cls if isinstance(cls, tuple) else (cls,)
        lines = (
            [goal]
            if cls == "goal" and goal
            else [f"- {line}" for c, line in kept_items if c in classes]
        )
        if cls is None and heading.startswith("## "):
            sections.append(heading if heading == "## Work State" else heading + "\n- (none)")
            continue
        sections.append(
            heading
            + "\n"
            + ("\n".join(lines) if lines else "- (none)" if headings is not HEADINGS else "(none)")
        )
    return "\n\n".join(sections)


def forwarding_summariser(
    base_url: str, model: str, api_key: str | None = None, timeout: float = 900
):
    """A summariser that sends each summary request, as it came, to a real OpenAI-compatible
    server (``model`` there; ``max_tokens`` kept) and returns its answer as a reply (an error
    reply when the server fails)."""
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + "/chat/completions"
    key = api_key or os.environ.get("OPENAI_API_KEY") or "sk-none"

    def summarise(body: dict) -> Reply:
        payload = {"model": model, "messages": body.get("messages") or [], "stream": False}
        if body.get("max_tokens"):
            payload["max_tokens"] = int(body["max_tokens"])
        req = urllib.request.Request(
            url,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                data = json.loads(resp.read())
            text = (data["choices"][0]["message"].get("content") or "").strip()
        except urllib.error.HTTPError as err:  # passed on as it came (a context overflow too)
            raw = err.read()
            try:
                error_body = json.loads(raw)
            except ValueError:
                error_body = {"error": {"message": raw[:300].decode(errors="replace")}}
            return Reply(status=err.code, error_body=error_body)
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as err:
            return Reply(
                status=502,
                error_body={
                    "error": {"message": f"summariser: {err}"[:300], "type": "server_error"}
                },
            )
        return Reply(text=text or "(empty summary)")

    return summarise


def extractive_summariser(body: dict) -> Reply:
    """The offline summariser as a responder (the default)."""
    return Reply(text=extractive_summary(body))


@dataclass
class RuleAgent:
    """The agent side: knows the turn in progress through the harness, acts on what it sees."""

    turn: object = None  # scenarios.Turn in progress
    executed: dict = field(default_factory=dict)  # step id → times called
    lost: int = 0  # requests in which the current request was not visible
    duplicates: int = 0

    def reply(self, body: dict) -> Reply:
        msgs = body.get("messages") or []
        said = "\n".join(_content(m) for m in msgs if m.get("role") in ("user", "assistant"))
        seen = "\n".join(
            [_content(m) for m in msgs]
            + [c["function"]["arguments"] for m in msgs for c in (m.get("tool_calls") or ())]
        )
        turn = self.turn
        if turn is None or turn.marker not in said:
            self.lost += 1
            return Reply(
                text="I am not sure what you would like me to do next; could you restate the task?"
            )
        for step in turn.steps:
            path = step.args.get("filePath") or step.args.get("command", "").split()[-1]
            if path in seen:
                continue
            count = self.executed.get(step.id, 0)
            if count:
                self.duplicates += 1
            self.executed[step.id] = count + 1
            return Reply(
                tool_calls=(
                    {"name": step.tool, "arguments": step.args, "id": f"call_{step.id}_{count}"},
                )
            )
        return Reply(text=turn.final)


class BenchServer(ScriptedServer):
    """Scripted server with a responder instead of a queue and a hard context limit."""

    def __init__(self, responder: Callable[[dict], Reply], context: int, **kw) -> None:
        super().__init__(**kw)
        self.responder = responder
        self.context = context
        self.overflows = 0
        self.keep_requests = True

    def _take(self, body: dict) -> tuple[int, Reply]:
        with self._lock:
            self._count += 1
            if self.keep_requests:
                self._requests.append(body)
            n = self._count
        prompt = math.ceil(
            len(json.dumps([*(body.get("messages") or []), *(body.get("tools") or [])])) / 4
        )
        if prompt + int(body.get("max_tokens") or 0) > self.context:
            self.overflows += 1
            return n, Reply(
                status=400,
                error_body={
                    "error": {
                        "message": f"This model's maximum context length is {self.context} tokens. However, you requested "
                        f"{prompt + int(body.get('max_tokens') or 0)} tokens. Please reduce the length of the messages.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )
        return n, self.responder(body)
