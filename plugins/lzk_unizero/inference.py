"""Inference with exact KV caches: root windows, recurrent search steps, sequence values.

Shapes: n contexts, B roots, W window observations, E width, N support atoms, A actions.
The cache invariants are documented in :mod:`lzk_unizero.kv_cache`; every function here keeps
them. Callers run these under ``torch.inference_mode()`` with the model in eval mode.
"""
from __future__ import annotations

import numpy as np
import torch

from lzk_muzero.support import DiscreteSupport
from lzk_unizero.kv_cache import Contexts, NodeStore, keep_tokens
from lzk_unizero.model import WorldModel


def empty_contexts(model: WorldModel, n: int, capacity: int, device: torch.device | str) -> Contexts:
    cfg = model.cfg
    return Contexts.empty(n, capacity, cfg.num_layers, cfg.num_heads, cfg.embed_dim // cfg.num_heads,
                          cfg.embed_dim, device, model.act_emb.weight.dtype)


def extend(model: WorldModel, ctx: Contexts, new_tokens: torch.Tensor) -> torch.Tensor:
    """Append ``new_tokens`` [n, m, E] to every context in place; returns their outputs [n, m, E].

    Needs length + m <= capacity. The tokens sit at positions length … length + m − 1.
    """
    n, m, E = new_tokens.shape
    positions = ctx.length[:, None] + torch.arange(m, device=new_tokens.device)  # [n, m]
    if int(positions.max()) >= ctx.capacity:
        raise ValueError(f"context overflow: {int(positions.max()) + 1} tokens > capacity {ctx.capacity}")
    ctx.tokens.scatter_(1, positions[..., None].expand(n, m, E), new_tokens)
    h = model.transformer(new_tokens, positions, ctx.layer_kv())
    ctx.length += m
    return h


def build_contexts(model: WorldModel, tokens: torch.Tensor, lengths: torch.Tensor,
                   capacity: int) -> tuple[Contexts, torch.Tensor]:
    """Fresh contexts from right-padded token rows: tokens [n, m, E], lengths [n] (1 … m).

    Returns (contexts, outputs at each row's last valid token [n, E]). Padding is harmless:
    causal attention lets token i see only tokens <= i, and slots >= length stay masked later.
    """
    ctx = empty_contexts(model, tokens.shape[0], capacity, tokens.device)
    h = extend(model, ctx, tokens)
    ctx.length.copy_(lengths)
    return ctx, h[torch.arange(tokens.shape[0], device=tokens.device), lengths - 1]


def root_inference(model: WorldModel, obs: torch.Tensor, actions: torch.Tensor, n_obs: torch.Tensor,
                   capacity: int) -> tuple[Contexts, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Root windows → (contexts, value logits [n, N], policy logits [n, A], root latent [n, E]).

    obs [n, W, *O] right-padded windows whose first ``n_obs[b]`` observations are real (the last
    real one is the current observation), actions [n, W−1] the actions between them (padding:
    any valid index). Window b has 2·n_obs[b] − 1 tokens (<= capacity).
    """
    latents = model.encode(obs)  # [n, W, E]
    tokens = model.interleave(latents, model.embed_actions(actions))  # [n, 2W−1, E]
    lengths = 2 * n_obs - 1
    ctx, h = build_contexts(model, tokens, lengths, capacity)
    value, policy = model.obs_heads(h)
    root_latent = latents[torch.arange(obs.shape[0], device=obs.device), n_obs - 1]
    return ctx, value, policy, root_latent


def recurrent_step(model: WorldModel, ctx: Contexts, actions: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One search step on parent contexts ``ctx`` (modified in place into the children's):
    append the action token, read (next latent, reward) there, append the latent as an
    observation token, read (value, policy) there.

    Returns (reward logits [n, N], value logits [n, N], policy logits [n, A], next latent [n, E]).
    Rows whose context cannot take two more tokens are first rebuilt from their last
    ``keep_tokens(T)`` tokens (the rebuild and the action token share one forward pass).
    """
    n, T = len(ctx), ctx.capacity
    act = model.embed_actions(actions)[:, None]  # [n, 1, E]
    full = ctx.length + 2 > T  # [n]
    n_full = int(full.sum())
    if n_full == 0:
        h_act = extend(model, ctx, act)[:, 0]
    else:
        keep = keep_tokens(T)
        if n_full == n:
            rows_full = rows_rest = None
            old = ctx
        else:
            rows_full, rows_rest = full.nonzero()[:, 0], (~full).nonzero()[:, 0]
            old = ctx.select(rows_full)
        fresh = empty_contexts(model, len(old), T, act.device)
        sub_act = act if rows_full is None else act[rows_full]
        h_full = extend(model, fresh, torch.cat([old.last_tokens(keep), sub_act], dim=1))[:, -1]
        if rows_full is None:
            ctx.tokens, ctx.k, ctx.v, ctx.length = fresh.tokens, fresh.k, fresh.v, fresh.length
            h_act = h_full
        else:
            rest = ctx.select(rows_rest)
            h_rest = extend(model, rest, act[rows_rest])[:, 0]
            ctx.assign(rows_full, fresh)
            ctx.assign(rows_rest, rest)
            h_act = torch.empty(n, h_full.shape[-1], dtype=h_full.dtype, device=h_full.device)
            h_act[rows_full], h_act[rows_rest] = h_full, h_rest
    next_latent, reward = model.action_heads(h_act)
    h_obs = extend(model, ctx, next_latent[:, None])[:, 0]
    value, policy = model.obs_heads(h_obs)
    return reward, value, policy, next_latent


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().cpu().numpy()


class SearchSession:
    """The ``recurrent_fn`` of one ``lzk_mcts.search`` over B roots, backed by a :class:`NodeStore`.

    ``__call__(batch_idx [B'], parent_node [B'], action [B'], new_node)`` gathers the parents'
    contexts, runs :func:`recurrent_step` and stores the children at ``(new_node, b)``; it
    returns (reward [B'], value [B'], logits [B', A]) as float32 numpy, rewards and values decoded.
    """

    def __init__(self, model: WorldModel, root: Contexts, num_simulations: int,
                 value_support: DiscreteSupport, reward_support: DiscreteSupport) -> None:
        self.model = model
        self.store = NodeStore(root, num_simulations + 1)
        self.device = root.length.device
        self.value_support, self.reward_support = value_support, reward_support
        self.calls = 0
        #: When a list, every call appends (batch_idx, parent_node, action, new_node, reward
        #: logits, value logits, policy logits) as numpy arrays (tests, debugging).
        self.record: list[tuple[np.ndarray, ...]] | None = None

    def __call__(self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray,
                 new_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = torch.as_tensor(np.asarray(batch_idx, dtype=np.int64), device=self.device)
        parent = torch.as_tensor(np.asarray(parent_node, dtype=np.int64), device=self.device)
        a = torch.as_tensor(np.asarray(action, dtype=np.int64), device=self.device)
        ctx = self.store.get(parent, b)
        reward, value, policy, _ = recurrent_step(self.model, ctx, a)
        self.store.put(int(new_node), b, ctx)
        self.calls += 1
        if self.record is not None:
            self.record.append((np.array(batch_idx), np.array(parent_node), np.array(action), np.array(new_node),
                                *(x.detach().cpu().numpy() for x in (reward, value, policy))))
        return (_np(self.reward_support.decode(reward)), _np(self.value_support.decode(value)), _np(policy))


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
