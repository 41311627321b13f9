"""One learner step of ours against LightZero 0.2.0's ``_forward_learn`` on the same network and
the same batch (issue 12: a defect or a difference on our side would show here).

    python benchmarks/lightzero_learner_parity.py [--batch 256] [--perturb 0.05] [--json-out F]

The network is LightZero's CartPole MuZero MLP (SimNorm at the end of the representation, which
ours builds with ``policy.model.latent_norm: SimNorm``) from our initialisation with every tensor
perturbed (as ``lightzero_search_parity.py``: the zero-initialised heads would otherwise give
uniform priors, zero values and zero gradients in the last layers). The batch is K = 5 steps of
CartPole states from random play with random actions and targets, some rows padded past an
episode's end (mask 0: no value, policy or reward target). Both sides learn in float32 with their
CartPole configs' hyperparameters; LightZero's side runs in the rival kit's venv
(``_lightzero_learn.py``).

Printed and written: the loss terms, the gradient norm and the priorities of both; per parameter
the largest difference of the clipped gradients relative to the parameter's largest gradient;
the running statistics after the step (every BatchNorm's, in the order LightZero's loop updates
them; the SSL heads' means corrected for the bias our forward skips, see below); and the weights
after the Adam step. Parameters whose gradient is 0 but for rounding (the Linear biases a
BatchNorm follows; any below 1e-5 of the largest gradient on both sides) are reported apart. The SSL heads' Linear biases: ours are frozen and
skipped in forward (``BatchNormedLinear``), LightZero's Adam moves them by its weight decay alone;
neither changes an output, but LightZero's running means include them.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from _results import write_results
from _rival import default_rival_dir, run_lightzero_driver
from lightzero_search_parity import cartpole_roots, our_policy

K = 5


def learner_batch(b: int, seed: int = 0) -> SimpleNamespace:
    """A learner batch in our layout (:class:`lzkernel.Batch` fields): K + 1 CartPole states per
    row, random actions and targets, about a fifth of the rows ending 1–3 steps early."""
    rng = np.random.default_rng(seed)
    obs = cartpole_roots(b * (K + 1), seed).reshape(b, K + 1, 4)
    mask = np.ones((b, K + 1), np.float32)
    for row in np.flatnonzero(rng.random(b) < 0.2):
        mask[row, K + 1 - rng.integers(1, 4):] = 0.0
    policy = rng.random((b, K + 1, 2)).astype(np.float32)
    policy = policy / policy.sum(-1, keepdims=True) * mask[..., None]
    return SimpleNamespace(
        obs=obs, actions=rng.integers(0, 2, (b, K)), mask=mask,
        target_reward=mask[:, :K].copy(), target_value=(rng.uniform(0, 60, (b, K + 1)) * mask).astype(np.float32),
        target_policy=policy, weights=rng.uniform(0.5, 1.0, b).astype(np.float32),
    )


def lightzero_side(rival: Path, batch: SimpleNamespace, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One run of ``_lightzero_learn.py`` in the rival kit's venv on this batch and these weights."""
    return run_lightzero_driver(rival, "_lightzero_learn.py", {**vars(batch), **weights})


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| relative to b's largest magnitude (0 when both are 0)."""
    scale = float(np.abs(b).max())
    return float(np.abs(a - b).max()) / scale if scale > 0 else float(np.abs(a).max())


