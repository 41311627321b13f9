"""Parsing YAML text strictly: safe tags only, no duplicate keys, a bounded alias expansion.

:func:`parse` is the one place the kernel turns YAML text into data (config files, dotted
override values, the config stored in a checkpoint). On top of ``yaml.SafeLoader`` it

* refuses a mapping that repeats a key, at any depth (PyYAML would silently keep the last one,
  so a second ``run:`` section would drop the first): the error names the key and both lines;
* reads booleans as YAML 1.2 does: only ``true`` and ``false`` (any case PyYAML knows: ``True``,
  ``FALSE``). YAML 1.1's ``yes``/``no``/``on``/``off``/``y``/``n`` stay strings, so a bool
  option given ``no`` is an error naming the key rather than a silent ``False``, and a string
  option given ``no`` (a country code, an opponent's name) keeps its text;
* bounds what anchors and aliases expand to. PyYAML shares the object an alias points to, so
  loading a "billion laughs" document is quick, but everything that walks the result (validation,
  ``yaml.safe_dump`` of the resolved config) visits every expanded value. The expanded size is
  counted once per distinct object (memoised, so the check itself is linear) and a document
  that expands to more than :data:`MAX_VALUES` values, or that contains itself through an alias,
  is refused.

Errors are :class:`yaml.YAMLError` subclasses carrying a mark (``line``/``column``) where one
is known, so callers report ``file:line:column`` exactly as for syntax errors.
"""
from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

#: Most values (scalars and containers, aliases expanded) one document may hold. Real configs
#: hold a few hundred; the budget is far above that and far below what makes a walk slow.
MAX_VALUES = 100_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate mapping keys."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked on the keys as written, before merge keys (``<<: *base``) are flattened in:
        # overriding a merged key is legitimate, repeating a written key is not.
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeConstructor reports it below
                    continue
                if first is not None:
                    raise ConstructorError(
                        None, None,
                        f"duplicate key {key!r} (first given at line {first + 1}); a key may appear "
                        "only once in a mapping",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
# YAML 1.2 booleans: SafeLoader's resolvers without its 1.1 bool rule, plus true/false only.
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in rules if tag != _BOOL_TAG]
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class AliasBombError(yaml.YAMLError):
    """The document expands (through aliases) beyond :data:`MAX_VALUES` values, or into itself."""


def expanded_size(data: Any, limit: int = MAX_VALUES) -> int:
    """Values in ``data`` with every alias expanded (a container counts 1 plus its contents).

    Memoised by object identity, so shared subtrees cost one visit; raises
    :class:`AliasBombError` past ``limit`` or on a cycle."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(obj: Any) -> int:
        if isinstance(obj, dict):
            children: Any = [*obj.keys(), *obj.values()]
        elif isinstance(obj, list):
            children = obj
        else:
            return 1
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise AliasBombError("the document contains itself through an alias (a recursive anchor)")
        active.add(key)
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                raise AliasBombError(
                    f"the document expands to more than {limit:,} values through anchors and aliases "
                    "(&name / *name); refusing it (a YAML alias bomb?)")
        active.discard(key)
        sizes[key] = total
        return total

    return size(data)


def parse(text: str) -> Any:
    """``text`` as plain data: safe tags only, no duplicate keys, bounded alias expansion."""
    data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    expanded_size(data)
    return data
