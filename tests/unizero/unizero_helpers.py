"""Tiny UniZero models and hand-checkable helpers shared by the lzk_unizero tests."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lzk_unizero.config import UniZeroModelConfig
from lzk_unizero.model import WorldModel

OBS_DIM, NUM_ACTIONS, ATOMS = 4, 3, 21  # support [-10, 11, 1]


def tiny_cfg(**kw: Any) -> UniZeroModelConfig:
    base: dict[str, Any] = dict(embed_dim=16, num_layers=2, num_heads=2, context_length=8, max_blocks=10,
                                value_support_range=[-10, 11, 1], reward_support_range=[-10, 11, 1])
    base.update(kw)
    return UniZeroModelConfig(**base)


def random_model(cfg: UniZeroModelConfig | None = None, *, head_std: float = 0.3, seed: int = 0,
                 obs_shape: tuple[int, ...] = (OBS_DIM,)) -> WorldModel:
    """A world model whose zero-initialised head layers are randomised (so outputs vary), in eval mode."""
    torch.manual_seed(seed)
    m = WorldModel(cfg or tiny_cfg(), obs_shape, NUM_ACTIONS, ATOMS, ATOMS)
    with torch.no_grad():
        for head in (m.head_value, m.head_policy, m.head_reward, m.head_next_latent):
            head.last.weight.normal_(0.0, head_std)
            head.last.bias.normal_(0.0, head_std)
    return m.eval()


def tree_step(session: Any, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray,
              new_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Call a search session (a ``lzk_mcts`` model step) per tree: the slots of ``batch_idx``'s
    parents and children (slot = node·B + b) → (reward, value, policy logits)."""
    b = np.asarray(batch_idx, dtype=np.int64)
    B = session.store.B
    out = session(np.asarray(parent_node, dtype=np.int64) * B + b, np.asarray(action, dtype=np.int64),
                  int(new_node) * B + b)
    return out.reward, out.value, out.prior_logits
