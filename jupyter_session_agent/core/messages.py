"""The data model: Session → Message → Part, as OpenCode's ``message-v2.ts``.

One module: the values and their codec; each class declares its OpenCode JSON shape and the
compiled decoders read those declarations, so a value and its encoding change together.

Values are frozen dataclasses with snake_case fields. ``to_data()`` gives the
JSON object OpenCode would store (camelCase keys, nested ``time``/``cache``
objects, ``None`` fields omitted); ``from_data()`` reads it back, so
``X.from_data(x.to_data()) == x`` for every value. Changing a value means
``dataclasses.replace``; identity (ids) is a field because OpenCode's API
shapes carry it, but storage keys are derived by the store, not here.

This module is pure: no I/O, no clocks except :func:`now_ms` for callers.
"""

from __future__ import annotations

import collections.abc as _abc
import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

Json = dict[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------
# generic field ↔ JSON mapping


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


_SPECIAL_KEYS = {
    "session_id": "sessionID",
    "message_id": "messageID",
    "parent_id": "parentID",
    "project_id": "projectID",
    "workspace_id": "workspaceID",
    "provider_id": "providerID",
    "model_id": "modelID",
    "call_id": "callID",
}


def _key(name: str, overrides: Mapping[str, str]) -> str:
    return overrides.get(name) or _SPECIAL_KEYS.get(name) or _camel(name)


def _dump(value: Any) -> Any:
    if hasattr(value, "to_data"):
        return value.to_data()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _set_path(out: Json, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        out = out.setdefault(p, {})
    out[leaf] = value


def _get_path(data: Mapping[str, Any], path: str) -> Any:
    cur: Any = data
    for p in path.split("."):
        if not isinstance(cur, Mapping) or p not in cur:
            return None
        cur = cur[p]
    return cur


class _Value:
    """Mixin: dataclass ↔ OpenCode JSON through ``_KEYS`` (field → dotted path)."""

    _KEYS: ClassVar[dict[str, str]] = {}
    _CONVERT: ClassVar[dict[str, Any]] = {}  # field → callable(json) -> value
    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def to_data(self) -> Json:
        out: Json = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None:
                continue
            _set_path(out, _key(f.name, self._KEYS), _dump(value))
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]):
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _PLANS[cls] = _compile_decoder(cls)
        return plan(data)


_PLANS: dict[type, Any] = {}  # class → its compiled field plan (what _Value.from_data runs)
_DECODERS: dict[type, Any] = {}


def decoder(cls: type[_Value]) -> Any:
    """``cls.from_data`` as a function compiled once per class (the field plan, cached).

    For ``_Value`` classes that keep the inherited ``from_data``, the plan
    (field → JSON path → converter → default) becomes straight-line code that
    sets the slots directly, so decoding many stored values skips the
    per-call reflection and keyword handling (about 3x faster than a loop over
    ``fields()``). A class that overrides ``from_data`` gets its own method.
    Semantics are ``from_data``'s: a missing or null key takes the field's
    default, JSON arrays become tuples, a missing required field raises
    ``TypeError``.
    """
    found = _DECODERS.get(cls)
    if found is None:
        if getattr(cls.from_data, "__func__", None) is vars(_Value)["from_data"].__func__:
            found = _PLANS.get(cls) or _PLANS.setdefault(cls, _compile_decoder(cls))
        else:
            found = cls.from_data
        _DECODERS[cls] = found
    return found


def _nested(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, _abc.Mapping) else None


