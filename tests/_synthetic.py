"""A synthetic session that holds every part type, every tool status, a pruned
output, a compaction request with its summary, and a retry — for the display
tests and the browser test. Pure values: nothing here touches a store."""

from __future__ import annotations

from jupyter_session_agent.core import ids
from jupyter_session_agent.core.messages import (
    AgentPart,
    AssistantMessage,
    CompactionPart,
    FilePart,
    ModelRef,
    PatchPart,
    ReasoningPart,
    RetryPart,
    Session,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    UserMessage,
    WithParts,
    error_data,
)

T0 = 1_760_000_000_000
MODEL = ModelRef("openai", "scripted")
BIG_OUTPUT = "\n".join(
    f"row {i:05d}: " + "x" * 60 for i in range(500)
)  # ~36 KB: truncated in the bundle
PRUNED_OUTPUT = "\n".join(f"line {i}: old listing of the data directory" for i in range(200))


def _tokens(inp: int, out: int, **kw) -> Tokens:
    return Tokens(input=inp, output=out, total=inp + out + kw.get("cache_read", 0), **kw)


def synthetic_session(
    title: str = "Synthetic session: every part",
) -> tuple[Session, list[WithParts]]:
    sid = ids.descending("session")
    session = Session(
        id=sid, directory="/work", title=title, time_created=T0, time_updated=T0 + 60_000
    )
    history: list[WithParts] = []
    t = iter(range(T0, T0 + 10_000_000, 1_000))

    def user(*make) -> None:
        info = UserMessage(ids.ascending("message"), sid, next(t), MODEL)
        history.append(WithParts(info, tuple(m(info.id) for m in make)))

    def assistant(
        *make, summary=None, tokens=Tokens(), cost=0.0, finish="stop", error=None
    ) -> None:
        parent = next(m.info.id for m in reversed(history) if m.info.role == "user")
        info = AssistantMessage(
            ids.ascending("message"),
            sid,
            parent,
            next(t),
            "openai",
            "scripted",
            agent="compaction" if summary else "build",
            mode="compaction" if summary else "build",
            cost=cost,
            tokens=tokens,
            time_completed=next(t),
            finish=finish,
            summary=summary,
            error=error,
        )
        history.append(WithParts(info, tuple(m(info.id) for m in make)))

    def part(cls, **kw):
        return lambda mid: cls(ids.ascending("part"), sid, mid, **kw)

    def tool(name, state, call):
        return part(ToolPart, call_id=call, tool=name, state=state)

    # turn 1: a prompt with a file and an @agent mention
    user(
        part(
            TextPart,
            text="Load data.csv with pandas and tell me which column has the most missing values.",
        ),
        part(FilePart, mime="text/csv", url="file:///work/data.csv", filename="data.csv"),
        part(AgentPart, name="explore"),
    )
    s1 = _tokens(1_200, 180, reasoning=40)
    assistant(
        part(StepStartPart, snapshot="4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
        part(
            ReasoningPart,
            text="The user wants missing values per column; load the CSV first.",
            time_start=T0 + 5_000,
            time_end=T0 + 6_200,
        ),
        part(
            TextPart,
            text="I'll load the file and count the **missing values**.",
            time_start=T0 + 6_300,
            time_end=T0 + 6_900,
        ),
        tool(
            "python",
            ToolCompleted(
                {"code": "df = pd.read_csv('data.csv')\ndf.isna().sum()"},
                BIG_OUTPUT,
                "python",
                {"truncated": False},
                T0 + 7_000,
                T0 + 7_450,
            ),
            "call_py",
        ),
        tool(
            "bash",
            ToolCompleted(
                {"command": "ls -la data"},
                PRUNED_OUTPUT,
                "ls -la data",
                {},
                T0 + 7_500,
                T0 + 7_620,
                time_compacted=T0 + 50_000,
            ),
            "call_ls",
        ),
        tool(
            "read",
            ToolError(
                {"filePath": "missing.csv"},
                "File not found: /work/missing.csv",
                T0 + 7_700,
                T0 + 7_705,
            ),
            "call_read",
        ),
        part(
            StepFinishPart,
            reason="tool-calls",
            cost=0.00156,
            tokens=s1,
            metadata={"firstTokenMs": 210, "latencyMs": 1900, "attempts": 1},
        ),
        part(PatchPart, hash="4b825dc6", files=("/work/clean.csv",)),
        part(SnapshotPart, snapshot="9d1c2a7e5f"),
        tokens=s1,
        cost=0.00156,
        finish="tool-calls",
    )
    s2 = _tokens(46_000, 90, cache_read=1_000)
    assistant(
        part(StepStartPart),
        part(
            RetryPart,
            attempt=1,
            error=error_data("APIError", "Rate limit reached", statusCode=429, isRetryable=True),
            time_created=T0 + 8_000,
        ),
        tool("glob", ToolPending({}, ""), "call_glob"),
        tool("grep", ToolRunning({"pattern": "NaN"}, T0 + 9_000, title="grep NaN"), "call_grep"),
        tool(
            "bash",
            ToolError(
                {"command": "sleep 100"},
                "Tool execution aborted",
                T0 + 9_100,
                T0 + 19_100,
                {"interrupted": True},
            ),
            "call_sleep",
        ),
        part(
            SubtaskPart,
            prompt="Summarise the columns",
            description="column summary",
            agent="general",
            model=MODEL,
        ),
        part(StepFinishPart, reason="tool-calls", cost=0.0462, tokens=s2),
        tokens=s2,
        cost=0.0462,
        finish="tool-calls",
    )
    # compaction: the request, the summary, the synthetic continue message
    user(part(CompactionPart, auto=True, overflow=False))
    s3 = _tokens(47_000, 400)
    assistant(
        part(StepStartPart),
        part(
            TextPart,
            text="## Goal\nFind the column with most missing values.\n\n## Accomplished\nLoaded data.csv.",
            time_start=T0 + 30_000,
            time_end=T0 + 31_000,
        ),
        part(StepFinishPart, reason="stop", cost=0.0478, tokens=s3),
        summary=True,
        tokens=s3,
        cost=0.0478,
    )
    user(part(TextPart, text="Continue if you have next steps.", synthetic=True))
    s4 = _tokens(2_100, 60)
    assistant(
        part(StepStartPart),
        part(
            TextPart,
            text="Column `age` has the most missing values (42).",
            time_start=T0 + 40_000,
            time_end=T0 + 40_500,
        ),
        part(StepFinishPart, reason="stop", cost=0.00222, tokens=s4),
        tokens=s4,
        cost=0.00222,
    )
    return session, history
