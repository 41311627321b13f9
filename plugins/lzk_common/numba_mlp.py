"""Compiled search steps (``policy.search_backend: numba``) of the residual latent MLP that
MuZero and EfficientZero share (:class:`~lzk_common.latent_models.LatentMLP`): the kernels, the
weight packing and the backend object's plumbing. One numba call per simulation does gather →
dynamics → heads → decoding → scatter on float32 numpy arrays, instead of ~20 torch ops; each
algorithm writes its step kernel from the pieces here (MuZero: :mod:`lzk_muzero.numba_mlp`,
EfficientZero: :mod:`lzk_efficientzero.numba_lstm`).

D = latent size, A = actions, Hr/Hv/Hp = head widths, Nr/Nv = support sizes, n = trees expanded
by this simulation, B = trees in the search, S = simulations. From the BN-folded network and the
latents ``store[node·B + b]`` [(S + 1)·B, D], the shared part of a step computes::

    s      = store[parent·B + b]                                   [n, D]
    nxt    = relu(relu([s ‖ onehot(a)]·W1ᵀ + b1)·W2ᵀ + b2) + s      → store[new_node·B + b]
    u      = fc_dynamics_2(nxt)                                     (the transition features)
    value  = decode(value_head(prediction_trunk(nxt))),  logits = policy_head(prediction_trunk(nxt))

and the algorithm maps u to its head on the reward support ("transition head": MuZero's reward
head, EfficientZero's LSTM and value-prefix head), with decode(z) = h⁻¹(Σ softmax(z)·support).
Only the decoded scalars leave the call.

Why it is fast: at B ≈ 8..64 a torch step pays ~5 µs per op for ~20 ops; here every layer is
one microkernel call (:func:`dense`, ~90% of the FMA peak through :mod:`lzk_common.numba_simd`).
Exactness: the same float32 products as torch in another summation order (≈1e-7 relative);
the softmax expectation is accumulated in float64, since Σ e_i·s_i cancels (terms up to ±300):
the torch path's float32 reduction is the less exact of the two (~1e-4 on near-uniform logits).

Weights are packed once per weight version (the policy rebuilds its snapshot when its version
moves) into one flat float32 array of *panels*: a Linear [N, K] becomes [⌈N/16⌉, K, 16] (zero
padded), so the microkernel streams 16 contiguous outputs per input. Activations are padded to
multiples of 16 columns; padded columns are exactly 0 and meet zero weight rows in the next layer.

numba caches compiled code per source file and checks only that file's timestamp: after editing
this file, ``numba_simd.py`` or h⁻¹ in ``support.py``, touch the algorithms' step modules (or
clear ``__pycache__``).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch import nn

from lzk_common.support import DiscreteSupport, inverse_scalar_transform_scalar
from lzk_common.latent_models import LatentMLP
from lzk_mcts.slots import ArraySlots
from lzk_common.numba_simd import bits_f32, f32_bits, vadd, vbroadcast, vfma, vload, vrelu, vstore, vzero

PANEL = 16  # outputs per weight panel: 2 vectors of 8 lanes
CHUNK_ROWS = 128  # rows per compiled call: bounds the workspace (~0.6 MB) for reanalysis/value batches
FASTMATH = {"reassoc", "contract", "nsz"}  # vectorisable reductions and FMAs; NaN/inf semantics kept

# Rows of the layer table (one per Linear, in network order); REWARD_* is the transition head
# (MuZero's reward head, EfficientZero's value-prefix head). Algorithms may append rows.
FC1, FC1B, FC2A, TRUNK_A, FC2B, TRUNK_B, REWARD_H, VALUE_H, POLICY_H, REWARD_O, VALUE_O, POLICY_O = range(12)

_F0, _F1, _HALF = np.float32(0.0), np.float32(1.0), np.float32(0.5)
# Cephes expf: e^x = 2^n·e^r, n = round(x·log2 e), r = x − n·ln 2 (ln 2 in two parts so that n·C1
# is exact), e^r by a degree-6 polynomial on |r| <= ln2/2 (≤ 3 ulp); 2^n assembled from bits.
_LOG2E = np.float32(1.44269504088896341)
_C1, _C2 = np.float32(0.693359375), np.float32(-2.12194440e-4)
_P0, _P1, _P2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
_P3, _P4, _P5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
# Below this, e^x underflows float32's normal range: clamping keeps 2^n normal; the error
# (< 1.2e-38 per term) is invisible next to the softmax's largest term, e^0 = 1.
_EXP_LO = np.float32(-87.33)
_KEY_MASK = np.int32(0x7FFFFFFF)
_INT32_MIN = np.int32(-(2 ** 31))


def pad(n: int) -> int:
    """n rounded up to a multiple of PANEL (the padded width of an activation or panel row)."""
    return -(-n // PANEL) * PANEL


# ------------------------------------------------------------------------------------------------
# Packing (Python, once per weight version)

def folded_residual_mlp(net: nn.Module, head: str) -> bool:
    """True for a BN-folded :class:`~lzk_common.latent_models.LatentMLP` with residual dynamics
    and one hidden layer in each of its transition head (attribute ``head``), value and policy
    heads: the layout these kernels compute."""
    if not isinstance(net, LatentMLP) or not net.res_connection or not hasattr(net, head):
        return False
    heads = (getattr(net, head), net.value_head, net.policy_head)
    seqs = (net.fc_dynamics_1, net.fc_dynamics_2, net.prediction_trunk, *heads)
    folded = all(not isinstance(m, (nn.BatchNorm1d, nn.LayerNorm)) for s in seqs for m in s)
    return folded and all(len(h) == 4 for h in heads)


#: One layer to pack: (weight [N, K] float32 with K the padded input width, bias [N], ReLU after it).
PackedLayer = tuple[np.ndarray, np.ndarray, bool]


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def linear_layers(net: LatentMLP, head: str) -> list[PackedLayer]:
    """The 12 Linears of a :func:`folded_residual_mlp` in the order of the ``FC1``… constants
    (``head``: the transition head's attribute), each with its input width padded: ``D + A``
    for fc1, whose input is [s ‖ onehot(a)], the padded input width elsewhere (the transition
    head's input need not be D wide: EfficientZero's reads the LSTM state)."""
    fc1, fc2, trunk = net.fc_dynamics_1, net.fc_dynamics_2, net.prediction_trunk
    rh, vh, ph = getattr(net, head), net.value_head, net.policy_head
    linears = [fc1[0], fc1[3], fc2[0], trunk[0], fc2[3], trunk[3], rh[0], vh[0], ph[0], rh[3], vh[3], ph[3]]
    # fc1 reads x = [s ‖ onehot(a)] unpadded; every other layer a padded activation of its input.
    k_in = [fc1[0].in_features] + [pad(lin.in_features) for lin in linears[1:]]
    out = []
    for i, (lin, k) in enumerate(zip(linears, k_in)):
        w = _numpy(lin.weight)
        padded = np.zeros((w.shape[0], k), np.float32)
        padded[:, :w.shape[1]] = w
        out.append((padded, _numpy(lin.bias), i not in (REWARD_O, VALUE_O, POLICY_O)))
    return out


def pack_layers(layers_in: list[PackedLayer]) -> tuple[np.ndarray, np.ndarray]:
    """Layers as panels → (params [P] float32, layers [len, 5] int64 rows (weight offset, K,
    N padded, bias offset, ReLU after it: 0/1), in the given order). Weight rows and bias
    entries beyond the true sizes are 0."""
    chunks, layers, offset = [], np.zeros((len(layers_in), 5), np.int64), 0
    for i, (w, b, relu) in enumerate(layers_in):
        (n_out, k), n_pad = w.shape, pad(w.shape[0])
        padded = np.zeros((n_pad, k), np.float32)
        padded[:n_out] = w
        bias = np.zeros(n_pad, np.float32)
        bias[:n_out] = b
        chunks += [padded.reshape(n_pad // PANEL, PANEL, k).transpose(0, 2, 1).reshape(-1), bias]
        layers[i] = offset, k, n_pad, offset + padded.size, relu
        offset += padded.size + n_pad
    return np.concatenate(chunks), layers


def scratch_floats(layers: np.ndarray, rows: int) -> int:
    """Size of the workspace of ``step_buffers`` (the step kernels, ``mlp_predict``) for ``rows`` trees."""
    dp, hid = layers[FC1B, 2], max(layers[REWARD_H, 2], layers[VALUE_H, 2], layers[POLICY_H, 2])
    z = max(layers[REWARD_O, 2], layers[VALUE_O, 2])
    return int(rows * (layers[FC1, 1] + 3 * dp + hid + layers[POLICY_O, 2]) + (rows + 1) * z)


# ------------------------------------------------------------------------------------------------
# Kernels

@njit(fastmath=FASTMATH, boundscheck=False)
def dense(x: np.ndarray, params: np.ndarray, layer: np.ndarray, out: np.ndarray) -> None:
    """out[:, :N padded] = act(x·Wᵀ + b) for ``layer`` (a row of the layer table; act = ReLU or
    the identity): x [n, K], out [n, >= N padded] (C-contiguous float32; wider rows keep their
    extra columns). Callers pass the row, not its index, and the ReLU flag is data: constants
    are literal types in numba, which would compile one copy of this function per value.

    Microkernel: a tile of 4 rows × 16 outputs lives in 8 vector registers while k runs over
    the panel [K, 16]; per k, 2 weight loads + 4 broadcasts feed 8 FMAs. Panels are the outer
    loop so that one panel (K·64 bytes) stays in L1 while all rows pass."""
    n, k_dim = x.shape
    w_off, n_pad, b_off, relu = layer[0], layer[2], layer[3], layer[4] != 0
    stride = out.shape[1]
    for p in range(n_pad // PANEL):
        panel = w_off + p * k_dim * PANEL
        j = p * PANEL
        b0, b1 = vload(params, b_off + j), vload(params, b_off + j + 8)
        r = 0
        while r < n:
            rows = min(4, n - r)
            a00, a01, a10, a11 = vzero(), vzero(), vzero(), vzero()
            a20, a21, a30, a31 = vzero(), vzero(), vzero(), vzero()
            if rows == 4:
                for k in range(k_dim):
                    w0, w1 = vload(params, panel + k * PANEL), vload(params, panel + k * PANEL + 8)
                    x0, x1 = vbroadcast(x[r, k]), vbroadcast(x[r + 1, k])
                    x2, x3 = vbroadcast(x[r + 2, k]), vbroadcast(x[r + 3, k])
                    a00, a01 = vfma(x0, w0, a00), vfma(x0, w1, a01)
                    a10, a11 = vfma(x1, w0, a10), vfma(x1, w1, a11)
                    a20, a21 = vfma(x2, w0, a20), vfma(x2, w1, a21)
                    a30, a31 = vfma(x3, w0, a30), vfma(x3, w1, a31)
            else:  # the last n % 4 rows, one at a time (tile rows 1..3 stay 0 and are not stored)
                for k in range(k_dim):
                    x0 = vbroadcast(x[r, k])
                    a00 = vfma(x0, vload(params, panel + k * PANEL), a00)
                    a01 = vfma(x0, vload(params, panel + k * PANEL + 8), a01)
                rows = 1
            for t in range(rows):
                lo, hi = (a00, a01) if t == 0 else (a10, a11) if t == 1 else (a20, a21) if t == 2 else (a30, a31)
                lo, hi = vadd(lo, b0), vadd(hi, b1)
                if relu:
                    lo, hi = vrelu(lo), vrelu(hi)
                o = (r + t) * stride + j
                vstore(out, o, lo)
                vstore(out, o + 8, hi)
            r += rows


@njit(fastmath=FASTMATH)
def _order_key(bits: np.int32) -> np.int32:
    """Maps float32 bits to int32 keys in the floats' order (an involution)."""
    return np.int32(bits ^ ((bits >> 31) & _KEY_MASK))


@njit(fastmath=FASTMATH)
def exp_f32(x: np.float32) -> np.float32:
    """e^x in float32 for x <= 88 (the decode calls it with x <= 0); NaN gives NaN."""
    x = x if not (x < _EXP_LO) else _EXP_LO
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _C1 - n * _C2
    p = ((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5
    return (p * (r * r) + r + _F1) * bits_f32((np.int32(n) + 127) << 23)


@njit(fastmath=FASTMATH)
def decode_row(z: np.ndarray, support: np.ndarray, e: np.ndarray) -> np.float32:
    """h⁻¹(Σ softmax(z)·support) of one row of logits z [>= N] over ``support`` [N] float64;
    e [>= N] float32 is scratch.

    Three vectorised passes: the max through order-preserving integer keys (LLVM vectorises an
    integer max, but a float max only under no-NaN semantics); e = exp(z − max) with its float32
    sum (positive terms: no cancellation); Σ e·support in float64 (terms of both signs up to
    |support| cancel). Fusing the last two passes stops LLVM from vectorising them well."""
    m = _INT32_MIN
    for i in range(support.shape[0]):
        key = _order_key(f32_bits(z[i]))
        m = key if key > m else m
    z_max = bits_f32(_order_key(m))
    s0 = _F0
    for i in range(support.shape[0]):
        v = exp_f32(z[i] - z_max)
        e[i] = v
        s0 += v
    s1 = 0.0
    for i in range(support.shape[0]):
        s1 += np.float64(e[i]) * support[i]
    return np.float32(inverse_scalar_transform_scalar(s1 / np.float64(s0)))


@njit
def step_buffers(scratch: np.ndarray, layers: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """C-contiguous views of the flat workspace for n rows: x [n, D + A], three [n, D padded]
    activations, hid (flat: [n, H padded] of any head), policy logits [n, A padded] and
    z [n + 1, N padded] (one reward/value head's logits, and a row for decode_row)."""
    d_in, dp, a_pad = layers[FC1, 1], layers[FC1B, 2], layers[POLICY_O, 2]
    h_max = max(layers[REWARD_H, 2], layers[VALUE_H, 2], layers[POLICY_H, 2])
    z_width = max(layers[REWARD_O, 2], layers[VALUE_O, 2])
    o1 = n * d_in
    o2, o3, o4 = o1 + n * dp, o1 + 2 * n * dp, o1 + 3 * n * dp
    o5 = o4 + n * h_max
    o6 = o5 + n * a_pad
    return (scratch[:o1].reshape((n, d_in)), scratch[o1:o2].reshape((n, dp)), scratch[o2:o3].reshape((n, dp)),
            scratch[o3:o4].reshape((n, dp)), scratch[o4:o5], scratch[o5:o6].reshape((n, a_pad)),
            scratch[o6:o6 + (n + 1) * z_width].reshape((n + 1, z_width)))


@njit(fastmath=FASTMATH, boundscheck=False)
def decoded_head(x: np.ndarray, params: np.ndarray, hidden: np.ndarray, output: np.ndarray,
                  hid: np.ndarray, z: np.ndarray, support: np.ndarray, out: np.ndarray) -> None:
    """out[r] = decode_row(head(x[r])) for the head ``hidden`` → ReLU → ``output`` (layer table
    rows); hid (flat) and z [n + 1, >= N padded] are workspace."""
    n = x.shape[0]
    h = hid[:n * hidden[2]].reshape((n, hidden[2]))
    dense(x, params, hidden, h)
    dense(h, params, output, z)
    e = z[n]
    for r in range(n):
        out[r] = decode_row(z[r], support, e)


@njit(fastmath=FASTMATH, boundscheck=False)
def predict_rows(latent: np.ndarray, params: np.ndarray, layers: np.ndarray, support_v: np.ndarray,
             t0: np.ndarray, t1: np.ndarray, hid: np.ndarray, lg: np.ndarray, z: np.ndarray,
             value: np.ndarray, logits: np.ndarray) -> None:
    """The prediction network on latent [n, D padded]: value [n] (decoded) and logits [n, A].
    t0, t1 [n, D padded], hid, lg, z: workspace (see step_buffers)."""
    n = latent.shape[0]
    dense(latent, params, layers[TRUNK_A], t0)
    dense(t0, params, layers[TRUNK_B], t1)
    decoded_head(t1, params, layers[VALUE_H], layers[VALUE_O], hid, z, support_v, value)
    hp = hid[:n * layers[POLICY_H, 2]].reshape((n, layers[POLICY_H, 2]))
    dense(t1, params, layers[POLICY_H], hp)
    dense(hp, params, layers[POLICY_O], lg)
    for r in range(n):
        for j in range(logits.shape[1]):
            logits[r, j] = lg[r, j]


@njit(fastmath=FASTMATH, boundscheck=False)
def residual_dynamics(store: np.ndarray, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray,
                      params: np.ndarray, layers: np.ndarray, x: np.ndarray, h: np.ndarray, nxt: np.ndarray,
                      u: np.ndarray) -> None:
    """The shared part of a step for the n = len(parent_slot) trees: gathers the parents'
    latents from ``store`` [(S + 1)·B, D] into x = [s ‖ onehot(a)], writes the next latents
    ``nxt`` [n, D padded] (also to ``store`` at ``child_slot``) and the transition features
    u = fc_dynamics_2(nxt) [n, D padded]; h [n, D padded] is workspace (see step_buffers)."""
    n = parent_slot.shape[0]
    d = store.shape[1]
    # Explicit loops, not slice assignments: those compile shape-mismatch error paths (~10 s).
    for r in range(n):
        s = store[parent_slot[r]]
        for j in range(d):
            x[r, j] = s[j]
        for j in range(d, x.shape[1]):
            x[r, j] = 0.0
        x[r, d + action[r]] = 1.0
    # Dynamics; the residual sum is the next latent (padded columns stay 0: no s there).
    dense(x, params, layers[FC1], h)  # layer rows, not indices: see dense
    dense(h, params, layers[FC1B], nxt)
    for r in range(n):
        row = store[child_slot[r]]
        for j in range(d):
            v = nxt[r, j] + x[r, j]
            nxt[r, j] = v
            row[j] = v
    dense(nxt, params, layers[FC2A], h)
    dense(h, params, layers[FC2B], u)


@njit(cache=True, fastmath=FASTMATH, boundscheck=False, nogil=True)
def mlp_predict(latent: np.ndarray, params: np.ndarray, layers: np.ndarray, support_v: np.ndarray,
                scratch: np.ndarray, value: np.ndarray, logits: np.ndarray) -> None:
    """The prediction network (root inference after torch's representation): latent [n, D]
    float32 → value [n] (decoded), logits [n, A]; scratch as for the step kernels."""
    n, d = latent.shape
    _, x, t0, t1, hid, lg, z = step_buffers(scratch, layers, n)
    for r in range(n):
        for j in range(d):
            x[r, j] = latent[r, j]
        for j in range(d, x.shape[1]):
            x[r, j] = 0.0
    predict_rows(x, params, layers, support_v, t0, t1, hid, lg, z, value, logits)


# ------------------------------------------------------------------------------------------------
# The backend objects of the search snapshots

def index_array(a: np.ndarray) -> np.ndarray:
    """``a`` as C-contiguous int64 (as it is when it already is: the driver's views are), so the
    kernels keep one compiled signature."""
    return a if a.dtype == np.int64 and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=np.int64)


class CompiledLatentMLP:
    """Search inference of a folded residual latent MLP on CPU (float32): :meth:`predict` for the
    roots (after torch's representation) and, between :meth:`begin` and the next ``begin``, the
    ``lzk_mcts`` model step (``__call__``) on the latents at the search's slots (an
    :class:`~lzk_mcts.slots.ArraySlots`). Subclasses pack their transition head (``head``: its
    attribute, plus ``extra_layers`` appended to the table) and run their step kernel in
    :meth:`_kernel`.

    The stores and workspace grow and are reused across searches (no per-search allocation).
    """

    def __init__(self, net: LatentMLP, head: str, value_support: DiscreteSupport, reward_support: DiscreteSupport,
                 extra_layers: list[PackedLayer] = ()) -> None:
        if not folded_residual_mlp(net, head):
            raise ValueError(f"the numba backend needs a BN-folded residual MLP with 1-layer heads ({head})")
        self.params, self.layers = pack_layers(linear_layers(net, head) + list(extra_layers))
        self.latent_dim = int(net.latent_shape[0])
        self.num_actions = int(net.num_actions)
        self.support_v = value_support.values.detach().cpu().double().numpy()
        self.support_r = reward_support.values.detach().cpu().double().numpy()
        self.latents = ArraySlots((self.latent_dim,), np.float32)
        self._scratch = np.zeros(0, np.float32)

    @property
    def store(self) -> np.ndarray:
        """Latents [(S + 1)·B, D] of the current search (row node·B + b)."""
        return self.latents.array

    def _scratch_floats(self, rows: int) -> int:
        """Workspace floats the step kernel needs for ``rows`` trees (subclasses add theirs)."""
        return scratch_floats(self.layers, rows)

    def _workspace(self, rows: int) -> np.ndarray:
        need = self._scratch_floats(min(rows, CHUNK_ROWS))
        if self._scratch.size < need:
            self._scratch = np.zeros(need, np.float32)
        return self._scratch

    def predict(self, latent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Prediction network on latents [n, D] → (value [n] decoded, policy logits [n, A]) float32."""
        latent = np.ascontiguousarray(latent, dtype=np.float32)
        value = np.empty(latent.shape[0], np.float32)
        logits = np.empty((latent.shape[0], self.num_actions), np.float32)
        scratch = self._workspace(latent.shape[0])
        for lo in range(0, latent.shape[0], CHUNK_ROWS):
            hi = lo + CHUNK_ROWS  # row slices of C-contiguous arrays stay C-contiguous
            mlp_predict(latent[lo:hi], self.params, self.layers, self.support_v, scratch, value[lo:hi], logits[lo:hi])
        return value, logits

    def begin(self, root_latent: np.ndarray, num_simulations: int) -> None:
        """Start a search from root latents [B, D] with room for ``num_simulations`` new nodes."""
        b = root_latent.shape[0]
        self.latents.reserve(num_simulations + 1, b)
        self._workspace(b)
        self.latents.array[:b] = root_latent

    def __call__(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model step: (reward [n], value [n], logits [n, A]) float32, fresh arrays, in
        compiled calls of at most CHUNK_ROWS trees."""
        parent_slot, action, child_slot = index_array(parent_slot), index_array(action), index_array(child_slot)
        n = parent_slot.shape[0]
        reward = np.empty(n, np.float32)
        value = np.empty(n, np.float32)
        logits = np.empty((n, self.num_actions), np.float32)
        if n <= CHUNK_ROWS:  # the search's case: no slicing (a few µs of a ~40 µs call at B = 8)
            self._kernel(parent_slot, action, child_slot, reward, value, logits)
            return reward, value, logits
        for lo in range(0, n, CHUNK_ROWS):
            hi = lo + CHUNK_ROWS
            self._kernel(parent_slot[lo:hi], action[lo:hi], child_slot[lo:hi], reward[lo:hi], value[lo:hi],
                         logits[lo:hi])
        return reward, value, logits

    def _kernel(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray, reward: np.ndarray,
                value: np.ndarray, logits: np.ndarray) -> None:  # pragma: no cover
        """One compiled step call for at most CHUNK_ROWS trees, writing reward, value, logits."""
        raise NotImplementedError
