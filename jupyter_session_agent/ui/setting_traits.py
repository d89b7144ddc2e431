"""The ``%config`` traits of ``AgentMagics``, generated from the settings' one declaration.

``core/settings.py`` declares every setting as a dataclass field (type, default, spec, doc);
:func:`setting_trait` turns one into a trait of that type with that default and the doc as its
help, the spec riding along as metadata (``AgentMagics`` checks every assignment with it).
:func:`drop_refused` removes the values a shell's config holds that the spec refuses, so a
refused ``%config`` line or ``ipython_config.py`` entry never breaks the next ``%load_ext``.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Float, Int, List, TraitError, TraitType, Unicode, Union

from ..core.errors import ConfigError
from ..core.settings import SettingInfo, check_setting


class SettingError(ConfigError, TraitError):
    """A setting refused on assignment: one line saying what is allowed; the old value stays.

    A ``TraitError`` too, so traitlets rolls a ``%config`` assignment back."""


class _Number(Float):
    """A ``Float`` setting that leaves ``True``/``False`` as they are (``Float`` casts them to
    1.0/0.0), so the setting's check refuses them as it does for every other number."""

    def validate(self, obj, value):
        return value if isinstance(value, bool) else super().validate(obj, value)


class _Names(List):
    """A ``List(Unicode())`` setting that leaves a string as it is (``List`` wraps it in a
    list), so ``tools = "python"`` is refused by the setting's check as the Python API
    refuses it."""

    def set(self, obj, value):
        return super(List, self).set(obj, value)


def _typed_trait(hint: Any, **kwargs: Any) -> TraitType:
    """The trait for a field annotation: ``str``/``Path`` → ``Unicode``, ``int`` → ``Int``,
    ``float`` → a number, ``bool`` → ``Bool``, a mapping → ``Dict``, a list or tuple of
    strings → a list of ``Unicode``, a nested settings dataclass → ``Dict``; ``X | None`` allows ``None``, ``X | Y`` is a ``Union``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) < len(typing.get_args(hint)):
            kwargs["allow_none"] = True
        if len(members) == 1:
            return _typed_trait(members[0], **kwargs)
        return Union([_typed_trait(m) for m in members], **kwargs)
    kind = typing.get_origin(hint) or hint
    if kind is bool:
        return Bool(**kwargs)
    if kind is int:
        return Int(**kwargs)
    if kind is float:
        return _Number(**kwargs)
    if kind in (str, Path):
        return Unicode(**kwargs)
    if isinstance(kind, type) and (issubclass(kind, Mapping) or dataclasses.is_dataclass(kind)):
        return Dict(**kwargs)  # a nested setting (compaction, …) is set as a dict of its keys
    if kind in (list, tuple):
        return _Names(Unicode(), **kwargs)
    raise TypeError(f"no trait for a setting of type {hint!r} — add one to _typed_trait")


def setting_trait(info: SettingInfo) -> TraitType:
    """The ``%config`` trait of one declared setting: its type, default and help; the spec
    that checks it rides along as metadata."""
    trait = _typed_trait(info.type, default_value=copy.deepcopy(info.default), help=info.help)
    return trait.tag(config=True, spec=info.spec)


def check_assignment(name: str, value: Any, spec: Any) -> Any:
    """``value`` if setting ``name`` allows it, else the one-line :class:`SettingError`."""
    try:
        return check_setting(name, value, spec=spec)
    except ConfigError as err:
        raise SettingError(str(err)) from None


def _sections(config, cls) -> list:
    """The sections of ``config`` that configure ``cls`` (its name and its bases')."""
    if config is None:
        return []
    names = [c.__name__ for c in cls.mro() if hasattr(c, "class_trait_names")]
    return [config[n] for n in names if n in config]


def drop_refused(cls, config) -> list[str]:
    """Remove the values in ``config`` a new ``cls`` would refuse; one message for each.

    The shell's config holds what ``ipython_config.py`` set, and every ``%config`` line, refused
    or not (the shell merges it after the magics refused it): without this, a refused value
    would make the next ``%load_ext``/``%reload_ext`` fail."""
    messages = []
    traits = cls.class_traits(config=True)
    for section in _sections(config, cls):
        for name in [n for n in list(section) if n in traits]:
            value, trait = section[name], traits[name]
            if not isinstance(value, (str, int, float, bool, dict, list, tuple, type(None))):
                continue  # a lazy value: traitlets resolves it against the default
            try:
                check_setting(name, value, spec=trait.metadata["spec"])
            except ConfigError as err:
                messages.append(str(err))
                del section[name]
    return messages
