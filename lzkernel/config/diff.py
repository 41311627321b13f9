"""``lzkernel config A --diff B``: where two resolved configs differ, one line per key."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lzkernel.config.loader import load_config
from lzkernel.config.resume_check import config_changes, show_value
from lzkernel.errors import ConfigError
from lzkernel.registry import Registry


def diff_lines(this: Mapping[str, Any], other: str, registry: Registry) -> list[str]:
    """``KEY: THIS → OTHER`` for every key whose resolved value differs, "no differences" when
    none does. ``this``: a resolved config as plain data; ``other``: a config file, or a run or
    checkpoint directory (the resolved ``config.yaml`` it was written with). Defaults are filled
    in on both sides, so a key left out on one side and written with its default on the other is
    no difference. ConfigError (naming ``--diff``) when ``other`` cannot be read."""
    path = Path(other)
    if path.is_dir():
        path = path / "config.yaml"
        if not path.is_file():
            raise ConfigError(f"--diff {other}: a directory without config.yaml (not a run or checkpoint directory)")
    try:
        that = load_config(path, [], registry).to_dict()
    except ConfigError as exc:
        raise ConfigError(f"--diff {other}: {exc}") from None
    changes = config_changes(this, that)
    return [f"{key}: {show_value(a, 80)} → {show_value(b, 80)}" for key, a, b in changes] or ["no differences"]
