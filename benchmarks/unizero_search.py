"""UniZero search speed: the CartPole world model (E 64, 2 layers, 2 heads, context 8 tokens,
101-atom supports, obs dim 4, A = 2) searched by ``lzk_mcts`` through ``lzk_unizero``'s KV-cached
``SearchSession``, on both search backends (``policy.search_backend``: ``numba``, one compiled
kernel per simulation, and ``torch``, the folded-snapshot reference), and against the same search
recomputing every context from its tokens.

Five tables, every figure the median (and min) over ``--repeats`` runs after ``--warmup``, the
cases run round-robin in one process (a shared machine's speed drifts; interleaving makes the
drift hit all alike; on a busy machine read the minimums):

* ``search``: one search of B = 8 roots × 25 simulations from full root windows (3 past pairs,
  the steady state of an episode): ``numba`` and ``torch`` (KV-cached) and ``uncached`` (torch,
  both model passes of every simulation recomputed from the node's tokens, ``SearchSession(
  cached=False)``); ms per search, ms per simulation (model calls only), and the env steps/s that
  many ms per decision would allow 8 envs.
* ``act``: a whole collect-mode ``UniZeroPolicy.act`` for 8 envs (root window from the env
  history, root inference, search, action selection, history update) per backend, and its env
  steps/s.
* ``context``: ms per simulation by root window (0 … 3 past pairs) and by episode step
  (10, 100, 1000 with full windows), default (numba) backend. The cost is bounded by the
  context length: it must not grow with the episode.
* ``reanalyze``: ``window_reanalyze_fn`` on 128 full windows (target model, 25 simulations) by
  ``search_chunk`` and backend: ms per root (how ``search_chunk``'s default was chosen).
* ``compile``: the numba kernel's first-call cost in a fresh process: compiling into an empty
  cache directory (once per install and source change), then loading from that cache (every
  later process); measured as the first numba ``act`` minus a steady one.

Goal (the issue): collection >= 264 env steps/s with 8 envs, i.e. <= ~30 ms per ``act``.

    python benchmarks/unizero_search.py                  # tables
    python benchmarks/unizero_search.py --json           # JSON on stdout
    python benchmarks/unizero_search.py --json --out benchmarks/results/unizero_search.json

Threads: one torch thread (``policy.search_threads: 1``); see ``benchmarks/mcts.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

import lzk_mcts
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.inference import InferenceNet, SearchSession
from lzk_unizero.kv_cache import NodeStore
from lzk_unizero.policy import UniZeroPolicy

ENVS, SIMS, OBS_DIM, ACTIONS = 8, 25, 4, 2
GOAL_STEPS_PER_S = 264.0
BACKENDS = ("numba", "torch")


def _policy(seed: int = 0) -> UniZeroPolicy:
    torch.manual_seed(seed)
    policy = UniZeroPolicy(UniZeroPolicyConfig(num_simulations=SIMS, search_threads=1), (OBS_DIM,), ACTIONS,
                           seed=seed)
    # Perturb the weights (the heads start at zero) so the tree sees non-uniform priors and values.
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.target_model.load_state_dict(policy.model.state_dict())  # reanalysis searches the target
    policy.mark_weights_changed()
    return policy


def _obs(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(scale=[1.0, 1.0, 0.1, 1.0], size=(*shape, OBS_DIM)).astype(np.float32)  # CartPole-like


def _stats(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), min(xs)


class SearchCase:
    """One search of ENVS roots whose windows hold ``pairs`` past pairs on ``backend``, cached or
    not: ms per search (root inference + S simulations + root statistics) and per simulation
    (model calls)."""

    def __init__(self, policy: UniZeroPolicy, cached: bool, pairs: int, backend: str = "torch") -> None:
        rng = np.random.default_rng(1)
        M = policy.history_pairs
        self.w_obs = torch.as_tensor(_obs(rng, ENVS, M + 1))
        self.w_act = torch.as_tensor(rng.integers(0, ACTIONS, (ENVS, M)))
        self.n_obs = np.full(ENVS, pairs + 1)
        self.policy, self.cached, self.backend = policy, cached, backend
        self.net = InferenceNet(policy.model.eval(), policy.capacity)
        mc = policy.cfg.model
        self.store = NodeStore(policy.capacity, mc.num_layers, mc.embed_dim, "cpu")
        self.calls = 0
        self.search_ms: list[float] = []
        self.sim_ms: list[float] = []

    def run(self, keep: bool) -> None:
        legal, to_play = np.ones((ENVS, ACTIONS), bool), np.full(ENVS, -1)
        p = self.policy
        with torch.inference_mode():
            t0 = time.perf_counter()
            session = SearchSession(self.net, self.store, self.w_obs, self.w_act, self.n_obs, SIMS,
                                    p.value_support, p.reward_support, cached=self.cached, backend=self.backend)
            result = lzk_mcts.search(session, session.root_policy_logits.numpy(), legal, to_play,
                                     lzk_mcts.SearchConfig(num_simulations=SIMS),
                                     np.random.default_rng(self.calls), add_noise=True, deterministic=False)
        self.calls += 1
        if keep:
            self.search_ms.append((time.perf_counter() - t0) * 1e3)
            self.sim_ms.append(result.stats["search/model_ms"] / SIMS)

    def row(self) -> dict[str, float]:
        (ms, ms_min), (per_sim, per_sim_min) = _stats(self.search_ms), _stats(self.sim_ms)
        return {"ms_per_search": ms, "min_ms": ms_min, "ms_per_sim": per_sim, "min_ms_per_sim": per_sim_min}


class ActCase:
    """A collect ``act`` for ENVS envs at episode step ``step`` with ``pairs`` past pairs in the
    root windows, on ``backend`` (the env histories are re-prepared before every call, outside
    the timing: they hold at most M pairs whatever the episode length)."""

    def __init__(self, policy: UniZeroPolicy, pairs: int, step: int, backend: str = "numba") -> None:
        self.policy, self.pairs, self.step, self.backend = policy, pairs, step, backend
        self.rng = np.random.default_rng(2)
        self.act_ms: list[float] = []
        self.sim_ms: list[float] = []
        self.tokens = 0.0

    def run(self, keep: bool) -> None:
        p, rng = self.policy, self.rng
        p.history.clear()
        for e in range(ENVS):
            for t in range(self.step - self.pairs, self.step):
                p.history.record(("collect", e), _obs(rng, 1)[0], int(rng.integers(ACTIONS)), t)
        obs = _obs(rng, ENVS)
        p.cfg.search_backend = self.backend
        t0 = time.perf_counter()
        res = p.act(obs, np.ones((ENVS, ACTIONS), bool), np.full(ENVS, -1), mode="collect",
                    env_ids=np.arange(ENVS), temperature=0.25, timestep=np.full(ENVS, self.step))
        if keep:
            self.act_ms.append((time.perf_counter() - t0) * 1e3)
            self.sim_ms.append(res.metrics["search/model_ms"] / SIMS)
            self.tokens = res.metrics["search/root_context_tokens"]

    def row(self) -> dict[str, float]:
        (ms, ms_min), (per_sim, per_sim_min) = _stats(self.act_ms), _stats(self.sim_ms)
        return {"ms_per_act": ms, "min_ms": ms_min, "ms_per_sim": per_sim, "min_ms_per_sim": per_sim_min,
                "root_context_tokens": self.tokens}


class ReanalyzeCase:
    """``window_reanalyze_fn`` over ROOTS full history windows with ``search_chunk`` = chunk."""

    ROOTS = 128

    def __init__(self, policy: UniZeroPolicy, chunk: int, backend: str) -> None:
        rng = np.random.default_rng(3)
        W = policy.history_pairs + 1
        self.args = (_obs(rng, self.ROOTS, W), rng.integers(0, ACTIONS, (self.ROOTS, W - 1)),
                     np.full(self.ROOTS, W), np.ones((self.ROOTS, ACTIONS), bool), np.full(self.ROOTS, -1))
        self.policy, self.chunk, self.backend = policy, chunk, backend
        self.ms: list[float] = []

    def run(self, keep: bool) -> None:
        self.policy.cfg.search_chunk = self.chunk
        self.policy.cfg.search_backend = self.backend
        t0 = time.perf_counter()
        self.policy.window_reanalyze_fn(*self.args)
        if keep:
            self.ms.append((time.perf_counter() - t0) * 1e3 / self.ROOTS)

    def row(self) -> dict[str, float]:
        ms, ms_min = _stats(self.ms)
        return {"ms_per_root": ms, "min_ms_per_root": ms_min}


_COMPILE_PROBE = f"""
import json, sys, time
import numpy as np, torch
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import unizero_search as U
torch.set_num_threads(1)
policy = U._policy()
act = U.ActCase(policy, policy.history_pairs, 100, "torch")
act.run(keep=False)  # imports, lzk_mcts kernels, torch warm-up: not the numba search step
act.backend = "numba"
act.run(keep=True)  # the first numba act: the search step is compiled or loaded here
for _ in range(5):
    act.run(keep=True)