def _compile_decoder(cls: type[_Value]) -> Any:
    ns: dict[str, Any] = {
        "cls": cls,
        "new": object.__new__,
        "freeze": _freeze,
        "nested": _nested,
        "dict": dict,
        "list": list,
    }
    flds = fields(cls)
    slots: dict[str, Any] = {
        f.name: next((c.__dict__[f.name] for c in cls.__mro__ if f.name in c.__dict__), None)
        for f in flds
    }
    direct = not hasattr(cls, "__post_init__") and all(
        f.init and type(slots[f.name]).__name__ == "member_descriptor" for f in flds
    )
    body = ["def decode(d):", "    get = d.get"]
    for i, f in enumerate(flds):
        v = f"v{i}"
        head, *rest = _key(f.name, cls._KEYS).split(".")
        body.append(f"    {v} = get({head!r})")
        for key in rest:
            body.append(
                f"    if {v} is not None: "
                f"{v} = {v}.get({key!r}) if {v}.__class__ is dict else nested({v}, {key!r})"
            )
        convert = cls._CONVERT.get(f.name)
        owner = getattr(convert, "__self__", None)
        if (
            isinstance(owner, type)
            and issubclass(owner, _Value)
            and getattr(convert, "__name__", "") == "from_data"
        ):
            ns[f"c{i}"] = decoder(owner)
            value = f"c{i}({v})"
        elif convert is tool_state_from_data:
            ns[f"c{i}"] = {status: decoder(state) for status, state in _STATES.items()}
            value = f"c{i}[{v}['status']]({v})"
        elif convert is dict:
            value = f"dict({v})"
        elif convert is not None:
            ns[f"c{i}"] = convert
            value = f"c{i}({v})"
        else:
            value = f"(freeze({v}) if {v}.__class__ is list else {v})"
        if f.default is not dataclasses.MISSING:
            ns[f"d{i}"] = f.default
            default = f"d{i}"
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"f{i}"] = f.default_factory
            default = f"f{i}()"
        else:
            ns[f"m{i}"] = f"{cls.__name__}.from_data: missing required field {f.name!r}"
            body.append(f"    if {v} is None: raise TypeError(m{i})")
            default = None
        body.append(
            f"    {v} = {value}"
            if default is None
            else f"    {v} = {default} if {v} is None else {value}"
        )
        allowed = _scalar_classes(f.type) if convert is None else None
        if allowed is not None:  # a stored field of the wrong shape is unreadable, not trusted
            ns[f"a{i}"] = allowed
            ns[f"t{i}"] = f"{cls.__name__}.from_data: field {f.name!r} must be {f.type}"
            body.append(f"    if {v}.__class__ not in a{i}: raise TypeError(t{i})")
    if direct:  # a frozen slotted dataclass without __post_init__: set the slots, skip __init__
        body.append("    o = new(cls)")
        for i, f in enumerate(flds):
            ns[f"s{i}"] = slots[f.name].__set__
            body.append(f"    s{i}(o, v{i})")
        body.append("    return o")
    else:
        body.append(f"    return cls({', '.join(f'{f.name}=v{i}' for i, f in enumerate(flds))})")
    exec("\n".join(body), ns)  # noqa: S102 - code generated from dataclass fields only
    return ns["decode"]


_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "bool": (bool,),
    "int": (int, bool, float),
    "float": (float, int, bool),
    "None": (type(None),),
}


def _scalar_classes(annotation: Any) -> frozenset[type] | None:
    """The classes a field annotated ``str``, ``int | None``… may hold when decoded (a JSON
    number may be either kind), or ``None`` when the annotation is not only such scalars."""
    names = [n.strip() for n in str(annotation).split("|")]
    if not all(n in _SCALARS for n in names):
        return None
    return frozenset(c for n in names for c in _SCALARS[n])


def _freeze(raw: Any) -> Any:
    # JSON arrays come back as tuples so that values stay hashable-ish and equal
    # to what was written (tuples are written as arrays).
    if isinstance(raw, list):
        return tuple(_freeze(v) for v in raw)
    return raw


# --------------------------------------------------------------------------
# tokens


