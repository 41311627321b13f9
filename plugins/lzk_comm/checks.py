"""Argument checks every comm backend applies, so that code which runs fine in one process does
not first fail on a cluster."""
from __future__ import annotations

from typing import Any

import torch

#: Types ``broadcast_object`` accepts (containers checked recursively).
_PLAIN = (type(None), bool, int, float, str)


def check_plain(obj: Any, where: str = "obj") -> None:
    """Raise TypeError unless ``obj`` is None/bool/int/float/str or lists/tuples/dicts of them
    (dict keys: str). The same rule every backend applies, so objects that travel over a real
    transport also travel locally."""
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"broadcast_object: {where} has a non-string key {k!r}")
            check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(
        f"broadcast_object: {where} is a {type(obj).__name__}; only None, bool, int, float, str "
        "and lists/dicts of them can be broadcast"
    )


def check_tensor(tensor: Any, op: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{op}: expected a torch.Tensor, got {type(tensor).__name__}")


def check_src(src: int, world_size: int, op: str) -> None:
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < world_size:
        raise ValueError(f"{op}: src must be a rank in [0, {world_size}), got {src!r}")
