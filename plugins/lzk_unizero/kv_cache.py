"""KV-cache bookkeeping: contexts, the node-keyed search store and per-env observation history.

Shapes: n contexts, T capacity in tokens (= ``context_length``), L layers, H heads, d head size,
E width, N = S + 1 search nodes, B roots, M = ⌊(T − 1)/2⌋ past (obs, action) pairs.

**The exact design.** Every context is a token sequence ``tokens[:length]`` (observation and
action token *inputs*, before positions) plus the per-layer K/V of exactly those tokens, computed
causally with positions 0, 1, … from its first token. The invariant, for every stored context:

    K/V and outputs == an uncached causal forward of tokens[:length] from scratch

holds because a context is only ever (a) built from scratch, or (b) extended by new tokens that
attend to its K/V (an incremental causal pass equals the full one). There is no positional
correction and no hashing:

* **Root** (per env, every ``act``): the window ``[o_{t−M'}, a_{t−M'}, …, a_{t−1}, o_t]``,
  M' = min(M, pairs seen this episode), is rebuilt from the raw observations and actions kept
  in :class:`EnvHistory` (≤ M + 1 observations per env). Rebuilding costs one batched forward of
  ≤ T tokens per ``act``: negligible next to the search, and it makes the root independent of
  cache state, so nothing goes stale when weights change and episode ends just drop history.
* **Search** (:class:`NodeStore`): the context of node s of root b lives at slot ``(s, b)``;
  a child is its parent's context plus one (action, predicted latent) pair. When the pair would
  not fit in T tokens, the child's context is rebuilt from the parent's last ``keep`` tokens
  (the largest odd count <= T − 2, so it starts at an observation token) plus the pair: a window
  of the same shape as the root's. The store is allocated per search and dropped after it.

Memory is bounded by construction: history ≤ (M + 1) observations per env and mode; one search
holds N·B contexts of T tokens ((2·L·T·E + T·E) floats each).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Hashable

import numpy as np
import torch

from lzk_unizero.attention import LayerKV


def keep_tokens(capacity: int) -> int:
    """Tokens kept when a search context is rebuilt before appending a pair: the largest odd
    number <= capacity − 2 (a window that starts and ends at an observation token)."""
    keep = capacity - 2
    return keep if keep % 2 == 1 else keep - 1


def root_pairs(capacity: int) -> int:
    """M: past (obs, action) pairs a root window holds besides the current observation."""
    return (capacity - 1) // 2


@dataclass
class Contexts:
    """n contexts, left-aligned in T slots; slots >= length hold stale values (always masked)."""

    tokens: torch.Tensor  # [n, T, E] token inputs
    k: torch.Tensor  # [L, n, H, T, d]
    v: torch.Tensor  # [L, n, H, T, d]
    length: torch.Tensor  # [n] int64 valid tokens

    @classmethod
    def empty(cls, n: int, capacity: int, layers: int, heads: int, head_dim: int, embed_dim: int,
              device: torch.device | str, dtype: torch.dtype = torch.float32) -> Contexts:
        return cls(
            tokens=torch.zeros(n, capacity, embed_dim, device=device, dtype=dtype),
            k=torch.zeros(layers, n, heads, capacity, head_dim, device=device, dtype=dtype),
            v=torch.zeros(layers, n, heads, capacity, head_dim, device=device, dtype=dtype),
            length=torch.zeros(n, dtype=torch.int64, device=device),
        )

    def empty_like(self, n: int) -> Contexts:
        L, _, H, T, d = self.k.shape
        return Contexts.empty(n, T, L, H, d, self.tokens.shape[-1], self.tokens.device, self.tokens.dtype)

    @property
    def capacity(self) -> int:
        return int(self.tokens.shape[1])

    def __len__(self) -> int:
        return int(self.length.shape[0])

    def layer_kv(self) -> list[LayerKV]:
        """Per-layer views for the buffered attention path (writes land in this object)."""
        return [LayerKV(self.k[i], self.v[i], self.length) for i in range(self.k.shape[0])]

    def select(self, idx: torch.Tensor) -> Contexts:
        """A copy of rows ``idx`` [n'] int64."""
        return Contexts(self.tokens.index_select(0, idx), self.k.index_select(1, idx),
                        self.v.index_select(1, idx), self.length.index_select(0, idx))

    def assign(self, idx: torch.Tensor, other: Contexts) -> None:
        """Rows ``idx`` [n'] ← ``other`` (in place)."""
        self.tokens.index_copy_(0, idx, other.tokens)
        self.k.index_copy_(1, idx, other.k)
        self.v.index_copy_(1, idx, other.v)
        self.length.index_copy_(0, idx, other.length)

    def last_tokens(self, count: int) -> torch.Tensor:
        """The last ``count`` valid tokens of every row: [n, count, E] (needs length >= count)."""
        start = self.length - count  # [n]
        idx = start[:, None] + torch.arange(count, device=start.device)  # [n, count]
        return self.tokens.gather(1, idx[..., None].expand(-1, -1, self.tokens.shape[-1]))


class NodeStore:
    """The contexts of one batched search, keyed by (tree node, root row): flat slot node·B + b."""

    def __init__(self, root: Contexts, num_nodes: int) -> None:
        self.B = len(root)
        self.ctx = root.empty_like(num_nodes * self.B)
        self.ctx.assign(torch.arange(self.B, device=root.length.device), root)

    def slots(self, node: torch.Tensor | int, batch_idx: torch.Tensor) -> torch.Tensor:
        return node * self.B + batch_idx

    def get(self, node: torch.Tensor | int, batch_idx: torch.Tensor) -> Contexts:
        return self.ctx.select(self.slots(node, batch_idx))

    def put(self, node: torch.Tensor | int, batch_idx: torch.Tensor, ctx: Contexts) -> None:
        self.ctx.assign(self.slots(node, batch_idx), ctx)


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
