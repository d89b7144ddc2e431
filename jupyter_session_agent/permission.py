"""Permission rules: allow / ask / deny, last match wins (OpenCode §4.7).

Pure: no I/O, no clocks. A rule is ``{permission, pattern, action}``; a
ruleset is a sequence of rules; :func:`evaluate` takes the **last** rule whose
permission glob and pattern glob both match, and ``ask`` when none does.
Globs follow OpenCode's ``Wildcard.match``: ``*`` is any text (``/``
included), ``?`` one character, anchored at both ends, ``.`` matching
newlines, backslashes read as ``/``, and a trailing ``" *"`` optional
(``"ls *"`` matches ``"ls"``).

What a tool call asks for is :func:`tool_asks` (the §4.7 table adapted to our
tools). The in-memory :class:`Broker` holds pending requests and applies
replies exactly as OpenCode's ``PermissionNext.ask`` / ``reply`` do; the
notebook's synchronous flow (one question at a time, on stdin) is
:class:`Gate`, which the processor calls just before a tool runs.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from . import ids
from .errors import ConfigError, ToolFailure, UsageError

Action = Literal["allow", "ask", "deny"]
ACTIONS: tuple[str, ...] = ("allow", "ask", "deny")

# Tools whose calls ask another tool's permission (OpenCode: the edit family).
EDIT_TOOLS = ("edit", "write", "patch", "multiedit", "apply_patch")
READ_TOOLS = ("read", "list", "glob", "grep")


def permission_of(tool: str) -> str:
    """The permission a tool's calls ask for: ``write`` → ``edit``, ``grep`` → ``read``."""
    if tool in EDIT_TOOLS:
        return "edit"
    if tool in READ_TOOLS:
        return "read"
    return tool


def permission_name(name: str) -> str:
    """A permission named by a user: the edit family becomes ``edit``; ``list``, ``glob``
    and ``grep`` are refused because their calls ask ``read`` (a rule for them would
    never match, and mapping them would change every read)."""
    name = str(name).strip()
    if name in EDIT_TOOLS:
        return "edit"
    if name in READ_TOOLS and name != "read":
        raise ConfigError(f"{name} asks the read permission — write the rule for read, e.g. "
                          f"%agent permit read \"/data/*\" deny")
    return name


# --------------------------------------------------------------------------
# rules


@dataclass(frozen=True, slots=True)
class Rule:
    permission: str
    pattern: str
    action: str

    def to_dict(self) -> dict[str, str]:
        return {"permission": self.permission, "pattern": self.pattern, "action": self.action}

    @classmethod
    def of(cls, value: "Rule | Mapping[str, Any]") -> "Rule":
        """A Rule from a Rule or a ``{permission, pattern, action}`` mapping (validated)."""
        if isinstance(value, Rule):
            return value
        try:
            rule = cls(str(value["permission"]), str(value.get("pattern", "*")), str(value["action"]))
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(f"a permission rule needs permission, pattern and action; got {value!r}") from None
        _check_action(rule.action, rule.permission)
        return rule


Ruleset = Sequence[Rule]


def _check_action(action: Any, where: str) -> None:
    if action not in ACTIONS:
        raise ConfigError(
            f"permission {where!r}: action must be allow, ask or deny, not {action!r} — "
            "e.g. %config AgentMagics.permission = {\"bash\": \"allow\"}"
        )


@lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    escaped = re.sub(r"[.+^${}()|\[\]\\]", lambda m: "\\" + m.group(0), pattern.replace("\\", "/"))
    escaped = escaped.replace("*", ".*").replace("?", ".")
    if escaped.endswith(" .*"):
        escaped = escaped[:-3] + "( .*)?"
    return re.compile("^" + escaped + "$", re.DOTALL)


def match(text: str, pattern: str) -> bool:
    """OpenCode's ``Wildcard.match(text, pattern)``."""
    return _glob(pattern).match(text.replace("\\", "/")) is not None


