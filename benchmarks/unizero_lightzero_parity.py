"""Our UniZero world model, loss and bootstrap values against LightZero 0.2.0's, on the same weights.

    python benchmarks/unizero_lightzero_parity.py [--batch 32] [--scale 0.3] [--steps 7] [--json-out F]

The network is a vector UniZero with LightZero 0.2.0's CartPole choices where ours has them:
E = 64, 2 layers, 2 heads, RoPE (θ = 10000), the MLP tokenizer ending in SimNorm(8)
(``final_norm: SimNorm``), 101-atom supports; no dropout, so that train-mode passes repeat. Its
heads have SPEC §4.1's shape (LN → Linear(E, 4E) → LN → GELU → Linear), which LightZero's side
swaps in for 0.2.0's Linear → GELU → Linear. Every tensor is drawn from N(0, scale²) (the zero
heads of either initialisation would make the comparison empty); the target model's tokenizer
is drawn separately, so the next-latent labels must come from it. Our attention has one fused qkv
projection and rotates feature pairs (i, i + d/2) where LightZero rotates (2i, 2i + 1): the export
splits qkv and permutes the query and key features within each head, which leaves every
attention score unchanged.

Compared, in this order on both sides (BatchNorm's running statistics move in the train-mode
step only):

* bootstrap values: the target-model pass over one (o_{t+n+j}, a_{t+n+j}) sequence per sample
  (``sequence_values`` against ``forward_initial_inference`` with actions): equal at the first K
  positions; LightZero repeats its K-th value as the (K+1)-th, ours evaluates o_{t+n+K};
* root inference over an episode (``lzk_unizero.inference.root_inference`` on the exact window
  of the last ⌊(context_length − 1)/2⌋ = 3 (observation, action) pairs, against LightZero's
  collect-mode calls, one per step, with its KV-cache pool): equal while LightZero's cache still
  holds the whole episode (steps 0–3: 1, 3, 5, 7 tokens); from step 4 on LightZero reuses K/V
  computed with the dropped oldest pair still visible (its window slide keeps tokens [2, 7) of
  the cache), so the two differ there by design (docs/algorithms/unizero.md, difference 1);
* the loss with label smoothing 0 (0.2.0 smooths no labels), entropy weight 5e-3 and the MSE
  next-latent loss (0.2.0's CartPole default is group_kl, which ours does not offer): total,
  next-latent, reward, value and policy terms, and every parameter's gradient. The batch holds
  rows that end inside the K steps (mask 0 after).

Printed and written: the largest differences (values relative to the largest value, gradients to
the tensor's largest gradient).
LightZero's side runs in the rival kit's venv (``_lightzero_unizero.py``).
"""
from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import numpy as np

from _results import write_results
from _rival import default_rival_dir, run_lightzero_driver
from lightzero_search_parity import cartpole_roots

E, H, LAYERS, A, K, N = 64, 2, 2, 2, 5, 101
HEADS = {"head_next_latent": "head_observations", "head_reward": "head_rewards", "head_value": "head_value",
         "head_policy": "head_policy"}


