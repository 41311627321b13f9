"""AlphaZero search speed: one batched search of 8 connect-four positions × 50 simulations and of
8 tic-tac-toe positions × 25 simulations, with the networks of ``connect4_alphazero.yaml`` and
``tictactoe_alphazero.yaml`` (random weights: the cost does not depend on them), as a collect
move runs it (root noise, clones and steps of OpenSpiel states, one batched network call per
simulation). Prints the median ms per move and the shares of the time in the network, in the
simulator (clone + step + observe) and in the tree; the goal is a network share of at least 70%.

LightZero replays every simulation from the root through a Python env and evaluates leaves one
at a time (SPEC §5.2); it is not timed here (its AlphaZero does not run as installed, see the
rival kit's lightzero_az.py).

    python benchmarks/alphazero_search.py [--repeats 30] [--json benchmarks/results/alphazero_search.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from lzk_alphazero.config import AlphaZeroPolicyConfig
from lzk_alphazero.policy import AlphaZeroPolicy
from lzk_envs.openspiel import OpenSpielEnvSpec
from lzkernel.config.loader import load_tree
from lzkernel.config.schema import validate

ROOT = Path(__file__).resolve().parents[1]
CASES = [("connect4_alphazero.yaml", 8, 50), ("tictactoe_alphazero.yaml", 8, 25)]


def _policy(config: str, sims: int) -> tuple[AlphaZeroPolicy, OpenSpielEnvSpec]:
    data, _ = load_tree(ROOT / "configs" / config)  # the strict parse, with any base config merged
    env, pol = data["env"], data["policy"]
    spec = OpenSpielEnvSpec.load(env["game"], env.get("params"), to_play_plane=env.get("to_play_plane", True),
                                 mover_planes=env.get("mover_planes", ()))
    body = {k: v for k, v in pol.items() if k != "name"}
    body["num_simulations"] = sims
    cfg, problems = validate(AlphaZeroPolicyConfig, body, "policy")
    assert not problems, problems
    torch.manual_seed(0)
    policy = AlphaZeroPolicy(cfg, spec, seed=0)
    with torch.no_grad():  # non-zero heads, so the search sees uneven priors and values
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.mark_weights_changed()
    return policy, spec


def _positions(spec: OpenSpielEnvSpec, batch: int, rng: np.random.Generator) -> list:
    """``batch`` positions a few random moves into a game (none terminal)."""
    sim, out = spec.make_simulator(), []
    while len(out) < batch:
        state = sim.new_state()
        for _ in range(int(rng.integers(0, 4))):
            view = sim.observe([state])
            sim.step([state], np.array([rng.choice(np.flatnonzero(view.legal[0]))]))
        if not sim.observe([state]).terminal[0]:
            out.append(state)
    return out


def bench(config: str, batch: int, sims: int, repeats: int, warmup: int = 3) -> dict:
    policy, spec = _policy(config, sims)
    states = _positions(spec, batch, np.random.default_rng(0))
    view = spec.make_simulator().observe(states)
    rows: dict[str, list[float]] = {"ms": [], "network": [], "simulator": [], "tree": []}
    for i in range(warmup + repeats):
        _, _, m = policy.search(view.obs, view.legal, view.to_play, states, sims, add_noise=True, deterministic=False)
        if i >= warmup:
            rows["ms"].append(m["search/ms"])
            rows["network"].append(m["search/network_share"])
            rows["simulator"].append(m["search/simulator_share"])
            rows["tree"].append(m["search/tree_share"])
    return {"config": config, "game": spec.id, "batch": batch, "simulations": sims,
            "ms_per_move": round(statistics.median(rows["ms"]), 3), "min_ms": round(min(rows["ms"]), 3),
            **{f"{k}_share": round(statistics.median(v), 3) for k, v in rows.items() if k != "ms"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [bench(c, b, s, args.repeats) for c, b, s in CASES]
    print(f"{'game':>24} {'B x S':>7} {'ms/move':>8} {'min':>7} {'network':>8} {'simulator':>10} {'tree':>6}")
    for r in rows:
        ok = "ok" if r["network_share"] >= 0.70 else "--"
        print(f"{r['game']:>24} {r['batch']:>3} x {r['simulations']:<3} {r['ms_per_move']:>8.2f} {r['min_ms']:>7.2f} "
              f"{r['network_share']:>8.0%} {r['simulator_share']:>10.0%} {r['tree_share']:>6.0%} {ok}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
