"""Embedded server benchmark: cold start to first token, then warm streamed completions.

Run: ``python3 benchmarks/bench_local.py [n_ctx]`` (needs the [local] extra;
about 15 s on 2 cores). Cold = ``LocalServer.ensure()`` in an empty run
directory (process start, model load, ``/v1/models`` answering) plus a tiny
streamed chat completion up to its first token. Warm = the same request on the
running server: time to first token and to the last chunk. The server is
stopped at the end. Prints; nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_session_agent.providers.local import LocalServer  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say hello in five words."}]
LONG = [{"role": "user", "content": "Write a long story about a dragon who learns to cook."}]


def stream_once(
    client, max_tokens: int = 16, messages: list = MESSAGES
) -> tuple[float, float, int]:
    """(seconds to first content token, seconds to end, chunks with content)."""
    t0 = time.perf_counter()
    first, n = None, 0
    for chunk in client.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=max_tokens, temperature=0, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            n += 1
            if first is None:
                first = time.perf_counter() - t0
    return (first if first is not None else float("nan")), time.perf_counter() - t0, n


def main() -> None:
    n_ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    import openai  # imported before the clock starts: not part of the server's cold start

    with tempfile.TemporaryDirectory() as tmp:
        server = LocalServer(n_ctx=n_ctx, run_dir=tmp)
        try:
            t0 = time.perf_counter()
            url = server.ensure()
            t_ready = time.perf_counter() - t0
            client = openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=120)
            first, _, _ = stream_once(client)
            cold = t_ready + first
            t1 = time.perf_counter()
            server.ensure()
            t_reuse = time.perf_counter() - t1

            warm = [stream_once(client) for _ in range(5)]
            ttft = statistics.median(w[0] for w in warm)
            total = statistics.median(w[1] for w in warm)
            tokens = statistics.median(w[2] for w in warm)
            long_first, long_total, long_n = stream_once(client, max_tokens=256, messages=LONG)

            print(f"n_ctx                             {n_ctx}")
            print(f"cold: ensure() until /v1/models   {t_ready:6.2f} s")
            print(f"cold: ensure() until first token  {cold:6.2f} s")
            print(f"warm: ensure() (reuse check)      {t_reuse * 1000:6.1f} ms")
            print(f"warm: first token (median of 5)   {ttft * 1000:6.0f} ms")
            print(f"warm: {tokens:.0f}-chunk completion          {total * 1000:6.0f} ms")
            rate = (long_n - 1) / max(long_total - long_first, 1e-9)
            print(
                f"warm: story, {long_n} chunks (max 256)    {long_total:6.2f} s ({rate:.0f} chunks/s after the first)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
