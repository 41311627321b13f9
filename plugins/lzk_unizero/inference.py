"""Search inference with exact KV caches: root windows, the recurrent search step over a
:class:`~lzk_unizero.kv_cache.NodeStore` (whose rows are the search's slots), and sequence values,
all on the folded snapshot of :mod:`lzk_unizero.snapshot`.

Shapes: n rows, m tokens per row, B roots, W window observations, L layers, T capacity,
E width, H heads, d = E/H, N support atoms, A actions.

The cache invariants are documented in :mod:`lzk_unizero.kv_cache`; every function here keeps
them. Callers run these under ``torch.inference_mode()``.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lzk_common.support import DiscreteSupport, inverse_scalar_transform_np
from lzk_mcts import StepOutput
from lzk_unizero.kv_cache import NodeStore, keep_tokens
from lzk_unizero.model import WorldModel
from lzk_unizero.numba_search import NumbaStep
from lzk_unizero.snapshot import InferenceNet, KVRows, numba_supported, weights_of

__all__ = ["InferenceNet", "SearchSession", "numba_supported", "root_inference", "sequence_values"]


def root_inference(net: InferenceNet, obs: torch.Tensor, actions: torch.Tensor, n_obs: np.ndarray,
                   store: NodeStore | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Root windows → (value logits [n, N], policy logits [n, A], root latent [n, E]).

    obs [n, W, *O] right-padded windows whose first ``n_obs[b]`` observations are real (the last
    real one is the current observation), actions [n, W−1] the actions between them (padding:
    any valid index). Window b has 2·n_obs[b] − 1 tokens (<= capacity). With ``store`` (already
    :meth:`NodeStore.reset` for n roots), the windows become the contexts of node 0.
    """
    n_obs = np.asarray(n_obs, dtype=np.int64)
    model = net.model
    latents = model.encode(obs)  # [n, W, E]
    tokens = model.interleave(latents, model.embed_actions(actions))  # [n, 2W−1, E]
    n, m = tokens.shape[:2]
    lengths = 2 * n_obs - 1
    if int(lengths.max()) > net.T:
        raise ValueError(f"root window of {int(lengths.max())} tokens exceeds the context ({net.T})")
    kv = None
    if store is not None:
        m = min(m, net.T)  # padding beyond the longest window may be cut
        tokens = tokens[:, :m]
        store.tokens[:n, :m] = tokens
        store.length[:n] = lengths
        kv = KVRows.of(store.kv[:n], net.H)
    value, policy = net.obs_heads(net.prefill(tokens, lengths - 1, kv))
    root_latent = latents.reshape(n * latents.shape[1], -1).index_select(
        0, net._index(np.arange(n) * latents.shape[1] + n_obs - 1))
    return value, policy, root_latent