def expand(pattern: str, home: str | None = None) -> str:
    """``~``, ``~/…``, ``$HOME`` and ``$HOME/…`` at the start become the home directory."""
    home = home if home is not None else os.path.expanduser("~")
    if pattern.startswith("~/"):
        return home + pattern[1:]
    if pattern == "~":
        return home
    if pattern.startswith("$HOME"):
        return home + pattern[5:]
    return pattern


def from_config(config: Mapping[str, Any] | str | None, *, home: str | None = None) -> tuple[Rule, ...]:
    """``{perm: action | {pattern: action}}`` (or one action for everything) → rules, key order kept."""
    if config is None:
        return ()
    if isinstance(config, str):
        config = {"*": config}
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"permission must be a dict like {{\"bash\": \"allow\", \"edit\": {{\"*.py\": \"allow\"}}}}, "
            f"not {type(config).__name__}"
        )
    rules: list[Rule] = []
    for key, value in config.items():
        name = permission_name(key)
        if isinstance(value, str):
            _check_action(value, key)
            rules.append(Rule(name, "*", value))
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(f"permission {key!r}: use an action or a {{pattern: action}} dict, not {value!r}")
        for pattern, action in value.items():
            _check_action(action, f"{key}: {pattern}")
            rules.append(Rule(name, expand(str(pattern), home), action))
    return tuple(rules)


def from_data(data: Iterable[Any] | None) -> tuple[Rule, ...]:
    """Rules stored on ``Session.permission`` (dicts) → Rule values."""
    return tuple(Rule.of(r) for r in (data or ()))


def merge(*rulesets: Iterable[Rule | Mapping[str, Any]]) -> list[Rule]:
    """Concatenation, in order."""
    return [Rule.of(rule) for ruleset in rulesets for rule in ruleset]


def evaluate(permission: str, pattern: str, *rulesets: Iterable[Rule | Mapping[str, Any]]) -> Rule:
    """The last rule matching both ``permission`` and ``pattern``; ``ask`` when none does."""
    merged = merge(*rulesets)
    for rule in reversed(merged):
        if match(permission, rule.permission) and match(pattern, rule.pattern):
            return rule
    return Rule(permission, "*", "ask")


def disabled(tools: Iterable[str], ruleset: Iterable[Rule | Mapping[str, Any]]) -> set[str]:
    """Tools to hide from the model: the last rule for their permission is a ``*`` deny."""
    rules = merge(ruleset)
    hidden: set[str] = set()
    for tool in tools:
        permission = permission_of(tool)
        rule = next((r for r in reversed(rules) if match(permission, r.permission)), None)
        if rule is not None and rule.pattern == "*" and rule.action == "deny":
            hidden.add(tool)
    return hidden


