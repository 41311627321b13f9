"""KV-cache bookkeeping: the node-keyed search store and per-env observation history.

Shapes: R store rows, T capacity in tokens (= ``context_length``), L layers, E width,
N = S + 1 search nodes, B roots, A actions, M = ⌊(T − 1)/2⌋ past (obs, action) pairs.

**The exact design.** Every context is a token sequence ``tokens[:length]`` (observation and
action token *inputs*, before positions) plus the per-layer K/V of exactly those tokens, computed
causally with positions 0, 1, … from its first token. The invariant, for every stored context:

    K/V and outputs == an uncached causal forward of tokens[:length] from scratch

holds because a context is only ever (a) computed from its tokens in one causal pass, or (b)
extended by new tokens that attend to its K/V (an incremental causal pass equals the full one).
There is no positional correction and no hashing:

* **Root** (per env, every ``act``): the window ``[o_{t−M'}, a_{t−M'}, …, a_{t−1}, o_t]``,
  M' = min(M, pairs seen this episode), is rebuilt from the raw observations and actions kept
  in :class:`EnvHistory` (≤ M + 1 observations per env). Rebuilding costs one batched forward of
  ≤ T tokens per ``act``: negligible next to the search, and it makes the root independent of
  cache state, so nothing goes stale when weights change and episode ends just drop history.
* **Search** (:class:`NodeStore`): the context of node s of root b lives in row ``s·B + b``;
  a child is its parent's context plus one (action, predicted latent) pair. When the pair would
  not fit in T tokens, the child's context is recomputed from the parent's last ``keep`` tokens
  (the largest odd count <= T − 2, so it starts at an observation token) plus the pair: a window
  of the same shape as the root's.

Memory is bounded by construction: history ≤ (M + 1) observations per env and mode; a search
holds N·B contexts of T tokens ((2·L·T·E + T·E) floats each) in buffers that grow to the largest
search seen and are reused (zeroed once at allocation: stale slots then always hold finite values,
which masked attention needs — 0·NaN would poison a row).
"""
from __future__ import annotations

from collections import deque
from typing import Hashable

import numpy as np
import torch


def keep_tokens(capacity: int) -> int:
    """Tokens kept when a search context is rebuilt before appending a pair: the largest odd
    number <= capacity − 2 (a window that starts and ends at an observation token)."""
    keep = capacity - 2
    return keep if keep % 2 == 1 else keep - 1


def root_pairs(capacity: int) -> int:
    """M: past (obs, action) pairs a root window holds besides the current observation."""
    return (capacity - 1) // 2


class NodeStore:
    """The contexts of one batched search, keyed by (tree node, root): row ``node·B + b``.

    ``tokens`` [R, T, E] token inputs, ``kv`` [R, L, T, 2E] per layer the K (first E features,
    rotary positions applied) and V of every slot, ``length`` [R] int64 valid tokens (numpy:
    lengths follow from the tree alone, so the search decides on the host, without device syncs,
    which rows extend and which are rebuilt). Slots >= length hold stale values and are always
    masked. ``source`` is ``tokens`` flattened to [R·T, E] followed by the A action embeddings,
    so one ``index_select`` gathers a window and its new action token.

    The buffers are reused by the next :meth:`reset` (one search at a time per store).
    """

    def __init__(self, capacity: int, layers: int, embed_dim: int, device: torch.device | str,
                 dtype: torch.dtype = torch.float32) -> None:
        self.T, self.L, self.E = capacity, layers, embed_dim
        self.device, self.dtype = torch.device(device), dtype
        self.release()

    def release(self) -> None:
        """Drop the buffers (the next :meth:`reset` allocates again); the store is empty."""
        self._source = torch.zeros(0, self.E, device=self.device, dtype=self.dtype)
        self._kv = torch.zeros(0, self.L, self.T, 2 * self.E, device=self.device, dtype=self.dtype)
        self._use(0, 0, 0)

    def reset(self, num_nodes: int, batch: int, action_tokens: torch.Tensor) -> None:
        """Room for ``num_nodes`` × ``batch`` contexts, all empty; ``action_tokens`` [A, E]."""
        R, A = num_nodes * batch, action_tokens.shape[0]
        if R * self.T + A > self._source.shape[0] or R > self._kv.shape[0]:
            rows = max(R, 2 * self._kv.shape[0])  # grow geometrically: few reallocations
            self._source = torch.zeros(rows * self.T + A, self.E, device=self.device, dtype=self.dtype)
            self._kv = torch.zeros(rows, self.L, self.T, 2 * self.E, device=self.device, dtype=self.dtype)
        self._use(R, batch, A)
        self.source[R * self.T:].copy_(action_tokens)

    def _use(self, R: int, batch: int, A: int) -> None:
        self.B, self.R = batch, R
        self.source = self._source[: R * self.T + A]
        self.tokens = self._source[: R * self.T].view(R, self.T, self.E)
        self.kv = self._kv[:R]
        self.length = np.zeros(R, np.int64)

    @property
    def action_base(self) -> int:
        """Row of action 0's embedding in ``source``."""
        return self.R * self.T


