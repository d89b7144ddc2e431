"""The llama.cpp server process: ``python -m jupyter_session_agent.providers.llama_handler <args>``.

One module: everything that runs inside the server process and imports ``llama_cpp`` — the
chat handler (native tool calls and code actions), its usage chunks and the idle watchdog;
nothing else may import ``llama_cpp``, and the kernel side never imports this module.

Runs ``llama_cpp.server``'s own ``main()`` after registering the
``jsa-chatml-tools`` chat handler (tool calls for SmolLM2, streamed, with an
OpenAI-style usage chunk) and dropping llama_cpp.server's environment-variable
settings. Only this process imports ``llama_cpp``; the kernel side, which
starts and shares this server, is :mod:`jupyter_session_agent.providers.local` (its
docstring lists the server quirks this handler works around).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from ..core import codeaction
from .local import CHAT_FORMAT, MODEL_ALIAS, FileLock, ServerState, live_clients

_IM_END = "<|im_end|>"
_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
_TOOL_PROMPT = (
    "\n\nYou can call these functions:\n{functions}\n"
    "Reply in one of two ways.\n"
    "To answer in words, write 'message:' and then your answer on the next line.\n"
    "To call a function, write 'functions.' and the function's name and ':', "
    "then its arguments as one JSON object on the next line.\n"
    "A function's result comes back as a user turn that begins with 'result of functions.'; use it to answer."
)


def _text(content: Any) -> str:
    """Message content as text (string, list of parts or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in ("text", "input_text", None) and isinstance(
                    part.get("text"), str
                ):
                    out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return str(content)


def _tool_list(tools: Any, functions: Any) -> list[dict]:
    out = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            out.append(fn)
    for fn in functions or ():
        if isinstance(fn, dict) and fn.get("name"):
            out.append(fn)
    return out


def _calls(msg: dict) -> list[dict]:
    calls = [c for c in (msg.get("tool_calls") or []) if isinstance(c, dict)]
    if isinstance(msg.get("function_call"), dict):
        calls.append({"function": msg["function_call"]})
    return calls


def render_prompt(messages: list[dict], tools: list[dict] | None = None) -> str:
    """ChatML prompt for SmolLM2, with a tool section and tool results when ``tools``.

    Without tools this is exactly the GGUF's own template. With tools, the
    system message lists them (``functions.<name>:`` + description + JSON
    schema); assistant turns render as ``message:`` / ``functions.<name>:``
    blocks, and ``role: "tool"`` results as user turns headed ``result of
    functions.<name>:`` (SmolLM2 ignores a ``tool`` role's content far more
    often); results are rendered even without tools, so history stays visible.
    """
    msgs = list(messages)
    if not msgs or msgs[0].get("role") != "system":
        msgs.insert(0, {"role": "system", "content": _DEFAULT_SYSTEM})
    names: dict[str, str] = {}
    out = []
    for i, msg in enumerate(msgs):
        role = msg.get("role")
        content = _text(msg.get("content"))
        if role == "system" and i == 0 and tools:
            lines = []
            for fn in tools:
                desc = str(fn.get("description") or "").strip()
                params = json.dumps(
                    fn.get("parameters") or {"type": "object", "properties": {}}, ensure_ascii=False
                )
                lines.append(
                    f"\nfunctions.{fn['name']}:" + (f" {desc}" if desc else "") + f"\n{params}\n"
                )
            content += _TOOL_PROMPT.format(functions="".join(lines))
        if role == "assistant":
            body = []
            calls = _calls(msg)
            if content:
                body.append(f"message:\n{content}" if tools else content)
            for call in calls:
                fn = call.get("function") or {}
                name = str(fn.get("name") or "")
                if call.get("id"):
                    names[str(call["id"])] = name
                body.append(f"functions.{name}:\n{fn.get('arguments') or '{}'}")
            out.append("<|im_start|>assistant\n" + "\n".join(body) + f"{_IM_END}\n")
        elif role in ("tool", "function"):
            name = names.get(str(msg.get("tool_call_id")), "") or str(msg.get("name") or "")
            head = f"result of functions.{name}:\n" if name else ""
            # A "tool" role is not in SmolLM2's training; as a user turn it uses the result.
            out.append(f"<|im_start|>user\n{head}{content}{_IM_END}\n")
        else:
            out.append(f"<|im_start|>{role}\n{content}{_IM_END}\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


def _parses(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except (TypeError, ValueError):
        return False


def _same_args(a: str, b: str) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except (TypeError, ValueError):
        return " ".join(str(a).split()) == " ".join(str(b).split())


def already_called(messages: list[dict], name: str, arguments: str) -> bool:
    """Whether the conversation already holds this exact call (same name, same JSON arguments)."""
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        for call in _calls(msg):
            fn = call.get("function") or {}
            if fn.get("name") == name and _same_args(str(fn.get("arguments") or "{}"), arguments):
                return True
    return False


class _Reply:
    """What both chat paths (native tool calls, code actions) share: the response's id, time
    and model name, the stop strings, a text's token count, the prompt's size check (an
    :class:`_Overflow` before anything is generated) and the OpenAI-shaped chunks, usage and
    response they send."""

    def __init__(self, llama: Any, prompt: str, *, model: str, max_tokens: Any, stop: Any) -> None:
        self.llama, self.model = llama, model
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.call_id = "call_" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.stops = [_IM_END] + ([stop] if isinstance(stop, str) else list(stop or []))
        self.prompt_tokens = self.count(prompt)
        if self.prompt_tokens >= llama.n_ctx():
            raise _Overflow(self.prompt_tokens, llama.n_ctx(), max_tokens)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def usage(self, completion: int) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def chunk(self, delta: dict, finish: str | None = None) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def usage_chunk(self, completion: int) -> dict:
        """The stream's last chunk: no choices, the usage."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(completion),
        }

    def response(self, message: dict, finish: str, completion: int) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": self.usage(completion),
        }

    def call_start(self, name: str) -> dict:
        """The chunk that opens the tool call ``name`` (its arguments follow)."""
        call = {"index": 0, "id": self.call_id, "type": "function"}
        return self.chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]})

    def call_message(self, content: str | None, name: str, arguments: str) -> dict:
        call = {"id": self.call_id, "type": "function"}
        return {
            "role": "assistant",
            "content": content,
            "tool_calls": [{**call, "function": {"name": name, "arguments": arguments}}],
        }


def _stream_error(err: Exception) -> dict:
    """An error after the ``200`` was sent, in-band (the ``openai`` SDK raises ``APIError``)."""
    return {
        "error": {
            "message": f"{type(err).__name__}: {err}",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }


def _chat_impl(
    *,
    llama: Any,
    messages: list[dict],
    functions: Any = None,
    function_call: Any = None,
    tools: Any = None,
    tool_choice: Any = None,
    temperature: float = 0.2,
    top_p: float = 0.95,
    top_k: int = 40,
    min_p: float = 0.05,
    typical_p: float = 1.0,
    stream: bool = False,
    stop: Any = None,
    seed: int | None = None,
    response_format: Any = None,
    max_tokens: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.1,
    tfs_z: float = 1.0,
    mirostat_mode: int = 0,
    mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1,
    model: str | None = None,
    logits_processor: Any = None,
    grammar: Any = None,
    logit_bias: Any = None,
    **_: Any,
) -> Any:
    """The ``jsa-chatml-tools`` chat completion handler (runs in the server): code actions
    (:func:`_code_chat`) when the model name ends in ``+code``, else native tool calls
    (:func:`_tool_chat`).

    With tools (``tool_choice`` unset means ``"auto"``; ``"none"`` hides them):

    1. decide, grammar-constrained at temperature 0: ``message:`` or
       ``functions.<name>:`` (``"required"`` drops ``message:``; a forced
       tool skips this);
    2. for a call, generate the arguments under the tool's JSON-schema grammar;
       if the conversation already holds the identical call (a small model's
       favourite loop) and the tool was not forced, answer with a message instead;
    3. a message is generated (and streamed) as plain text.

    One call per response; arguments arrive in one ``tool_calls`` delta after
    the one naming the call. Usage ends every stream (``choices: []``).
    """
    choice = tool_choice if tool_choice is not None else function_call
    if str(model or "").endswith(codeaction.CODE_SUFFIX):
        sampling = dict(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            typical_p=typical_p,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_penalty=CODE_REPEAT_PENALTY,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
            logits_processor=logits_processor,
            seed=seed,
            logit_bias=logit_bias,
        )
        offered = choice != "none" and codeaction.offers_python(tools, messages)
        return _code_chat(
            llama,
            messages,
            offered=offered,
            stream=stream,
            max_tokens=max_tokens,
            stop=stop,
            sampling=sampling,
            model=str(model)[: -len(codeaction.CODE_SUFFIX)],
        )
    sampling = dict(
        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, repeat_penalty=repeat_penalty,
        tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
        model=model, logits_processor=logits_processor, seed=seed, logit_bias=logit_bias,
    )  # fmt: skip
    return _tool_chat(
        llama,
        messages,
        fns=_tool_list(tools, functions),
        choice=choice,
        stream=stream,
        max_tokens=max_tokens,
        stop=stop,
        sampling=sampling,
        grammar=grammar,
        response_format=response_format,
        model=model or MODEL_ALIAS,
    )


def _tool_chat(
    llama: Any,
    messages: list[dict],
    *,
    fns: list[dict],
    choice: Any,
    stream: bool,
    max_tokens: int | None,
    stop: Any,
    sampling: dict,
    grammar: Any,
    response_format: Any,
    model: str,
) -> Any:
    """Native tool calls (steps 1–3 of :func:`_chat_impl`)."""
    from llama_cpp import llama_grammar

    forced: str | None = None
    if isinstance(choice, dict):
        forced = str((choice.get("function") or {}).get("name") or choice.get("name") or "") or None
    use_tools = bool(fns) and choice != "none"
    prompt = render_prompt(messages, fns if use_tools else None)
    reply = _Reply(llama, prompt, model=model, max_tokens=max_tokens, stop=stop)
    stops = reply.stops

    def complete(text: str, gram: Any, **kw: Any) -> tuple[str, str | None, int]:
        out = llama.create_completion(prompt=text, stream=False, grammar=gram, **{**sampling, **kw})
        ch = out["choices"][0]
        return (
            ch.get("text") or "",
            ch.get("finish_reason"),
            int((out.get("usage") or {}).get("completion_tokens", 0)),
        )

    # 1. decide: message or which function; 2. the call's arguments
    call: tuple[str, str, str | None] | None = None  # (name, arguments, finish)
    spent = 0  # completion tokens generated before the streamed part
    if use_tools:
        known = [fn["name"] for fn in fns]
        target: str | None = None
        if forced is not None:
            if forced not in known:
                raise ValueError(f"tool_choice names {forced!r}, which is not in tools")
            target = forced
        else:
            options = [f'"functions.{n}:"' for n in known] + (
                [] if choice == "required" else ['"message:"']
            )
            gbnf = llama_grammar.LlamaGrammar.from_string(
                "root ::= " + " | ".join(options) + "\n", verbose=False
            )
            text, _fin, used = complete(prompt, gbnf, max_tokens=48, stop=[":"], temperature=0.0)
            spent += used
            text = text.strip()
            if text.startswith("functions."):
                name = text[len("functions.") :].rstrip(":")
                target = name if name in known else None
        if target is not None:
            fn = next(f for f in fns if f["name"] == target)
            try:
                gram: Any = llama_grammar.LlamaGrammar.from_json_schema(
                    json.dumps(fn.get("parameters") or {"type": "object"}), verbose=False
                )
            except Exception:
                gram = llama_grammar.LlamaGrammar.from_string(
                    llama_grammar.JSON_GBNF, verbose=False
                )
            args, fin, used = complete(
                prompt + f"functions.{target}:\n", gram, max_tokens=max_tokens, stop=stops
            )
            spent += used
            args = args.strip()
            if not _parses(args):  # cut by max_tokens mid-object: one more, sampled, try
                again, fin2, used = complete(
                    prompt + f"functions.{target}:\n",
                    gram,
                    max_tokens=max_tokens,
                    stop=stops,
                    temperature=CODE_RESAMPLE_TEMPERATURE,
                    seed=CODE_SEED,
                )
                spent += used
                if _parses(again.strip()):
                    args, fin = again.strip(), fin2
            if forced is None and choice != "required" and already_called(messages, target, args):
                call = None  # the result is already in the context: answer instead
            else:
                call = (target, args, fin)

    def usage(text: str) -> int:  # the completion tokens
        return spent + reply.count(text)

    chunk = reply.chunk
    if call is not None:
        name, args, fin = call
        ended = "length" if fin == "length" else "tool_calls"
        if stream:
            start = reply.call_start(name)
            start["choices"][0]["delta"].update(role="assistant", content=None)
            return iter([
                start,
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                chunk({}, ended),
                reply.usage_chunk(usage("")),
            ])  # fmt: skip
        return reply.response(reply.call_message(None, name, args), ended, usage(""))

    # 3. a message
    gen_prompt = prompt + ("message:\n" if use_tools else "")
    if use_tools and forced is None:
        spent = max(spent, 1)  # "message" was generated by the model
    gram = grammar
    if (
        gram is None
        and isinstance(response_format, dict)
        and response_format.get("type") in ("json_object", "json_schema")
    ):
        schema = response_format.get("schema") or (response_format.get("json_schema") or {}).get(
            "schema"
        )
        try:
            gram = (
                llama_grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
                if schema
                else None
            )
        except Exception:
            gram = None
        if gram is None:
            gram = llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)
    pieces = llama.create_completion(
        prompt=gen_prompt, max_tokens=max_tokens, stop=stops, stream=True, grammar=gram, **sampling
    )

    if stream:

        def events() -> Iterator[dict]:
            text, finish = "", None
            yield chunk({"role": "assistant", "content": ""})
            try:
                for piece in pieces:
                    ch = piece["choices"][0]
                    finish = ch.get("finish_reason") or finish
                    if ch.get("text"):
                        text += ch["text"]
                        yield chunk({"content": ch["text"]})
            except Exception as err:  # report in-band: the 200 is already sent
                yield _stream_error(err)
                return
            yield chunk({}, finish or "stop")
            yield reply.usage_chunk(usage(text))

        return events()

    text, finish = "", None
    for piece in pieces:
        ch = piece["choices"][0]
        text += ch.get("text") or ""
        finish = ch.get("finish_reason") or finish
    return reply.response({"role": "assistant", "content": text}, finish or "stop", usage(text))


# -- code actions (core/codeaction.py) ------------------------------------------------

CODE_STEP_TOKENS = 320  # a step's reply: a short answer or one block of code
CODE_ANSWER_TOKENS = 96  # the one-line answer after a run
CODE_REPEAT_PENALTY = 1.0
CODE_SEED = 7
CODE_RESAMPLES = 2  # more candidates for a block that cannot run (syntax error, undefined name)
CODE_RESAMPLE_TEMPERATURE = 0.7
CODE_COMMENT = (
    True  # start the first block of a turn with the request as a comment (measured: +2 tasks)
)
CODE_FIRST_TOKEN = True  # rewritten blocks start with code (see ``first_token``)
CODE_REPAIR = True  # ``codeaction.quote_names`` and ``codeaction.add_imports`` on each block
_FIRST_TOKEN = r"root ::= [^\n`# \t] [^\x00]*"
_ONE_LINE = r"root ::= [^\n`]+"  # the answer after a run: one line, no code
_NO_CODE = r"root ::= [^`]+"  # without the python tool: text, no fences


def _last_user(messages: list[dict]) -> int:
    """The index of the last user message (-1 when there is none)."""
    return next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), -1
    )


_AGAIN = "the same code already failed"


def _bare(code: str) -> str:
    """Code without its comments, blank lines and imports (to recognise the same code again:
    a repair does not import again what the failed run imported)."""
    lines = (ln.rstrip() for ln in code.splitlines())
    return "\n".join(
        ln for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "import ", "from "))
    )


def _runs(messages: list[dict]) -> list[tuple[str, str]]:
    """(code, result text) of each python call in ``messages`` that has a result."""
    codes: dict[str, str] = {}
    runs = []
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            if fn.get("name") == codeaction.TOOL:
                try:
                    code = json.loads(fn.get("arguments") or "{}").get("code")
                except (TypeError, ValueError, AttributeError):
                    code = None
                if isinstance(code, str):
                    codes[str(call.get("id"))] = code
        if msg.get("role") in ("tool", "function") and str(msg.get("tool_call_id")) in codes:
            runs.append((codes[str(msg.get("tool_call_id"))], _text(msg.get("content"))))
    return runs


def _code_chat(
    llama: Any,
    messages: list[dict],
    *,
    offered: bool,
    stream: bool,
    max_tokens: int | None,
    stop: Any,
    sampling: dict,
    model: str,
) -> Any:
    """One step of the code-action protocol (see :mod:`..core.codeaction`) for the embedded model.

    The history is rendered as text (:func:`codeaction.code_messages`); the reply streams as
    text until a python block opens; when the block is over and checked (a block that cannot
    run is written again, see ``steps``) it follows as a ``python`` tool call; generation stops
    when the block closes. After a run, the reply is one line of text (a grammar without
    newlines and backticks): the answer. (Retrying a failed block once, with the error in
    view, was measured on the task suite and gained nothing for this model: not done.)
    Without the python tool (the max-steps step; python denied) it is text without
    backticks: nothing runs.
    """
    from llama_cpp import llama_grammar

    after_result = bool(messages) and messages[-1].get("role") in ("tool", "function")
    # After a failed run a coder model writes the code again, once (for SmolLM2 a retry was
    # measured to gain nothing: it answers in one line after any run).
    turn = messages[_last_user(messages) + 1 :]
    failures = sum(
        1
        for m in turn
        if m.get("role") in ("tool", "function") and codeaction.is_error(_text(m.get("content")))
    )
    retry = (
        offered
        and after_result
        and model != MODEL_ALIAS
        and codeaction.is_error(_text(messages[-1].get("content")))
        and failures < 2
    )
    answer = offered and after_result and not retry
    # The tiniest model copies the nearest example; a larger one does better with the same
    # examples every time, which also lets the server reuse the prompt's evaluation.
    prompt = render_prompt(codeaction.code_messages(messages, select=model == MODEL_ALIAS))
    limit = CODE_ANSWER_TOKENS if answer else CODE_STEP_TOKENS
    limit = min(limit, max_tokens) if max_tokens else limit
    reply = _Reply(llama, prompt, model=model, max_tokens=max_tokens, stop=stop)
    stops = reply.stops
    rule = _ONE_LINE if answer else None if offered else _NO_CODE
    grammar = llama_grammar.LlamaGrammar.from_string(rule, verbose=False) if rule else None

    known = codeaction.known_names(messages)
    # The code of this turn's runs that failed: a repair that writes it again is no repair.
    failed = {_bare(code) for code, result in _runs(turn) if codeaction.is_error(result)}
    # The lines that raised in them: sent again with nothing it reads bound first, the same
    # error comes back (a failing block repeated with small changes elsewhere).
    raised = {codeaction.raised_line(result) for _, result in _runs(turn)} - {""}

    def trouble(code: str) -> str:
        """Why ``code`` should not be sent: ``codeaction.problem``, or it is a failed run again."""
        found = codeaction.problem(code, known, request_all) or codeaction.missing_file(
            code, messages
        )
        if not found and (
            _bare(code) in failed or any(codeaction.repeats_failure(code, ln) for ln in raised)
        ):
            return _AGAIN
        return found

    request = next(
        (codeaction.plain(m.get("content")) for m in reversed(messages) if m.get("role") == "user"),
        "",
    )
    # A request about what the kernel holds starts with code, never an answer from memory.
    code_first = retry or (
        offered
        and not after_result
        and codeaction.needs_code(request, codeaction.kernel_words(messages))
    )
    # The comment is the request's first line: a request that carries a cell and its
    # traceback (``%agent fix``) flattened into one comment line left the model nothing to add.
    first = next((ln.strip() for ln in request.splitlines() if ln.strip()), "")[:200]
    request_all = request
    request = " ".join(request.split())[:200]
    quoted, error_line = codeaction.reported_error(request_all)
    if retry:  # the run that just failed: its error goes where the code is written again
        error_line = codeaction.last_error(_text(messages[-1].get("content"))) or error_line
    if error_line:  # where the column or name it misses is
        error_line += codeaction.error_hint(error_line, messages)
    failed.update(_bare(code) for code in quoted)  # the cell that failed: running it is no fix
    comment = ""
    if CODE_COMMENT and offered and (not after_result or retry):
        comment = f"# {first}\n" if first else ""
        if comment and error_line:  # the error, where the fix is written
            comment += f"# {error_line}\n"
        if comment and not retry:  # the variables it is about, as the kernel describes them
            comment += "".join(
                f"# {codeaction.in_kernel(text)}\n"
                for text in codeaction.relevant(request_all, messages)
            )

    def generate(
        text: str | list[int], temperature: float | None = None, seed: int | None = None
    ) -> Iterator[Any]:
        kw = dict(sampling)
        if temperature is not None:
            kw.update(temperature=temperature, seed=seed)
        return llama.create_completion(
            prompt=text, max_tokens=limit, stop=stops, stream=True, grammar=grammar, **kw
        )

    def first_token(
        text: str, temperature: float | None, seed: int | None, spent: list[str]
    ) -> tuple[str, str | list[int]]:
        """The block's first token, chosen under a grammar: code, not the closing fence, a
        comment or a blank (a block of only the request's comment runs nothing); and the
        prompt to go on from, as token ids (``text`` and the token again as text may tokenize
        differently, and the model would continue another prompt than the one it chose for)."""
        kw = dict(sampling)
        if temperature is not None:
            kw.update(temperature=temperature, seed=seed)
        rule = llama_grammar.LlamaGrammar.from_string(_FIRST_TOKEN, verbose=False)
        out = llama.create_completion(prompt=text, max_tokens=1, stop=stops, grammar=rule, **kw)
        token = out["choices"][0].get("text") or ""
        spent.append(token)
        tail = llama.tokenize(token.encode("utf-8"), add_bos=False, special=True)
        if len(tail) != 1:
            return token, text + token
        return token, llama.tokenize(text.encode("utf-8"), add_bos=True, special=True) + tail

    def block(
        pieces: Iterator[Any], parser: Any, spent: list[str]
    ) -> Generator[tuple[str, str], None, None]:
        """Parser events of one generation (stopped once a block is over), then ("end", finish)."""
        finish, done = None, False
        try:
            for piece in pieces:
                ch = piece["choices"][0]
                finish = ch.get("finish_reason") or finish
                text = ch.get("text") or ""
                spent.append(text)
                for event in parser.feed(text) if offered else [("text", text)] if text else []:
                    if not done:  # nothing after the block is sent
                        yield event
                    done = done or event[0] in ("close", "cut")
                if done:
                    break
            if not done and offered:
                yield from parser.end(cut=finish == "length")
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # a block closed: stop generating
        yield "end", finish or "stop"

    def steps() -> Iterator[tuple[str, str]]:
        """("text", s) | ("open", "") | ("args", s) | ("finish", reason) | ("usage", completion text).

        Text streams as it comes; a block is held until it is over and repaired (the quotes
        and imports it forgot: ``codeaction.quote_names``, ``codeaction.add_imports``), and
        when it cannot run (a syntax error, no code, a name nothing defines, ``input()``, a
        range that would run for hours: ``codeaction.problem``; or cut off) it is written
        again from the fence up to ``CODE_RESAMPLES`` times: a block of only the comment first
        greedily with its first token forced to be code (``first_token``), else sampled. The
        first candidate that can run is sent, else the first complete one; when every
        candidate would run for hours, none is: the code is shown as text and the turn ends.
        (Measured on the task suite, docs/benchmarks.md: forcing the first token of every
        block, not only of an empty one, changed good greedy blocks and gained nothing.)"""
        spent: list[str] = []
        parser = codeaction.BlockParser()
        events = block(generate(prompt), parser, spent)
        before = ""  # the text streamed before the block
        head = "```python\n" + comment  # how every candidate block starts
        candidates: list[tuple[str, str]] = []  # (kind: close | cut, code)
        finish = "stop"

        def keep(kind: str, code: str) -> None:
            if kind == "close" and CODE_REPAIR:  # the quotes and imports it forgot
                code = codeaction.print_returns(codeaction.quote_names(code, request, known))
                code = codeaction.add_imports(codeaction.load_files(code, messages, known), known)
                code = codeaction.bind_asked(code, request, known)
                code = codeaction.drop_reloads(code, messages, known)
            candidates.append((kind, code))

        def candidate(
            temperature: float | None = None, seed: int | None = None, code_first: bool = False
        ) -> None:
            nonlocal finish
            start = head
            go_on: str | list[int] = prompt + before + head
            if code_first:  # the block starts with code: not a close, not a comment
                token, go_on = first_token(prompt + before + head, temperature, seed, spent)
                start += token
            again = codeaction.BlockParser()
            for kind, text in itertools.chain(
                again.feed(start),
                block(generate(go_on, temperature, seed), again, spent),
            ):
                if kind in ("close", "cut"):
                    keep(kind, text)
                elif kind == "end":
                    finish = text

        if code_first:  # no prose first: the reply is a block from its first token
            candidate()
        said = ""  # the answer after a run, held to check its numbers against the output
        for kind, text in () if code_first else events:
            if kind == "text" and answer:
                said += text
            elif kind == "text":
                before += text
                yield "text", text
            elif kind == "open" and comment:  # start the block again, the request as its comment
                events.close()
                candidate()
                break
            elif kind in ("close", "cut"):
                keep(kind, text)
            elif kind == "end":
                finish = text
        if said:  # only numbers the run printed (or the request gave)
            output = _text(messages[-1].get("content"))
            yield "text", codeaction.grounded_answer(said, output, request_all)
        for attempt in range(1, CODE_RESAMPLES + 1):
            if not candidates or (candidates[-1][0] == "close" and not trouble(candidates[-1][1])):
                break
            empty = trouble(candidates[-1][1]) == codeaction.EMPTY
            if attempt == 1 and CODE_FIRST_TOKEN and empty:
                candidate(code_first=True)  # only the comment: greedy again, starting with code
            else:
                candidate(CODE_RESAMPLE_TEMPERATURE, CODE_SEED + attempt, CODE_FIRST_TOKEN)
        if candidates:
            checked = [(kind, code, trouble(code)) for kind, code in candidates]
            safe = [c for c in checked if not c[2].endswith(codeaction.HOURS)]  # a hang is worse
            # a block of only comments (after every repair) runs nothing: never sent
            safe = [c for c in safe if c[2] != codeaction.EMPTY]
            if not safe:  # every candidate would hold the kernel: show the code, run nothing
                kind, code, problem = checked[0]
                yield "text", f"{codeaction.fence(code)}\n(not run: {problem})"
                yield "finish", "stop"
                yield "usage", "".join(spent)
                return
            ranked = (
                [c for c in safe if c[0] == "close" and not c[2]]
                or [c for c in safe if c[0] == "close" and c[2] != _AGAIN]
                or [c for c in safe if c[0] == "close"]
            )
            kind, code, _ = (ranked or safe)[0]
            yield "open", ""
            yield "args", '{"code": ' + json.dumps(code, ensure_ascii=False)[:-1]
            if kind == "close":
                yield "args", '"}'
            yield "finish", "tool_calls" if kind == "close" else "length"
        else:
            yield "finish", finish
        yield "usage", "".join(spent)

    if stream:

        def events() -> Iterator[dict]:
            yield reply.chunk({"role": "assistant", "content": ""})
            try:
                for kind, text in steps():
                    if kind == "text":
                        yield reply.chunk({"content": text})
                    elif kind == "open":
                        yield reply.call_start(codeaction.TOOL)
                    elif kind == "args":
                        yield reply.chunk(
                            {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
                        )
                    elif kind == "finish":
                        yield reply.chunk({}, text)
                    else:
                        yield reply.usage_chunk(reply.count(text))
            except Exception as err:  # report in-band: the 200 is already sent
                yield _stream_error(err)

        return events()

    content, args, opened, finish, generated = "", "", False, "stop", ""
    for kind, text in steps():
        if kind == "text":
            content += text
        elif kind == "open":
            opened = True
        elif kind == "args":
            args += text
        elif kind == "finish":
            finish = text
        else:
            generated = text
    message: dict = {"role": "assistant", "content": content or None}
    if opened:
        message = reply.call_message(content or None, codeaction.TOOL, args)
    return reply.response(message, finish, reply.count(generated))


class _Overflow(ValueError):
    """The prompt does not fit; ``str()`` is llama.cpp's wording, which the server maps to 400."""

    def __init__(self, prompt_tokens: int, n_ctx: int, max_tokens: int | None) -> None:
        super().__init__(f"Requested tokens ({prompt_tokens}) exceed context window of {n_ctx}")
        self.prompt_tokens, self.n_ctx, self.max_tokens = prompt_tokens, n_ctx, max_tokens or 0

    def openai_message(self) -> str:
        return (
            f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
            f"{self.prompt_tokens + self.max_tokens} tokens ({self.prompt_tokens} in the messages, "
            f"{self.max_tokens} in the completion). Please reduce the length of the messages or completion."
        )


def _chat_handler(**kwargs: Any) -> Any:
    """``_chat_impl``, with errors before a stream starts sent in-band as an SSE error event.

    The server has already sent ``200`` when a streaming handler runs, so an
    exception would just cut the stream; an ``{"error": …}`` event makes the
    ``openai`` SDK raise ``APIError`` with the message instead.
    """
    if not kwargs.get("stream"):
        return _chat_impl(**kwargs)
    error: dict[str, Any]
    try:
        return _chat_impl(**kwargs)
    except _Overflow as err:
        error = {"message": err.openai_message(), "type": "invalid_request_error", "param": "messages",
                 "code": "context_length_exceeded"}  # fmt: skip
    except Exception as err:
        error = {
            "message": f"{type(err).__name__}: {err}",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    return iter([{"error": error}])


class _Activity:
    """Requests in progress and the time the last one ended (for the idle watchdog)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0
        self.last = time.time()

    def begin(self) -> None:
        with self.lock:
            self.busy += 1
            self.last = time.time()

    def end(self) -> None:
        with self.lock:
            self.busy = max(0, self.busy - 1)
            self.last = time.time()

    def track(self, result: Any) -> Any:
        """``result`` (a response, or a stream ending the request when it is exhausted or closed)."""
        if isinstance(result, dict):
            self.end()
            return result

        def stream() -> Iterator[Any]:
            try:
                yield from result
            finally:
                self.end()

        return stream()


_ACTIVITY = _Activity()


def _tracked_handler(**kwargs: Any) -> Any:
    _ACTIVITY.begin()
    try:
        result = _chat_handler(**kwargs)
    except BaseException:
        _ACTIVITY.end()
        raise
    return _ACTIVITY.track(result)


def watch(
    state_dir: str,
    idle_timeout: float,
    client_grace: float,
    *,
    activity: _Activity = _ACTIVITY,
    stop: Any = None,
) -> str:
    """Wait until the server should stop; clear its ``state.json`` and return the reason.

    Stops when no request has been served for ``idle_timeout`` seconds (0: never), or when
    no kernel that used the server (``clients/<pid>``, see ``local.live_clients``) is alive
    and ``client_grace`` seconds have passed since the last request. A kernel's
    ``ensure()`` touches its client file under the same lock, so a server it has just
    been handed does not stop under it.
    """
    folder = Path(state_dir)
    limits = [t for t in (idle_timeout, client_grace) if t > 0]
    period = max(0.2, min(30.0, min(limits) / 4)) if limits else 30.0
    while True:
        if stop is not None and stop.wait(period):
            return ""
        if stop is None:
            time.sleep(period)
        try:
            with FileLock(folder / "lock", timeout=1.0):
                with activity.lock:
                    busy, last = activity.busy, activity.last
                if busy:
                    continue
                now = time.time()
                clients = live_clients(folder)
                newest = max([last, *clients])
                reason = ""
                if idle_timeout > 0 and now - newest >= idle_timeout:
                    reason = f"idle for {now - newest:.0f} s"
                elif not clients and now - last >= client_grace:
                    reason = "no kernel uses it"
                if not reason:
                    continue
                try:
                    state = ServerState.from_data(json.loads((folder / "state.json").read_text()))
                except (OSError, ValueError):
                    state = None
                if state is not None and state.pid == os.getpid():
                    (folder / "state.json").unlink()
                return reason
        except Exception:  # noqa: BLE001 - a lock held by a starting kernel: look again later
            continue


def _watchdog(state_dir: str, idle_timeout: float, client_grace: float) -> None:
    """Run :func:`watch` in a thread; then stop this server (SIGTERM: uvicorn shuts down)."""

    def run() -> None:
        reason = watch(state_dir, idle_timeout, client_grace)
        print(
            f"--- jupyter-session-agent: stopping ({reason}) at {time.strftime('%Y-%m-%d %H:%M:%S')}",
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10.0)
        os._exit(0)  # uvicorn did not stop in time

    threading.Thread(target=run, name="jsa-idle-watchdog", daemon=True).start()


def _own_args(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split ``--jsa_<name> value`` pairs (ours) from llama_cpp.server's arguments."""
    rest, ours = [], {}
    items = iter(argv)
    for item in items:
        if item.startswith("--jsa_"):
            ours[item[len("--jsa_") :]] = next(items, "")
        else:
            rest.append(item)
    return rest, ours


def _serve(argv: list[str]) -> None:
    """Run ``llama_cpp.server`` with our chat handler, ignoring its env-var settings."""
    from llama_cpp import llama_chat_format
    from llama_cpp.server import settings as server_settings

    argv, ours = _own_args(argv)
    fields: set[str] = set()
    for cls in (
        server_settings.Settings,
        server_settings.ServerSettings,
        server_settings.ModelSettings,
    ):
        fields.update(name.lower() for name in getattr(cls, "model_fields", {}))
    fields.add("config_file")
    for key in list(os.environ):
        if key.lower() in fields:
            del os.environ[key]
    llama_chat_format.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        CHAT_FORMAT, _tracked_handler, overwrite=True
    )
    if ours.get("state_dir"):
        _watchdog(
            ours["state_dir"],
            float(ours.get("idle_timeout") or 0),
            float(ours.get("client_grace") or 0),
        )
    from llama_cpp.server.__main__ import main

    sys.argv = ["llama_cpp.server", *argv]
    main()


if __name__ == "__main__":
    _serve(sys.argv[1:])