def parse_rule(text: str) -> Rule:
    """A ``%%agent -p`` rule: ``"bash=allow"``, ``"edit:*.py=allow"``, ``"bash:git *=ask"``."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]  # IPython's argument splitting keeps the quotes
    left, sep, action = text.rpartition("=")
    action = action.strip().lower()
    if not sep or not left.strip() or action not in ACTIONS:
        raise UsageError(f"bad permission rule {text!r} — use TOOL=allow|ask|deny or TOOL:PATTERN=allow|ask|deny")
    tool, colon, pattern = left.partition(":")
    try:
        name = permission_name(tool)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return Rule(name, expand(pattern.strip()) if colon and pattern.strip() else "*", action)


# --------------------------------------------------------------------------
# defaults


def defaults(*, data_dir: str | os.PathLike | None = None) -> tuple[Rule, ...]:
    """What a notebook user gets without configuring anything.

    Reading is allowed (``.env`` files ask, ``.env.example`` does not); running
    code (``python``, ``bash``) and changing files (``edit``, which ``write``
    follows) ask; paths outside the session directory ask, except the saved
    tool outputs; a repeated identical call (``doom_loop``) asks.
    """
    rules = [
        Rule("*", "*", "ask"),
        Rule("read", "*", "allow"),
        Rule("read", "*.env", "ask"),
        Rule("read", "*.env.*", "ask"),
        Rule("read", "*.env.example", "allow"),
        Rule("recall", "*", "allow"),  # memory search: reads only this history and the memory notes
        Rule("edit", "*", "ask"),
        Rule("bash", "*", "ask"),
        Rule("python", "*", "ask"),
        Rule("external_directory", "*", "ask"),
        Rule("doom_loop", "*", "ask"),
    ]
    if data_dir is not None:
        output_dir = posixpath.join(str(data_dir).replace("\\", "/"), "tool-output")
        rules.append(Rule("external_directory", output_dir + "/*", "allow"))
    return tuple(rules)


# --------------------------------------------------------------------------
# what a tool call asks for


@dataclass(frozen=True)
class Ask:
    """One permission a call needs: every pattern must be allowed (or approved)."""

    permission: str
    patterns: tuple[str, ...]
    always: tuple[str, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)


def tool_asks(tool: str, args: Mapping[str, Any], directory: str) -> list[Ask]:
    """The permissions a call of ``tool`` with ``args`` needs, in the order they are asked.

    ``edit``/``write``: ``edit`` with the path relative to ``directory`` (always
    ``*``); ``read``/``list``/``glob``/``grep``: ``read`` with the absolute path
    (always: that path); ``bash``: ``bash`` with each simple command of the
    command line (always: its arity prefix + ``" *"``); ``python``: the code
    (always ``*``); any other tool: its name with ``*``. A path outside
    ``directory`` first asks ``external_directory`` with ``<dir>/*``.
    """
    directory = _norm(directory)
    args = args or {}
    asks: list[Ask] = []
    permission = permission_of(tool)
    if tool in EDIT_TOOLS:
        target = _abs(directory, args.get("filePath") or args.get("path") or "")
        asks += _external(directory, target, directory_kind=False, tool=tool)
        relative = posixpath.relpath(target, directory) if target != directory else "."
        asks.append(Ask("edit", (relative,), ("*",), {"tool": tool, "summary": relative}))
    elif tool in READ_TOOLS:
        if tool == "read":
            target, is_dir = _abs(directory, args.get("filePath") or ""), False
        else:
            target, is_dir = _abs(directory, args.get("path") or ""), True
            if tool == "glob":
                target = _glob_root(target, str(args.get("pattern") or ""))
        asks += _external(directory, target, directory_kind=is_dir, tool=tool)
        summary = target if tool == "read" else f"{target} ({args.get('pattern') or tool})"
        asks.append(Ask("read", (target,), (target,), {"tool": tool, "summary": summary}))
    elif tool == "bash":
        command = str(args.get("command") or "")
        commands = split_commands(command) or [command.strip()]
        for path in _command_paths(commands, directory):
            asks += _external(directory, path, directory_kind=path.endswith("/") or "." not in posixpath.basename(path), tool=tool)
        always = tuple(dict.fromkeys(bash_prefix(c) + " *" for c in commands))
        asks.append(Ask("bash", tuple(dict.fromkeys(commands)), always, {"tool": tool, "summary": command.strip()}))
    elif tool == "python":
        code = str(args.get("code") or "")
        asks.append(Ask("python", (code,), ("*",), {"tool": tool, "summary": _first_line(code)}))
    else:
        asks.append(Ask(permission, ("*",), ("*",), {"tool": tool, "summary": tool}))
    return _dedupe_external(asks)


def doom_loop_ask(tool: str, args: Mapping[str, Any]) -> Ask:
    return Ask("doom_loop", (tool,), (tool,), {"tool": tool, "input": dict(args or {}),
                                              "summary": f"{tool} called 3 times in a row with the same input"})


def _norm(path: str) -> str:
    return posixpath.normpath(str(path).replace("\\", "/"))


def _abs(directory: str, path: str) -> str:
    path = os.path.expanduser(str(path)).replace("\\", "/")
    return _norm(posixpath.join(directory, path)) if path else directory


def _inside(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _external(directory: str, target: str, *, directory_kind: bool, tool: str) -> list[Ask]:
    if _inside(directory, target):
        return []
    parent = target if directory_kind else posixpath.dirname(target)
    glob = posixpath.join(parent, "*")
    return [Ask("external_directory", (glob,), (glob,), {"tool": tool, "summary": f"{glob} ({tool} {target})"})]


def _dedupe_external(asks: list[Ask]) -> list[Ask]:
    """One external_directory question per call, naming every directory."""
    external = [a for a in asks if a.permission == "external_directory"]
    if len(external) <= 1:
        return asks
    patterns = tuple(dict.fromkeys(p for a in external for p in a.patterns))
    merged = Ask("external_directory", patterns, patterns,
                 {"tool": external[0].metadata.get("tool"), "summary": ", ".join(patterns)})
    return [merged] + [a for a in asks if a.permission != "external_directory"]


def _glob_root(root: str, pattern: str) -> str:
    """The literal leading directories of a glob pattern, joined to ``root``."""
    pattern = os.path.expanduser(pattern).replace("\\", "/")
    parts = pattern.split("/")
    literal = []
    for part in parts[:-1]:
        if any(c in part for c in "*?[{"):
            break
        literal.append(part)
    if not literal:
        return root
    prefix = "/".join(literal) or "/"
    return _norm(posixpath.join(root, prefix))


def _first_line(code: str) -> str:
    lines = [line for line in code.splitlines() if line.strip()]
    first = lines[0].strip() if lines else ""
    if len(first) > 80:
        first = first[:79] + "…"
    return first + (f"  (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


# -- bash ---------------------------------------------------------------------

# How many words name a command, for "always" patterns (OpenCode's BashArity, trimmed).
BASH_ARITY: Mapping[str, int] = {
    "git": 2, "git config": 3, "git remote": 3, "git stash": 3, "git submodule": 3, "git worktree": 3,
    "npm": 2, "npm run": 3, "npm exec": 3, "pnpm": 2, "pnpm run": 3, "yarn": 2, "yarn run": 3,
    "bun": 2, "bun run": 3, "npx": 2,
    "pip": 2, "pip3": 2, "uv": 2, "uv pip": 3, "uv run": 2, "conda": 2, "mamba": 2, "poetry": 2, "poetry run": 3,
    "python -m": 3, "python3 -m": 3, "python -m pip": 4, "python3 -m pip": 4,
    "cargo": 2, "go": 2, "docker": 2, "docker compose": 3, "kubectl": 2, "helm": 2,
    "make": 2, "jupyter": 2, "apt": 2, "apt-get": 2, "brew": 2, "systemctl": 2, "gh": 3,
}

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def bash_prefix(command: str) -> str:
    """The command's arity prefix: ``git checkout main`` → ``git checkout``, ``ls -la`` → ``ls``."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:
        tokens = command.split()
    while tokens and _ASSIGNMENT.match(tokens[0]):
        tokens = tokens[1:]
    if not tokens:
        return command.strip()
    for length in range(len(tokens), 0, -1):
        arity = BASH_ARITY.get(" ".join(tokens[:length]))
        if arity is not None:
            return " ".join(tokens[:arity])
    return tokens[0]


def split_commands(command: str) -> list[str]:
    """The simple commands of a command line: split on ``; & && | || newline ( )``,
    with the commands inside ``$(…)`` and backticks added after their host.

    A rule like ``"echo *"`` must not allow ``echo hi && rm -rf ~``: each part
    is its own pattern, and every pattern must be allowed.
    """
    out: list[str] = []
    nested: list[str] = []
    buf: list[str] = []
    i, n = 0, len(command)
    quote: str | None = None

    def flush() -> None:
        text = "".join(buf).strip()
        buf.clear()
        if text:
            out.append(text)

    while i < n:
        c = command[i]
        if quote == "'":
            buf.append(c)
            if c == "'":
                quote = None
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            buf.append(command[i:i + 2])
            i += 2
            continue
        if c == "$" and command.startswith("$(", i) or c == "`":
            end = _closing(command, i)
            inner = command[i + 2:end] if c == "$" else command[i + 1:end]
            nested.extend(split_commands(inner))
            buf.append(command[i:end + 1])
            i = end + 1
            continue
        if quote == '"':
            buf.append(c)
            if c == '"':
                quote = None
            i += 1
            continue
        if c in "'\"":
            quote = c
            buf.append(c)
        elif c == "#" and (not buf or buf[-1][-1:].isspace()):
            while i < n and command[i] != "\n":
                i += 1
            continue
        elif c == "&" and buf and buf[-1][-1:] in "<>":
            buf.append(c)  # a redirection such as 2>&1
        elif c == ">" and buf and buf[-1][-1:] == "&":
            buf.append(c)  # &> file
        elif c in ";&|\n()":
            flush()
        else:
            buf.append(c)
        i += 1
    flush()
    return out + nested


def _closing(text: str, start: int) -> int:
    """Index of the character closing ``$(`` or a backtick at ``start`` (or the end)."""
    if text[start] == "`":
        end = text.find("`", start + 1)
        return end if end != -1 else len(text)
    depth, i, quote = 0, start + 1, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty"})


def _command_paths(commands: list[str], directory: str) -> list[str]:
    """Absolute forms of the path-like words (``/…``, ``~…``, ``..…``) of ``commands``."""
    found: list[str] = []
    for command in commands:
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:
            words = command.split()
        for word in words:
            for candidate in (word, word.partition("=")[2]):
                if not candidate.startswith(("/", "~", "..")) or candidate in _HARMLESS_PATHS:
                    continue
                path = _abs(directory, candidate)
                if not _inside(directory, path):
                    found.append(path)
    return list(dict.fromkeys(found))


# --------------------------------------------------------------------------
# asking and replying (OpenCode's PermissionNext.ask / reply)


class PermissionFailure(ToolFailure):
    """Base of the permission outcomes a tool part records; ``metadata`` goes on its error state."""

    outcome = "denied"

    def __init__(self, message: str, *, permission: str | None = None, patterns: Sequence[str] = ()):
        super().__init__(message)
        self.permission = permission
        self.patterns = tuple(patterns)

    @property
    def metadata(self) -> dict[str, Any]:
        info: dict[str, Any] = {"outcome": self.outcome}
        if self.permission:
            info["permission"] = self.permission
            info["patterns"] = [_short(p, 200) for p in self.patterns]
        return {"permission": info}


class DeniedError(PermissionFailure):
    """A rule denies the call; the model sees which rules."""

    outcome = "denied"

    def __init__(self, permission: str, pattern: str, rules: Sequence[Rule]):
        self.rules = tuple(rules)
        shown = ", ".join(f"{r.permission} {r.pattern!r} → {r.action}" for r in self.rules[-5:])
        super().__init__(
            f"permission denied: {permission} {_short(pattern)!r} is denied by the user's rules "
            f"({shown}). Do not retry it; use another approach or ask the user.",
            permission=permission, patterns=(pattern,),
        )
        self.pattern = pattern


class RejectedError(PermissionFailure):
    """The user said no: the tool errors and the turn stops (OpenCode ``blocked``)."""

    outcome = "rejected"

    def __init__(self, message: str = "rejected by the user", **where: Any):
        super().__init__(message, **where)


class CorrectedError(PermissionFailure):
    """The user said no with feedback: the model sees it and the turn goes on."""

    outcome = "corrected"

    def __init__(self, feedback: str, **where: Any):
        self.feedback = feedback
        super().__init__(f"rejected by the user, with this feedback: {feedback}", **where)


class ApprovalUnavailable(RejectedError):
    """The call needs an answer and the front end cannot ask (no stdin): a clear denial."""

    outcome = "unavailable"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


Reply = Literal["once", "always", "reject"]


@dataclass(frozen=True)
class Request:
    """A pending question: ``permission`` for every pattern in ``patterns``."""

    id: str
    session_id: str
    permission: str
    patterns: tuple[str, ...]
    always: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    ruleset: tuple[Rule, ...] = ()


class Broker:
    """Pending requests and approvals, per session, in memory (OpenCode's state)."""

    def __init__(self) -> None:
        self.pending: dict[str, Request] = {}
        self.approved: dict[str, list[Rule]] = {}  # session → rules added by "always"

    def ask(self, session_id: str, permission: str, patterns: Sequence[str], *, always: Sequence[str] = (),
            metadata: Mapping[str, Any] | None = None, ruleset: Iterable[Rule | Mapping] = (),
            call_id: str | None = None, id: str | None = None) -> Request | None:
        """``None`` when every pattern is allowed; raises :class:`DeniedError` when one is
        denied; otherwise a pending :class:`Request` to answer with :meth:`reply`."""
        rules = tuple(merge(ruleset))
        approved = self.approved.get(session_id, [])
        needs = False
        for pattern in patterns:
            rule = evaluate(permission, pattern, rules, approved)
            if rule.action == "deny":
                relevant = [r for r in merge(rules, approved) if match(permission, r.permission)]
                raise DeniedError(permission, pattern, relevant)
            needs = needs or rule.action == "ask"
        if not needs:
            return None
        request = Request(id or ids.ascending("permission"), session_id, permission, tuple(patterns),
                          tuple(always), dict(metadata or {}), call_id, rules)
        self.pending[request.id] = request
        return request

    def list(self) -> list[Request]:
        return list(self.pending.values())

    def reply(self, request_id: str, reply: Reply, message: str | None = None) -> dict[str, ToolFailure | None]:
        """Answer a request. Returns what each request it settles must do: ``None``
        = go ahead, an exception = fail with it.

        ``once`` settles this request; ``always`` also approves its "always"
        patterns for the session and settles the session's other pending
        requests that now evaluate to allow; ``reject`` rejects this one
        (:class:`CorrectedError` when ``message`` is given) and every other
        pending request of the session (:class:`RejectedError`).
        """
        request = self.pending.pop(request_id, None)
        if request is None:
            raise UsageError(f"no pending permission request {request_id!r}")
        if reply not in ("once", "always", "reject"):
            raise UsageError(f"reply must be once, always or reject, not {reply!r}")
        outcome: dict[str, ToolFailure | None] = {}
        same = [r for r in self.pending.values() if r.session_id == request.session_id]
        if reply == "reject":
            where = {"permission": request.permission, "patterns": request.patterns}
            outcome[request.id] = CorrectedError(message, **where) if message else RejectedError(**where)
            for other in same:
                del self.pending[other.id]
                outcome[other.id] = RejectedError(permission=other.permission, patterns=other.patterns)
            return outcome
        outcome[request.id] = None
        if reply == "always":
            approved = self.approved.setdefault(request.session_id, [])
            approved.extend(Rule(request.permission, p, "allow") for p in request.always)
            for other in same:
                if all(evaluate(other.permission, p, other.ruleset, approved).action == "allow"
                       for p in other.patterns):
                    del self.pending[other.id]
                    outcome[other.id] = None
        return outcome


def how_to_allow(request: Request) -> str:
    """The one-line fix for a call that could not be asked about."""
    tool = request.metadata.get("tool") or request.permission
    if request.permission == "external_directory":
        pattern = request.patterns[0]
        return (f"{tool} needs access outside the session directory ({_short(pattern)}) and this front end "
                f"cannot ask (no stdin): allow it with %agent permit external_directory \"{pattern}\" allow, "
                f"then run the cell again")
    if request.permission == "doom_loop":
        return (f"{tool} was called 3 times in a row with the same input and this front end cannot ask "
                "(no stdin): the turn stopped; %agent permit doom_loop allow lets such loops run")
    config = f"{{\"{request.permission}\": \"allow\"}}"
    return (f"{tool} needs your approval and this front end cannot ask (no stdin): allow it with "
            f"%agent permit {request.permission} allow (this session) or "
            f"%config AgentMagics.permission = {config}, then run the cell again")


# --------------------------------------------------------------------------
# the synchronous gate the processor calls


DOOM_LOOP_THRESHOLD = 3


class Gate:
    """Checks each tool call just before it runs, for one turn of one session.

    ``ruleset()`` gives the turn's rules (defaults, user config, session rules,
    cell rules); approvals answered "always" are appended after them and
    reported through ``on_always`` so the session can persist them.
    ``approver(request)`` returns ``(reply, message)`` and may raise
    :class:`ApprovalUnavailable`. After a plain reject the turn stops; later
    questions in the same turn are rejected without asking (OpenCode rejects
    the session's other pending requests).
    """

    def __init__(self, *, session_id: str, directory: str, ruleset: Callable[[], Sequence[Rule]],
                 approver: Callable[[Request], tuple[str, str | None]],
                 on_always: Callable[[list[Rule]], None] | None = None) -> None:
        self.session_id = session_id
        self.directory = directory
        self.ruleset = ruleset
        self.approver = approver
        self.on_always = on_always
        self.broker = Broker()
        self.calls: list[tuple[str, str]] = []  # (tool, canonical input) in order, this turn
        self.stopped: RejectedError | None = None

    def __call__(self, tool: str, args: Mapping[str, Any], call: Any = None) -> None:
        key = (tool, _canonical(args))
        recent = self.calls[-(DOOM_LOOP_THRESHOLD - 1):]
        self.calls.append(key)
        asks = tool_asks(tool, args, self.directory)
        if len(recent) == DOOM_LOOP_THRESHOLD - 1 and all(k == key for k in recent):
            asks.insert(0, doom_loop_ask(tool, args))
        for ask in asks:
            self._check(ask, getattr(call, "call_id", None))

    def _check(self, ask: Ask, call_id: str | None) -> None:
        request = self.broker.ask(self.session_id, ask.permission, ask.patterns, always=ask.always,
                                  metadata=ask.metadata, ruleset=self.ruleset(), call_id=call_id)
        if request is None:
            return
        if self.stopped is not None:
            self.broker.reply(request.id, "reject")
            raise RejectedError("rejected: the user rejected an earlier tool call in this turn",
                                permission=request.permission, patterns=request.patterns)
        try:
            reply, message = self.approver(request)
        except RejectedError as err:  # no way to ask: a denial that stops the turn
            self.broker.pending.pop(request.id, None)
            if err.permission is None:
                err.permission, err.patterns = request.permission, request.patterns
            self.stopped = err
            raise
        except BaseException:
            self.broker.pending.pop(request.id, None)
            raise
        outcome = self.broker.reply(request.id, reply, message)
        if reply == "always" and self.on_always is not None:
            self.on_always([Rule(request.permission, p, "allow") for p in request.always])
        error = outcome.get(request.id)
        if error is not None:
            if not isinstance(error, CorrectedError):
                self.stopped = error  # a plain reject ends the turn
            raise error


def _canonical(args: Mapping[str, Any]) -> str:
    try:
        return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(args)


__all__ = [
    "Rule", "Ask", "Request", "Broker", "Gate", "DeniedError", "RejectedError", "CorrectedError",
    "ApprovalUnavailable", "match", "expand", "from_config", "from_data", "merge", "evaluate",
    "disabled", "defaults", "tool_asks", "doom_loop_ask", "split_commands", "bash_prefix",
    "parse_rule", "permission_of", "how_to_allow",
]
