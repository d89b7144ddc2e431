"""Whole ``%%agent`` turns on the embedded local model, as a newcomer gets them.

A fresh data directory and server run directory (so the llama.cpp server is not
running), no API key, the default model: the first turn pays the server start and the
first prompt (the system prompt and the worked examples of the code-action protocol);
later turns reuse the server and its prompt cache. Each turn is capped at one step (``max_steps = 1``) so that the numbers
measure one LLM call, not how many tools the tiny model decides to call; a
second series runs with all tools disabled. Prints; asserts nothing.

Run: ``python benchmarks/bench_local_turn.py [--warm 5]`` (needs the [local] extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def run(warm: int, tools: bool) -> tuple[float, list[float], list[int]]:
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_session_agent.providers.local import stop_server

    data_dir = tempfile.mkdtemp(prefix="jsa-bench-local-")
    run_dir = tempfile.mkdtemp(prefix="jsa-run-")  # a fresh server: the first turn starts it
    os.environ["JUPYTER_SESSION_AGENT_RUN_DIR"] = run_dir
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ.pop("OPENAI_BASE_URL", None)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_session_agent")
    magics = ip.magics_manager.registry["AgentMagics"]
    magics.data_dir, magics.max_steps, magics.titles, magics.live = data_dir, 1, False, False
    magics.local_context = 4096
    if not tools:
        magics.permission = {"*": "deny"}  # a tool denied by "*" is not offered at all
    try:
        t = time.perf_counter()
        ip.run_cell_magic("agent", "--new", "Say hello in five words.")
        first = time.perf_counter() - t
        warm_times, prompt_tokens = [], []
        for i in range(warm):
            t = time.perf_counter()
            ip.run_cell_magic("agent", "", f"Name one colour (question {i}).")
            warm_times.append(time.perf_counter() - t)
            finish = next(p for p in magics.session.history[-1].parts if p.type == "step-finish")
            prompt_tokens.append(finish.tokens.prompt)
        return first, warm_times, prompt_tokens
    finally:
        ip.run_line_magic("unload_ext", "jupyter_session_agent")
        stop_server(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm", type=int, default=5)
    args = parser.parse_args()
    for tools in (True, False):
        first, warm, tokens = run(args.warm, tools)
        label = "python offered (code actions)" if tools else "no tools"
        print(
            f"{label}: first %%agent turn (cold server) {first:.1f} s; warm turn median "
            f"{statistics.median(warm):.1f} s (min {min(warm):.1f}, max {max(warm):.1f}); "
            f"prompt tokens {tokens[0]}–{tokens[-1]}"
        )


if __name__ == "__main__":
    main()
