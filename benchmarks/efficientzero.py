"""EfficientZero against MuZero on the same machine in one run: search time per case and learner
step at the same batch (the goals of issue 13: both at most 1.25× MuZero's).

The models are the CartPole configs' (latent 128, 601-atom supports, obs dim 4, A = 2; EfficientZero
with the LSTM of hidden 128 and horizon 5). Searches are collect-mode acts as a policy runs them
(root inference, root noise, S simulations, root statistics); MuZero and EfficientZero alternate
search by search (and step by step for the learner), so that load on a shared machine hits both
alike. Figures are medians after warm-up.

    python benchmarks/efficientzero.py                 # table, JSON to benchmarks/results/efficientzero.json
    python benchmarks/efficientzero.py --learn         # also the batch-256 learner steps
    python benchmarks/efficientzero.py --ez-torch      # also EfficientZero's torch search path
    python benchmarks/efficientzero.py --json          # the rows as JSON on stdout

Arithmetic per new search node (MACs, the CartPole sizes): MuZero's step ≈ 149k (dynamics 33k,
fc2 33k, prediction trunk 33k, reward/value/policy heads 51k); EfficientZero adds the LSTM cell,
2 × 128 × 512 = 131k, and nothing else (its value-prefix head replaces the reward head), i.e.
≈ 1.88× MuZero's network arithmetic. The learner step is dominated by the SSL projection heads
(1024 wide), where the LSTM adds a few percent.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np
import torch

from _results import write_results
from mcts import CASES, _learn_batch, perturb, time_acts
from lzk_efficientzero.config import EfficientZeroPolicyConfig
from lzk_efficientzero.policy import EfficientZeroPolicy
from lzk_muzero.config import MuZeroPolicyConfig
from lzk_muzero.policy import MuZeroPolicy
from lzk_replay.targets import value_prefix

GOAL_RATIO = 1.25


def _policy(algo: str, num_simulations: int, threads: int, backend: str = "numba") -> Any:
    """A CartPole policy of ``algo`` with its zero-initialised layers perturbed (non-uniform
    priors and values), seeded alike for both algorithms."""
    torch.manual_seed(0)
    cls, cfg_cls = ((MuZeroPolicy, MuZeroPolicyConfig) if algo == "muzero"
                    else (EfficientZeroPolicy, EfficientZeroPolicyConfig))
    cfg = cfg_cls(num_simulations=num_simulations, search_threads=threads, search_backend=backend)
    return perturb(cls(cfg, (4,), 2, seed=0))


def bench_search(batch: int, sims: int, threads: int, warmup: int, repeats: int, ez_torch: bool
                 ) -> dict[str, dict[str, float]]:
    """{label: {ms_per_search, min_ms, network_share, tree_ms}} for MuZero and EfficientZero
    (numba backends; and EfficientZero's torch path with ``ez_torch``), interleaved."""
    policies = {"muzero": _policy("muzero", sims, threads), "efficientzero": _policy("efficientzero", sims, threads)}
    if ez_torch:
        policies["efficientzero_torch"] = _policy("efficientzero", sims, threads, backend="torch")
    return time_acts(policies, batch, warmup, repeats)


def bench_learn(threads: int, warmup: int, repeats: int, batch: int = 256) -> dict[str, dict[str, float]]:
    """{algo: {ms_per_step, min_ms}}: learner steps at ``batch`` (K = 5), interleaved."""
    torch.set_num_threads(threads)
    policies = {a: _policy(a, 25, threads) for a in ("muzero", "efficientzero")}
    batches = [_learn_batch(batch, 5, seed) for seed in range(4)]
    for b in batches:  # what the game buffer adds for EfficientZero (horizon 5)
        b.target_value_prefix = value_prefix(b.target_reward, 5)
    ms: dict[str, list[float]] = {a: [] for a in policies}
    for i in range(warmup + repeats):
        for a, policy in policies.items():
            t0 = time.perf_counter()
            policy.learn(batches[i % len(batches)])
            if i >= warmup:
                ms[a].append((time.perf_counter() - t0) * 1e3)
    return {a: {"ms_per_step": statistics.median(x), "min_ms": min(x)} for a, x in ms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads during search (default 1)")
    parser.add_argument("--ez-torch", action="store_true", help="also time EfficientZero's torch search path")
    parser.add_argument("--learn", action="store_true", help="also time learner steps at batch 256")
    parser.add_argument("--learn-threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json-out", default=None, help="summary path (default benchmarks/results/efficientzero.json)")
    args = parser.parse_args()

    rows = []
    for batch, sims, _ in CASES:
        r = bench_search(batch, sims, args.threads, args.warmup, args.repeats, args.ez_torch)
        mz = r["muzero"]["ms_per_search"]
        for label, x in r.items():
            rows.append({"kind": "search", "batch": batch, "simulations": sims, "algo": label,
                         **{k: round(v, 3) for k, v in x.items()},
                         "ratio_to_muzero": round(x["ms_per_search"] / mz, 3)})
    if args.learn:
        r = bench_learn(args.learn_threads, warmup=3, repeats=max(5, args.repeats // 3))
        for label, x in r.items():
            rows.append({"kind": "learn", "batch": 256, "unroll_steps": 5, "threads": args.learn_threads,
                         "algo": label, **{k: round(v, 1) for k, v in x.items()},
                         "ratio_to_muzero": round(x["ms_per_step"] / r["muzero"]["ms_per_step"], 3)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'case':>14} {'algo':>20} {'ms':>9} {'min ms':>8} {'network':>8} {'× MuZero':>9}  goal <= {GOAL_RATIO}")
        for r in rows:
            case = f"{r['batch']} x {r['simulations']}" if r["kind"] == "search" else f"learn B={r['batch']}"
            ms = r.get("ms_per_search", r.get("ms_per_step"))
            share = f"{r['network_share']:>7.0%}" if "network_share" in r else f"{'':>7}"
            ok = "" if r["algo"] == "muzero" else ("ok" if r["ratio_to_muzero"] <= GOAL_RATIO else "--")
            print(f"{case:>14} {r['algo']:>20} {ms:>9.2f} {r['min_ms']:>8.2f} {share} {r['ratio_to_muzero']:>9.2f}  {ok}")
    if not args.json or args.json_out:  # --json alone keeps stdout pure JSON
        write_results({"goal_ratio": GOAL_RATIO, "search_threads": args.threads, "rows": rows}, "efficientzero.json",
                      args.json_out)


if __name__ == "__main__":
    main()
