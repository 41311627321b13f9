"""LightZero's side of ``lightzero_learner_parity.py``; runs under the rival kit's Python (``$LZ_PY``).

    $LZ_PY benchmarks/_lightzero_learn.py IN.npz OUT.npz

IN holds ``sd/0000 …`` (the weights of LightZero's CartPole MuZero MLP in its own state-dict
order, buffers included) and one learner batch in our layout: ``obs`` [B, K+1, 4], ``actions``
[B, K], ``mask`` [B, K+1], ``target_reward`` [B, K], ``target_value`` [B, K+1], ``target_policy``
[B, K+1, A], ``weights`` [B]. Builds LightZero 0.2.0's MuZero policy from its
``cartpole_muzero_config`` (batch size B), loads the weights into its learn and target models and
runs one ``_forward_learn`` on the batch in LightZero's own layout. OUT: its log values
(``log/<name>``), every parameter's gradient after clipping (``grad/<index>``, the state-dict
index) and the state dict after the step (``sd/<index>``).
"""
import copy
import sys

import numpy as np
import torch
from ding.config import compile_config
from ding.policy import create_policy
from zoo.classic_control.cartpole.config.cartpole_muzero_config import create_config, main_config


def main(src: str, dst: str) -> None:
    data = np.load(src)
    obs = data["obs"]
    b, k_plus_1 = obs.shape[:2]
    cfg, ccfg = copy.deepcopy(main_config), copy.deepcopy(create_config)
    cfg.policy.cuda, cfg.policy.device = False, "cpu"
    cfg.policy.batch_size = int(b)
    cfg.exp_name = dst + ".cfg"
    cfg = compile_config(cfg, seed=0, env=None, auto=True, create_cfg=ccfg, save_cfg=False)
    torch.set_num_threads(1)
    policy = create_policy(cfg.policy, enable_field=["learn"])
    model = policy._learn_model
    names = list(model.state_dict())
    weights = [data[k] for k in sorted(k for k in data.files if k.startswith("sd/"))]
    if len(weights) != len(names):
        raise SystemExit(f"{len(weights)} tensors given, LightZero's model has {len(names)}")
    state = {n: torch.from_numpy(np.array(w)) for n, w in zip(names, weights)}
    model.load_state_dict(state)
    policy._target_model.load_state_dict(state)
    # LightZero's batch: observations flattened over the K + 1 steps; rewards padded to K + 1.
    reward = np.concatenate([data["target_reward"], np.zeros((b, 1), np.float32)], axis=1)
    current = [obs.reshape(b, -1), data["actions"], data["mask"], np.arange(b), data["weights"], np.zeros(b)]
    # Read by its log dict only; set by the collect mode, which is not enabled here.
    policy._collect_mcts_temperature, policy.collect_epsilon = 0.25, 0.0
    log = policy._forward_learn([current, [reward, data["target_value"], data["target_policy"]]])
    out = {f"log/{k}": np.asarray(v, dtype=np.float64) for k, v in log.items() if np.isscalar(v)}
    params = dict(model.named_parameters())
    for i, n in enumerate(names):
        p = params.get(n)
        if p is not None and p.grad is not None:
            out[f"grad/{i:04d}"] = p.grad.numpy()
    for i, t in enumerate(model.state_dict().values()):
        out[f"sd/{i:04d}"] = t.numpy()
    np.savez(dst, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
