"""Compiled search step of the residual MuZero MLP (``policy.search_backend: numba``): the shared
kernels of :mod:`lzk_common.numba_mlp` with MuZero's transition head, a reward head::

    nxt, u = residual_dynamics(store[parent])                  → store[child] = nxt
    reward = decode(reward_head(u)),  value, logits = prediction(nxt)

numba caches compiled code per source file and checks only that file's timestamp: after editing
:mod:`lzk_common.numba_mlp`, :mod:`lzk_common.numba_simd` or h⁻¹ in ``support.py``, touch this
file (or clear ``__pycache__``).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from torch import nn

from lzk_common.numba_cache import act_once, ensure_cached, mark_warming
from lzk_common.numba_mlp import (FASTMATH, REWARD_H, REWARD_O, CompiledLatentMLP, decoded_head, linear_layers,
                                  mlp_predict, pack_layers, predict_rows, residual_dynamics, step_buffers)
from lzk_common.numba_mlp import folded_residual_mlp as _folded
from lzk_common.support import DiscreteSupport
from lzk_muzero.model_mlp import MuZeroMLP


def folded_residual_mlp(net: nn.Module) -> bool:
    """True for a BN-folded :class:`MuZeroMLP` with residual dynamics and one hidden layer per
    head: the layout this backend (and the torch fused path) computes."""
    return isinstance(net, MuZeroMLP) and _folded(net, "reward_head")


def pack_weights(net: MuZeroMLP) -> tuple[np.ndarray, np.ndarray]:
    """The Linears of a :func:`folded_residual_mlp` as panels → (params [P] float32, layers [12, 5]
    int64), in the order of the ``lzk_common.numba_mlp.FC1``… constants."""
    return pack_layers(linear_layers(net, "reward_head"))


@njit(cache=True, fastmath=FASTMATH, boundscheck=False, nogil=True)
def mlp_step(store: np.ndarray, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray,
             params: np.ndarray, layers: np.ndarray, support_r: np.ndarray, support_v: np.ndarray,
             scratch: np.ndarray, reward: np.ndarray, value: np.ndarray, logits: np.ndarray) -> None:
    """One simulation's network step for the n = len(parent_slot) trees (see the module doc).

    store [(S + 1)·B, D] float32 (the search's slots) is read at rows ``parent_slot`` and written
    at rows ``child_slot``; scratch [>= scratch_floats(layers, n)] float32 is workspace.
    Writes reward [n], value [n] (decoded) and logits [n, A].
    """
    n = parent_slot.shape[0]
    x, h, nxt, u, hid, lg, z = step_buffers(scratch, layers, n)
    residual_dynamics(store, parent_slot, action, child_slot, params, layers, x, h, nxt, u)
    # Reward from fc_dynamics_2(nxt), then the prediction network on nxt.
    decoded_head(u, params, layers[REWARD_H], layers[REWARD_O], hid, z, support_r, reward)
    predict_rows(nxt, params, layers, support_v, h, u, hid, lg, z, value, logits)


_WARM = "lzk_muzero.numba_mlp:warm_cache"


def warm_cache() -> None:
    """Compile this backend's kernels into numba's cache (run in a subprocess by
    :func:`lzk_common.numba_cache.ensure_cached`): one search of a tiny MuZero."""
    mark_warming(_WARM)
    from lzk_muzero.config import MuZeroModelConfig, MuZeroPolicyConfig
    from lzk_muzero.policy import MuZeroPolicy

    act_once(MuZeroPolicy(MuZeroPolicyConfig(num_simulations=2, model=MuZeroModelConfig(latent_dim=16, ssl=False)),
                          (4,), 2, seed=0))


class NumbaMLP(CompiledLatentMLP):
    """MuZero's compiled search inference (see :class:`~lzk_common.numba_mlp.CompiledLatentMLP`)."""

    def __init__(self, net: MuZeroMLP, value_support: DiscreteSupport, reward_support: DiscreteSupport) -> None:
        if not folded_residual_mlp(net):
            raise ValueError("the numba backend needs a BN-folded residual MuZeroMLP with 1-layer heads")
        super().__init__(net, "reward_head", value_support, reward_support)
        ensure_cached((mlp_step, mlp_predict), _WARM)  # load, never compile, in this process

    def _kernel(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray, reward: np.ndarray,
                value: np.ndarray, logits: np.ndarray) -> None:
        mlp_step(self.latents.array, parent_slot, action, child_slot, self.params, self.layers, self.support_r,
                 self.support_v, self._scratch, reward, value, logits)
