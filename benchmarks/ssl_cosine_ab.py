"""The fused SSL negative cosine (``lzk_common.numba_rows``) against torch's passes, inside real
learner steps: the CartPole MuZero learner at batch 256, K = 5, steps alternating one by one
between the fused path and the torch path in one process (the order flips every round), so both
see the same machine state; prints the median of the per-pair differences and its quartiles.

    python benchmarks/ssl_cosine_ab.py --dtype bfloat16 --pairs 60

On a shared two-core machine single steps swing by ±20% from second to second: the per-pair
differences and their quartiles say whether a few milliseconds are real, where two medians
taken minutes apart do not.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lzk_common import numba_rows
from mcts import learn_setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    policy, batches = learn_setup(args.dtype, args.threads, n_batches=4)
    fused_supported = numba_rows.supported

    def torch_only(*tensors: torch.Tensor) -> bool:
        return False

    sides = {"fused": fused_supported, "torch": torch_only}
    for i in range(6):  # warm-up: allocator, kernels compiled or loaded
        for check in sides.values():
            numba_rows.supported = check
            policy.learn(batches[i % len(batches)])
    ms: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for r in range(args.pairs):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                numba_rows.supported = sides[name]
                t0 = time.perf_counter()
                policy.learn(batches[r % len(batches)])
                ms[name].append((time.perf_counter() - t0) * 1e3)
    finally:
        numba_rows.supported = fused_supported
    diff = [a - b for a, b in zip(ms["fused"], ms["torch"])]
    q1, _, q3 = statistics.quantiles(diff, n=4)
    print(f"{args.dtype}, {args.threads} threads, {args.pairs} pairs: step median fused "
          f"{statistics.median(ms['fused']):.1f} ms, torch {statistics.median(ms['torch']):.1f} ms; "
          f"fused − torch per pair: median {statistics.median(diff):+.2f} ms (quartiles {q1:+.2f}, {q3:+.2f})")


if __name__ == "__main__":
    main()
