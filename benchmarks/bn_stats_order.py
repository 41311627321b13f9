"""What the order of the learner's BatchNorm running-statistics updates does to the search's
network, at a checkpoint of a real MLP MuZero/EfficientZero run (issue 12).

    python benchmarks/bn_stats_order.py RUN_DIR/ckpt/step_000000002000 [--batches 8] [--json-out F]

In train mode a learner step updates each prediction-network BatchNorm 2K + 1 times: with the
unrolled latents s_0 … s_K and with the SSL targets' latents o_1 … o_K (their initial inference
runs the prediction network too). LightZero's loop does it in the order s_0, s_1, o_1, s_2, o_2, …;
our batched learner did s_0 … s_K, then o_1 … o_K until 2026-12-06 and does LightZero's order since
(``lzk_common.blocks.step_ordered_statistics``). The gradients do not depend on the order; the
running statistics, which the search reads in eval mode, do.

This script samples ``--batches`` batches of B = 256 (K = 5) from the checkpoint's replay buffer,
runs LightZero's loop on them in train mode without gradient and records every prediction-network
BatchNorm's batch mean and variance per call. For each order it sets the layers' running
statistics to the order's steady state (every learner step applying the same 2K + 1 updates:
r* = Σ_i m(1 − m)^(n−1−i) x_i / (1 − (1 − m)^n)) and compares the two eval-mode networks on a fresh
batch: decoded values and the prior of action 0 at depths 0–2.
"""
from __future__ import annotations

import argparse
import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from _results import write_results

K, B = 5, 256


