"""LightZero's side of ``unizero_lightzero_parity.py``; runs under the rival kit's Python (``$LZ_PY``).

    $LZ_PY benchmarks/_lightzero_unizero.py IN.npz OUT.npz

IN: ``p/<name>`` the world model's tensors under LightZero 0.2.0's names (buffers included),
``t/<name>`` the target tokenizer's, ``dims`` [E, H, L, A, N], the learner batch (``obs`` [B, K, 4],
``actions`` [B, K], ``timestep`` [B, K], ``mask`` [B, K] bool, the categorical targets ``rewards``
and ``target_value`` [B, K, N], ``target_policy`` [B, K, A]), one bootstrap sequence per row
(``seq_obs`` [B, K+1, 4], ``seq_actions`` [B, K]) and a rollout (``roll_obs`` [E', T, 4],
``roll_actions`` [E', T]).

Builds LightZero 0.2.0's vector ``WorldModel`` (RepresentationNetworkMLP tokenizer, RoPE, no
dropout) with its heads replaced by SPEC §4.1's shape (0.2.0's heads are Linear → GELU → Linear),
loads the tensors, then, in this order: the bootstrap values of the sequences
(``forward_initial_inference`` with actions and no current observation, eval mode: ``seq_value``
[B·(K+1), N]); the rollout's root inferences as its collect mode makes them, one call per step
with the previous observations and actions (``root_value`` [E', T, N], ``root_policy`` [E', T,
A]); ``compute_loss`` in train mode with the target tokenizer, then backward. OUT also holds the
loss terms (``loss/<name>``) and every parameter's gradient (``g/<name>``).
"""
import sys

import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from lzero.model.common import RepresentationNetworkMLP, SimNorm
from lzero.model.unizero_world_models.tokenizer import Tokenizer
from lzero.model.unizero_world_models.world_model import WorldModel
from lzero.policy.unizero import UniZeroPolicy


def spec_head(E: int, out: int, simnorm: bool) -> nn.Sequential:
    """SPEC §4.1's head: LN(E) → Linear(E, 4E) → LN(4E) → GELU(tanh) → Linear(4E, out) [→ SimNorm(8)]."""
    layers = [nn.LayerNorm(E), nn.Linear(E, 4 * E), nn.LayerNorm(4 * E), nn.GELU(approximate="tanh"),
              nn.Linear(4 * E, out)]
    return nn.Sequential(*layers, *([SimNorm(8)] if simnorm else []))


def load(module: nn.Module, data: np.lib.npyio.NpzFile, prefix: str) -> None:
    state = {k[len(prefix):]: torch.from_numpy(np.array(data[k])) for k in data.files if k.startswith(prefix)}
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (m == "transformer.freqs_cis" or m.endswith(".attn.mask"))]
    if missing or unexpected:
        raise SystemExit(f"{prefix}: missing {missing}, unexpected {unexpected}")


def main(src: str, dst: str) -> None:
    data = np.load(src)
    E, H, L, A, N = (int(x) for x in data["dims"])
    torch.set_num_threads(1)
    wm = EasyDict(UniZeroPolicy.config["model"]["world_model_cfg"])
    wm.update(dict(embed_dim=E, num_heads=H, num_layers=L, action_space_size=A, support_size=N, obs_type="vector",
                   rotary_emb=True, embed_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0, policy_entropy_weight=5e-3,
                   predict_latent_loss_type="mse", device="cpu", norm_type="BN", env_num=8, max_tokens=20))

    def tokenizer() -> Tokenizer:
        return Tokenizer(encoder=RepresentationNetworkMLP(4, hidden_channels=E, layer_num=2,
                                                          activation=nn.GELU(approximate="tanh"), group_size=8))

    model = WorldModel(wm, tokenizer())
    for name, out, simnorm in (("head_observations", E, True), ("head_rewards", N, False),
                               ("head_value", N, False), ("head_policy", A, False)):
        getattr(model, name).head_module = spec_head(E, out, simnorm)
    load(model, data, "p/")
    target = tokenizer()
    load(target, data, "t/")
    out = {}
    with torch.no_grad():
        model.eval()
        B, K = data["seq_actions"].shape
        seq = model.forward_initial_inference(
            {"obs": torch.from_numpy(data["seq_obs"]).reshape(B * (K + 1), -1), "action": data["seq_actions"],
             "current_obs": None}, start_pos=data["timestep"])
        out["seq_value"] = seq[4].numpy()
        roll_obs, roll_actions = torch.from_numpy(data["roll_obs"]), data["roll_actions"]
        n, T = roll_actions.shape
        last_obs, last_action, values, policies = torch.zeros(n, roll_obs.shape[-1]), [-1] * n, [], []
        for t in range(T):  # the collect mode's root inference, one env step at a time
            step = {"obs": last_obs, "action": last_action, "current_obs": roll_obs[:, t]}
            res = model.forward_initial_inference(step, start_pos=[t] * n)
            policies.append(res[3].reshape(n, -1).numpy())
            values.append(res[4].reshape(n, -1).numpy())
            last_obs, last_action = roll_obs[:, t], [int(a) for a in roll_actions[:, t]]
        out["root_value"], out["root_policy"] = np.stack(values, 1), np.stack(policies, 1)
    model.train()
    target.train()
    batch = {k: torch.from_numpy(np.array(data[k])) for k in ("obs", "actions", "timestep", "mask", "rewards",
                                                             "target_value", "target_policy")}
    batch["observations"], batch["mask_padding"] = batch.pop("obs"), batch.pop("mask")
    batch["ends"] = torch.zeros_like(batch["actions"])
    losses = model.compute_loss(batch, target, None)
    losses.loss_total.backward()
    out["loss/total"] = losses.loss_total.detach().numpy()
    for k in ("loss_obs", "loss_rewards", "loss_value", "loss_policy", "policy_entropy"):
        out[f"loss/{k}"] = losses.intermediate_losses[k].detach().numpy()
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[f"g/{name}"] = p.grad.numpy()
    np.savez(dst, **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
