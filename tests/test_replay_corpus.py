"""Provider fidelity on real recorded responses: each recording of the replay corpus
(tests/fixtures/replay/manifest.json, provenance per file) is served
byte for byte by the replay server, and one ``%%agent`` turn through a real IPython shell
must store what the recording says: the answer text, the reasoning, the tool calls, the
usage, the cost and its source, or the server's error.

What a recording says is read here by this file's own parser (written apart from the
product's accumulator: whole-body regular expressions, not a streaming state machine), and
the expected prices come from genai-prices' public ``calc_price``, not from the product's
price lookup.

The recordings are copied from their public sources by tests/fixtures/replay/collect.py
(they are not in the repository). They are looked for in ``$JSA_REPLAY_CORPUS``, in
tests/fixtures/replay/recordings, and in ``shared/replay-corpus`` beside the checkout (each
laid out as ``<owner>/<repo>/<path>``); a recording found nowhere is skipped, and without any
this module is. A recording is a vcrpy cassette's interaction, or (``"body": "slice"``) the
bytes ``start``..``end`` of a file quoting a server's response (a vendor's documentation, a
curl transcript).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

HERE = Path(__file__).parent / "fixtures" / "replay"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
CORPORA = [Path(p) for p in (os.environ.get("JSA_REPLAY_CORPUS"), HERE / "recordings") if p] + [
    Path(__file__).resolve().parents[2] / "shared" / "replay-corpus"
]

# genai-prices' own provider ids, by vendor (None: a vendor it does not price)
GENAI_PROVIDER = {
    "openai": "openai",
    "azure": "azure",
    "deepseek": "deepseek",
    "groq": "groq",
    "openrouter": "openrouter",
    "mistral": "mistral",
    "huggingface": "huggingface_together",  # the recordings' route: /together/v1
    "ollama": None,
    "snowflake": None,
    "zai": "zai",
    "cerebras": "cerebras",
    "crusoe": None,
    "heroku": None,
    "gemini": "google",
    "xai": "x-ai",
    "deepinfra": "deepinfra",
    "together": "together",
    "lmstudio": None,
}
LOCAL = {"ollama", "lmstudio"}
# the environment variables a vendor's preset reads (URL, key)
VENDOR_ENV = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "azure": ("AZURE_OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"),
    "deepseek": ("DEEPSEEK_BASE_URL", "DEEPSEEK_API_KEY"),
    "groq": ("GROQ_BASE_URL", "GROQ_API_KEY"),
    "openrouter": ("OPENROUTER_BASE_URL", "OPENROUTER_API_KEY"),
    "mistral": ("MISTRAL_BASE_URL", "MISTRAL_API_KEY"),
    "huggingface": ("HF_BASE_URL", "HF_TOKEN"),
    "ollama": ("OLLAMA_BASE_URL", "OLLAMA_API_KEY"),
    "snowflake": ("SNOWFLAKE_BASE_URL", "SNOWFLAKE_PAT"),
    "zai": ("ZAI_BASE_URL", "ZAI_API_KEY"),
    "cerebras": ("CEREBRAS_BASE_URL", "CEREBRAS_API_KEY"),
    "crusoe": ("CRUSOE_BASE_URL", "CRUSOE_API_KEY"),
    "heroku": ("INFERENCE_URL", "INFERENCE_KEY"),
    "gemini": ("GEMINI_BASE_URL", "GEMINI_API_KEY"),
    "together": ("TOGETHER_BASE_URL", "TOGETHER_API_KEY"),
    "lmstudio": ("LMSTUDIO_BASE_URL", "LMSTUDIO_API_KEY"),
    "xai": ("XAI_BASE_URL", "XAI_API_KEY"),
    "deepinfra": ("DEEPINFRA_BASE_URL", "DEEPINFRA_API_KEY"),
}


def _path(entry: dict) -> Path:
    for corpus in CORPORA:
        found = corpus / entry["repo"] / entry["path"]
        if found.exists():
            return found
    return CORPORA[0] / entry["repo"] / entry["path"]


PRESENT = [e for e in MANIFEST if _path(e).exists()]
if not PRESENT:
    pytest.skip(
        "replay corpus not present — copy it with tests/fixtures/replay/collect.py",
        allow_module_level=True,
    )


# -- an independent reading of a recording -----------------------------------------


def _response(entry: dict) -> tuple[int, bytes]:
    if entry["body"] == "slice":
        return entry["status"], _path(entry).read_bytes()[entry["start"] : entry["end"]]
    data = yaml.safe_load(_path(entry).read_bytes())
    response = data["interactions"][entry["interaction"]]["response"]
    body = response.get("body")
    if isinstance(body, dict) and isinstance(body.get("string"), bytes):  # as sent: gzip
        raw = (
            gzip.decompress(body["string"]) if body["string"][:2] == b"\x1f\x8b" else body["string"]
        )
    elif isinstance(body, dict) and "string" in body:
        raw = body["string"].encode()
    else:
        raw = json.dumps(response.get("parsed_body")).encode()
    return response["status"]["code"], raw


def _chunks(raw: bytes, stream: bool) -> list[dict]:
    if not stream:
        return [json.loads(raw)]
    out = []
    for block in re.split(r"\r?\n\r?\n", raw.decode()):
        data = "\n".join(
            re.sub(r"^data: ?", "", line) for line in block.splitlines() if line.startswith("data:")
        )
        if data and data.strip() != "[DONE]":
            out.append(json.loads(data))
    return out


def expect(entry: dict) -> dict[str, Any]:
    """What the recording says: text, reasoning, tool names, usage, error."""
    status, raw = _response(entry)
    if status != 200:
        body = json.loads(raw)
        error = body.get("error", body)
        return {"error": error.get("message") if isinstance(error, dict) else str(error)}
    text, reasoning, calls, usage, finished, error = "", "", {}, None, False, None
    for chunk in _chunks(raw, entry["stream"]):
        usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage") or usage
        if chunk.get("error") and not finished:
            error = chunk["error"].get("message", "")
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            d = choice.get("delta") or choice.get("message") or {}
            details = "".join(
                x.get("text") or x.get("summary") or ""
                for x in d.get("reasoning_details") or []
                if isinstance(x, dict) and isinstance(x.get("text") or x.get("summary"), str)
            )
            reasoning += d.get("reasoning_content") or d.get("reasoning") or details or ""
            content = d.get("content")
            if isinstance(content, list):
                for item in content:
                    if item.get("type") == "thinking":
                        reasoning += "".join(t.get("text", "") for t in item["thinking"])
                    elif item.get("type") == "text":
                        text += item["text"]
            elif isinstance(content, str):
                text += content
            for n, call in enumerate(d.get("tool_calls") or []):
                key = call.get("index", n)
                if call.get("id") and key in calls and calls[key]["id"] not in (None, call["id"]):
                    key = f"{key}-{call['id']}"
                name = (call.get("function") or {}).get("name")
                slot = calls.setdefault(key, {"id": call.get("id"), "name": ""})
                slot["name"] = slot["name"] or name or ""
            finished = finished or bool(choice.get("finish_reason"))
    think = re.match(r"\s*<think>(.*?)(?:</think>|$)(.*)", text, re.S)
    if think:
        reasoning, text = reasoning + think.group(1), think.group(2)
    return {
        "error": error,
        "text": text,
        "reasoning": reasoning,
        "tools": [c["name"] for c in calls.values()],
        "usage": usage,
    }


def expected_tokens(usage: dict) -> dict[str, int]:
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    pd = usage.get("prompt_tokens_details") or {}
    cd = usage.get("completion_tokens_details") or {}
    cached = pd.get("cached_tokens") or usage.get("prompt_cache_hit_tokens") or 0
    reasoning = cd.get("reasoning_tokens") or 0
    if reasoning > completion or (
        reasoning and usage.get("total_tokens") == prompt + completion + reasoning
    ):
        output = completion  # reasoning counted outside the completion
    else:
        output = completion - reasoning
    return {
        "input_tokens": prompt - cached,
        "output_tokens": output,
        "reasoning_tokens": reasoning,
        "cache_read_tokens": cached,
    }


def expected_cost(entry: dict, usage: dict | None) -> tuple[float, str]:
    if usage and isinstance(usage.get("cost"), dict):  # Perplexity: a breakdown
        return usage["cost"]["total_cost"], "server"
    if usage and isinstance(usage.get("cost"), (int, float)):
        extra = (usage.get("cost_details") or {}).get("upstream_inference_cost") or 0
        return usage["cost"] + (extra if usage.get("is_byok") else 0), "server"
    if usage and isinstance(usage.get("cost_in_usd_ticks"), int):  # xAI: 1e-10 USD each
        return usage["cost_in_usd_ticks"] / 1e10, "server"
    if usage and isinstance(usage.get("estimated_cost"), (int, float)):  # DeepInfra
        return usage["estimated_cost"], "server"
    if entry["vendor"] in LOCAL:
        return 0.0, "local"
    provider = GENAI_PROVIDER[entry["vendor"]]
    if provider is None or not usage:
        return 0.0, "unknown"
    from genai_prices import Usage, calc_price

    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    tokens = expected_tokens(usage)
    try:
        price = calc_price(
            Usage(
                input_tokens=usage.get("prompt_tokens") or 0,
                cache_read_tokens=cached,
                # billed output: the completion, plus reasoning a server counts apart
                output_tokens=tokens["output_tokens"] + tokens["reasoning_tokens"],
            ),
            entry["model"],
            provider_id=provider,
        )
    except LookupError:
        return 0.0, "unknown"
    return float(price.total_price), "catalogue"


# -- one turn per recording ------------------------------------------------------------


def _squash(text: str) -> str:
    return " ".join(text.split())


RESULTS: dict[str, dict[str, bool]] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    target = os.environ.get("JSA_REPLAY_REPORT")
    if target:
        Path(target).write_text(json.dumps(RESULTS, indent=1, sort_keys=True))


@pytest.mark.parametrize("entry", PRESENT, ids=[e["id"] for e in PRESENT])
def test_recording_through_agent(entry, ip, magics, store, monkeypatch):
    from jupyter_session_agent.core.errors import AgentError
    from jupyter_session_agent.testing.replay_server import (
        ReplayServer,
        load_cassette,
        load_slice,
    )

    want = expect(entry)
    if entry["body"] == "slice":
        recorded = load_slice(
            _path(entry), entry["start"], entry["end"], entry["status"], entry["content_type"]
        )
    else:
        recorded = load_cassette(_path(entry), entry["interaction"])
    with ReplayServer([recorded]) as server:
        url_var, key_var = VENDOR_ENV[entry["vendor"]]
        path = re.sub(r"^https?://[^/]+", "", entry["base_url"])
        if os.environ.get("JSA_REPLAY_VIA_BASE_URL"):  # how any server was reached before
            monkeypatch.setenv("OPENAI_BASE_URL", server.url + path)
            magics.model = f"openai/{entry['model']}"
        else:
            monkeypatch.setenv(url_var, server.url + path)
            monkeypatch.setenv(key_var, "sk-replay-not-a-real-key")
            magics.model = f"{entry['vendor']}/{entry['model']}"
        magics.model_overrides = {}
        magics.max_steps = 1
        magics.max_retries = 0
        got: dict[str, bool] = {}
        RESULTS[entry["id"]] = got
        if want["error"]:
            with pytest.raises(AgentError) as info:
                ip.run_cell_magic("agent", "", "Hello")
            got["error"] = _squash(want["error"])[:60] in _squash(str(info.value))
            assert got["error"], (str(info.value), want["error"])
            return
        ip.run_cell_magic("agent", "", "Hello")
    history = store.messages(magics.session.info.id)
    parts = [p for item in history[1:] for p in item.parts]
    text = "".join(p.text for p in parts if p.type == "text")
    reasoning = "".join(p.text for p in parts if p.type == "reasoning")
    tools = [p.tool for p in parts if p.type == "tool"]
    got["text"] = _squash(text) == _squash(want["text"])
    got["reasoning"] = _squash(reasoning) == _squash(want["reasoning"])
    got["tools"] = tools == want["tools"]
    rows = store.sql(f"select * from step where session_id = '{magics.session.info.id}'")
    assert len(rows) == 1, "one step row per LLM call"
    row = rows.iloc[0].to_dict()
    usage = want["usage"]
    if usage:
        tokens = expected_tokens(usage)
        got["usage"] = {k: int(row[k]) for k in tokens} == tokens and not row["estimated"]
    else:
        got["usage"] = bool(row["estimated"])
    if not usage:  # estimated tokens (flagged above) are priced as any others
        usage = {
            "prompt_tokens": int(row["input_tokens"]) + int(row["cache_read_tokens"]),
            "completion_tokens": int(row["output_tokens"]) + int(row["reasoning_tokens"]),
        }
    cost, source = expected_cost(entry, usage)
    got["cost"] = row["cost"] == pytest.approx(cost, rel=1e-9, abs=1e-12)
    got["cost_source"] = row.get("cost_source") == source
    assert all(got.values()), (got, row, want)


def test_every_base_url_is_recognised():
    """Each recorded server's real base URL maps to its vendor's preset."""
    from jupyter_session_agent.providers.presets import detect

    found = {e["base_url"]: detect(e["base_url"]) for e in MANIFEST}
    assert found == {e["base_url"]: e["vendor"] for e in MANIFEST}
