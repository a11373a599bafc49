"""Where an unknown config field belongs: a close name at its level ("did you mean"), or
the place the same name lives one level off (``subnet_id`` directly under ``provider``
is ``provider.network_interface.subnet_id``).

The names come from the models themselves, so a new field is suggested as soon as it
exists.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, get_args

from pydantic import BaseModel

# Path (field names from the model's root) -> the field names at that level.
FieldTree = Mapping[tuple[str, ...], frozenset[str]]


@cache
def field_tree(model: type[BaseModel]) -> FieldTree:
    """Every level of ``model`` and the models nested in its fields, by path."""
    tree: dict[tuple[str, ...], frozenset[str]] = {}

    def walk(level: type[BaseModel], path: tuple[str, ...]) -> None:
        if path in tree or len(path) > 4:
            return
        tree[path] = frozenset(level.model_fields)
        for name, info in level.model_fields.items():
            for nested in _models_in(info.annotation):
                walk(nested, (*path, name))

    walk(model, ())
    return tree


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def close_name(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a typo of, if any is close."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return found[0] if found else None


def hint(name: str, parent: tuple[str, ...], tree: FieldTree, root: str = "") -> str:
    """What to say after "unknown field" for ``name`` found at ``parent``: "" when there is
    nothing better to say."""
    close = close_name(name, tree.get(parent, ()))
    if close is not None:
        return f"did you mean {close}?"
    homes = sorted((path for path, names in tree.items() if name in names), key=len)
    if homes:
        return f"it lives at {'.'.join(filter(None, (root, *homes[0], name)))}"
    return ""