def steady_state(order: list[str], values: dict[str, Any], momentum: float) -> Any:
    """The fixed point of r ← (1 − m)·r + m·x_i applied for i in ``order`` at every step:
    r* = Σ_i m(1 − m)^(n−1−i)·x_i / (1 − (1 − m)^n), ``values[tag]`` = x of that call."""
    n = len(order)
    total = sum(momentum * (1 - momentum) ** (n - 1 - i) * values[tag] for i, tag in enumerate(order))
    return total / (1 - (1 - momentum) ** n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a checkpoint directory of an MLP run (ckpt/step_*)")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out")
    args = parser.parse_args()

    import torch
    from torch import nn

    from lzkernel.evaluate import load_policy
    from lzkernel.pluginmanager import Kernel

    warnings.simplefilter("ignore", DeprecationWarning)
    torch.manual_seed(args.seed)
    policy = load_policy(Kernel(), str(args.checkpoint), checkpoint=str(args.checkpoint)).policy
    model, support = policy.model, policy.learner.value_support
    arrays = np.load(args.checkpoint / "arrays.npz")
    frames, pool = arrays["buffer/frame_ids"], arrays["buffer/frame_pool"]
    actions, valid = arrays["buffer/actions"], arrays["buffer/valid_len"]
    rng = np.random.default_rng(args.seed)
    rows = np.flatnonzero(valid > K + 1)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, K+1, O], actions [B, K] of random windows of the buffer's segments."""
        r = rng.choice(rows, B)
        t = np.array([rng.integers(0, valid[i] - K) for i in r])
        obs = np.stack([pool[frames[r, t + k]] for k in range(K + 1)], 1)
        return torch.from_numpy(obs).float(), torch.from_numpy(np.stack([actions[r, t + k] for k in range(K)], 1))

    def prediction_norms(m: nn.Module) -> list[nn.BatchNorm1d]:
        heads = (m.prediction_trunk, m.value_head, m.policy_head)
        return [x for h in heads for x in h.modules() if isinstance(x, nn.BatchNorm1d)]

    norms = prediction_norms(model)
    seen: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {id(n): [] for n in norms}
    hooks = [n.register_forward_pre_hook(
        lambda mod, inp: seen[id(mod)].append((inp[0].double().mean(0), inp[0].double().var(0))))
        for n in norms]
    loop_order = ["s0"] + [tag for k in range(1, K + 1) for tag in (f"s{k}", f"o{k}")]
    model.train()
    per_call: dict[int, dict[str, list[tuple[torch.Tensor, torch.Tensor]]]] = {id(n): {} for n in norms}
    with torch.no_grad():
        for _ in range(args.batches):
            obs, act = batch()
            s = model.represent(obs[:, 0])
            model.predict(s)
            for k in range(K):  # LightZero's loop: recurrent inference, then the target's initial inference
                s, _ = model.dynamics(s, act[:, k])
                model.predict(s)
                model.initial_inference(obs[:, k + 1])
            for n in norms:
                for tag, stat in zip(loop_order, seen[id(n)]):
                    per_call[id(n)].setdefault(tag, []).append(stat)
                seen[id(n)].clear()
    for h in hooks:
        h.remove()
    orders = {"lightzero": loop_order,
              "unrolled_then_targets": [f"s{k}" for k in range(K + 1)] + [f"o{k}" for k in range(1, K + 1)]}

    def steady(order: list[str], stats: dict[str, list[tuple[Any, Any]]], momentum: float) -> tuple[Any, Any]:
        """The steady-state running (mean, var) of ``order``, each call's statistics averaged over batches."""
        mean = {tag: sum(x[0] for x in v) / len(v) for tag, v in stats.items()}
        var = {tag: sum(x[1] for x in v) / len(v) for tag, v in stats.items()}
        return steady_state(order, mean, momentum), steady_state(order, var, momentum)

    layers, nets = [], {}
    for name, order in orders.items():
        net = copy.deepcopy(model)
        for src, dst in zip(norms, prediction_norms(net)):
            mean, var = steady(order, per_call[id(src)], float(src.momentum))
            dst.running_mean.copy_(mean.float())
            dst.running_var.copy_(var.float())
        nets[name] = net.eval()
    for n in norms:
        stats = per_call[id(n)]
        sd = torch.stack([sum(x[1] for x in v) / len(v) for v in stats.values()]).mean(0).sqrt()
        unrolled = torch.stack([sum(x[0] for x in stats[f"s{k}"]) / args.batches for k in range(1, K + 1)]).mean(0)
        targets = torch.stack([sum(x[0] for x in stats[f"o{k}"]) / args.batches for k in range(1, K + 1)]).mean(0)
        a = steady(orders["lightzero"], stats, float(n.momentum))[0]
        b = steady(orders["unrolled_then_targets"], stats, float(n.momentum))[0]
        gap, shift = (unrolled - targets).abs() / sd, (a - b).abs() / sd
        layers.append({"features": n.num_features, "latent_gap_sd_median": float(gap.median()),
                       "latent_gap_sd_max": float(gap.max()), "running_mean_shift_sd_median": float(shift.median()),
                       "running_mean_shift_sd_max": float(shift.max())})
        print(f"BatchNorm({n.num_features}): unrolled vs target latents {float(gap.median()):.4f} sd (max "
              f"{float(gap.max()):.4f}); the two orders' running means {float(shift.median()):.4f} sd (max "
              f"{float(shift.max()):.4f})")
    depths: list[dict[str, Any]] = []
    with torch.no_grad():
        obs, act = batch()
        out: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for name, net in nets.items():
            s = net.represent(obs[:, 0])
            out[name] = []
            for d in range(3):
                v, p = net.predict(s)
                out[name].append((support.decode(v), p.softmax(-1)[:, 0]))
                s, _ = net.dynamics(s, act[:, d])
        for d in range(3):
            (va, pa), (vb, pb) = out["lightzero"][d], out["unrolled_then_targets"][d]
            dv, dp = (va - vb).abs(), (pa - pb).abs()
            depths.append({"depth": d, "value_mean": float(va.mean()), "value_diff_median": float(dv.median()),
                           "value_diff_max": float(dv.max()), "prior_diff_median": float(dp.median()),
                           "prior_diff_max": float(dp.max())})
            print(f"depth {d}: value {float(va.mean()):.2f}; |value difference| median {float(dv.median()):.4f}, "
                  f"max {float(dv.max()):.4f}; |prior difference| median {float(dp.median()):.5f}, max {float(dp.max()):.5f}")
    write_results({"checkpoint": str(args.checkpoint), "batches": args.batches, "layers": layers, "depths": depths},
                  "bn_stats_order.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