def to_lightzero(values: dict[str, Any]) -> dict[str, np.ndarray]:
    """Our world model's tensors (state dict or gradients, by our names) under LightZero 0.2.0's
    names (see the module docstring for the qkv split and the RoPE permutation)."""
    import torch

    d = E // H
    inv = torch.argsort(torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)]))  # LightZero feature order

    def unpermute(w: torch.Tensor) -> torch.Tensor:
        return w.reshape(H, d, *w.shape[1:])[:, inv].reshape(w.shape)

    out: dict[str, np.ndarray] = {}
    for name, t in values.items():
        t = t.detach().cpu()
        if m := re.fullmatch(r"encoder\.net\.(\d+)\.(.+)", name):
            out[f"tokenizer.encoder.fc_representation.{m[1]}.{m[2]}"] = t.numpy()
        elif m := re.fullmatch(r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", name):
            q, k, v = t.split(E)
            for part, x in (("query", unpermute(q)), ("key", unpermute(k)), ("value", v)):
                out[f"transformer.blocks.{m[1]}.attn.{part}.{m[2]}"] = x.numpy()
        elif m := re.fullmatch(r"blocks\.(\d+)\.ffn\.(\d+)\.(.+)", name):
            out[f"transformer.blocks.{m[1]}.mlp.{m[2]}.{m[3]}"] = t.numpy()
        elif name.startswith(("blocks.", "ln_f.")):
            out[f"transformer.{name}"] = t.numpy()
        elif name == "act_emb.weight":
            out["act_embedding_table.weight"] = t.numpy()
        elif m := re.fullmatch(r"(head_\w+)\.net\.(\d+)\.(.+)", name):
            out[f"{HEADS[m[1]]}.head_module.{m[2]}.{m[3]}"] = t.numpy()
        else:
            raise KeyError(f"no LightZero name for {name}")
    return out


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| relative to b's largest magnitude (0 when both are 0)."""
    scale = float(np.abs(b).max())
    return float(np.abs(a - b).max()) / scale if scale > 0 else float(np.abs(a).max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=7, help="root-inference steps of the rollout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rival-dir", type=Path, default=None)
    parser.add_argument("--json-out")
    args = parser.parse_args()

    import torch

    from lzk_common.support import DiscreteSupport
    from lzk_unizero.config import UniZeroModelConfig
    from lzk_unizero.inference import InferenceNet, root_inference, sequence_values
    from lzk_unizero.loss import UniZeroLossWeights, unizero_loss
    from lzk_unizero.model import WorldModel

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    cfg = UniZeroModelConfig(embed_dim=E, num_heads=H, num_layers=LAYERS, dropout=0.0, final_norm="SimNorm",
                             init="lightzero")
    model = WorldModel(cfg, (4,), A, N, N)
    target = copy.deepcopy(model)
    with torch.no_grad():
        for m in (model, target):
            for p in m.parameters():
                p.normal_(0.0, args.scale)
            bn = m.encoder.net[1]
            bn.running_mean.normal_(0.0, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    support = DiscreteSupport.from_range([-(N // 2), N // 2 + 1, 1])

    B = args.batch
    obs = cartpole_roots(B * (K + 1), args.seed).reshape(B, K + 1, 4)
    actions = rng.integers(0, A, (B, K))
    mask = np.ones((B, K + 1), np.float32)
    for row in np.flatnonzero(rng.random(B) < 0.3):
        mask[row, rng.integers(1, K + 1):] = 0.0
    target_reward = (rng.normal(0, 3, (B, K + 1)) * mask).astype(np.float32)
    target_value = (rng.uniform(-40, 60, (B, K + 1)) * mask).astype(np.float32)
    target_policy = rng.random((B, K + 1, A)).astype(np.float32)
    target_policy = target_policy / target_policy.sum(-1, keepdims=True) * mask[..., None]
    timestep = rng.integers(0, 150, (B, 1)) + np.arange(K)
    seq_obs = cartpole_roots(B * (K + 1), args.seed + 1).reshape(B, K + 1, 4)
    seq_actions = rng.integers(0, A, (B, K))
    roll = 4
    roll_obs = cartpole_roots(roll * args.steps, args.seed + 2).reshape(roll, args.steps, 4)
    roll_actions = rng.integers(0, A, (roll, args.steps))

    categorical = lambda x: support.encode(torch.as_tensor(x[:, :K])).numpy()  # noqa: E731
    target_encoder = {k[len("tokenizer."):]: v for k, v in to_lightzero(
        {n: t for n, t in target.state_dict().items() if n.startswith("encoder.")}).items()}
    arrays = {
        **{f"p/{k}": v for k, v in to_lightzero(model.state_dict()).items()},
        **{f"t/{k}": v for k, v in target_encoder.items()},
        "dims": np.array([E, H, LAYERS, A, N]), "obs": obs[:, :K], "actions": actions, "timestep": timestep,
        "mask": mask[:, :K] == 1, "rewards": categorical(target_reward), "target_value": categorical(target_value),
        "target_policy": target_policy[:, :K], "seq_obs": seq_obs, "seq_actions": seq_actions,
        "roll_obs": roll_obs, "roll_actions": roll_actions,
    }
    theirs = run_lightzero_driver(args.rival_dir or default_rival_dir(), "_lightzero_unizero.py", arrays)

    summary: dict[str, Any] = {"batch": B, "K": K, "scale": args.scale, "seed": args.seed}
    with torch.no_grad():
        model.eval()
        ours_seq = sequence_values(model, torch.as_tensor(seq_obs), torch.as_tensor(seq_actions), support).numpy()
        lz_seq = support.decode(torch.as_tensor(theirs["seq_value"])).numpy().reshape(B, K + 1)
        summary["bootstrap_value_first_k"] = relative(ours_seq[:, :K], lz_seq[:, :K])
        summary["bootstrap_value_last_lightzero_repeats"] = bool(np.array_equal(lz_seq[:, K], lz_seq[:, K - 1]))
        net, M = InferenceNet(model, cfg.context_length), (cfg.context_length - 1) // 2
        per_step = []
        for t in range(args.steps):
            lo = max(0, t - M)
            w_obs, w_act = roll_obs[:, lo: t + 1], roll_actions[:, lo:t]
            value, policy, _ = root_inference(net, torch.as_tensor(w_obs, dtype=torch.float32), torch.as_tensor(w_act),
                                              np.full(roll, t + 1 - lo))
            per_step.append(max(float(np.abs(value.numpy() - theirs["root_value"][:, t]).max()),
                                float(np.abs(policy.numpy() - theirs["root_policy"][:, t]).max())))
        summary["root_logits_by_step"] = per_step

    model.train()
    target.train()

    class Batch:  # the fields unizero_loss reads
        pass

    batch = Batch()
    for name, value in (("obs", obs), ("actions", actions), ("mask", mask), ("target_reward", target_reward),
                        ("target_value", target_value), ("target_policy", target_policy)):
        setattr(batch, name, torch.as_tensor(value))
    batch.weights = torch.ones(B)
    out = unizero_loss(model, target, batch, support, support, UniZeroLossWeights(entropy=5e-3, label_smoothing=0.0))
    out.loss.backward()
    losses = {"total": (out.loss, "total"), "obs": (out.obs, "loss_obs"), "reward": (out.reward, "loss_rewards"),
              "value": (out.value, "loss_value"), "policy": (out.policy, "loss_policy")}
    summary["losses"] = {k: [float(o.detach()), float(theirs[f"loss/{lz}"])] for k, (o, lz) in losses.items()}
    grads = to_lightzero({n: p.grad for n, p in model.named_parameters()})
    # The encoder's first Linear bias has a gradient of 0 up to rounding (a BatchNorm follows it):
    # such tensors (below 1e-5 of the largest gradient on both sides) are counted apart.
    largest = max(float(np.abs(g).max()) for g in grads.values())
    zero = {n for n, g in grads.items() if max(np.abs(g).max(), np.abs(theirs[f"g/{n}"]).max()) < 1e-5 * largest}
    summary["gradient_relative_max"] = max(relative(g, theirs[f"g/{n}"]) for n, g in grads.items() if n not in zero)
    summary["gradient_tensors"], summary["gradient_tensors_zero_up_to_rounding"] = len(grads), sorted(zero)

    print(f"bootstrap values, first K positions: largest difference {summary['bootstrap_value_first_k']:.1e} of the "
          f"largest value (LightZero's (K+1)-th repeats its K-th: {summary['bootstrap_value_last_lightzero_repeats']})")
    print("root logits by step, max |diff|: " + ", ".join(f"{t}: {d:.1e}" for t, d in enumerate(per_step)))
    for k, (o, lz) in summary["losses"].items():
        print(f"loss {k:7s} ours {o:.6f}  LightZero {lz:.6f}")
    print(f"gradients: {len(grads)} tensors, largest difference {summary['gradient_relative_max']:.1e} of the "
          f"tensor's largest ({len(zero)} zero up to rounding on both sides: {', '.join(sorted(zero))})")
    write_results(summary, "unizero_lightzero_parity.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
