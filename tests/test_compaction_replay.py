"""The compaction replay lab (``analytics.replay``, ``%agent compaction replay``): recorded
sessions — ours, made through ``%%agent`` against the scripted server, and a real OpenCode
1.18 history imported from ``tests/fixtures/opencode-1.18`` — rerun offline under other
settings, with rows in the ``compaction_replay`` view."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.analytics import replay as R
from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.exchange.opencode import import_opencode
from jupyter_session_agent.loop.compaction import SUMMARY_SYSTEM
from jupyter_session_agent.store import Store
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.tools import BUILTIN_NAMES

FIXTURE = Path(__file__).parent / "fixtures" / "opencode-1.18"


def _agent(ip, prompt: str, *flags: str):
    with capture_output():
        ip.run_cell_magic("agent", " ".join(flags), prompt)


def _record(ip, server, tmp_path, turns: int = 5) -> None:
    """A session of ``turns`` turns, each reading a ~2,000-token file, then answering. The tools
    offered are pinned (the nine the sizes below were measured with), so a new built-in tool's
    schema does not move where the replays compact."""
    magics = ip.find_magic("agent").__self__
    magics.tools = [n for n in BUILTIN_NAMES if n not in ("notebook_edit", "notebook_run")]
    for t in range(turns):
        name = f"notes_{t}.txt"
        (tmp_path / name).write_text(
            "\n".join(f"line {i} of file {t}: value_{t}_{i} is within bounds" for i in range(180))
        )
        server.enqueue(
            Reply(tool_calls=({"name": "read", "arguments": {"filePath": name}},)),
            Reply(text=f"File {t} read; every value is within bounds."),
        )
        _agent(ip, f"Read {name} and tell me whether its values are within bounds.")


def test_replay_under_the_recorded_settings_reproduces_the_recorded_tokens(
    ip, server, store, magics, tmp_path
):
    _record(ip, server, tmp_path)
    session_id = magics.session.info.id
    result = R.replay(store, session_id, "name=same", settings=magics.settings())
    steps = [r for r in result.rows]
    assert len(steps) == 10 and not any(r.action == "summary" for r in steps)
    for row in steps:  # the same history seen the same way: the estimate follows the usage
        assert row.replay_tokens == pytest.approx(row.recorded_tokens, rel=0.15), row
    frame = store.sql(
        "SELECT step, recorded_tokens, replay_tokens, policy_name FROM compaction_replay "
        "WHERE replay_id = ? ORDER BY step",
        [result.replay_id],
    )
    assert list(frame["step"]) == list(range(10)) and set(frame["policy_name"]) == {"same"}


def test_a_smaller_window_summarises_and_prunes_without_a_model(
    ip, server, store, magics, tmp_path
):
    _record(ip, server, tmp_path, turns=6)
    requests = len(server.requests)
    policy = "name=small,context=9000,output=1000,prune_protect=2000,prune_minimum=1000"
    result = R.replay(store, magics.session.info.id, policy, settings=magics.settings())
    assert len(server.requests) == requests  # no model call
    summaries = [r for r in result.rows if r.action == "summary"]
    assert len(summaries) == 2 and all(r.summary_source == "placeholder" for r in summaries)
    assert all(r.outcome == "ok" and r.tokens_after < r.tokens_before / 2 for r in summaries)
    assert all(r.replay_tokens < r.trigger for r in result.rows if r.action is None)
    assert max(r.replay_tokens for r in result.rows) < max(r.recorded_tokens for r in result.rows)
    # prune only: the outputs beyond the newest 2,000 tokens cleared at each turn's end
    pruned = R.replay(
        store,
        magics.session.info.id,
        "name=prune-only,auto=false,prune_protect=2000,prune_minimum=1000",
        settings=magics.settings(),
    )
    prunes = [r for r in pruned.rows if r.action == "prune"]
    assert len(prunes) == 4 and all(r.parts_pruned == 1 and r.tokens_pruned > 2000 for r in prunes)
    assert not any(r.action == "summary" for r in pruned.rows)
    last = pruned.rows[-1]  # three earlier outputs cleared by the last step
    assert last.recorded_tokens - last.replay_tokens > 3 * 2300
    runs = R.replays(store)
    assert list(runs["policy"]) == ["small", "prune-only"]
    assert list(runs["replay_summaries"]) == [2, 0] and list(runs["replay_prunes"]) == [0, 4]
    fig = R.plot_replay(store, result.replay_id)
    assert fig.axes and fig.axes[0].get_lines()


def test_a_chosen_model_writes_the_summaries(ip, server, store, magics, tmp_path):
    _record(ip, server, tmp_path, turns=6)
    server.enqueue(*[Reply(text=f"## Goal\nreplayed summary {i}") for i in range(6)])
    before = len(server.requests)
    policy = "name=m,context=9000,output=1000,prune=false,model=openai/scripted"
    result = R.replay(store, magics.session.info.id, policy, settings=magics.settings())
    sent = server.requests[before:]
    summaries = [r for r in result.rows if r.action == "summary"]
    assert len(summaries) >= 2 and len(sent) == sum(r.llm_calls for r in summaries)
    assert all(b["messages"][0]["content"] == SUMMARY_SYSTEM for b in sent)
    assert "<transcript>" in sent[0]["messages"][1]["content"]
    assert all(r.summary_source == "scripted" and r.outcome == "ok" for r in summaries)
    assert all(r.summary_input_tokens > 0 and r.tokens_after < r.tokens_before for r in summaries)
    # another template: the model is sent it instead of ours
    server.enqueue(*[Reply(text="## Status\nshort") for i in range(6)])
    before = len(server.requests)
    (tmp_path / "status.md").write_text("## Status\n[one line]")
    R.replay(
        store,
        magics.session.info.id,
        policy + f",template={tmp_path / 'status.md'}",
        settings=magics.settings(),
    )
    prompt = server.requests[before]["messages"][1]["content"]
    assert "## Status" in prompt and "## Discoveries" not in prompt


def test_the_magic_wraps_the_api_and_bad_policies_are_one_line(ip, server, store, magics, tmp_path):
    _record(ip, server, tmp_path, turns=3)
    frame = ip.run_line_magic("agent", "compaction replay --policy name=wide,context=1000000")
    assert list(frame["policy"]) == ["wide"] and frame["replay_summaries"][0] == 0
    every = ip.run_line_magic("agent", "compaction replay --all --policy context=4000,output=800")
    assert len(every) == 1 and every["replay_summaries"][0] >= 1
    with pytest.raises(UsageError, match="unknown key 'prune_protekt'"):
        R.ReplayPolicy.parse("prune_protekt=1")
    with pytest.raises(UsageError, match="key=value"):
        R.ReplayPolicy.parse("context")
    with pytest.raises(UsageError, match="usage: %agent compaction replay"):
        ip.run_line_magic("agent", "compaction rerun")


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("context=true", "context must be a whole number of tokens above 0"),
        ("context=2000,output=4000", r"output \(4,000\) must be below context \(2,000\)"),
        ("context=3000 output=3000", r"output \(3,000\) must be below context \(3,000\)"),
        ("model=", "key=value pairs, got 'model='"),
        ("name=", "key=value pairs, got 'name='"),
        ("tail_turns=1,tail_turns=2", "tail_turns is given twice"),
    ],
)
def test_bad_policies_are_refused_in_one_line_each(policy, message):
    with pytest.raises(UsageError, match=message) as caught:
        R.ReplayPolicy.parse(policy)
    assert "\n" not in str(caught.value)


def test_a_window_smaller_than_the_recorded_output_is_refused_before_replaying(
    ip, server, store, magics, tmp_path
):
    """Only ``context`` given, below the recorded model's output limit: one line naming the
    fix, no rows written (it used to replay into a window with no room for input)."""
    _record(ip, server, tmp_path, turns=2)
    with pytest.raises(UsageError, match=r"must be below context \(100\) — e.g. --policy"):
        ip.run_line_magic("agent", "compaction replay --policy context=100")
    assert R.replays(store).empty


def test_an_imported_opencode_history_replays(tmp_path):
    """The real OpenCode 1.18's "auto" session (two automatic summaries): under its own window
    the replay summarises too; under a window too large to fill, never, and its context grows
    past what OpenCode's compactions kept."""
    root = tmp_path / "opencode"
    root.mkdir()
    (root / "opencode.db").write_bytes(lzma.decompress((FIXTURE / "opencode.db.xz").read_bytes()))
    store = Store(tmp_path / "data")
    import_opencode(store, root)
    import json

    session = json.loads((FIXTURE / "next-requests.json").read_text())["sessions"]["auto"]
    with pytest.raises(UsageError, match="context="):
        R.replay(store, session, "")  # the scripted model's window is not in any catalogue
    wide = R.replay(store, session, "name=wide,context=1000000,output=8000")
    recorded = [r for r in wide.rows if r.recorded_action == "summary"]
    assert len(recorded) >= 2 and not any(r.action == "summary" for r in wide.rows)
    assert wide.rows[-1].replay_tokens > wide.rows[-1].recorded_tokens
    assert wide.rows[0].replay_tokens == pytest.approx(wide.rows[0].recorded_tokens, rel=0.15)
    peak = max(r.recorded_tokens for r in wide.rows)
    tight = R.replay(store, session, f"name=tight,context={peak},output={peak // 8}")
    assert any(r.action == "summary" and r.outcome == "ok" for r in tight.rows)
    frame = store.sql("SELECT policy_name, count(*) n FROM compaction_replay GROUP BY 1 ORDER BY 1")
    assert list(frame["policy_name"]) == ["tight", "wide"]
    store.close()
