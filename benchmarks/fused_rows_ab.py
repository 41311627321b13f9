"""The fused row kernels of the learner's loss (``lzk_common.numba_rows``: the SSL negative cosine,
the soft cross-entropy of the value and reward supports) against torch's passes, inside real
learner steps: the CartPole MuZero learner at batch 256, K = 5, steps alternating one by one
between the fused path and the torch path in one process (the order flips every round), so both
see the same machine state; prints the median of the per-pair differences and its quartiles.

    python benchmarks/fused_rows_ab.py --dtype bfloat16 --kernels all --pairs 60

``--kernels cosine`` or ``ce`` switches one kernel family and leaves the other fused on both
sides. On a shared two-core machine single steps swing by ±20% from second to second: the
per-pair differences and their quartiles say whether a few milliseconds are real, where two
medians taken minutes apart do not.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from lzk_common import numba_rows
from mcts import learn_setup

# The kernels' checks the losses consult; the torch side replaces the chosen ones with "no".
CHECKS = {"cosine": "supported", "ce": "ce_supported"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--kernels", choices=("cosine", "ce", "all"), default="all")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    policy, batches = learn_setup(args.dtype, args.threads, n_batches=4)
    switched = list(CHECKS.values()) if args.kernels == "all" else [CHECKS[args.kernels]]
    fused: dict[str, Callable[..., bool]] = {name: getattr(numba_rows, name) for name in switched}

    def torch_only(*tensors: torch.Tensor) -> bool:
        return False

    def use(side: str) -> None:
        for name in switched:
            setattr(numba_rows, name, fused[name] if side == "fused" else torch_only)

    sides = ("fused", "torch")
    ms: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for i in range(6):  # warm-up: allocator, kernels compiled or loaded
            for side in sides:
                use(side)
                policy.learn(batches[i % len(batches)])
        for r in range(args.pairs):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                use(side)
                t0 = time.perf_counter()
                policy.learn(batches[r % len(batches)])
                ms[side].append((time.perf_counter() - t0) * 1e3)
    finally:
        use("fused")
    diff = [a - b for a, b in zip(ms["fused"], ms["torch"])]
    q1, _, q3 = statistics.quantiles(diff, n=4)
    print(f"{args.dtype}, kernels {args.kernels}, {args.threads} threads, {args.pairs} pairs: step median fused "
          f"{statistics.median(ms['fused']):.1f} ms, torch {statistics.median(ms['torch']):.1f} ms; "
          f"fused − torch per pair: median {statistics.median(diff):+.2f} ms (quartiles {q1:+.2f}, {q3:+.2f})")


if __name__ == "__main__":
    main()
