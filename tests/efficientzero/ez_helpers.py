"""Small EfficientZero configs and policies for the tests, and a per-node reference of
LightZero's value-prefix search semantics (addendum C.5) built on tests/mcts/reference.py."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from lzk_common.inference import decode_np, fold_batchnorm
from lzk_efficientzero.config import EfficientZeroModelConfig, EfficientZeroPolicyConfig
from lzk_efficientzero.policy import EfficientZeroPolicy
from muzero_helpers import SMALL_MODEL, randomize

OBS, A = (4,), 3


def small_model_cfg(**kw) -> EfficientZeroModelConfig:
    """MuZero's small test layout with a 12-wide LSTM."""
    return EfficientZeroModelConfig(**{**SMALL_MODEL, "lstm_hidden": 12, **kw})


def small_policy_cfg(**kw) -> EfficientZeroPolicyConfig:
    model_kw = kw.pop("model", {})
    base = dict(model=small_model_cfg(**model_kw), num_simulations=8, unroll_steps=3, batch_size=16,
                lstm_horizon_len=2)
    base.update(kw)
    return EfficientZeroPolicyConfig(**base)


def make_policy(seed: int = 0, std: float = 0.3, **cfg_kw) -> EfficientZeroPolicy:
    """A policy with random weights (zero-initialised layers too) and BN statistics."""
    torch.manual_seed(0)
    pol = EfficientZeroPolicy(small_policy_cfg(**cfg_kw), OBS, A, seed=seed)
    randomize(pol.model, seed=11 + seed, std=std)
    pol.learner.update_target()
    pol.mark_weights_changed()
    return pol


def path_model(model: torch.nn.Module, obs: np.ndarray, horizon: int, value_support, prefix_support
               ) -> Callable[[tuple[int, ...]], tuple[float, float, np.ndarray]]:
    """``model(path) -> (reward, value, logits)`` for ``reference.reference_search`` from the
    root ``obs`` [*O']: each call replays the path from the root, one node at a time, with
    LightZero's per-node rule (a node at depth d continues its parent's state; it stores a zero
    state, ``is_reset``, when d % H == 0; its reward is its prefix minus its parent's, or its
    prefix when the parent is the root or reset). Single rows of the folded eval network."""
    net = fold_batchnorm(model, drop=(model.ssl,))

    def run(path: Sequence[int]) -> tuple[float, float, np.ndarray]:
        with torch.inference_mode():
            latent = net.represent(torch.as_tensor(obs[None], dtype=torch.float32))
            state = net.initial_state(1, "cpu")
            parent_prefix, parent_reset = 0.0, True  # the root: prefix 0, fresh state
            for depth, a in enumerate(path, start=1):
                latent, (h, c), vp_logits, v_logits, logits = net.recurrent_inference(
                    latent, state, torch.tensor([a]))
                prefix = float(decode_np(vp_logits, prefix_support.values)[0])
                reward = prefix if parent_reset else prefix - parent_prefix
                is_reset = depth % horizon == 0
                state = net.initial_state(1, "cpu") if is_reset else (h, c)
                parent_prefix, parent_reset = prefix, is_reset
            value = float(decode_np(v_logits, value_support.values)[0])
        return np.float32(reward), np.float32(value), logits[0].numpy()

    return run


def node_depths(children: np.ndarray) -> np.ndarray:
    """Depth (edges from the root) of every created node of one tree's children [N, A]; -1 unused."""
    depth = np.full(children.shape[0], -1, np.int64)
    depth[0] = 0
    frontier = [0]
    while frontier:
        n = frontier.pop()
        for c in children[n]:
            if c >= 0:
                depth[c] = depth[n] + 1
                frontier.append(int(c))
    return depth


__all__ = ["A", "OBS", "make_policy", "node_depths", "path_model", "randomize", "small_model_cfg",
           "small_policy_cfg"]
