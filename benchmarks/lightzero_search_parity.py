"""Our MuZero search against LightZero 0.2.0's C++ tree on the same network and the same roots.

    python benchmarks/lightzero_search_parity.py RUN_DIR [--checkpoint last] [--roots 64] [--sims 25 50]
    python benchmarks/lightzero_search_parity.py --perturb 0.05      # LightZero's init, perturbed

The network is LightZero's CartPole MuZero MLP (``cartpole_muzero_config``: SimNorm(8) at the end of
the representation), which ours builds with ``policy.model.latent_norm: SimNorm``; its weights
come from one of our checkpoints of such a run (``RUN_DIR``) or from our initialisation with every
tensor perturbed by ``N(0, perturb²)`` (the zero-initialised heads would otherwise give uniform
priors and zero values). The roots are CartPole states reached by random play. LightZero's side
runs in the rival kit's venv (``_lightzero_search.py``, via ``../shared/rival/setup.sh``); both
search without root noise. Printed: the root network outputs' largest difference (the two
networks must agree exactly: same layers, same order) and, per simulation count, on how many roots
the visit counts agree and the largest relative difference of the root values; LightZero's side
runs ``--lightzero-runs`` times on the same input, and its reruns are compared with its first run
too (its tree breaks ties with C ``rand()`` seeded from the wall clock, so it does not repeat).

Our tree works in float64 and LightZero's in float32, and our search network folds BatchNorm and
fuses its layers (float32 rounding differs from torch's), so a near-tie at some node can go either
way. ``tests/mcts/reference.py`` (a per-node float64 search written from the SPEC) is the oracle
that our search matches exactly in the tests.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from _results import write_results
from _rival import default_rival_dir, run_lightzero_driver


def cartpole_roots(n: int, seed: int = 0) -> np.ndarray:
    """``n`` CartPole-v0 states [n, 4] float32 reached by uniformly random play (resets seeded)."""
    import gymnasium as gym

    warnings.simplefilter("ignore", DeprecationWarning)  # "CartPole-v0 is out of date"
    env, rng, out = gym.make("CartPole-v0"), np.random.default_rng(seed), []
    obs, _ = env.reset(seed=seed)
    while len(out) < n:
        out.append(obs)
        obs, _, term, trunc, _ = env.step(int(rng.integers(2)))
        if term or trunc:
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
    return np.asarray(out, dtype=np.float32)


def our_policy(run_dir: Path | None, checkpoint: str, perturb: float) -> Any:
    """Our MuZero policy with LightZero's CartPole network: a checkpoint's (which must have been
    trained with SimNorm) or a perturbed initialisation, whose learner runs in float32 as
    LightZero's. Its eval-mode simulations are ``policy.cfg.eval_num_simulations`` (read at every
    search)."""
    import torch

    if run_dir is not None:
        from lzkernel.evaluate import load_policy
        from lzkernel.pluginmanager import Kernel

        policy = load_policy(Kernel(), str(run_dir), checkpoint=checkpoint).policy
        if policy.cfg.model.latent_norm != "SimNorm":
            raise SystemExit(f"{run_dir}: trained with latent_norm {policy.cfg.model.latent_norm}; "
                             "LightZero's CartPole MuZero network ends with SimNorm")
        return policy
    from lzk_muzero.config import MuZeroPolicyConfig
    from lzk_muzero.policy import MuZeroPolicy

    torch.manual_seed(0)
    cfg = MuZeroPolicyConfig(search_threads=1)
    cfg.model.latent_norm = "SimNorm"
    cfg.learn_dtype = "float32"
    policy = MuZeroPolicy(cfg, (4,), 2, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, t in policy.model.state_dict().items():
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=g) * perturb)
    policy.mark_weights_changed()
    return policy


def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], sims: list[int]) -> dict[str, Any]:
    """Agreement of the root network outputs and, per simulation count, of the searches."""
    out: dict[str, Any] = {
        "root_logits_max_abs_diff": float(max(np.abs(ours["root_policy_logits"] - theirs["root_policy_logits"]).max(),
                                              np.abs(ours["root_value_logits"] - theirs["root_value_logits"]).max())),
        "searches": []}
    for s in sims:
        v_ours, v_theirs = ours[f"visits_{s}"], theirs[f"visits_{s}"]
        same = np.all(v_ours == v_theirs, axis=1)
        rel = np.abs(ours[f"values_{s}"] - theirs[f"values_{s}"]) / (1.0 + np.abs(theirs[f"values_{s}"]))
        out["searches"].append({"simulations": s, "roots": int(len(same)), "visits_equal": int(same.sum()),
                                "max_visit_diff": float(np.abs(v_ours - v_theirs).max()),
                                "root_value_max_rel_diff": float(rel.max()),
                                "root_value_median_rel_diff": float(np.median(rel))})
    return out


def lightzero_side(rival: Path, obs: np.ndarray, sims: list[int], weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One run of ``_lightzero_search.py`` in the rival kit's venv on these roots and weights."""
    return run_lightzero_driver(rival, "_lightzero_search.py", {"obs": obs, "sims": np.asarray(sims), **weights})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", type=Path, help="a run of ours with policy.model.latent_norm: SimNorm")
    parser.add_argument("--checkpoint", default="last")
    parser.add_argument("--perturb", type=float, default=0.05, help="without RUN_DIR: weight perturbation")
    parser.add_argument("--roots", type=int, default=64)
    parser.add_argument("--sims", type=int, nargs="+", default=[25, 50])
    parser.add_argument("--lightzero-runs", type=int, default=3,
                        help="run LightZero's side this often on the same input (its search is not reproducible)")
    parser.add_argument("--rival-dir", type=Path, default=None)
    parser.add_argument("--json-out")
    args = parser.parse_args()

    import torch

    rival = args.rival_dir or default_rival_dir()
    obs = cartpole_roots(args.roots)
    policy = our_policy(args.run_dir, args.checkpoint, args.perturb)
    weights = {f"sd/{i:04d}": t.detach().cpu().numpy() for i, t in enumerate(policy.model.state_dict().values())}
    policy.model.eval()
    with torch.no_grad():
        _, v, p = policy.model.initial_inference(torch.from_numpy(obs))
    ours: dict[str, np.ndarray] = {"root_policy_logits": p.numpy(), "root_value_logits": v.numpy()}
    for s in args.sims:
        policy.cfg.eval_num_simulations = s
        act = policy.act(obs, np.ones((len(obs), 2), bool), np.full(len(obs), -1), mode="eval",
                         env_ids=np.arange(len(obs)))
        ours[f"visits_{s}"] = np.rint(act.visit_dist.astype(np.float64) * s)  # normalised visits → counts
        ours[f"values_{s}"] = np.asarray(act.root_value, dtype=np.float64)
    runs = [lightzero_side(rival, obs, args.sims, weights) for _ in range(args.lightzero_runs)]
    result = {"weights": str(args.run_dir) if args.run_dir else f"perturbed init ({args.perturb})",
              **compare(ours, runs[0], args.sims),
              # LightZero against itself: its tree breaks ties with a wall-clock-seeded rand().
              "lightzero_reruns": [compare(run, runs[0], args.sims)["searches"] for run in runs[1:]]}
    print(f"root network outputs, largest difference: {result['root_logits_max_abs_diff']:.3g}")
    for i, r in enumerate(result["searches"]):
        again = [rerun[i]["visits_equal"] for rerun in result["lightzero_reruns"]]
        print(f"{r['simulations']:>3} simulations: visit counts equal on {r['visits_equal']}/{r['roots']} roots "
              f"(largest difference {r['max_visit_diff']:.0f}; LightZero rerun on the same input: {again}); "
              f"root values: median relative difference {r['root_value_median_rel_diff']:.2g}, "
              f"largest {r['root_value_max_rel_diff']:.2g}")
    write_results(result, "lightzero_search_parity.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
