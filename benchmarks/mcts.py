"""Search speed: the CartPole MuZero MLP (latent 128, 601-atom supports, obs dim 4, A = 2)
searched by ``lzk_mcts`` through ``lzk_muzero``'s inference adapter, against LightZero.

For each case (B roots × S simulations) it times one collect-mode search as a policy runs it:
root inference, root noise, S simulations (one batched model call each), root statistics; the
figure is the median over ``--repeats`` searches after ``--warmup`` ones. ``network share`` is
the time inside the model calls (root and recurrent inference, including the decoding of
reward/value to scalars) over the whole search. LightZero's figures (13 / 26 / 45 ms) were
measured on the same 2-core machine; the goal is half of them with a network share >= 75%.

    python benchmarks/mcts.py            # table
    python benchmarks/mcts.py --json     # [{"batch", "simulations", "ms_per_search", "network_share",
                                         #   "lightzero_ms", "goal_ms", "backend", ...}, ...]
    python benchmarks/mcts.py --backend both   # numba and torch, interleaved
    python benchmarks/mcts.py --learn    # also: learner step at batch 256 (float32; bfloat16 too on AMX/AVX-512 BF16 CPUs), with
                                         #   its matmul GMAC (forward + backward), the rate achieved, and the
                                         #   same matmuls timed alone: the machine's peak for the learner's
                                         #   shapes and the step's share of it (goal: >= 85% float32, 50% bf16),
                                         #   timed apart and interleaved (step, matmuls alone, step, ...: the figure
                                         #   judged, since both sides then see the same load)

Backends (``policy.search_backend``): ``numba`` (the default: one compiled call per simulation,
:mod:`lzk_muzero.numba_mlp`) or ``torch`` (the reference path); ``--backend both`` alternates the
two search by search in one process, so that load on a shared machine hits both alike. The first
run after a change to the numba code compiles it (~6 s of CPU, then cached in ``__pycache__``);
warm-up searches keep that out of the figures.

Memory: like ``lzkernel run`` (``run.retain_freed_memory``), the benchmark keeps freed memory in
the process, so the learner's activations are not page-faulted in again every step;
``--malloc-defaults`` measures with glibc's default thresholds instead.

Threads: searches run with one torch thread (``policy.search_threads: 1``, the default): the
matmuls are [B, 128]-sized, and on two shared cores a second OpenMP thread made searches 2-10×
slower in our measurements. ``--threads`` overrides it for experiments.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from gemm_peak import interleaved_share, matmul_profile
from lzk_common.precision import native_bf16
from lzkernel.memory import retain_freed_memory
from lzk_muzero.config import MuZeroPolicyConfig
from lzk_muzero.policy import MuZeroPolicy

#: (batch, simulations, LightZero's ms per search on this machine)
CASES = [(8, 25, 13.0), (8, 50, 26.0), (64, 50, 45.0)]


BACKENDS = ("numba", "torch")


def perturb(policy: Any) -> Any:
    """Perturb the zero-initialised layers so the tree sees non-uniform priors and values."""
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.mark_weights_changed()
    return policy


def _policy(num_simulations: int, threads: int, learn_dtype: str = "float32",
            backend: str = MuZeroPolicyConfig.search_backend) -> MuZeroPolicy:
    torch.manual_seed(0)
    cfg = MuZeroPolicyConfig(num_simulations=num_simulations, search_threads=threads, learn_dtype=learn_dtype,
                             search_backend=backend)
    return perturb(MuZeroPolicy(cfg, (4,), 2, seed=0))


def time_acts(policies: dict[str, Any], batch: int, warmup: int, repeats: int) -> dict[str, dict[str, float]]:
    """Times collect searches of each policy on one CartPole-like batch, alternating between the
    policies search by search; {label: {ms_per_search, network_share, tree_ms, min_ms}}."""
    rng = np.random.default_rng(0)
    obs = rng.normal(scale=[1.0, 1.0, 0.1, 1.0], size=(batch, 4)).astype(np.float32)  # CartPole-like
    legal = np.ones((batch, 2), bool)
    to_play = np.full(batch, -1, np.int64)
    env_ids = np.arange(batch)
    samples: dict[str, dict[str, list[float]]] = {b: {"ms": [], "share": [], "tree": []} for b in policies}
    for i in range(warmup + repeats):
        for b, policy in policies.items():
            # A collect step: its search/* metrics time root inference + search (not action selection).
            metrics = policy.act(obs, legal, to_play, mode="collect", env_ids=env_ids, temperature=0.25).metrics
            if i >= warmup:
                samples[b]["ms"].append(metrics["search/ms"])
                samples[b]["share"].append(metrics["search/network_share"])
                samples[b]["tree"].append(metrics.get("search/tree_ms", float("nan")))
    return {
        b: {
            "ms_per_search": statistics.median(x["ms"]),
            "network_share": statistics.median(x["share"]),
            "tree_ms": statistics.median(x["tree"]),
            "min_ms": min(x["ms"]),
        }
        for b, x in samples.items()
    }


def bench_search(batch: int, sims: int, threads: int, warmup: int, repeats: int,
                 backends: tuple[str, ...] = (MuZeroPolicyConfig.search_backend,)) -> dict[str, dict[str, float]]:
    """Times collect searches of each backend (same weights and inputs), alternating between the
    backends search by search; {backend: {ms_per_search, network_share, tree_ms, min_ms}}."""
    return time_acts({b: _policy(sims, threads, backend=b) for b in backends}, batch, warmup, repeats)


def _learn_batch(b: int, k: int, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    policy = rng.random((b, k + 1, 2)).astype(np.float32)
    return SimpleNamespace(
        obs=rng.normal(size=(b, k + 1, 4)).astype(np.float32), actions=rng.integers(0, 2, (b, k)),
        mask=np.ones((b, k + 1), np.float32), target_reward=np.ones((b, k), np.float32),
        target_value=rng.uniform(0, 60, (b, k + 1)).astype(np.float32),
        target_policy=policy / policy.sum(-1, keepdims=True), weights=np.ones(b, np.float32),
    )


def learn_setup(dtype: str, threads: int, n_batches: int) -> tuple[MuZeroPolicy, list[SimpleNamespace]]:
    """The CartPole MuZero policy with ``threads`` torch threads in ``dtype``, and ``n_batches``
    random batch-256, K = 5 learner batches."""
    torch.set_num_threads(threads)
    return _policy(25, threads, learn_dtype=dtype), [_learn_batch(256, 5, seed) for seed in range(n_batches)]


def time_learn_steps(policy: MuZeroPolicy, batches: list[SimpleNamespace], warmup: int,
                     repeats: int) -> tuple[list[float], list[float]]:
    """``warmup`` + ``repeats`` learner steps cycling through ``batches``: ms of each timed step and
    the total loss of every step."""
    ms, loss = [], []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        metrics, _ = policy.learn(batches[i % len(batches)])
        if i >= warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
        loss.append(metrics["train/loss_total"])
    return ms, loss


def bench_learn(dtype: str, threads: int, warmup: int, repeats: int) -> dict[str, float]:
    """Learner steps at batch 256: median/min ms, and the step's matmuls (forward and backward)
    against the machine's rate for those very shapes (:func:`gemm_peak.matmul_profile`). The
    share of the peak is measured interleaved (:func:`gemm_peak.interleaved_share`: a step, then
    its matmuls alone, ``repeats`` rounds), so that both sides see the same load on a shared
    machine; ``share_apart`` is the step median over the matmuls' medians timed afterwards."""
    policy, batches = learn_setup(dtype, threads, n_batches=4)
    ms, loss = time_learn_steps(policy, batches, warmup, repeats)
    median = statistics.median(ms)
    profile = matmul_profile(lambda: policy.learn(batches[0]), median / 1e3, threads)
    inter = interleaved_share(lambda: policy.learn(batches[0]), rounds=repeats, threads=threads)
    return {"ms_per_step": median, "min_ms": min(ms), "final_loss": loss[-1], **profile,
            "share_apart": profile["share_of_peak"], "share_of_peak": inter["share_of_peak"],
            "share_min": inter["share_min"], "share_max": inter["share_max"],
            "interleaved_step_ms": inter["step_seconds"] * 1e3, "interleaved_gemm_ms": inter["gemm_seconds"] * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads during search (default 1)")
    parser.add_argument("--backend", choices=(*BACKENDS, "both"), default=MuZeroPolicyConfig.search_backend,
                        help="search backend (default: the config default); 'both' interleaves them")
    parser.add_argument("--learn", action="store_true", help="also time learner steps at batch 256")
    parser.add_argument("--learn-threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--learn-dtypes", nargs="+", choices=("float32", "bfloat16"), default=None,
                        help="learner precisions to time (default: float32, plus bfloat16 where the CPU "
                             "has native bf16 matmuls; emulated bf16 takes ~11 s per step)")
    parser.add_argument("--malloc-defaults", action="store_true",
                        help="keep glibc malloc's default thresholds (runs raise them: run.retain_freed_memory)")
    args = parser.parse_args()
    retained = not args.malloc_defaults and retain_freed_memory()  # as `lzkernel run` does by default

    backends = BACKENDS if args.backend == "both" else (args.backend,)
    rows = []
    for batch, sims, lz in CASES:
        for backend, r in bench_search(batch, sims, args.threads, args.warmup, args.repeats, backends).items():
            rows.append({"batch": batch, "simulations": sims, "ms_per_search": round(r["ms_per_search"], 3),
                         "network_share": round(r["network_share"], 4), "lightzero_ms": lz, "goal_ms": lz / 2,
                         "min_ms": round(r["min_ms"], 3), "tree_ms": round(r["tree_ms"], 3), "threads": args.threads,
                         "backend": backend})
    learn_rows = []
    if args.learn:
        dtypes = args.learn_dtypes or (("float32", "bfloat16") if native_bf16("cpu") else ("float32",))
        for dtype in dtypes:
            r = bench_learn(dtype, args.learn_threads, warmup=3, repeats=max(5, args.repeats // 3))
            learn_rows.append({"learn_dtype": dtype, "batch": 256, "unroll_steps": 5, "threads": args.learn_threads,
                               "ms_per_step": round(r["ms_per_step"], 1), "min_ms": round(r["min_ms"], 1),
                               "gmac_per_step": round(r["matmul_gmac"], 2),
                               "gmac_per_s": round(r["achieved_gmac_per_s"], 1),
                               "peak_gmac_per_s": round(r["peak_gmac_per_s"], 1), "gemm_ms": round(r["gemm_seconds"] * 1e3, 1),
                               "share_of_peak": round(r["share_of_peak"], 3),
                               "share_min": round(r["share_min"], 3), "share_max": round(r["share_max"], 3),
                               "share_apart": round(r["share_apart"], 3),
                               "interleaved_step_ms": round(r["interleaved_step_ms"], 1),
                               "interleaved_gemm_ms": round(r["interleaved_gemm_ms"], 1),
                               "goal_share": 0.85 if dtype == "float32" else 0.5, "lightzero_ms": 210.0,
                               "retained_freed_memory": retained})

    if args.json:
        print(json.dumps(rows + learn_rows if args.learn else rows, indent=1))
        return
    print(f"{'B x S':>9} {'backend':>8} {'ms/search':>10} {'min ms':>8} {'network':>8} {'tree ms':>8} "
          f"{'LightZero':>10} {'goal':>6}")
    for r in rows:
        ok = "ok" if r["ms_per_search"] <= r["goal_ms"] and r["network_share"] >= 0.75 else "--"
        print(f"{r['batch']:>4} x {r['simulations']:<3} {r['backend']:>8} {r['ms_per_search']:>10.2f} "
              f"{r['min_ms']:>8.2f} {r['network_share']:>7.0%} {r['tree_ms']:>8.2f} {r['lightzero_ms']:>9.0f}  "
              f"{r['goal_ms']:>5.1f} {ok}")
    for r in learn_rows:
        print(f"learn {r['learn_dtype']:>8} B=256 K=5 threads={r['threads']}: {r['ms_per_step']:.1f} ms/step "
              f"(min {r['min_ms']:.1f}; LightZero ~{r['lightzero_ms']:.0f}); matmuls {r['gmac_per_step']:.1f} GMAC "
              f"per step, run at {r['gmac_per_s']:.0f} GMAC/s; the same matmuls alone: {r['gemm_ms']:.1f} ms "
              f"({r['peak_gmac_per_s']:.0f} GMAC/s): {r['share_apart']:.0%} of the machine's peak for these shapes; "
              f"interleaved (step {r['interleaved_step_ms']:.1f} ms, its matmuls alone {r['interleaved_gemm_ms']:.1f} ms, "
              f"median of {r['share_min']:.0%}..{r['share_max']:.0%}): {r['share_of_peak']:.0%} "
              f"(goal {r['goal_share']:.0%}){'' if retained else '; malloc defaults'}")


if __name__ == "__main__":
    main()