@dataclass(frozen=True, slots=True)
class Tokens(_Value):
    """Usage of one LLM call, OpenCode's ``tokens`` object.

    ``input`` excludes cache reads and writes and ``output`` excludes reasoning (as
    OpenCode stores them);
    :attr:`prompt` is the OTel-style input that includes them. ``estimated``
    is ours: true when the server reported no usage and we counted locally.
    """

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int | None = None
    estimated: bool | None = None

    _KEYS: ClassVar[dict[str, str]] = {"cache_read": "cache.read", "cache_write": "cache.write"}

    @property
    def prompt(self) -> int:
        """Input tokens including cache reads and writes."""
        return self.input + self.cache_read + self.cache_write

    @property
    def count(self) -> int:
        """What ``isOverflow`` compares: ``total`` or the sum of the parts."""
        return self.total or (
            self.input + self.output + self.reasoning + self.cache_read + self.cache_write
        )


# --------------------------------------------------------------------------
# sessions


DEFAULT_TITLE_RE = re.compile(
    r"^(New session - |Child session - )\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
)


def default_title(created_ms: int, *, child: bool = False) -> str:
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created_ms / 1000))
    return f"{'Child' if child else 'New'} session - {iso}.{created_ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Session(_Value):
    id: str
    directory: str
    title: str
    time_created: int
    time_updated: int
    slug: str = ""
    project_id: str = "global"
    version: str = ""
    parent_id: str | None = None
    workspace_id: str | None = None
    time_archived: int | None = None
    permission: tuple | None = None
    revert: Json | None = None
    summary: Json | None = None
    share: Json | None = None
    time_compacting: int | None = None  # OpenCode's vestigial time.compacting, kept for imports
    # ours (lifecycle.md): where a fork came from, {"sessionID", "messageID"}; and what the
    # title call used, {"model", "tokens", "cost", "time"} (rolled up by the session_cost view)
    forked_from: Json | None = None
    title_usage: Json | None = None
    # what OpenCode 1.18 keeps on its session row, kept by an import (ours adds up the messages
    # instead): cost and token totals {input, output, reasoning, cache: {read, write}}, agent,
    # model {id, providerID, variant}, path (relative to the project) and metadata
    cost: float | None = None
    tokens: Json | None = None
    agent: str | None = None
    model: Json | None = None
    path: str | None = None
    metadata: Json | None = None

    _KEYS: ClassVar[dict[str, str]] = {
        "time_created": "time.created",
        "time_updated": "time.updated",
        "time_archived": "time.archived",
        "time_compacting": "time.compacting",
    }

    @property
    def has_default_title(self) -> bool:
        return bool(DEFAULT_TITLE_RE.match(self.title))


# --------------------------------------------------------------------------
# messages


@dataclass(frozen=True, slots=True)
class ModelRef(_Value):
    provider_id: str
    model_id: str

    @classmethod
    def parse(cls, spec: str) -> ModelRef:
        """``"provider/model"`` → ModelRef; a bare name means provider ``openai``."""
        provider, sep, model = spec.partition("/")
        return cls(provider, model) if sep else cls("openai", provider)

    def __str__(self) -> str:
        return f"{self.provider_id}/{self.model_id}"


@dataclass(frozen=True, slots=True)
class UserMessage(_Value):
    id: str
    session_id: str
    time_created: int
    model: ModelRef
    agent: str = "build"
    system: str | None = None
    variant: str | None = None
    format: Json | None = None
    summary: Json | None = None

    role: ClassVar[str] = "user"
    _KEYS: ClassVar[dict[str, str]] = {"time_created": "time.created"}
    _CONVERT: ClassVar[dict[str, Any]] = {"model": ModelRef.from_data}

    def to_data(self) -> Json:
        return {"role": "user", **_Value.to_data(self)}


