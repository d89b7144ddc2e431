"""The import tests' fixture, written by the real OpenCode CLI.

``python -m benchmarks.opencode_fixture``

Runs ``opencode run`` (npm ``opencode-ai``, installed into a cache folder when missing; see
``benchmarks/compactbench/opencode_cli.py``) in an isolated home against the package's scripted
server and keeps the database it writes, as ``tests/fixtures/opencode-1.18/opencode.db.xz``
(``VACUUM INTO``, then xz).
Four sessions, each with a title naming what it holds:

* ``fixture: tools`` — reasoning and cached tokens in the usage, ``todowrite`` (twice: the
  ``todo`` table), a ``task`` subagent (a child session), bash / read / edit, six outputs
  large enough for OpenCode's prune (it runs at the end of a run with ``compaction.prune``)
  and truncation (the full output saved to a file);
* ``fixture: auto`` — a small model whose context fills twice: two automatic summaries, the
  second merging the first (``<prior-summary>``);
* ``fixture: manual`` — ``POST /session/<id>/summarize`` through ``opencode serve`` (``opencode
  run --command compact`` does not work), then one more turn;
* ``fixture: overflow`` — the server refuses a request as too long (context_length_exceeded):
  the overflow compaction and the re-posted prompt.

``next-requests.json`` holds, for the tools and auto sessions, the prompt of one more turn and
the messages OpenCode sent for it (system prompt left out; each as role, tool calls and a
digest of its text: :func:`digest`), taken after the database was copied: the tests continue
the imported sessions with the same prompt and compare. Every turn is ``opencode run
--attach`` to one ``opencode serve`` (which also takes the manual compaction).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from jupyter_session_agent.testing.scripted_server import Reply

from .compactbench.llm import BenchServer, extractive_summary, is_summary_request, is_title_request
from .compactbench.opencode_cli import VERSION, Sandbox, Serve, ensure_opencode, session_of

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "opencode-1.18"
BIG_LINES = 2_200  # more than OpenCode's 2,000 lines: the output is truncated and saved in full
OVERFLOW = "overflow"  # a planned reply: refuse the request as too long


def _usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _bash(command: str) -> Reply:
    return Reply(
        tool_calls=({"name": "bash", "arguments": {"command": command, "description": command}},)
    )


TODOS = [
    {"content": "check the environment", "status": "in_progress", "priority": "high"},
    {"content": "review config.py", "status": "pending", "priority": "medium"},
    {"content": "turn debug off", "status": "pending", "priority": "low"},
]
DONE = [{**t, "status": "completed"} for t in TODOS]

TOOLS = [  # (prompt, replies); each turn ends with a text reply
    (
        "[T1] Plan the work, then check the environment.",
        [
            Reply(
                reasoning="A short plan first, then one command.",
                tool_calls=({"name": "todowrite", "arguments": {"todos": TODOS}},),
                usage=_usage(9_000, 120, cached=6_000, reasoning=40),
            ),
            Reply(
                tool_calls=(
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "echo env-ok",
                            "description": "check the environment",
                        },
                    },
                ),
                usage=_usage(9_300, 30, cached=9_000),
            ),
            Reply(
                text="[T1] Planned; the environment is ok.", usage=_usage(9_400, 12, cached=9_200)
            ),
        ],
    ),
    (
        "[T2] Ask a subagent to review config.py.",
        [
            Reply(
                tool_calls=(
                    {
                        "name": "task",
                        "arguments": {
                            "description": "review config",
                            "prompt": "[SUB] Review config.py and report.",
                            "subagent_type": "general",
                        },
                    },
                )
            ),
            Reply(text="[T2] The subagent found nothing to change."),
        ],
    ),
    (
        "[T3] Read the first three big logs.",
        [
            _bash("cat logs/big1.log"),
            _bash("cat logs/big2.log"),
            _bash("cat logs/big3.log"),
            Reply(text="[T3] Read three logs."),
        ],
    ),
    (
        "[T4] Read the other three.",
        [
            _bash("cat logs/big4.log"),
            _bash("cat logs/big5.log"),
            _bash("cat logs/big6.log"),
            Reply(text="[T4] Read three more."),
        ],
    ),
    (
        "[T5] Turn debug off in config.py.",
        [
            Reply(tool_calls=({"name": "read", "arguments": {"filePath": "config.py"}},)),
            Reply(
                tool_calls=(
                    {
                        "name": "edit",
                        "arguments": {
                            "filePath": "config.py",
                            "oldString": "debug = True",
                            "newString": "debug = False",
                        },
                    },
                )
            ),
            Reply(tool_calls=({"name": "todowrite", "arguments": {"todos": DONE}},)),
            Reply(text="[T5] Debug is off; every todo is done."),
        ],
    ),
    (
        "[T6] Where do we stand?",
        [
            Reply(
                reasoning="Everything is done.",
                text="[T6] All three tasks are done.",
                usage=_usage(40_000, 20, cached=38_000, reasoning=5),
            )
        ],
    ),
]
TOOLS_NEXT = "[T7] Anything left to do?"

AUTO = [
    (
        f"[A{i}] Show part {i} of the report.",
        [_bash(f"cat report/part{i}.txt"), Reply(text=f"[A{i}] Part {i} shown.")],
    )
    for i in range(1, 11)
]
AUTO_NEXT = "[A11] Which parts have we seen?"

MANUAL = [
    ("[M1] Count the files.", [_bash("ls | wc -l"), Reply(text="[M1] Counted.")]),
    (
        "[M2] Read config.py.",
        [
            Reply(tool_calls=({"name": "read", "arguments": {"filePath": "config.py"}},)),
            Reply(text="[M2] Read it."),
        ],
    ),
]
MANUAL_AFTER = [("[M3] Go on with the review.", [Reply(text="[M3] Nothing else to review.")])]

OVERFLOWING = [
    ("[O1] Show part 1 of the report.", [_bash("cat report/part1.txt"), Reply(text="[O1] Shown.")]),
    (
        "[O2] Show part 2 of the report.",
        [OVERFLOW, _bash("cat report/part2.txt"), Reply(text="[O2] Shown after the overflow.")],
    ),
]


def digest(message: dict) -> dict:
    """A chat message as the continuation test compares it: role, tool calls, tool call id, and
    the text (its length, first characters and SHA-256, so the fixture stays small)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    text = (content or "").rstrip("\n")
    out = {
        "role": message["role"],
        "chars": len(text),
        "head": text[:80],
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"] or "{}"),
            }
            for c in message["tool_calls"]
        ]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out


