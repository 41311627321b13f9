"""Entry point of the lzk_comm plugin: registers its components with lzkernel.

No torch import at module level: the factories import their backend modules when called.
"""
from __future__ import annotations

from typing import Any

from lzkernel import Component, hookimpl


def make_local(cfg: Any, run: Any = None) -> Any:
    """The single-process backend (rank 0 of 1)."""
    from lzk_comm.local import LocalComm

    return LocalComm()


@hookimpl
def lzkernel_register_comm_backends() -> list[Component]:
    return [
        Component("local", factory=make_local, config=None, doc="One process: rank 0, world size 1, identity collectives."),
    ]