def _numpy_f32(x: torch.Tensor) -> np.ndarray:
    """A float32 numpy view (CPU float32 tensors, which search outputs are) or copy of x."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        return x.numpy()
    return x.detach().to("cpu", torch.float32).numpy()


_inverse_h = inverse_scalar_transform_np.ufunc  # the compiled ufunc: no dispatch wrapper per call


class SearchSession:
    """The model step of one ``lzk_mcts.search`` over B roots, backed by a :class:`NodeStore`
    whose rows are the search's slots (``node·B + b``).

    Construction resets ``store`` for B roots × (S + 1) nodes and puts the root windows at node 0
    (``root_value_logits`` [B, N], ``root_policy_logits`` [B, A] are their outputs).
    ``__call__(parent_slot [B'], action [B'], child_slot [B'])`` builds the children's contexts at
    ``child_slot``: it returns a :class:`lzk_mcts.StepOutput` (reward [B'], value [B'], logits
    [B', A] as float32 numpy, rewards and values decoded).

    Per call, with ``cached`` (the default): when every parent context can take the (action,
    latent) pair, the children copy their parents' K/V and run two one-token passes; otherwise
    every row's child window (the rebuilt window for full rows, the parent's whole context for the
    others) is recomputed in one right-padded pass — a full row must recompute, and one batched
    pass of <= T − 1 tokens costs less than splitting the batch — and the latent token is then
    appended with the cache. ``cached=False`` recomputes both passes from the tokens (the
    reference the benchmark compares against); both keep the same tokens, so outputs agree.

    ``backend="numba"`` runs each call as one compiled kernel
    (:class:`lzk_unizero.numba_search.NumbaStep`) on the same store and tokens, with the same
    extend/rebuild rule per row (rows need not share a path, and any subset of trees is built in
    place); it needs a cached search of a float32 CPU snapshot (:func:`numba_supported`). Root
    inference stays in torch either way. ``backend="torch"`` is the reference.
    """

    def __init__(self, net: InferenceNet, store: NodeStore, obs: torch.Tensor, actions: torch.Tensor,
                 n_obs: np.ndarray, num_simulations: int, value_support: DiscreteSupport,
                 reward_support: DiscreteSupport, *, cached: bool = True, backend: str = "torch") -> None:
        if backend not in ("torch", "numba"):
            raise ValueError(f"backend must be 'torch' or 'numba', got {backend!r}")
        if backend == "numba" and not (cached and numba_supported(net)):
            raise ValueError("the numba backend needs cached=True and a float32 CPU snapshot")
        self.net, self.store, self.cached, self.backend = net, store, cached, backend
        self.B = obs.shape[0]
        store.reset(num_simulations + 1, self.B, net.action_tokens)
        t0 = time.perf_counter()
        self.root_value_logits, self.root_policy_logits, _ = root_inference(net, obs, actions, n_obs, store)
        #: Seconds inside the network (root inference and every model step, decoding included).
        self.forward_seconds = time.perf_counter() - t0
        self.kv = KVRows.of(store.kv, net.H)
        self.keep = keep_tokens(store.T)
        self.joint_decode = value_support.same_as(reward_support)
        self.value_support, self.reward_support = value_support, reward_support
        self._rows_T = np.arange(self.B) * store.T  # row offsets into a block's flattened tokens
        self.calls = 0
        self._numba = (NumbaStep(weights_of(net), store, self.keep, value_support, reward_support)
                       if backend == "numba" else None)
        #: When a list, every call appends (batch_idx, parent_node, action, new_node, reward
        #: logits, value logits, policy logits) as numpy arrays (tests, debugging).
        self.record: list[tuple[np.ndarray, ...]] | None = None

    def __call__(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        """The model step (see the class docstring): contexts at ``parent_slot`` extended by
        ``action`` into ``child_slot`` (slots = store rows ``node·B + b``)."""
        t0 = time.perf_counter()
        try:
            return self._step(parent_slot, action, child_slot)
        finally:
            self.forward_seconds += time.perf_counter() - t0

    def _step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        if self._numba is not None:
            return StepOutput(*self._call_numba(parent_slot, action, child_slot))
        st, net = self.store, self.net
        B, T, E = st.B, st.T, st.E
        child = np.asarray(child_slot, dtype=np.int64)
        b = child % B  # the tree of each row
        a = np.asarray(action, dtype=np.int64)
        n = b.shape[0]
        parent = np.asarray(parent_slot, dtype=np.int64)
        plen = st.length[parent]
        # One step creates the same node index in every tree it serves, in increasing b, so
        # B' = B rows are one contiguous block of the store and the children are built in place;
        # otherwise in scratch rows, copied back.
        c0 = int(child[0]) - int(b[0])
        if n == B:
            kv, tokens = self.kv.rows(c0, n), st.tokens[c0: c0 + n]
        else:
            kv = KVRows.of(torch.zeros(n, st.L, T, 2 * E, device=net.device, dtype=net.dtype), net.H)
            tokens = torch.zeros(n, T, E, device=net.device, dtype=net.dtype)
        tokens_flat = tokens.view(n * T, E)
        rows_T = self._rows_T[:n]

        if self.cached and int(plen.max()) + 2 <= T:  # every child extends its parent's context
            parent_t = net._index(parent)
            kv.kv.copy_(st.kv.index_select(0, parent_t))
            tokens.copy_(st.tokens.index_select(0, parent_t))
            x_act = st.source.index_select(0, net._index(st.action_base + a))
            tokens_flat.index_copy_(0, net._index(rows_T + plen), x_act)
            h_act = net.append(x_act, plen, kv)
            slot = plen + 1
        else:
            start = np.where(plen + 2 > T, plen - self.keep, 0)
            width = plen - start + 1  # window + action token
            m = int(width.max())
            j = np.arange(m)
            # Window tokens, then the action token; padding after it repeats the action (never read).
            src = np.where(j < width[:, None] - 1, (parent * T + start)[:, None] + j, st.action_base + a[:, None])
            x = st.source.index_select(0, net._index(src.reshape(-1))).view(n, m, E)
            tokens[:, :m] = x
            h_act = net.prefill(x, width - 1, kv if self.cached else None)
            slot = width
        latent, reward = net.action_heads(h_act)
        tokens_flat.index_copy_(0, net._index(rows_T + slot), latent)
        if self.cached:
            h_obs = net.append(latent, slot, kv)
        else:
            h_obs = net.prefill(tokens[:, : int(slot.max()) + 1], slot, None)
        value, policy = net.obs_heads(h_obs)
        st.length[child] = slot + 1
        if n != B:
            child_t = net._index(child)
            st.kv.index_copy_(0, child_t, kv.kv)
            st.tokens.index_copy_(0, child_t, tokens)
        self.calls += 1
        if self.record is not None:
            self.record.append((b.copy(), parent // B, a.copy(), np.array(child[0] // B),
                                *(x.detach().cpu().numpy() for x in (reward, value, policy))))
        return StepOutput(*self._decode(reward, value), _numpy_f32(policy))

    def _call_numba(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parent = np.asarray(parent_slot, dtype=np.int64)
        child = np.asarray(child_slot, dtype=np.int64)
        reward, value, policy, expect = self._numba(parent, child, action)
        self.calls += 1
        if self.record is not None:
            B = self.store.B
            self.record.append((child % B, parent // B, np.array(action, dtype=np.int64), np.array(child[0] // B),
                                reward, value, policy.copy()))
        r, v = _inverse_h(expect)
        return r, v, policy

    def _decode(self, reward: torch.Tensor, value: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """h⁻¹(E_softmax[support]) of reward and value logits [n, N] → two [n] float32 arrays."""
        if self.joint_decode:  # one softmax·support reduction for both heads
            both = torch.softmax(torch.stack([reward, value]).float(), dim=-1)  # [2, n, N]
            r, v = _inverse_h(_numpy_f32(torch.mv(both.view(-1, both.shape[-1]), self.value_support.values))
                              ).reshape(2, -1)
            return r, v
        return (_inverse_h(_numpy_f32(self.reward_support.expectation(reward))),
                _inverse_h(_numpy_f32(self.value_support.expectation(value))))


def sequence_values(model: WorldModel, obs: torch.Tensor, actions: torch.Tensor,
                    value_support: DiscreteSupport) -> torch.Tensor:
    """Values of every observation of teacher-forced sequences: obs [M, T, *O], actions [M, T−1]
    → [M, T] float32 (decoded), from one uncached causal pass over 2T − 1 tokens.

    This is the bootstrap-value computation of SPEC §4.5 with all T observations kept (LightZero
    drops the last one and duplicates the previous value) and positions starting at 0 (LightZero
    offsets them by the sample's first timestep, which only RoPE forgives).
    """
    latents = model.encode(obs)
    h = model.forward_tokens(model.interleave(latents, model.embed_actions(actions)))
    value, _ = model.obs_heads(h[:, 0::2])
    return value_support.decode(value)
