"""Compiled search step of the residual EfficientZero MLP (``policy.search_backend: numba``): the
shared kernels of :mod:`lzk_common.numba_mlp` plus the LSTM cell and the reset rule, one call per
simulation. Per new node (parent p, child c, depth d = depth[p] + 1, H = horizon)::

    nxt, u   = residual_dynamics(store[p])                       → store[c] = nxt
    gates    = [u ‖ h[p]]·[W_ih | W_hh]ᵀ + (b_ih + b_hh)          [4·Hd]: i, f, g, o (torch's order)
    c'       = σ(f)·c[p] + σ(i)·tanh(g),   h' = σ(o)·tanh(c')
    (h[c], c[c]) = (0, 0) if d % H == 0 else (h', c')            (LightZero's is_reset)
    prefix[c] = decode(value_prefix_head(h'))
    reward   = prefix[c] − prefix[p], or prefix[c] where depth[p] % H == 0 (the parent's state was fresh)
    value, logits = prediction(nxt)

σ and tanh use the vectorisable float32 exp of the decoding (σ(x) = 1/(1 + e^−x), tanh(x) =
1 − 2/(1 + e^2x)): within ~1e-7 of torch's (absolute; tanh near 0 loses relative precision,
not absolute). The gates layer is one panel layer over the concatenated input, so the two LSTM
matmuls are one microkernel call.

numba caches compiled code per source file and checks only that file's timestamp: after editing
:mod:`lzk_common.numba_mlp`, :mod:`lzk_common.numba_simd` or h⁻¹ in ``support.py``, touch this
file (or clear ``__pycache__``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from lzk_common.numba_cache import act_once, ensure_cached, mark_warming
from lzk_common.numba_mlp import (CHUNK_ROWS, FASTMATH, FC1B, REWARD_H, REWARD_O, CompiledLatentMLP, PackedLayer,
                                  decoded_head, dense, exp_f32, folded_residual_mlp, mlp_predict, pad, predict_rows,
                                  residual_dynamics, step_buffers)
from lzk_common.support import DiscreteSupport
from lzk_efficientzero.model_mlp import EfficientZeroMLP
from lzk_mcts.slots import ArraySlots

#: Row of the layer table after the shared 12: the LSTM gates over [u ‖ h].
LSTM = 12

_F1, _F2 = np.float32(1.0), np.float32(2.0)


def supports(net: object) -> bool:
    """True for a BN-folded residual :class:`EfficientZeroMLP` with 1-layer heads."""
    return isinstance(net, EfficientZeroMLP) and folded_residual_mlp(net, "value_prefix_head")


def lstm_layer(net: EfficientZeroMLP) -> PackedLayer:
    """The LSTM cell as one layer over [u (D, padded) ‖ h (Hd)]: weight [4·Hd, pad(D) + pad(Hd)],
    bias b_ih + b_hh, no ReLU."""
    d, hd = net.latent_shape[0], net.lstm_hidden
    cell = net.lstm
    w = np.zeros((4 * hd, pad(d) + pad(hd)), np.float32)
    w[:, :d] = cell.weight_ih.detach().cpu().float().numpy()
    w[:, pad(d):pad(d) + hd] = cell.weight_hh.detach().cpu().float().numpy()
    bias = (cell.bias_ih + cell.bias_hh).detach().cpu().float().numpy()
    return w, bias, False


# error_model="numpy": no zero-division checks (1 + e^x >= 1), which would stop LLVM from
# vectorising the gate loops (measured: 42 → 3 µs for 8 rows of 128 units).
_KERNEL = dict(fastmath=FASTMATH, boundscheck=False, error_model="numpy")


@njit(**_KERNEL)
def _sigmoid(x: np.float32) -> np.float32:
    return _F1 / (_F1 + exp_f32(-x))


@njit(**_KERNEL)
def _tanh(x: np.float32) -> np.float32:
    return _F1 - _F2 / (_F1 + exp_f32(_F2 * x))


@njit(**_KERNEL)
def lstm_cell(gates: np.ndarray, c: np.ndarray, h_out: np.ndarray, c_out: np.ndarray) -> None:
    """One row of the LSTM cell from its pre-activations ``gates`` [>= 4·Hd] (i, f, g, o; turned
    into the activations in place) and cell state c [Hd] → h_out, c_out [>= Hd]. Each pass is a
    plain loop over contiguous floats, so that LLVM vectorises it."""
    hd = c.shape[0]
    for j in range(2 * hd):  # input and forget gates
        gates[j] = _sigmoid(gates[j])
    for j in range(2 * hd, 3 * hd):  # candidate
        gates[j] = _tanh(gates[j])
    for j in range(3 * hd, 4 * hd):  # output gate
        gates[j] = _sigmoid(gates[j])
    for j in range(hd):
        c_out[j] = gates[hd + j] * c[j] + gates[j] * gates[2 * hd + j]
    for j in range(hd):
        h_out[j] = gates[3 * hd + j] * _tanh(c_out[j])


def lstm_floats(layers: np.ndarray, rows: int) -> int:
    """Workspace floats of the LSTM part for ``rows`` trees: [u ‖ h] inputs, gates, h', c'."""
    k_in, g_pad = layers[LSTM, 1], layers[LSTM, 2]
    h_pad = k_in - layers[FC1B, 2]
    return int(rows * (k_in + g_pad + 2 * h_pad))


@njit(cache=True, nogil=True, **_KERNEL)
def lstm_step(store: np.ndarray, hidden: np.ndarray, cell: np.ndarray, prefix: np.ndarray, depth: np.ndarray,
              parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray, params: np.ndarray,
              layers: np.ndarray, support_r: np.ndarray, support_v: np.ndarray, horizon: int, scratch: np.ndarray,
              lstm_scratch: np.ndarray, reward: np.ndarray, value: np.ndarray, logits: np.ndarray) -> None:
    """One simulation's network step for the n = len(parent_slot) trees (see the module doc).

    Slot stores (row node·B + b): store [·, D] latents, hidden/cell [·, Hd], prefix [·] decoded
    value prefixes, depth [·] int64; read at ``parent_slot``, written at ``child_slot``.
    scratch [>= scratch_floats(layers, n)] and lstm_scratch [>= lstm_floats(layers, n)] float32
    are workspace.
    Writes reward [n] (from the prefixes), value [n] (decoded) and logits [n, A].
    """
    n = parent_slot.shape[0]
    hd = hidden.shape[1]
    x, h, nxt, u, hid, lg, z = step_buffers(scratch, layers, n)
    k_in, g_pad, dp = layers[LSTM, 1], layers[LSTM, 2], layers[FC1B, 2]
    h_pad = k_in - dp
    o1, o2, o3 = n * k_in, n * (k_in + g_pad), n * (k_in + g_pad + h_pad)
    xh = lstm_scratch[:o1].reshape((n, k_in))
    gates = lstm_scratch[o1:o2].reshape((n, g_pad))
    hn = lstm_scratch[o2:o3].reshape((n, h_pad))
    cn = lstm_scratch[o3:o3 + n * h_pad].reshape((n, h_pad))

    residual_dynamics(store, parent_slot, action, child_slot, params, layers, x, h, nxt, u)
    for r in range(n):  # [u ‖ h_parent] (u's padded columns are exactly 0)
        p = parent_slot[r]
        for j in range(dp):
            xh[r, j] = u[r, j]
        for j in range(hd):
            xh[r, dp + j] = hidden[p, j]
        for j in range(dp + hd, k_in):
            xh[r, j] = 0.0
    dense(xh, params, layers[LSTM], gates)
    for r in range(n):
        p, c = parent_slot[r], child_slot[r]
        lstm_cell(gates[r], cell[p], hn[r], cn[r])
        for j in range(hd, h_pad):
            hn[r, j] = 0.0
        d = depth[p] + 1
        depth[c] = d
        fresh = d % horizon == 0  # the node's children start from a zero state
        for j in range(hd):
            hidden[c, j] = 0.0 if fresh else hn[r, j]
            cell[c, j] = 0.0 if fresh else cn[r, j]
    decoded_head(hn, params, layers[REWARD_H], layers[REWARD_O], hid, z, support_r, reward)
    for r in range(n):  # reward = difference of consecutive prefixes, or the prefix below a fresh state
        p = parent_slot[r]
        vp = reward[r]
        prefix[child_slot[r]] = vp
        if depth[p] % horizon != 0:
            reward[r] = vp - prefix[p]
    predict_rows(nxt, params, layers, support_v, h, u, hid, lg, z, value, logits)


_WARM = "lzk_efficientzero.numba_lstm:warm_cache"


def warm_cache() -> None:
    """Compile this backend's kernels into numba's cache (run in a subprocess by
    :func:`lzk_common.numba_cache.ensure_cached`): one search of a tiny EfficientZero."""
    mark_warming(_WARM)
    from lzk_efficientzero.config import EfficientZeroModelConfig, EfficientZeroPolicyConfig
    from lzk_efficientzero.policy import EfficientZeroPolicy

    model = EfficientZeroModelConfig(latent_dim=16, lstm_hidden=8, ssl=False)
    act_once(EfficientZeroPolicy(EfficientZeroPolicyConfig(num_simulations=2, model=model), (4,), 2, seed=0))


class NumbaValuePrefixMLP(CompiledLatentMLP):
    """EfficientZero's compiled search inference: the shared backend plus the per-node LSTM
    state, value prefix and depth at the search's slots."""

    def __init__(self, net: EfficientZeroMLP, value_support: DiscreteSupport, prefix_support: DiscreteSupport,
                 horizon: int) -> None:
        if not supports(net):
            raise ValueError("the numba backend needs a BN-folded residual EfficientZeroMLP with 1-layer heads")
        super().__init__(net, "value_prefix_head", value_support, prefix_support, extra_layers=[lstm_layer(net)])
        self.horizon = int(horizon)
        hd = int(net.lstm_hidden)
        self.hidden = ArraySlots((hd,), np.float32)
        self.cell = ArraySlots((hd,), np.float32)
        self.prefix = ArraySlots((), np.float32)
        self.depth = ArraySlots((), np.int64)
        self._lstm_scratch = np.zeros(0, np.float32)
        ensure_cached((lstm_step, mlp_predict), _WARM)  # load, never compile, in this process

    def _workspace(self, rows: int) -> np.ndarray:
        need = lstm_floats(self.layers, min(rows, CHUNK_ROWS))
        if self._lstm_scratch.size < need:
            self._lstm_scratch = np.zeros(need, np.float32)
        return super()._workspace(rows)

    def begin(self, root_latent: np.ndarray, num_simulations: int) -> None:
        """Start a search from root latents [B, D]: roots at depth 0 with a zero state and prefix."""
        super().begin(root_latent, num_simulations)
        b = root_latent.shape[0]
        for store in (self.hidden, self.cell, self.prefix, self.depth):
            store.reserve(num_simulations + 1, b)
            store.array[:b] = 0

    def _kernel(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray, reward: np.ndarray,
                value: np.ndarray, logits: np.ndarray) -> None:
        lstm_step(self.latents.array, self.hidden.array, self.cell.array, self.prefix.array, self.depth.array,
                  parent_slot, action, child_slot, self.params, self.layers, self.support_r, self.support_v,
                  self.horizon, self._scratch, self._lstm_scratch, reward, value, logits)