@dataclass(frozen=True, slots=True)
class AssistantMessage(_Value):
    id: str
    session_id: str
    parent_id: str
    time_created: int
    provider_id: str
    model_id: str
    agent: str = "build"
    mode: str = "build"
    path: Json = field(default_factory=dict)  # {cwd, root}
    cost: float = 0.0
    tokens: Tokens = Tokens()
    time_completed: int | None = None
    finish: str | None = None
    error: Json | None = None  # {"name": ..., "data": {...}} as OpenCode's NamedError
    summary: bool | None = None
    variant: str | None = None
    structured: Any = None

    role: ClassVar[str] = "assistant"
    _KEYS: ClassVar[dict[str, str]] = {
        "time_created": "time.created",
        "time_completed": "time.completed",
    }
    _CONVERT: ClassVar[dict[str, Any]] = {"tokens": Tokens.from_data, "path": dict, "error": dict}

    def to_data(self) -> Json:
        return {"role": "assistant", **_Value.to_data(self)}

    @property
    def model(self) -> ModelRef:
        return ModelRef(self.provider_id, self.model_id)


Message = UserMessage | AssistantMessage


def message_from_data(data: Mapping[str, Any]) -> Message:
    cls = UserMessage if data.get("role") == "user" else AssistantMessage
    return cls.from_data(data)


def error_data(name: str, message: str, **extra: Any) -> Json:
    """OpenCode's NamedError shape: ``{"name": ..., "data": {"message": ..., ...}}``."""
    return {"name": name, "data": {"message": message, **extra}}


# --------------------------------------------------------------------------
# tool states


@dataclass(frozen=True, slots=True)
class ToolPending(_Value):
    input: Json = field(default_factory=dict)
    raw: str = ""
    status: ClassVar[str] = "pending"

    def to_data(self) -> Json:
        return {"status": self.status, **_Value.to_data(self)}


@dataclass(frozen=True, slots=True)
class ToolRunning(_Value):
    input: Json
    time_start: int
    title: str | None = None
    metadata: Json | None = None
    status: ClassVar[str] = "running"
    _KEYS: ClassVar[dict[str, str]] = {"time_start": "time.start"}
    _CONVERT: ClassVar[dict[str, Any]] = {"input": dict, "metadata": dict}

    def to_data(self) -> Json:
        return {"status": self.status, **_Value.to_data(self)}


@dataclass(frozen=True, slots=True)
class ToolCompleted(_Value):
    input: Json
    output: str
    title: str
    metadata: Json
    time_start: int
    time_end: int
    time_compacted: int | None = None  # the prune marker
    attachments: tuple | None = None
    status: ClassVar[str] = "completed"
    _KEYS: ClassVar[dict[str, str]] = {
        "time_start": "time.start",
        "time_end": "time.end",
        "time_compacted": "time.compacted",
    }
    _CONVERT: ClassVar[dict[str, Any]] = {"input": dict, "metadata": dict}

    def to_data(self) -> Json:
        return {"status": self.status, **_Value.to_data(self)}


@dataclass(frozen=True, slots=True)
class ToolError(_Value):
    input: Json
    error: str
    time_start: int
    time_end: int
    metadata: Json | None = None
    status: ClassVar[str] = "error"
    _KEYS: ClassVar[dict[str, str]] = {"time_start": "time.start", "time_end": "time.end"}
    _CONVERT: ClassVar[dict[str, Any]] = {"input": dict, "metadata": dict}

    def to_data(self) -> Json:
        return {"status": self.status, **_Value.to_data(self)}

    @property
    def interrupted(self) -> bool:
        return bool(self.metadata and self.metadata.get("interrupted"))


ToolState = ToolPending | ToolRunning | ToolCompleted | ToolError
_STATES = {c.status: c for c in (ToolPending, ToolRunning, ToolCompleted, ToolError)}


def tool_state_from_data(data: Mapping[str, Any]) -> ToolState:
    return _STATES[data["status"]].from_data(data)


# --------------------------------------------------------------------------
# parts


@dataclass(frozen=True, slots=True)
class _PartBase(_Value):
    id: str
    session_id: str
    message_id: str

    type: ClassVar[str] = ""

    def to_data(self) -> Json:
        return {"type": self.type, **_Value.to_data(self)}