print(json.dumps({{"first_act_ms": act.act_ms[0], "steady_act_ms": min(act.act_ms[1:])}}))
"""


def compile_times() -> list[dict[str, Any]]:
    """The numba step's first-call overhead in fresh processes: compiled into an empty cache
    directory, then loaded from it (``NUMBA_CACHE_DIR``; the other kernels are warmed first)."""
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for case in ("compile (empty cache)", "load (cached)"):
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            out = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, check=True, capture_output=True,
                                 text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append({"table": "compile", "case": case, "first_act_ms": round(r["first_act_ms"], 1),
                         "steady_act_ms": round(r["steady_act_ms"], 2),
                         "first_call_overhead_s": round((r["first_act_ms"] - r["steady_act_ms"]) / 1e3, 3)})
    return rows


def run_interleaved(cases: list[Any], warmup: int, repeats: int) -> None:
    """Round-robin over the cases, so that drifts of a shared machine's speed hit all alike."""
    for i in range(warmup + repeats):
        for case in cases:
            case.run(keep=i >= warmup)


def _steps_per_s(ms: float) -> float:
    return ENVS * 1e3 / ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--out", help="also write the JSON to this path")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip the compile-time probes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = _policy()
    M = policy.history_pairs

    search = [SearchCase(policy, True, M, b) for b in BACKENDS] + [SearchCase(policy, False, M)]
    act = [ActCase(policy, M, 100, b) for b in BACKENDS]
    context = [ActCase(policy, p, p) for p in range(M + 1)] + [ActCase(policy, M, s) for s in (10, 100, 1000)]
    run_interleaved([*search, *act, *context], args.warmup, args.repeats)
    reanalyze = [ReanalyzeCase(policy, chunk, b) for chunk in (8, 32, 128) for b in BACKENDS]
    run_interleaved(reanalyze, 1, max(3, args.repeats // 4))

    rows: list[dict[str, Any]] = []
    for case in search:
        r = case.row()
        rows.append({"table": "search", "mode": case.backend if case.cached else "uncached", "batch": ENVS,
                     "simulations": SIMS, "root_pairs": M, **{k: round(v, 3) for k, v in r.items()},
                     "env_steps_per_s": round(_steps_per_s(r["ms_per_search"]), 1)})
    for case in act:
        r = case.row()
        rows.append({"table": "act", "backend": case.backend, "batch": ENVS, "simulations": SIMS,
                     "episode_step": case.step, **{k: round(v, 3) for k, v in r.items()},
                     "env_steps_per_s": round(_steps_per_s(r["ms_per_act"]), 1),
                     "env_steps_per_s_at_min": round(_steps_per_s(r["min_ms"]), 1),
                     "goal_env_steps_per_s": GOAL_STEPS_PER_S})
    for case in context:
        r = case.row()
        rows.append({"table": "context", "backend": case.backend, "root_pairs": case.pairs,
                     "episode_step": case.step, **{k: round(v, 3) for k, v in r.items()}})
    for case in reanalyze:
        rows.append({"table": "reanalyze", "backend": case.backend, "roots": case.ROOTS, "search_chunk": case.chunk,
                     "simulations": SIMS, **{k: round(v, 3) for k, v in case.row().items()}})
    if not args.no_compile:
        rows += compile_times()

    text = json.dumps(rows, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        print(text)
        return
    print(f"search: B={ENVS} roots x S={SIMS} simulations, root windows of {M} past pairs, 1 thread")
    print(f"{'mode':>9} {'ms/search':>10} {'min ms':>8} {'ms/sim':>7} {'min':>6} {'env steps/s':>12}")
    _print_rows(rows, "search", "{mode:>9} {ms_per_search:>10.2f} {min_ms:>8.2f} {ms_per_sim:>7.3f} "
                                "{min_ms_per_sim:>6.3f} {env_steps_per_s:>12.0f}")
    print(f"\nact (collect, {ENVS} envs, {SIMS} simulations, episode step 100; goal {GOAL_STEPS_PER_S:.0f} env steps/s)")
    print(f"{'backend':>8} {'ms/act':>7} {'min':>6} {'env steps/s':>12} {'at min':>7}")
    _print_rows(rows, "act", "{backend:>8} {ms_per_act:>7.2f} {min_ms:>6.2f} {env_steps_per_s:>12.0f} "
                             "{env_steps_per_s_at_min:>7.0f}")
    print("\ncontext: ms per simulation (model calls) by root window and episode step, numba backend")
    print(f"{'pairs':>6} {'step':>6} {'root tokens':>12} {'ms/sim':>7} {'min':>6} {'ms/act':>7}")
    _print_rows(rows, "context", "{root_pairs:>6} {episode_step:>6} {root_context_tokens:>12.0f} "
                                 "{ms_per_sim:>7.3f} {min_ms_per_sim:>6.3f} {ms_per_act:>7.2f}")
    print(f"\nreanalyze: {ReanalyzeCase.ROOTS} full windows, target model, {SIMS} simulations")
    print(f"{'chunk':>6} {'backend':>8} {'ms/root':>8} {'min':>6}")
    _print_rows(rows, "reanalyze", "{search_chunk:>6} {backend:>8} {ms_per_root:>8.3f} {min_ms_per_root:>6.3f}")
    if not args.no_compile:
        print("\nnumba first call in a fresh process (first numba act minus a steady one)")
        _print_rows(rows, "compile", "{case:>22}: {first_call_overhead_s:.2f} s")


def _print_rows(rows: list[dict], table: str, line: str) -> None:
    """Print the rows of one table, each formatted by ``line`` (a str.format template over the row)."""
    for r in rows:
        if r["table"] == table:
            print(line.format(**r))


if __name__ == "__main__":
    main()
