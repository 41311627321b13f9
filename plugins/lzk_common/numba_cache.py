"""Loading compiled search kernels from numba's cache, never compiling them in a run's process.

Why: the fast-math kernels (:mod:`lzk_common.numba_mlp` and the algorithms' step kernels built on
it) give different float32 results in a process that compiled them than in processes that load
them from the cache (measured: a fused multiply-add contracted in one and not the other). Without
this a fixed seed gives one result on a fresh install and another in every later run. So when a
kernel's cache is cold, :func:`ensure_cached` compiles it into the cache in a subprocess first;
the run's process then loads it like every later run does. A subprocess that cannot write the
cache (a read-only install) changes nothing: every run then compiles in process, alike.
"""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger("lzkernel")

_WARMED: set[str] = set()  # warm entries run (or being run) from this process
_said = False  # whether this process has said that it compiles

#: The one line a process logs when it (or its warm-up subprocess) first compiles kernels.
COMPILING = ("compiling numba kernels (the first run after an install or a source change, 10-20 s; "
             "later runs load them from the cache)")


def say_compiling() -> None:
    """Log :data:`COMPILING`, once per process (a warm-up subprocess and in-process compiles
    alike: the user needs to hear it once)."""
    global _said
    if not _said:
        _said = True
        log.info(COMPILING)


def cache_is_warm(kernels: Sequence[Any]) -> bool:
    """Whether numba's on-disk cache holds every one of ``kernels`` (``@njit(cache=True)``
    dispatchers), newer than its defining source file (numba's own staleness rule)."""
    for kernel in kernels:
        source = Path(kernel.py_func.__code__.co_filename)
        cache = Path(kernel.stats.cache_path)
        index = list(cache.glob(f"{source.stem}.{kernel.py_func.__qualname__}-*.nbi"))
        if not index or max(p.stat().st_mtime for p in index) < source.stat().st_mtime:
            return False
    return True


_ANNOUNCER: Any = None  # the numba.core.event.Listener registered by announce_compiles


def announce_compiles() -> None:
    """Log once per process when numba first compiles something in it. A cold cache (the first
    run after an install or a source change) spends 10-20 s compiling the search kernels before
    the first collect shows anything; loading them from the cache fires no such event, so a warm
    run logs nothing. Idempotent (the kernel's run-start hook of this library calls it)."""
    global _ANNOUNCER
    if _ANNOUNCER is not None:
        return
    from numba.core import event

    class FirstCompile(event.Listener):
        def on_start(self, ev: Any) -> None:
            say_compiling()  # once; a flag, not unregister: numba is iterating its listeners here

        def on_end(self, ev: Any) -> None:
            pass

    _ANNOUNCER = FirstCompile()
    event.register("numba:compile", _ANNOUNCER)


def mark_warming(warm: str) -> None:
    """Called first by a warm entry: this process is the one that compiles (no recursion)."""
    _WARMED.add(warm)


def ensure_cached(kernels: Sequence[Any], warm: str) -> None:
    """Make this process load ``kernels`` from numba's cache rather than compile them: when one is
    cold, run ``warm`` ("module:function", a function that compiles them with the argument types
    searches use) in a subprocess first, and say so in the log (the progress line only says
    "starting": compiling is announced here, where it is known to happen). Once per ``warm`` per
    process; nothing to do when the kernels are already loaded here."""
    if warm in _WARMED or all(k.signatures for k in kernels):
        return
    _WARMED.add(warm)
    if not cache_is_warm(kernels):
        say_compiling()
        module, name = warm.split(":")
        subprocess.run([sys.executable, "-c", f"from {module} import {name}; {name}()"],
                       check=False, capture_output=True, timeout=600)


def act_once(policy: Any) -> None:
    """One collect-mode search of ``policy`` on zero observations of two envs: compiles its
    search kernels with the argument types every search uses (they do not depend on sizes)."""
    import numpy as np

    obs = np.zeros((2, *policy.env_obs_shape), np.float32)
    legal = np.ones((2, policy.num_actions), bool)
    policy.act(obs, legal, np.full(2, -1), mode="collect", env_ids=np.arange(2))