class EnvHistory:
    """Per (mode, env id): the last M (observation, action) pairs and the timestep after them.

    ``window`` returns the root window inputs; ``record`` appends the pair just decided. A
    timestep that does not follow the recorded one (0 at a new episode, or a gap) starts a fresh
    history, so a collector that forgets ``reset_envs`` cannot leak context across episodes.
    """

    def __init__(self, max_pairs: int) -> None:
        self.max_pairs = max_pairs
        self._pairs: dict[Hashable, deque[tuple[np.ndarray, int]]] = {}
        self._next_t: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._pairs)

    def pairs(self, key: Hashable, timestep: int | None) -> list[tuple[np.ndarray, int]]:
        """The stored pairs preceding an observation at ``timestep`` (None: trust the history)."""
        if key not in self._pairs:
            return []
        if timestep is not None and self._next_t.get(key) != timestep:
            self.reset(key)
            return []
        return list(self._pairs[key])

    def record(self, key: Hashable, obs: np.ndarray, action: int, timestep: int | None) -> None:
        q = self._pairs.setdefault(key, deque(maxlen=self.max_pairs))
        if self.max_pairs > 0:
            q.append((np.array(obs, copy=True), int(action)))
        prev = self._next_t.get(key)
        self._next_t[key] = (timestep if timestep is not None else (prev if prev is not None else 0)) + 1

    def reset(self, key: Hashable) -> None:
        self._pairs.pop(key, None)
        self._next_t.pop(key, None)

    def clear(self) -> None:
        self._pairs.clear()
        self._next_t.clear()

    def state(self) -> list[tuple[Hashable, np.ndarray, list[int], int | None]]:
        """Every key's (key, observations [n, *O], actions [n], next timestep), n <= M: what a
        checkpoint keeps so that a resumed run's root windows are the ones it would have seen."""
        out = []
        for key, q in self._pairs.items():
            obs = np.stack([o for o, _ in q]) if q else np.zeros((0,), np.float32)
            out.append((key, obs, [a for _, a in q], self._next_t.get(key)))
        return out

    def load(self, entries: list[tuple[Hashable, np.ndarray, list[int], int | None]]) -> None:
        """Replace the histories by :meth:`state`'s ``entries``."""
        self.clear()
        for key, obs, actions, next_t in entries:
            q = self._pairs[key] = deque(maxlen=self.max_pairs)
            for o, a in zip(obs, actions):
                q.append((np.array(o, copy=True), int(a)))
            if next_t is not None:
                self._next_t[key] = int(next_t)


def window_inputs(history: EnvHistory, keys: list[Hashable], obs: np.ndarray,
                  timesteps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root window inputs of n rows: (obs [n, M+1, *O] right-padded with zeros, actions [n, M]
    (padding 0), n_obs [n] real observations per row, the last being ``obs[b]``)."""
    n, M = len(keys), history.max_pairs
    windows = np.zeros((n, M + 1, *obs.shape[1:]), dtype=np.float32)
    actions = np.zeros((n, M), dtype=np.int64)
    n_obs = np.ones(n, dtype=np.int64)
    for b, key in enumerate(keys):
        pairs = history.pairs(key, None if timesteps is None else int(timesteps[b]))
        for j, (o, a) in enumerate(pairs):
            windows[b, j], actions[b, j] = o, a
        windows[b, len(pairs)] = obs[b]
        n_obs[b] = len(pairs) + 1
    return windows, actions, n_obs
