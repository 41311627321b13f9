"""Entry point of the lzk_comm plugin: registers its components with lzkernel.

No torch import at module level: the factories import their backend modules when called.

* ``local``   one process (the default);
* ``gloo``    ``torch.distributed`` on CPU, launched by ``lzkernel launch`` (or torchrun);
* ``nccl``    ``torch.distributed`` on one GPU per rank, launched by ``lzkernel launch`` (or torchrun);
* ``threads`` W ranks as threads of one process (tests; see :func:`lzk_comm.threads.run_ranks`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import Component, ConfigError, hookimpl, option


@dataclass
class TorchDistConfig:
    """Options of the ``gloo`` and ``nccl`` backends (rank and world size come from torchrun)."""

    timeout_s: float = option(
        120.0, doc="Deadline in seconds of the rendezvous and of every collective (torch's default is 30 min). "
                   "A rank that has not reached a collective this long after another is named as stopped "
                   "responding. The longest legitimate wait is rank 0 evaluating or saving while the others "
                   "wait (seconds to tens of seconds on CPU for the shipped configs).",
        min=0.0, min_exclusive=True)
    oversubscribe: bool = option(
        False, doc="gloo: allow more ranks on one machine than CPU cores (by default a config error: the "
                   "ranks would share cores and each run slower than one; for debugging).")


@dataclass
class ThreadsConfig:
    """Options of the in-process ``threads`` backend."""

    world_size: int = option(
        0, doc="Ranks; 0 takes the world of the enclosing lzk_comm.threads.run_ranks (1 outside it).", min=0)
    timeout_s: float = option(
        60.0, doc="Deadline in seconds of every collective (a world of one built outside run_ranks).",
        min=0.0, min_exclusive=True)


def make_local(cfg: Any, run: Any = None) -> Any:
    """The single-process backend (rank 0 of 1)."""
    from lzk_comm.local import LocalComm

    return LocalComm()


def make_gloo(cfg: TorchDistConfig, run: Any = None) -> Any:
    import os

    from lzk_comm.torch_dist import TorchDistComm
    from lzkernel.launch import check_cores

    # torchrun sets LOCAL_WORLD_SIZE (the ranks on this machine); lzkernel launch checked already.
    check_cores(int(os.environ.get("LOCAL_WORLD_SIZE") or 1), cfg.oversubscribe)
    return TorchDistComm("gloo", timeout_s=cfg.timeout_s)


def make_nccl(cfg: TorchDistConfig, run: Any = None) -> Any:
    from lzk_comm.torch_dist import TorchDistComm

    return TorchDistComm("nccl", timeout_s=cfg.timeout_s)


def make_threads(cfg: ThreadsConfig, run: Any = None) -> Any:
    from lzk_comm.threads import ThreadComm, ThreadGroup, current

    comm = current()
    if comm is not None:
        if cfg.world_size not in (0, comm.world_size):
            raise ConfigError(f"comm.world_size={cfg.world_size} but this thread runs rank {comm.rank} of "
                              f"run_ranks({comm.world_size}, ...)")
        return comm
    if cfg.world_size > 1:
        raise ConfigError(
            f"comm.name=threads with world_size={cfg.world_size} runs ranks as threads of one process and is "
            "started through lzk_comm.threads.run_ranks (tests, notebooks); from the command line use "
            "lzkernel launch --nproc N CONFIG comm.name=gloo")
    return ThreadComm(ThreadGroup(1, cfg.timeout_s), 0)


@hookimpl
def lzkernel_register_comm_backends() -> list[Component]:
    return [
        Component("local", factory=make_local, config=None, doc="One process: rank 0, world size 1, identity collectives."),
        Component("gloo", factory=make_gloo, config=TorchDistConfig,
                  doc="torch.distributed on CPU (gloo), initialised from torchrun's environment."),
        Component("nccl", factory=make_nccl, config=TorchDistConfig,
                  doc="torch.distributed on CUDA (NCCL), one GPU per rank (LOCAL_RANK), from torchrun's environment."),
        Component("threads", factory=make_threads, config=ThreadsConfig,
                  doc="W ranks as threads of one process with real collectives (lzk_comm.threads.run_ranks)."),
    ]
