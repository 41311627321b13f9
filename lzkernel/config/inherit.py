"""Config inheritance: a config file's top-level ``base:`` names the file or files it extends.

    # configs/cartpole_rezero_gumbel.yaml
    base: cartpole_rezero.yaml          # relative to this file's directory
    run: {out_dir: runs/cartpole_rezero_gumbel}
    policy: {search_algorithm: gumbel}  # the rest of cartpole_rezero.yaml's policy section stays

The rules, in order:

1. ``base`` is a file name or a list of them, relative to the directory of the file that names
   them (or absolute). A base may have bases of its own (at most :data:`MAX_DEPTH` deep; a cycle
   is an error naming the chain).
2. The bases merge in the order listed, each over the previous; then the file itself over them.
3. Merging: two mappings merge key by key, recursively; anything else (a value, a list) replaces.
4. One exception: a role section whose ``name`` differs from the base's section replaces that
   section whole. The base's options belong to another component, which would refuse them.

What merges is plain data. Overrides (``a.b=v``, ``~a.b``) apply afterwards, and validation
after that. The run directory's ``config.yaml`` holds the result, so a resumed or evaluated run
never reads the bases again. Every problem is one :class:`~lzkernel.errors.ConfigError` line
naming the file and ``base``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lzkernel.errors import ConfigError

#: The top-level key that names a config's bases.
BASE_KEY = "base"
#: How many files a chain of bases may hold (a config, its base, that one's base, ...).
MAX_DEPTH = 16


def merge(under: Any, over: Any, where: str = "") -> Any:
    """``over`` merged onto ``under`` (rules 3 and 4; ``where`` is the dotted key of both, "" at
    the top), neither modified."""
    if not isinstance(under, dict) or not isinstance(over, dict):
        return over
    section = bool(where) and "." not in where  # a top-level section: run or a role
    if section and "name" in over and "name" in under and over["name"] != under["name"]:
        return dict(over)  # rule 4: another component, the base's options do not apply to it
    out = dict(under)
    for key, value in over.items():
        out[key] = merge(under[key], value, f"{where}.{key}" if where else str(key)) if key in under else value
    return out


def dotted_keys(tree: Any, where: str = "") -> list[str]:
    """Every dotted key of ``tree``, mappings and leaves alike: {a: {b: 1}} → [a, a.b]."""
    keys: list[str] = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            dotted = f"{where}.{key}" if where else str(key)
            keys += [dotted, *dotted_keys(value, dotted)]
    return keys


_NO_BASE = object()


def load_with_bases(path: Path, read: Callable[[Path], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree of ``path`` (``read``: one file's strict parse) with its bases merged under it,
    without ``base``; and, for every dotted key that a base set (not ``path`` itself), that base."""
    tree, origins = _load(path, read, ())
    return tree, {key: source for key, source in origins.items() if source != str(path)}


def _load(path: Path, read: Callable[[Path], dict[str, Any]],
          chain: tuple[Path, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    tree = read(path)
    bases = tree.pop(BASE_KEY, _NO_BASE)
    own = dict.fromkeys(dotted_keys(tree), str(path))
    if bases is _NO_BASE:
        return tree, own
    names = [bases] if isinstance(bases, str) else bases
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{path}: base: expected a config file name or a list of them, got {bases!r}")
    here = chain + (path.resolve(),)
    if len(here) >= MAX_DEPTH:  # its bases would make the chain longer than MAX_DEPTH files
        raise ConfigError(f"{path}: base: more than {MAX_DEPTH} configs deep ({' -> '.join(map(str, here))} -> ...)")
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in names:
        base = path.parent / name  # an absolute name stays as it is
        resolved = base.resolve()
        if resolved in here:
            cycle = " -> ".join(str(p) for p in (*here[here.index(resolved):], resolved))
            raise ConfigError(f"{path}: base: {name} makes a cycle ({cycle})")
        if not base.is_file():
            raise ConfigError(f"{path}: base: config file not found: {base}")
        try:
            merged, origins = _merged(merged, origins, *_load(base, read, here))
        except ConfigError as exc:  # a problem inside a base: say which file brought it in
            raise ConfigError(f"{path}: base: {exc}") from None
    for section, value in tree.items():
        if value is None and isinstance(merged.get(section), dict):
            raise ConfigError(f"{path}: {section}: an empty section would replace the whole {section} section of "
                              "its base; give the keys to change, or remove the line")
    return _merged(merged, origins, tree, own)


def _merged(under: dict[str, Any], under_origins: dict[str, str], over: dict[str, Any],
            over_origins: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """:func:`merge` of the trees; each key of the result comes from ``over`` where ``over`` has
    it, else from ``under``."""
    tree = merge(under, over)
    return tree, {k: over_origins.get(k) or under_origins[k] for k in dotted_keys(tree)}
