"""How a CartPole policy's greedy episodes end: the cart leaves the track (|x| > 2.4), the pole
falls (|θ| > 12°), or the time limit. The diagnostic behind issue 12's stalling seeds.

For each checkpoint of each run directory given (every complete ``ckpt/step_*``, or the one named with
``--checkpoint``) it restores the policy with :func:`lzkernel.evaluate.load_policy`, plays
``--episodes`` evaluation-mode episodes of the run's CartPole id (env seeds 1000, 1001, …) and
prints per checkpoint the mean length, how many episodes end each way and the mean cart position
over the episodes (signed: a policy that drifts right has a positive mean)::

    python benchmarks/cartpole_failures.py runs/cartpole_muzero            # every checkpoint
    python benchmarks/cartpole_failures.py RUN --checkpoint best --json    # JSON lines

What it showed (cartpole_muzero.yaml, seed 0, docs/algorithms/muzero.md): every one of the
stalled policy's failing episodes ends with the cart off the track at x ≈ +2.4 after ≈ 115 steps,
the pole still upright — a slow drift, which a value function learns to see only as its horizon
grows, not a balancing failure.
"""
from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

#: gymnasium's CartPole termination thresholds.
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360


def end_cause(obs: np.ndarray) -> str:
    """'track' (the cart left it), 'pole' (it fell) or 'time' (neither: the time limit) from an
    episode's last observation [x, ẋ, θ, θ̇]. The observation alone decides, so an end at the limit
    reads the same whether the env truncated it or (``truncation_as_terminal``) terminated it."""
    if abs(float(obs[0])) > X_LIMIT:
        return "track"
    if abs(float(obs[2])) > THETA_LIMIT:
        return "pole"
    return "time"


def play(policy: Any, env_id: str, episodes: int, seed: int = 1000) -> list[dict[str, Any]]:
    """Greedy (``mode="eval"``) episodes one at a time: [{length, end, mean_x}, …]."""
    import gymnasium as gym

    env = gym.make(env_id)
    out = []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            policy.reset_envs([0], "eval")
            xs, terminated, truncated = [], False, False
            while not (terminated or truncated):
                act = policy.act(obs[None].astype(np.float32), np.ones((1, 2), bool), np.array([-1]), mode="eval",
                                 env_ids=np.array([0]), timestep=np.array([len(xs)]))
                obs, _, terminated, truncated, _ = env.step(int(act.action[0]))
                xs.append(float(obs[0]))
            out.append({"length": len(xs), "end": end_cause(obs), "mean_x": float(np.mean(xs))})
    finally:
        env.close()
    return out


def summarise(checkpoint: str, meta: dict[str, Any], episodes: list[dict[str, Any]]) -> dict[str, Any]:
    ends = {cause: sum(e["end"] == cause for e in episodes) for cause in ("track", "pole", "time")}
    return {"checkpoint": checkpoint, "train_iter": meta.get("train_iter"), "env_steps": meta.get("env_steps"),
            "episodes": len(episodes), "length_mean": float(np.mean([e["length"] for e in episodes])),
            "ends": ends, "mean_x": float(np.mean([e["mean_x"] for e in episodes]))}


def checkpoints(run_dir: Path, which: str | None) -> list[str]:
    """``[which]``, or every complete step checkpoint of the run, oldest first (one still being
    written by a running training is skipped)."""
    if which is not None:
        return [which]
    from lzkernel.checkpoint import CheckpointStore

    return [str(p) for p in CheckpointStore(run_dir / "ckpt").complete_steps()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--checkpoint", default=None, help="last, best or a checkpoint directory (default: every step_*)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="one JSON object per checkpoint")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # gymnasium: "CartPole-v0 is out of date"

    from lzkernel.evaluate import load_policy
    from lzkernel.pluginmanager import Kernel

    kernel = Kernel()
    for run_dir in args.runs:
        for ckpt in checkpoints(run_dir, args.checkpoint):
            loaded = load_policy(kernel, str(run_dir), checkpoint=ckpt)
            env_id = loaded.config.section("env").id
            row = summarise(str(loaded.checkpoint), loaded.meta, play(loaded.policy, env_id, args.episodes))
            if args.json:
                print(json.dumps(row))
            else:
                e = row["ends"]
                print(f"{row['checkpoint']}: train_iter {row['train_iter']}, {row['episodes']} episodes, mean length "
                      f"{row['length_mean']:.1f}; ends: track {e['track']}, pole {e['pole']}, time {e['time']}; "
                      f"mean cart x {row['mean_x']:+.2f}")


if __name__ == "__main__":
    main()
