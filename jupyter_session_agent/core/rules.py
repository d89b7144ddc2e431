"""Permission rules: allow / ask / deny, last match wins (OpenCode's ``PermissionNext``
rules), and the rules a notebook user gets without configuring anything (:func:`defaults`).

The rules are pure (no I/O, no clocks). A rule is ``{permission, pattern, action}``; a
ruleset is a sequence of rules; :func:`evaluate` takes the **last** rule whose
permission glob and pattern glob both match, and ``ask`` when none does.
Globs follow OpenCode's ``Wildcard.match``: ``*`` is any text (``/``
included), ``?`` one character, anchored at both ends, ``.`` matching
newlines, backslashes read as ``/``, and a trailing ``" *"`` optional
(``"ls *"`` matches ``"ls"``). Asking and replying is :mod:`.permission`'s.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from .asks import (
    EDIT_TOOLS,
    KERNEL_READ_TOOLS,
    NOTEBOOK_EDIT,
    NOTEBOOK_RUN,
    READ_TOOLS,
    permission_of,
    real_path,
)
from .errors import ConfigError, UsageError
from .sensitive import NOT_SENSITIVE, SENSITIVE_PATTERNS

Action = Literal["allow", "ask", "deny"]
ACTIONS: tuple[str, ...] = ("allow", "ask", "deny")


def permission_name(name: str) -> str:
    """A permission named by a user: the edit family (and ``notebook_edit``) becomes
    ``edit``; ``list``, ``glob`` and ``grep`` are refused because their calls ask ``read``,
    and ``notebook_run`` because it asks ``python`` (a rule for them would never match, and
    mapping them would change every read or every python call)."""
    name = str(name).strip()
    if name in EDIT_TOOLS or name == NOTEBOOK_EDIT:
        return "edit"
    if name == NOTEBOOK_RUN:  # a rule for it would never match; python's would change too
        raise ConfigError(
            f"{name} asks the python permission (it runs the cell's code) — write the rule "
            'for python, e.g. %agent permit python "*" deny'
        )
    if name in READ_TOOLS and name != "read" or name in KERNEL_READ_TOOLS:
        raise ConfigError(
            f"{name} asks the read permission — write the rule for read, e.g. "
            f'%agent permit read "/data/*" deny'
        )
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
    def of(cls, value: Rule | Mapping[str, Any]) -> Rule:
        """A Rule from a Rule or a ``{permission, pattern, action}`` mapping (validated)."""
        if isinstance(value, Rule):
            return value
        try:
            rule = cls(
                str(value["permission"]), str(value.get("pattern", "*")), str(value["action"])
            )
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"a permission rule needs permission, pattern and action; got {value!r}"
            ) from None
        _check_action(rule.action, rule.permission)
        return rule


Ruleset = Sequence[Rule]


def _check_action(action: Any, where: str) -> None:
    if action not in ACTIONS:
        raise ConfigError(
            f"permission {where!r}: action must be allow, ask or deny, not {action!r} — "
            'e.g. %config AgentMagics.permission = {"bash": "allow"}'
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


def from_config(
    config: Mapping[str, Any] | str | None, *, home: str | None = None
) -> tuple[Rule, ...]:
    """``{perm: action | {pattern: action}}`` (or one action for everything) → rules, key order kept."""
    if config is None:
        return ()
    if isinstance(config, str):
        config = {"*": config}
    if not isinstance(config, Mapping):
        raise ConfigError(
            f'permission must be a dict like {{"bash": "allow", "edit": {{"*.py": "allow"}}}}, '
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
            raise ConfigError(
                f"permission {key!r}: use an action or a {{pattern: action}} dict, not {value!r}"
            )
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


def disabled(
    tools: Iterable[str],
    ruleset: Iterable[Rule | Mapping[str, Any]],
    *bounds: Iterable[Rule | Mapping[str, Any]],
) -> set[str]:
    """Tools to hide from the model: the last rule for their permission is a ``*`` deny
    (in ``ruleset`` or in any of ``bounds``, the rules of a subagent's parents)."""
    tools = list(tools)
    hidden: set[str] = set()
    for rules in (merge(ruleset), *(merge(b) for b in bounds)):
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
        raise UsageError(
            f"bad permission rule {text!r} — use TOOL=allow|ask|deny or TOOL:PATTERN=allow|ask|deny"
        )
    tool, colon, pattern = left.partition(":")
    try:
        name = permission_name(tool)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return Rule(name, expand(pattern.strip()) if colon and pattern.strip() else "*", action)


# --------------------------------------------------------------------------
# defaults


def defaults(
    *, data_dir: str | os.PathLike | None = None, sandboxed: bool = False
) -> tuple[Rule, ...]:
    """What a notebook user gets without configuring anything.

    Reading is allowed, except the sensitive paths (``core/sensitive.py``: ``.env`` files,
    private keys, ``~/.ssh``, ``~/.aws``, ``.netrc``, …), which ask (``.env.example`` does
    not); running code (``python``, ``bash``) and changing files (``edit``, which ``write``
    follows) ask; paths outside the session directory ask, except the saved tool outputs; a
    repeated identical call (``doom_loop``) asks. ``sandboxed``: bash commands run in the OS
    sandbox (``tools/sandbox.py``), which contains their effects, so ``bash`` is allowed (a
    rule after the defaults still asks or denies).
    """
    rules = [
        Rule("*", "*", "ask"),
        Rule("read", "*", "allow"),
        *(Rule("read", pattern, "ask") for pattern in SENSITIVE_PATTERNS),
        *(Rule("read", pattern, "allow") for pattern in NOT_SENSITIVE),
        Rule("recall", "*", "allow"),  # memory search: reads only this history and the memory notes
        Rule("edit", "*", "ask"),
        Rule("bash", "*", "allow" if sandboxed else "ask"),
        Rule("python", "*", "ask"),
        Rule("external_directory", "*", "ask"),
        Rule("doom_loop", "*", "ask"),
    ]
    if data_dir is not None:
        for root in dict.fromkeys([str(data_dir).replace("\\", "/"), real_path(str(data_dir))]):
            output_dir = posixpath.join(root, "tool-output")
            rules.append(Rule("external_directory", output_dir + "/*", "allow"))
    return tuple(rules)


__all__ = [
    "ACTIONS",
    "Action",
    "Rule",
    "defaults",
    "disabled",
    "evaluate",
    "expand",
    "from_config",
    "from_data",
    "match",
    "merge",
    "parse_rule",
    "permission_name",
]