@dataclass(frozen=True, slots=True)
class TextPart(_PartBase):
    text: str = ""
    synthetic: bool | None = None
    ignored: bool | None = None
    time_start: int | None = None
    time_end: int | None = None
    metadata: Json | None = None
    type: ClassVar[str] = "text"
    _KEYS: ClassVar[dict[str, str]] = {"time_start": "time.start", "time_end": "time.end"}
    _CONVERT: ClassVar[dict[str, Any]] = {"metadata": dict}


@dataclass(frozen=True, slots=True)
class ReasoningPart(_PartBase):
    text: str = ""
    time_start: int = 0
    time_end: int | None = None
    metadata: Json | None = None
    type: ClassVar[str] = "reasoning"
    _KEYS: ClassVar[dict[str, str]] = {"time_start": "time.start", "time_end": "time.end"}
    _CONVERT: ClassVar[dict[str, Any]] = {"metadata": dict}


@dataclass(frozen=True, slots=True)
class FilePart(_PartBase):
    mime: str = "application/octet-stream"
    url: str = ""
    filename: str | None = None
    source: Json | None = None
    type: ClassVar[str] = "file"
    _CONVERT: ClassVar[dict[str, Any]] = {"source": dict}


@dataclass(frozen=True, slots=True)
class ToolPart(_PartBase):
    call_id: str = ""
    tool: str = ""
    state: ToolState = ToolPending()
    metadata: Json | None = None
    type: ClassVar[str] = "tool"
    _CONVERT: ClassVar[dict[str, Any]] = {"state": tool_state_from_data, "metadata": dict}


@dataclass(frozen=True, slots=True)
class StepStartPart(_PartBase):
    snapshot: str | None = None
    type: ClassVar[str] = "step-start"


@dataclass(frozen=True, slots=True)
class StepFinishPart(_PartBase):
    reason: str = "stop"
    cost: float = 0.0
    tokens: Tokens = Tokens()
    snapshot: str | None = None
    metadata: Json | None = None  # ours: {"firstTokenMs", "latencyMs", "attempts"}
    type: ClassVar[str] = "step-finish"
    _CONVERT: ClassVar[dict[str, Any]] = {"tokens": Tokens.from_data, "metadata": dict}


@dataclass(frozen=True, slots=True)
class SnapshotPart(_PartBase):
    snapshot: str = ""
    type: ClassVar[str] = "snapshot"


@dataclass(frozen=True, slots=True)
class PatchPart(_PartBase):
    hash: str = ""
    files: tuple = ()
    type: ClassVar[str] = "patch"


@dataclass(frozen=True, slots=True)
class AgentPart(_PartBase):
    name: str = ""
    source: Json | None = None
    type: ClassVar[str] = "agent"
    _CONVERT: ClassVar[dict[str, Any]] = {"source": dict}


@dataclass(frozen=True, slots=True)
class CompactionPart(_PartBase):
    auto: bool = False
    overflow: bool | None = None
    tail_start_id: str | None = None
    type: ClassVar[str] = "compaction"
    _KEYS: ClassVar[dict[str, str]] = {"tail_start_id": "tail_start_id"}


@dataclass(frozen=True, slots=True)
class SubtaskPart(_PartBase):
    prompt: str = ""
    description: str = ""
    agent: str = ""
    model: ModelRef | None = None
    command: str | None = None
    type: ClassVar[str] = "subtask"
    _CONVERT: ClassVar[dict[str, Any]] = {"model": ModelRef.from_data}


@dataclass(frozen=True, slots=True)
class RetryPart(_PartBase):
    attempt: int = 1
    error: Json = field(default_factory=dict)
    time_created: int = 0
    time_next: int | None = (
        None  # when the retry was due (epoch ms): the wait is time.next - time.created
    )
    type: ClassVar[str] = "retry"
    _KEYS: ClassVar[dict[str, str]] = {"time_created": "time.created", "time_next": "time.next"}
    _CONVERT: ClassVar[dict[str, Any]] = {"error": dict}


