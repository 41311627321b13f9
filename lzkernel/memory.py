"""Freed heap memory stays in the process (``run.retain_freed_memory``).

A learner step allocates and frees the same large activations every step (the CartPole MuZero
step: dozens of [1280, 1024] float32 buffers, 5 MB each). glibc's malloc hands freed memory at
the top of the heap back to the OS once it exceeds its trim threshold (and serves large blocks by
``mmap``); where the activations sit at the top of the heap, each step then faults those pages
in again and zero-fills them. That happened in ``benchmarks/mcts.py`` (≈ 2,900 page faults per
CartPole learner step, 10–15% of its time on a 2-core VM) and not in CartPole runs, where other
live allocations sit above them (docs/algorithms/rezero.md): whether it happens depends on the
heap's layout. Raising both thresholds keeps the memory mapped after a free either way; the
resident size stays at the process's peak instead of shrinking between steps.

No torch import here: the kernel applies this before torch loads.
"""
from __future__ import annotations

import ctypes
import sys

#: Blocks up to this size come from the heap (reused after a free) rather than their own ``mmap``:
#: glibc's documented maximum on 64-bit systems (its dynamic threshold stops there too).
MMAP_THRESHOLD_BYTES = 32 << 20
#: Free memory at the top of the heap is returned to the OS only beyond this.
TRIM_THRESHOLD_BYTES = 1 << 30

# mallopt parameters (<malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def retain_freed_memory(libc: ctypes.CDLL | None = None) -> bool:
    """Set glibc malloc's mmap and trim thresholds (above) for this process. Returns whether both
    were applied: False off Linux, or where the C library has no ``mallopt`` or refuses a value
    (musl's ``mallopt`` is a stub that returns 0). ``libc``: the C library (default: this
    process's)."""
    if libc is None:
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(None)
        except OSError:
            return False
    try:
        mallopt = libc.mallopt
    except AttributeError:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The mmap threshold first: setting either one switches off glibc's dynamic thresholds.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