class Script:
    """The replies of the turn in progress; the subagent, titles and summaries answered aside."""

    def __init__(self) -> None:
        self.queue: list = []
        self.seen: list[dict] = []  # the main requests of the turn in progress

    def respond(self, body: dict):
        if is_title_request(body):
            return Reply(text="Fixture session")
        if is_summary_request(body):
            return Reply(text=extractive_summary(body))
        messages = body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        last = json.dumps(users[-1].get("content")) if users else ""
        if "[SUB]" in last:  # the subagent's own session
            return Reply(text="[SUB] config.py looks fine: debug is the only switch.")
        self.seen.append(body)
        if not self.queue:
            return Reply(text="Nothing more to do.")
        reply = self.queue.pop(0)
        if reply == OVERFLOW:
            return Reply(
                status=400,
                error_body={
                    "error": {
                        "message": "This model's maximum context length is 16000 tokens. However, "
                        "your messages resulted in 17500 tokens. Please reduce the length of the "
                        "messages.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )
        return reply


def _files(project: Path) -> None:
    (project / "logs").mkdir(parents=True, exist_ok=True)
    for n in range(1, 7):
        (project / "logs" / f"big{n}.log").write_text(
            "".join(
                f"log {n} line {i:05d}: worker ok, queue steady, cache warm\n"
                for i in range(BIG_LINES)
            )
        )
    (project / "report").mkdir(exist_ok=True)
    for n in range(1, 11):
        (project / "report" / f"part{n}.txt").write_text(
            f"Report part {n}: figures for region {n}.\n"
            + "".join(
                f"row {n}.{i:03d}: value {(n * 37 + i) % 1000:03d} within range\n"
                for i in range(120)
            )
        )
    (project / "config.py").write_text("debug = True\nretries = 3\n")


def _turns(
    sandbox: Sandbox,
    serve: Serve,
    script: Script,
    turns,
    *,
    model: str,
    title: str | None = None,
    session: str | None = None,
) -> str:
    """``opencode run --attach`` per turn: the server outlives each run, so what OpenCode does
    at the end of a loop (the prune) is finished before the next one (a run on its own exits
    first)."""
    for prompt, replies in turns:
        script.queue, script.seen = list(replies), []
        done = sandbox.run(
            prompt,
            session=session,
            model=model,
            title=None if session else title,
            attach=serve.url,
            timeout=900,
        )
        finishes = [line for line in done.stdout.splitlines() if '"type":"step_finish"' in line]
        # an error OpenCode recovered from (the overflow) still makes ``opencode run`` exit 1
        if done.returncode != 0 and not (finishes and '"reason":"stop"' in finishes[-1]):
            raise SystemExit(
                f"opencode run failed on {prompt!r} ({done.returncode}): "
                f"{(done.stderr or done.stdout)[-600:]}"
            )
        session = session or session_of(done)
        if session is None:
            raise SystemExit(f"no session id in opencode run's output: {done.stdout[:300]}")
        if script.queue:
            raise SystemExit(f"{prompt!r}: {len(script.queue)} planned replies were not asked for")
    return session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.opencode_fixture")
    parser.add_argument("--out", default=str(OUT), help=f"folder to write (default {OUT})")
    parser.add_argument("--keep", help="also keep the whole sandbox here (home, project, logs)")
    args = parser.parse_args(argv)
    binary = ensure_opencode()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="opencode-fixture-"))
    script = Script()
    server = BenchServer(script.respond, 10_000_000).start()
    try:
        sandbox = Sandbox(
            root,
            binary,
            server.base_url,
            200_000,
            4_000,
            models={"small": (16_000, 1_000), "mid": (16_000, 1_000)},
        )
        _files(sandbox.project)
        ids = {}
        serve = sandbox.serve()
        try:
            ids["tools"] = _turns(
                sandbox, serve, script, TOOLS, model="bench", title="fixture: tools"
            )
            ids["auto"] = _turns(sandbox, serve, script, AUTO, model="small", title="fixture: auto")
            ids["manual"] = _turns(
                sandbox, serve, script, MANUAL, model="bench", title="fixture: manual"
            )
            serve.summarize(ids["manual"])
            _turns(sandbox, serve, script, MANUAL_AFTER, model="bench", session=ids["manual"])
            ids["overflow"] = _turns(
                sandbox, serve, script, OVERFLOWING, model="mid", title="fixture: overflow"
            )
        finally:
            serve.stop()
        db = out / "opencode.db"
        db.unlink(missing_ok=True)
        con = sqlite3.connect(sandbox.db)
        con.execute(f"VACUUM INTO '{db}'")
        con.close()
        (out / "opencode.db.xz").write_bytes(
            lzma.compress(db.read_bytes(), preset=9 | lzma.PRESET_EXTREME)
        )
        db.unlink()
        nexts = {}
        with sandbox.serve() as serve:
            for name, prompt, model in (
                ("tools", TOOLS_NEXT, "bench"),
                ("auto", AUTO_NEXT, "small"),
            ):
                _turns(
                    sandbox,
                    serve,
                    script,
                    [(prompt, [Reply(text="Done.")])],
                    model=model,
                    session=ids[name],
                )
                nexts[ids[name]] = {
                    "name": name,
                    "prompt": prompt,
                    "messages": [digest(m) for m in script.seen[0]["messages"][1:]],
                }
        (out / "next-requests.json").write_text(
            json.dumps(
                {"opencode": VERSION, "sessions": ids, "next": nexts}, indent=1, ensure_ascii=False
            )
            + "\n"
        )
    finally:
        if args.keep:
            shutil.copytree(root, args.keep, dirs_exist_ok=True)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    size = (out / "opencode.db.xz").stat().st_size
    print(f"wrote {out}/opencode.db.xz ({size:,} bytes) and next-requests.json: sessions {ids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
