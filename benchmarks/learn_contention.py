"""Does the learner's precision change how it suffers when other processes share the cores?

Issue 12 saw two bf16 runs take 0.7–1.7 s per update while other processes loaded the cores, ten
times the quiet figure. This times the CartPole MuZero learner step (batch 256, K = 5, the
shapes of ``benchmarks/mcts.py --learn``) in each precision, with T torch threads, first on a
quiet machine and then with N busy processes (a pure-Python spin loop each) running beside it:

    python benchmarks/learn_contention.py                        # threads 1 and 2, 0/1/2 busy processes
    python benchmarks/learn_contention.py --threads 2 --busy 0 1 --dtypes float32 bfloat16

It prints, per (dtype, threads, busy), the median and the maximum ms per step and the slowdown
against the quiet figure, and writes ``benchmarks/results/learn_contention.json``. bfloat16 is
timed only where the CPU multiplies it natively (``lzk_common.precision.native_bf16``) unless
named in ``--dtypes``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

from _results import write_results
from lzk_common.precision import cpu_flags, native_bf16
from mcts import learn_setup, time_learn_steps

_SPIN = "while True: pass"


def time_steps(dtype: str, threads: int, warmup: int, repeats: int) -> list[float]:
    """ms of each of ``repeats`` learner steps after ``warmup`` steps (alternating two batches)."""
    policy, batches = learn_setup(dtype, threads, n_batches=2)
    return time_learn_steps(policy, batches, warmup, repeats)[0]


def with_busy(n: int, fn: Any) -> Any:
    """Run ``fn()`` while ``n`` spinning Python processes compete for the cores."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]
    try:
        time.sleep(0.5 if n else 0.0)  # let the spinners get scheduled
        return fn()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="numbers of busy processes")
    ap.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dtypes = args.dtypes or (("float32", "bfloat16") if native_bf16("cpu") else ("float32",))

    rows: list[dict[str, Any]] = []
    for dtype in dtypes:
        for threads in args.threads:
            quiet = None
            for busy in sorted(args.busy):
                ms = with_busy(busy, lambda: time_steps(dtype, threads, args.warmup, args.repeats))
                med = statistics.median(ms)
                quiet = med if busy == 0 else quiet
                row = {"learn_dtype": dtype, "threads": threads, "busy_processes": busy,
                       "median_ms": round(med, 1), "max_ms": round(max(ms), 1),
                       "slowdown": round(med / quiet, 2) if quiet else None}
                rows.append(row)
                slow = f"{row['slowdown']:.1f}x quiet" if row["slowdown"] else "no quiet figure"
                print(f"{dtype:>8} threads={threads} busy={busy}: {med:7.1f} ms/step (max {max(ms):7.1f}), "
                      f"{slow}", flush=True)
    flags = cpu_flags()
    summary = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "flags": sorted(f for f in flags if f.startswith(("avx", "amx"))), "rows": rows}
    write_results(summary, "learn_contention.json", args.out)


if __name__ == "__main__":
    main()
