"""Check a model's tool-call arguments against the tool's JSON schema.

Decisions (documented for the model-facing contract):

* ``args`` must be a JSON object; anything else is a :class:`ToolFailure`.
* Required keys must be present and not ``null``.
* Unknown keys are **ignored** (dropped), as OpenCode's zod objects do: small
  models often add stray keys, and failing on them wastes a step. When a
  required key is missing, the error names the unknown keys that were given,
  so ``file_path`` instead of ``filePath`` is easy to fix.
* ``null`` for an optional key means "not given" (the key is dropped).
* Types are checked with light coercion a model commonly needs: integers and
  numbers from numeric strings (``"10"``), integral floats to integers
  (``10.0``), booleans from ``"true"``/``"false"``. ``bool`` is never accepted
  as a number. Array items and ``enum`` values are checked too.

Every failure message starts with ``<tool>: `` and says what to send instead.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ToolFailure

_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "array": "an array",
    "object": "an object",
}


def validate_args(name: str, schema: dict, args: Any) -> dict:
    """Return the validated (and lightly coerced) arguments, known keys only."""
    if not isinstance(args, dict):
        raise ToolFailure(f"{name}: arguments must be a JSON object, got {_json_type(args)}")
    props: dict = schema.get("properties") or {}
    required: list = list(schema.get("required") or [])
    unknown = [k for k in args if k not in props]

    missing = [k for k in required if args.get(k) is None]
    if missing:
        words = ", ".join(f"'{k}'" for k in missing)
        plural = "arguments" if len(missing) > 1 else "argument"
        msg = f"{name}: missing required {plural} {words}"
        if unknown:
            msg += f" (unknown arguments given: {', '.join(repr(k) for k in unknown)})"
        raise ToolFailure(msg)

    out: dict = {}
    for key, spec in props.items():
        if key in args and args[key] is not None:
            out[key] = _check(name, key, spec, args[key])
    return out


def _check(name: str, key: str, spec: dict, value: Any) -> Any:
    kind = spec.get("type")
    if isinstance(kind, list):  # a union (MCP servers' schemas): ["string", "null"] is a string
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None  # several types: left to the tool
    if kind is not None:
        value = _coerce(name, key, kind, value)
    if kind == "array" and isinstance(spec.get("items"), dict):
        value = [_check(name, f"{key}[{i}]", spec["items"], item) for i, item in enumerate(value)]
    if "enum" in spec and value not in spec["enum"]:
        choices = ", ".join(repr(c) for c in spec["enum"])
        raise ToolFailure(f"{name}: argument '{key}' must be one of {choices}, got {value!r}")
    return value


def _coerce(name: str, key: str, kind: str, value: Any) -> Any:
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
    if kind in ("integer", "number") and not isinstance(value, bool):
        number = _number(value)
        if number is not None:
            if kind == "number":
                return number
            if isinstance(number, int) or number.is_integer():
                return int(number)
    if kind == "array" and isinstance(value, list):
        return value
    if kind == "object" and isinstance(value, dict):
        return value
    word = _TYPE_WORDS.get(kind, kind)
    raise ToolFailure(
        f"{name}: argument '{key}' must be {word}, got {_json_type(value)} {_short(value)}"
    )


def _number(value: Any) -> int | float | None:
    """``value`` as a number if it is one or spells one, else ``None``."""
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
