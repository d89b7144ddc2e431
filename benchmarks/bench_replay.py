"""A replayed ``%%agent`` turn against the same turn recorded from the scripted server.

Each turn is a python tool call and an answer (two steps). ``--turns`` cells are recorded into
a record file against the scripted server (``%agent record``), then replayed from it in a new
session of the same shell (``%agent replay FILE``; the python call runs again). Recording and
replay alternate per round, so both see the same machine noise. Prints the median cell time of
each and their ratio, and checks that the replay sent no request.

Run: ``python benchmarks/bench_replay.py [--turns 20] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from jupyter_session_agent.testing.scripted_server import ScriptedServer

    work = Path(tempfile.mkdtemp(prefix="jsa-bench-replay-"))
    os.chdir(work)
    shell = InteractiveShell.instance()
    recorded: list[float] = []
    replayed: list[float] = []
    with ScriptedServer() as server:
        os.environ.update(
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-bench-not-a-key",
            JUPYTER_SESSION_AGENT_DIR=str(work / "data"),
        )
        os.environ.pop("JUPYTER_SESSION_AGENT_REPLAY", None)
        shell.run_line_magic("load_ext", "jupyter_session_agent")
        magics = shell.magics_manager.registry["AgentMagics"]
        magics.model = "openai/scripted"
        magics.titles = False
        magics.live = False
        magics.permission = {"*": "allow"}
        for round_ in range(args.rounds):
            record = work / f"round{round_}.replay.json"
            prompts = [f"Store {i} squared in v{i}." for i in range(args.turns)]
            for i in range(args.turns):
                server.enqueue(
                    {"tool_calls": [{"name": "python", "arguments": {"code": f"v{i} = {i} ** 2"}}]},
                    {"text": f"v{i} is {i * i}."},
                )
            magics.replay = "off"
            with capture_output():
                shell.run_line_magic("agent", f"record {record}")
                for i, prompt in enumerate(prompts):
                    start = time.perf_counter()
                    shell.run_cell_magic("agent", "--new" if i == 0 else "", prompt)
                    recorded.append(time.perf_counter() - start)
            sent = len(server.requests)
            with capture_output():
                shell.run_line_magic("agent", f"replay {record}")
                for i, prompt in enumerate(prompts):
                    start = time.perf_counter()
                    shell.run_cell_magic("agent", "--new" if i == 0 else "", prompt)
                    replayed.append(time.perf_counter() - start)
            assert len(server.requests) == sent, "the replay sent a request"
            assert shell.user_ns[f"v{args.turns - 1}"] == (args.turns - 1) ** 2
    rec, rep = statistics.median(recorded), statistics.median(replayed)
    print(f"cells: {len(recorded)} recorded, {len(replayed)} replayed (python re-run)")
    print(f"recorded against the scripted server: median {rec * 1000:.1f} ms per cell")
    print(f"replayed from the record:              median {rep * 1000:.1f} ms per cell")
    print(f"ratio replay / record: {rep / rec:.2f}x; requests sent by the replays: 0")


if __name__ == "__main__":
    main()