def linear_then_norm(model: Any) -> dict[str, tuple[str, bool]]:
    """{BatchNorm name: (the bias name of the Linear right before it, whether that Linear skips
    its bias in forward)} for every Linear → BatchNorm pair inside an ``nn.Sequential``."""
    from torch import nn

    from lzk_common.blocks import BatchNormedLinear

    pairs = {}
    for name, seq in model.named_modules():
        if isinstance(seq, nn.Sequential):
            for i in range(len(seq) - 1):
                if isinstance(seq[i], nn.Linear) and isinstance(seq[i + 1], nn.modules.batchnorm._BatchNorm):
                    pairs[f"{name}.{i + 1}"] = (f"{name}.{i}.bias", isinstance(seq[i], BatchNormedLinear))
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--perturb", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rival-dir", type=Path, default=None)
    parser.add_argument("--json-out")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    rival = args.rival_dir or default_rival_dir()
    policy = our_policy(None, "last", args.perturb)
    model = policy.model
    names = list(model.state_dict())
    weights = {f"sd/{i:04d}": t.detach().cpu().numpy().copy() for i, t in enumerate(model.state_dict().values())}
    batch = learner_batch(args.batch, args.seed)
    theirs = lightzero_side(rival, batch, weights)
    metrics, priorities = policy.learn(batch)
    params = dict(model.named_parameters())
    after = [t.detach().cpu().numpy() for t in model.state_dict().values()]

    log = {k[4:]: float(v) for k, v in theirs.items() if k.startswith("log/")}
    losses = {  # ours, LightZero's (its SSL term is logged per step: × K)
        "loss_total": (metrics["train/loss_total"], log["weighted_total_loss"]),
        "loss_value": (metrics["train/loss_value"], log["value_loss"]),
        "loss_reward": (metrics["train/loss_reward"], log["reward_loss"]),
        "loss_policy": (metrics["train/loss_policy"], log["policy_loss"]),
        "loss_ssl": (metrics["train/loss_ssl"], log["consistency_loss"] * K),
        "policy_entropy": (metrics["train/policy_entropy"], log["policy_entropy"]),
        "grad_norm": (metrics["train/grad_norm"], log["total_grad_norm_before_clip"]),
        "priority_mean": (float(priorities.mean()), log["value_priority"]),
    }
    frozen = {n for n, p in params.items() if not p.requires_grad}
    pairs = linear_then_norm(model)
    cancelled = {bias for bias, _ in pairs.values()}  # a BatchNorm follows: gradient 0 up to rounding
    index = {n: i for i, n in enumerate(names)}
    # Parameters whose gradient is 0 up to rounding on both sides count with the cancelled biases
    # (e.g. the projection's last BatchNorm bias: the prediction head's BatchNorm cancels a shift).
    largest = max(float(np.abs(v).max()) for k, v in theirs.items() if k.startswith("grad/"))
    for n, p in params.items():
        g = theirs.get(f"grad/{index[n]:04d}")
        if p.grad is not None and g is not None and max(float(p.grad.abs().max()), float(np.abs(g).max())) < 1e-5 * largest:
            cancelled.add(n)
    grads, cancelled_grads, running, weights_after, frozen_after = {}, {}, {}, {}, {}
    changed, total = 0, 0
    for i, n in enumerate(names):
        key = f"{i:04d}"
        if n in params and n not in frozen:
            ours = params[n].grad.numpy() if params[n].grad is not None else np.zeros(params[n].shape, np.float32)
            theirs_grad = theirs.get(f"grad/{key}", np.zeros_like(ours))
            if n in cancelled:
                cancelled_grads[n] = float(max(np.abs(ours).max(), np.abs(theirs_grad).max()))
            else:
                grads[n] = relative(ours, theirs_grad)
            diff = np.abs(after[i] - theirs[f"sd/{key}"])
            weights_after[n] = float(diff.max())
            changed, total = changed + int((diff > 1e-5).sum()), total + diff.size
        elif n in frozen:
            frozen_after[n] = {"ours_moved": float(np.abs(after[i] - weights[f"sd/{key}"]).max()),
                               "lightzero_moved": float(np.abs(theirs[f"sd/{key}"] - weights[f"sd/{key}"]).max()),
                               "lightzero_grad_max": float(np.abs(theirs.get(f"grad/{key}", np.zeros(1))).max())}
        elif n.endswith(("running_mean", "running_var")):
            ours_stat = after[i]
            norm = n.rsplit(".", 1)[0]
            if n.endswith("running_mean") and pairs.get(norm, ("", False))[1]:
                # Our bias-free forward: LightZero's mean also holds (1 − (1 − m)^n)·b for the n updates.
                steps = int(after[index[f"{norm}.num_batches_tracked"]] - weights[f"sd/{index[f'{norm}.num_batches_tracked']:04d}"])
                bias = weights[f"sd/{index[pairs[norm][0]]:04d}"]
                ours_stat = ours_stat + (1.0 - 0.9 ** steps) * bias
            running[n] = relative(ours_stat, theirs[f"sd/{key}"])

    result = {
        "batch": args.batch, "perturb": args.perturb, "seed": args.seed,
        "losses": {k: {"ours": a, "lightzero": b, "rel_diff": abs(a - b) / max(abs(b), 1e-12)} for k, (a, b) in losses.items()},
        "grad_max_rel_diff": max(grads.values()), "grad_rel_diff": grads,
        "zero_gradient_params_max": cancelled_grads, "largest_gradient": largest,
        "weights_after_elements_differing_by_more_than_1e-5": changed, "weights_after_elements": total,
        "running_stats_max_rel_diff": max(running.values()), "running_stats_rel_diff": running,
        "weights_after_max_abs_diff": max(weights_after.values()), "weights_after_abs_diff": weights_after,
        "lr": float(metrics["train/lr"]), "frozen_ssl_biases": frozen_after,
    }
    for k, v in result["losses"].items():
        print(f"{k:>15}: ours {v['ours']:.7g}, LightZero {v['lightzero']:.7g} (relative difference {v['rel_diff']:.2g})")
    worst = max(grads, key=grads.__getitem__)
    print(f"clipped gradients: largest relative difference {grads[worst]:.2g} ({worst}) over {len(grads)} parameters")
    print(f"{len(cancelled_grads)} parameters whose gradient is 0 but for rounding (Linear biases a BatchNorm "
          f"follows, ...): at most {max(cancelled_grads.values()):.2g} on either side, against a largest "
          f"gradient of {largest:.2g}")
    worst = max(running, key=running.__getitem__)
    print(f"running statistics after the step: largest relative difference {running[worst]:.2g} ({worst}) "
          f"over {len(running)} buffers")
    print(f"weights after the Adam step: largest difference {result['weights_after_max_abs_diff']:.2g} "
          f"(learning rate {result['lr']:g}); {changed} of {total} elements differ by more than 1e-5 "
          f"(Adam's first step is ±lr·g/(|g| + ε), so a gradient within rounding of 0 can go either way)")
    moved = max(v["lightzero_moved"] for v in frozen_after.values()) if frozen_after else 0.0
    print(f"SSL Linear biases ({len(frozen_after)}): ours frozen, LightZero's moved by up to {moved:.2g} "
          f"(gradient at most {max((v['lightzero_grad_max'] for v in frozen_after.values()), default=0.0):.2g})")
    write_results(result, "lightzero_learner_parity.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
