"""Tree-only overhead of ``lzk_mcts.search``: ms per search with a dummy model step that
returns precomputed arrays, so the figures are the driver + numba kernels alone.

    .venv/bin/python benchmarks/mcts_tree.py [--repeats 200] [--json-out benchmarks/results/mcts_tree.json]

Each case runs one warm-up search first (numba JIT / cache load), then ``repeats`` timed
searches; the table gives the wall-clock median with its 10th/90th percentiles, and the
median process CPU time (steadier than wall time on a shared machine).
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from _results import write_results
from lzk_mcts import SearchConfig, StepOutput, search

#: (B roots, S simulations, A actions, ReZero reuse on every root)
CASES = [(8, 25, 2, False), (8, 50, 2, False), (64, 50, 2, False), (64, 50, 18, False), (64, 50, 2, True)]


def bench(batch: int, sims: int, actions: int, reuse: bool, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    rewards = np.zeros(batch, np.float32)
    values = rng.uniform(-1, 1, batch).astype(np.float32)
    logits = rng.normal(size=(batch, actions)).astype(np.float32)

    def step(parent_slot, action, child_slot):
        n = len(parent_slot)
        return StepOutput(rewards[:n], values[:n], logits[:n])

    root_logits = rng.normal(size=(batch, actions)).astype(np.float32)
    legal = np.ones((batch, actions), bool)
    to_play = np.full(batch, -1, np.int64)
    kw = dict(add_noise=True, deterministic=False)
    if reuse:
        kw.update(true_action=np.zeros(batch, np.int64), reuse_value=np.full(batch, 0.5, np.float32))
    cfg = SearchConfig(num_simulations=sims)
    search(step, root_logits, legal, to_play, cfg, rng, **kw)  # warm-up (JIT)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        res = search(step, root_logits, legal, to_play, cfg, rng, **kw)
        cpu.append((time.process_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    p10, p50, p90 = np.percentile(wall, [10, 50, 90])
    return {"B": batch, "S": sims, "A": actions, "reuse": reuse, "ms_median": p50, "ms_p10": p10, "ms_p90": p90,
            "cpu_ms_median": float(np.median(cpu)), "us_per_sim": p50 * 1e3 / sims,
            "inferences_per_sim": res.stats["search/inferences_per_sim"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json-out", default=None, help="summary path (default benchmarks/results/mcts_tree.json, "
                                                           "never replacing an existing one)")
    args = parser.parse_args()
    rows = [bench(*case, repeats=args.repeats) for case in CASES]
    print(f"{'B':>4} {'S':>4} {'A':>3} {'reuse':>5} {'ms/search':>10} {'p10':>7} {'p90':>7} {'cpu ms':>7} {'us/sim':>8} {'inf/sim':>8}")
    for r in rows:
        print(f"{r['B']:>4} {r['S']:>4} {r['A']:>3} {str(r['reuse']):>5} {r['ms_median']:>10.3f} {r['ms_p10']:>7.3f} "
              f"{r['ms_p90']:>7.3f} {r['cpu_ms_median']:>7.3f} {r['us_per_sim']:>8.1f} {r['inferences_per_sim']:>8.2f}")
    write_results({"machine": platform.processor() or platform.machine(), "rows": rows}, "mcts_tree.json", args.json_out)


if __name__ == "__main__":
    main()