PART_TYPES: dict[str, type[_PartBase]] = {
    c.type: c
    for c in (
        TextPart,
        ReasoningPart,
        FilePart,
        ToolPart,
        StepStartPart,
        StepFinishPart,
        SnapshotPart,
        PatchPart,
        AgentPart,
        CompactionPart,
        SubtaskPart,
        RetryPart,
    )
}
Part = (
    TextPart
    | ReasoningPart
    | FilePart
    | ToolPart
    | StepStartPart
    | StepFinishPart
    | SnapshotPart
    | PatchPart
    | AgentPart
    | CompactionPart
    | SubtaskPart
    | RetryPart
)


def part_from_data(data: Mapping[str, Any]) -> Part:
    return PART_TYPES[data["type"]].from_data(data)  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class UnknownPart(_PartBase):
    """A stored part this version cannot read: a type (or a tool state) a newer version wrote.

    ``data`` is its stored JSON without the three ids, kept exactly: ``to_data()`` gives it
    back, so storing the part again (a fork, an interrupted-tool fix, an export) changes
    nothing. It is shown as unknown and never sent to the model; ``problem`` says why it could
    not be read. ``type`` is ``"unknown"``; the stored type is :attr:`stored_type`.
    """

    data: Json = field(default_factory=dict)
    problem: str = ""
    type: ClassVar[str] = "unknown"

    @property
    def stored_type(self) -> str:
        return str(self.data.get("type") or "?")

    def to_data(self) -> Json:
        ids = {"id": self.id, "sessionID": self.session_id, "messageID": self.message_id}
        return {**self.data, **ids}

    @classmethod
    def from_data(cls, data: Mapping[str, Any], problem: str = "") -> UnknownPart:
        rest = {k: v for k, v in data.items() if k not in ("id", "sessionID", "messageID")}
        return cls(
            id=data["id"],
            session_id=data["sessionID"],
            message_id=data["messageID"],
            data=rest,
            problem=problem or f"unknown part type {rest.get('type')!r}",
        )


def read_part(data: Mapping[str, Any]) -> Part | UnknownPart:
    """``part_from_data``, or an :class:`UnknownPart` keeping ``data`` when this version cannot
    read it (an unknown type, an unknown tool status, a field of the wrong shape)."""
    try:
        return part_from_data(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return UnknownPart.from_data(data, _unreadable(data, err))


def _unreadable(data: Mapping[str, Any], err: Exception) -> str:
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in PART_TYPES:
        return f"unknown part type {kind!r}"
    return f"unreadable {kind} part ({type(err).__name__}: {err})"


@dataclass(frozen=True, slots=True)
class WithParts:
    """OpenCode's ``WithParts``: a message and its parts in id order."""

    info: Message
    parts: tuple[Part, ...] = ()

    def to_data(self) -> Json:
        return {"info": self.info.to_data(), "parts": [p.to_data() for p in self.parts]}


def replace(value, **changes):
    """``dataclasses.replace`` re-exported so callers need one import."""
    return dataclasses.replace(value, **changes)


Role = Literal["user", "assistant"]


def tool_status(part: ToolPart) -> str:
    """pending / running / completed / error / interrupted (a ToolError marked interrupted) /
    failed (completed, but the code it ran raised: see :func:`tool_error_class`)."""
    state = part.state
    if isinstance(state, ToolError) and state.interrupted:
        return "interrupted"
    if tool_error_class(part):
        return "failed"
    return state.status


def tool_error_class(part: ToolPart) -> str | None:
    """The exception class a completed call's code raised, else ``None``.

    The python tool completes a call whose code raised (its prints matter) and records the
    class in ``state.metadata["error"]``: every view shows such a call as failed, with the
    class as its badge (``SyntaxError``), and ``tool_call.failed`` counts it.
    """
    state = part.state
    if isinstance(state, ToolCompleted):
        error = (state.metadata or {}).get("error")
        if isinstance(error, str) and error:
            return error
    return None


def tool_label(part: ToolPart) -> str:
    """The badge text: the status, or the exception class of a failed call."""
    return tool_error_class(part) or tool_status(part)
