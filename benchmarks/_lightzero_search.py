"""LightZero's side of ``lightzero_search_parity.py``; runs under the rival kit's Python (``$LZ_PY``).

    $LZ_PY benchmarks/_lightzero_search.py IN.npz OUT.npz

IN holds ``sd/0000 …`` (the weights of LightZero's CartPole MuZero MLP, in its own parameter
order), ``obs`` [B, 4] and ``sims`` [S]. Builds LightZero 0.2.0's model from its
``cartpole_muzero_config``, loads the weights, and for each simulation count runs its C++ tree
(``MuZeroMCTSCtree``) from the roots of ``obs`` without root noise. OUT: ``root_policy_logits``,
``root_value_logits`` [B, ·], and per count ``visits_<S>`` [B, 2], ``values_<S>`` [B].
"""
import copy
import sys

import numpy as np
import torch
from ding.config import compile_config
from ding.policy import create_policy
from lzero.mcts.tree_search.mcts_ctree import MuZeroMCTSCtree
from zoo.classic_control.cartpole.config.cartpole_muzero_config import create_config, main_config


def main(src: str, dst: str) -> None:
    data = np.load(src)
    cfg, ccfg = copy.deepcopy(main_config), copy.deepcopy(create_config)
    cfg.policy.cuda, cfg.policy.device = False, "cpu"
    cfg.exp_name = dst + ".cfg"
    cfg = compile_config(cfg, seed=0, env=None, auto=True, create_cfg=ccfg, save_cfg=False)
    policy = create_policy(cfg.policy, enable_field=["collect"])
    model = policy._collect_model
    mine_all = model.state_dict()
    weights = [data[k] for k in sorted(k for k in data.files if k.startswith("sd/"))]
    if len(weights) != len(mine_all):
        raise SystemExit(f"{len(weights)} tensors given, LightZero's model has {len(mine_all)}")
    state = {}
    for w, (name, mine) in zip(weights, mine_all.items()):
        if tuple(w.shape) != tuple(mine.shape):
            raise SystemExit(f"{name}: shape {tuple(w.shape)} given, {tuple(mine.shape)} expected")
        state[name] = torch.from_numpy(np.array(w)).to(mine.dtype)
    model.load_state_dict(state)
    model.eval()
    obs = torch.from_numpy(data["obs"])
    b = obs.shape[0]
    mcts = policy._mcts_collect
    out = {}
    with torch.no_grad():
        root = model.initial_inference(obs)
    out["root_policy_logits"], out["root_value_logits"] = root.policy_logits.numpy(), root.value.numpy()
    for sims in data["sims"].tolist():
        mcts._cfg.num_simulations = int(sims)
        roots = MuZeroMCTSCtree.roots(b, [[0, 1]] * b)
        roots.prepare_no_noise([0.0] * b, root.policy_logits.numpy().tolist(), [-1] * b)
        mcts.search(roots, model, root.latent_state.numpy(), [-1] * b)
        out[f"visits_{sims}"] = np.asarray(roots.get_distributions(), dtype=np.float64)
        out[f"values_{sims}"] = np.asarray(roots.get_values(), dtype=np.float64)
    np.savez(dst, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
