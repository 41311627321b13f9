"""Typed config schemas: dataclasses whose fields carry a doc string and a valid range.

A component's schema is a plain dataclass. Declare each field with :func:`option` so that it has
a doc string (shown by ``lzkernel config --explain`` and the docs) and, where it matters, bounds::

    @dataclass
    class MyPolicyConfig:
        lr: float = option(3e-3, doc="Adam learning rate.", min=0.0, min_exclusive=True)
        num_simulations: int = option(25, doc="MCTS simulations per move.", min=1)

:func:`validate` turns a YAML mapping into an instance, collecting every problem (unknown keys
with a did-you-mean, wrong types, out-of-range values) instead of stopping at the first.
YAML 1.1 traps are handled by type: a float field accepts ``3e-4`` (which PyYAML reads as a
string) and ints; an int field rejects bools and floats with a fractional part; a bool field
accepts only real booleans.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

_MISSING = dataclasses.MISSING


def option(
    default: Any = _MISSING,
    *,
    doc: str,
    min: float | None = None,  # noqa: A002 - reads best at the call site
    max: float | None = None,  # noqa: A002
    min_exclusive: bool = False,
    max_exclusive: bool = False,
    choices: typing.Sequence[Any] | None = None,
    default_factory: typing.Callable[[], Any] | None = None,
) -> Any:
    """Declare a config field with its documentation and constraints (a ``dataclasses.field``)."""
    meta = {
        "doc": doc,
        "min": min,
        "max": max,
        "min_exclusive": min_exclusive,
        "max_exclusive": max_exclusive,
        "choices": tuple(choices) if choices is not None else None,
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_doc(schema: type, name: str) -> str:
    """The doc string declared for field ``name`` of ``schema`` (empty if none)."""
    for f in dataclasses.fields(schema):
        if f.name == name:
            return str(f.metadata.get("doc", ""))
    raise KeyError(name)


def suggest(word: str, candidates: typing.Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{key}: {message}")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _coerce(value: Any, tp: Any, key: str, problems: _Problems) -> Any:
    """Check ``value`` against type ``tp``; return the (possibly converted) value."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _coerce(value, non_none[0], key, problems)
        for arg in non_none:  # first member that accepts the value without complaint
            trial = _Problems()
            out = _coerce(value, arg, key, trial)
            if not trial.items:
                return out
        problems.add(key, f"expected {_type_name(tp)}, got {value!r}")
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed if a == value):
            problems.add(key, f"expected one of {list(allowed)}, got {value!r}{suggest(str(value), map(str, allowed))}")
        return value
    if origin in (list, tuple):
        args = get_args(tp)
        if not isinstance(value, (list, tuple)):
            problems.add(key, f"expected a list, got {type(value).__name__} {value!r}")
            return value
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                problems.add(key, f"expected a list of {len(args)} items, got {len(value)}")
                return value
            return tuple(_coerce(v, a, f"{key}[{i}]", problems) for i, (v, a) in enumerate(zip(value, args)))
        item_tp = args[0] if args else Any
        out = [_coerce(v, item_tp, f"{key}[{i}]", problems) for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            problems.add(key, f"expected a mapping, got {type(value).__name__} {value!r}")
            return value
        args = get_args(tp)
        val_tp = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, val_tp, f"{key}.{k}", problems) for k, v in value.items()}
    if _is_dataclass_type(tp):
        if not isinstance(value, dict):
            problems.add(key, f"expected a mapping, got {type(value).__name__} {value!r}")
            return value
        return _build(tp, value, key, problems)
    if tp is bool:
        if not isinstance(value, bool):
            problems.add(key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool):
            problems.add(key, f"expected an integer, got boolean {value!r}")
        elif isinstance(value, int):
            return value
        elif isinstance(value, float) and value.is_integer():
            return int(value)  # 1e5 written as 100000.0
        elif isinstance(value, str) and _looks_numeric(value) and float(value).is_integer():
            return int(float(value))  # PyYAML reads 1e5 as the string '1e5'
        else:
            problems.add(key, f"expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool):
            problems.add(key, f"expected a number, got boolean {value!r}")
        elif isinstance(value, (int, float)):
            return float(value)
        elif isinstance(value, str) and _looks_numeric(value):
            return float(value)  # PyYAML (YAML 1.1) reads 3e-4 as a string
        else:
            problems.add(key, f"expected a number, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            problems.add(key, f"expected a string, got {type(value).__name__} {value!r}")
        return value
    return value


_YAML11_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _looks_numeric(text: str) -> bool:
    """True for the numbers PyYAML (YAML 1.1) leaves as strings: ``3e-4``, ``1e5``. A quoted
    ``"50"`` is a string the user wrote on purpose and is rejected where a number is expected."""
    return bool(_YAML11_EXPONENT.match(text.strip()))


def _check_range(value: Any, meta: typing.Mapping[str, Any], key: str, problems: _Problems) -> None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        problems.add(key, f"expected one of {list(choices)}, got {value!r}{suggest(str(value), map(str, choices))}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None:
        if meta.get("min_exclusive") and not value > lo:
            problems.add(key, f"must be > {lo}, got {value}")
        elif not meta.get("min_exclusive") and not value >= lo:
            problems.add(key, f"must be >= {lo}, got {value}")
    if hi is not None:
        if meta.get("max_exclusive") and not value < hi:
            problems.add(key, f"must be < {hi}, got {value}")
        elif not meta.get("max_exclusive") and not value <= hi:
            problems.add(key, f"must be <= {hi}, got {value}")


def _build(schema: type, data: typing.Mapping[str, Any], prefix: str, problems: _Problems) -> Any:
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    for k in data:
        if k not in fields:
            problems.add(f"{prefix}.{k}" if prefix else str(k), f"unknown key{suggest(str(k), fields)}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:  # type: ignore[misc]
                problems.add(key, "missing required key")
            continue
        before = len(problems.items)
        value = _coerce(data[name], hints.get(name, Any), key, problems)
        if len(problems.items) == before:
            _check_range(value, f.metadata, key, problems)
        kwargs[name] = value
    if problems.items:
        return None
    instance = schema(**kwargs)
    check = getattr(instance, "validate", None)
    if callable(check):  # cross-field rules: a list of messages keyed by field
        for field_name, message in check() or []:
            problems.add(f"{prefix}.{field_name}" if prefix else field_name, message)
    return instance


def validate(schema: type, data: typing.Mapping[str, Any], prefix: str = "") -> tuple[Any, list[str]]:
    """Build ``schema`` from ``data``. Returns ``(instance or None, problems)``.

    ``prefix`` is the dotted path of ``data`` in the whole config (``policy``), used in messages.
    A schema may define ``validate(self) -> list[tuple[field, message]]`` for cross-field rules.
    """
    problems = _Problems()
    instance = _build(schema, data, prefix, problems)
    return (instance if not problems.items else None), problems.items


def to_dict(instance: Any) -> Any:
    """A dataclass instance (recursively) as plain YAML-friendly data."""
    if dataclasses.is_dataclass(instance) and not isinstance(instance, type):
        return {f.name: to_dict(getattr(instance, f.name)) for f in dataclasses.fields(instance)}
    if isinstance(instance, (list, tuple)):
        return [to_dict(v) for v in instance]
    if isinstance(instance, dict):
        return {k: to_dict(v) for k, v in instance.items()}
    return instance


class _Required:
    """The default of a field that has none (the config must give it)."""

    def __repr__(self) -> str:
        return "(required)"


#: What :func:`describe` gives as the default of a required field; its repr is ``(required)``.
REQUIRED: Any = _Required()


def describe(schema: type, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """Rows ``(dotted key, type, default, doc)`` of a schema, nested dataclasses flattened
    (a required field's default is :data:`REQUIRED`)."""
    rows: list[tuple[str, str, Any, str]] = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints.get(f.name, Any)
        if f.default is not _MISSING:
            default: Any = f.default
        elif f.default_factory is not _MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = REQUIRED
        if _is_dataclass_type(tp):
            rows.extend(describe(tp, key))
        else:
            rows.append((key, _type_name(tp), to_dict(default), str(f.metadata.get("doc", ""))))
    return rows
