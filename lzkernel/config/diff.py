"""``lzkernel config A --diff B``: where two resolved configs differ, one line per key.

Exit status as ``diff``'s: 0 when the configs are the same, 1 when they differ (2 stays a
configuration error). B may be a sweep's directory (``lzkernel run --seeds``): A is compared
with every seed's config, and a key whose value differs from seed to seed (``run.seed``,
``run.out_dir``) shows each seed's value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lzkernel.config.loader import load_config
from lzkernel.config.redact import redact_tree
from lzkernel.config.resume_check import config_changes, show_value
from lzkernel.errors import ConfigError
from lzkernel.registry import Registry

#: Seeds' values shown on a line before the rest is counted.
MAX_SEEDS_SHOWN = 5


def _resolved(path: Path, other: str, registry: Registry) -> dict[str, Any]:
    try:
        return load_config(path, [], registry).to_dict()
    except ConfigError as exc:
        raise ConfigError(f"--diff {other}: {exc}") from None


def _others(other: str, registry: Registry) -> dict[str, dict[str, Any]]:
    """The configs to compare with, by label: one for a file or a run directory ("": no label),
    one per seed (``seed_S``) for a sweep's directory."""
    from lzkernel.sweep import sweep_runs

    path = Path(other)
    if not path.is_dir():
        return {"": _resolved(path, other, registry)}
    if (path / "config.yaml").is_file():
        return {"": _resolved(path / "config.yaml", other, registry)}
    runs = sweep_runs(path)
    if not runs:
        raise ConfigError(f"--diff {other}: a directory without config.yaml (not a run, checkpoint or sweep directory)")
    return {d.relative_to(path).as_posix(): _resolved(d / "config.yaml", other, registry) for d in runs}


def diff_lines(this: Mapping[str, Any], other: str, registry: Registry) -> list[str]:
    """``KEY: THIS → OTHER`` for every key whose resolved value differs; [] when none does.

    ``this``: a resolved config as plain data; ``other``: a config file, a run or checkpoint
    directory (the resolved ``config.yaml`` it was written with) or a sweep's directory (module
    docstring: ``KEY: THIS → seed_0: V0, seed_1: V1, ...`` where the seeds differ). Defaults are
    filled in on both sides, so a key left out on one side and written with its default on the
    other is no difference. ConfigError (naming ``--diff``) when ``other`` cannot be read."""
    others = {label: redact_tree(that) for label, that in _others(other, registry).items()}
    this = redact_tree(this)
    per_key: dict[str, tuple[Any, dict[str, Any]]] = {}
    for label, that in others.items():
        for key, a, b in config_changes(this, that):
            per_key.setdefault(key, (a, {}))[1][label] = b
    lines = []
    for key in sorted(per_key):
        a, theirs = per_key[key]
        values = [theirs.get(label, a) for label in others]  # a seed without the change has this side's value
        if all(v == values[0] for v in values):
            lines.append(f"{key}: {show_value(a, 80)} → {show_value(values[0], 80)}")
            continue
        shown = [f"{label}: {show_value(v, 60)}" for label, v in zip(others, values)]
        more = len(shown) - MAX_SEEDS_SHOWN
        lines.append(f"{key}: {show_value(a, 80)} → " + ", ".join(shown[:MAX_SEEDS_SHOWN])
                     + (f", ... ({more} more)" if more > 0 else ""))
    return lines
