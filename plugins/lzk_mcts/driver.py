"""The search driver: prepares the roots, then runs S simulations of
select (numba) → one batched model step → expand and back up (numba)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import tree as K
from .config import SearchConfig, SearchResult
from .interface import StepFn, StepOutput

_INIT_ERRORS = {
    K.INIT_NO_LEGAL: "every root needs at least one legal action",
    K.INIT_BAD_TO_PLAY: "to_play must be -1 (single player) or 1/2 (two players)",
    K.INIT_BAD_TRUE_ACTION: "true_action must be -1 (no reuse) or a legal action of its root",
}


def _check_step(out: StepOutput, n: int, A: int) -> tuple[np.ndarray, ...]:
    """The step's arrays as the kernels take them (contiguous, typed) and their HAS_* flags; a
    clear error beats a broadcast bug in a compiled kernel."""
    reward = np.ascontiguousarray(out.reward, dtype=np.float32)
    value = np.ascontiguousarray(out.value, dtype=np.float32)
    logits = np.ascontiguousarray(out.prior_logits, dtype=np.float32)
    if reward.shape != (n,) or value.shape != (n,) or logits.shape != (n, A):
        raise ValueError(f"the model step must return reward [{n}], value [{n}], prior_logits [{n}, {A}]; got "
                         f"{reward.shape}, {value.shape}, {logits.shape}")
    flags = 0
    discount, legal, to_play = _NO_DISCOUNT, _no_legal(A), _NO_TO_PLAY
    if out.discount is not None:
        discount = np.ascontiguousarray(out.discount, dtype=np.float64)
        if discount.shape != (n,) or not ((discount >= 0.0) & (discount <= 1.0)).all():
            raise ValueError(f"the model step's discount must be [{n}] values in [0, 1]; got {out.discount!r}")
        flags |= K.HAS_DISCOUNT
    if out.legal is not None:
        legal = np.ascontiguousarray(out.legal, dtype=np.bool_)
        live = discount > 0.0 if out.discount is not None else np.ones(n, bool)
        if legal.shape != (n, A) or not legal[live].any(axis=1).all():
            raise ValueError(f"the model step's legal mask must be [{n}, {A}] with a legal action in every "
                             f"non-terminal row")
        flags |= K.HAS_LEGAL
    if out.to_play is not None:
        to_play = np.ascontiguousarray(out.to_play, dtype=np.int64)
        if to_play.shape != (n,):
            raise ValueError(f"the model step's to_play must be [{n}]; got {to_play.shape}")
        flags |= K.HAS_TO_PLAY
    return reward, value, logits, discount, legal, to_play, np.int64(flags)


_NO_DISCOUNT = np.zeros(0, np.float64)
_NO_TO_PLAY = np.zeros(0, np.int64)
_NO_LEGAL: dict[int, np.ndarray] = {}


def _no_legal(A: int) -> np.ndarray:
    if A not in _NO_LEGAL:
        _NO_LEGAL[A] = np.zeros((0, A), np.bool_)
    return _NO_LEGAL[A]


def search(
    step_fn: StepFn,
    root_logits: np.ndarray,
    legal: np.ndarray,
    to_play: np.ndarray,
    config: SearchConfig,
    rng: np.random.Generator,
    *,
    add_noise: bool,
    deterministic: bool,
    true_action: np.ndarray | None = None,
    reuse_value: np.ndarray | None = None,
    keep_tree: bool = False,
    root_value: np.ndarray | None = None,
) -> SearchResult:
    """Run ``config.num_simulations`` simulations on B roots at once.

    Args:
        step_fn: the model, called once per simulation with the B' <= B trees that need a step
            (never with B' = 0): ``step_fn(parent_slot [B'], action [B'], child_slot [B'])`` →
            :class:`~lzk_mcts.interface.StepOutput`. Slots number the nodes of all trees
            (``node·B + b``; the roots are slots 0 … B−1): the caller keeps each node's
            embedding (a latent, a KV-cache row, a simulator state) at its slot, in a store of
            :mod:`lzk_mcts.slots` or its own. Simulation s creates node s + 1.
        root_logits: [B, A] policy logits at the roots (prior = softmax over legal actions).
        legal: [B, A] bool legal actions at the roots.
        to_play: [B] int64, -1 for single-player roots, else the player to move (1 or 2);
            decided per row (LightZero decides for the whole batch from max(to_play)).
        config: hyper-parameters (value normalisation and the unvisited value included).
        rng: source of the Dirichlet noise and of the tie-breaking seeds (reproducible).
        add_noise: mix Dirichlet(α) noise over the legal actions into the root priors.
        deterministic: break score ties by the first action instead of at random.
        true_action: [B] int64 ReZero true action per root, -1 = no reuse for that root.
        reuse_value: [B] float32 value v_{t+1} reused through the true-action child.
        keep_tree: attach the ``Tree`` arrays to the result (inspection, tests).
        root_value: [B] the network's value of each root; required by (and only used by) the
            Gumbel search (``config.algorithm == "gumbel"``, :mod:`lzk_mcts.gumbel`), where
            ``add_noise`` draws the root Gumbel noise and ``deterministic`` has no effect (its
            interior selection is deterministic; ties go to the first action).

    Returns:
        SearchResult with visit_counts [B, A] int32 (rows sum to S), root_value [B] float32
        (Σ backed-up values / (S + 1)) and stats ``search/*``.
    """
    if config.algorithm == "gumbel":
        if root_value is None:
            raise ValueError("the Gumbel search needs root_value (the network's value of each root)")
        from .gumbel import gumbel_search

        return gumbel_search(step_fn, root_logits, legal, to_play, root_value, config, rng, add_noise=add_noise,
                             true_action=true_action, reuse_value=reuse_value, keep_tree=keep_tree)
    root_logits = np.ascontiguousarray(root_logits, dtype=np.float32)
    B, A = root_logits.shape
    noise_fraction = config.noise_fraction if add_noise else 0.0
    # Dir(α) over the legal actions = Gamma(α, 1) draws renormalised over them (in init_roots).
    gamma = rng.standard_gamma(config.dirichlet_alpha, size=(B, A)) if noise_fraction > 0.0 else np.zeros((B, A))
    w = prepare(root_logits, legal, to_play, config, true_action, reuse_value, gamma, noise_fraction)
    t = w.tree
    # One splitmix64 stream per tree, seeded from rng (rng untouched when deterministic).
    rng_state = np.zeros(B, np.uint64) if deterministic else rng.bit_generator.random_raw(B)
    # The arguments both kernels share, in their order (built once: cheaper calls in the loop).
    state = (t.children, t.prior, t.legal, t.visit, t.value_sum, t.reward, t.discount, t.terminal, t.to_play,
             t.minmax, t.params, t.true_action, t.reuse_value, deterministic, rng_state, w.path, w.leaf, w.infer,
             w.max_depth)
    simulate(step_fn, w, K.select_leaves(1, *state),
             lambda new_node, outputs, more: K.backup_and_select(new_node, *outputs, more, *state))
    visit_counts = np.empty((B, A), np.int32)
    root_value = np.empty(B, np.float32)
    K.read_roots(t.children, t.visit, t.value_sum, visit_counts, root_value)
    return SearchResult(visit_counts, root_value, w.stats(), t if keep_tree else None)


@dataclass
class Workspace:
    """One search's trees and the arrays its simulations share (no per-simulation allocation),
    built by :func:`prepare` for the pUCT and the Gumbel drivers."""

    tree: K.Tree
    num_simulations: int
    path: np.ndarray  # [B, S + 2] int32: a path holds at most S + 1 existing nodes + the new one
    leaf: np.ndarray  # [4, B] int64: kind, step slot, (unused), path length
    infer: np.ndarray  # [5, B] int64: batch index, parent node, action, parent slot, child slot
    max_depth: np.ndarray  # [1] int64
    t_start: float
    model_s: float = 0.0
    inferences: int = 0

    def stats(self) -> dict[str, float]:
        """The ``search/*`` statistics of the finished search."""
        total_s = time.perf_counter() - self.t_start
        return {
            "search/inferences_per_sim": self.inferences / self.num_simulations,
            "search/max_depth": float(self.max_depth[0]),
            "search/tree_ms": (total_s - self.model_s) * 1e3,
            "search/model_ms": self.model_s * 1e3,
        }


def prepare(root_logits: np.ndarray, legal: np.ndarray, to_play: np.ndarray, config: SearchConfig,
            true_action: np.ndarray | None, reuse_value: np.ndarray | None, gamma: np.ndarray,
            noise_fraction: float) -> Workspace:
    """Check the root inputs, allocate B trees of S + 1 nodes and prepare their roots
    (:func:`lzk_mcts.tree.init_roots`, with ``gamma`` [B, A] the Dirichlet draw mixed in by
    ``noise_fraction``); raises ValueError naming what is wrong."""
    t_start = time.perf_counter()
    B, A = root_logits.shape
    legal = np.ascontiguousarray(legal, dtype=np.bool_)
    to_play = np.ascontiguousarray(to_play, dtype=np.int64)
    if legal.shape != (B, A) or to_play.shape != (B,):
        raise ValueError(f"legal must be [B, A] = {(B, A)} and to_play [B]; got {legal.shape} and {to_play.shape}")
    if (true_action is None) != (reuse_value is None):
        raise ValueError("true_action and reuse_value go together")
    S = config.num_simulations
    t = K.Tree.allocate(B, S + 1, A)
    t.params[:] = (config.discount, config.pb_c_base, config.pb_c_init, config.value_delta_max,
                   config.value_normalization == "minmax", config.unvisited_value == "zero",
                   config.parent_visits == "node")
    if true_action is None:
        true_action = np.full(B, -1, np.int64)
        t.reuse_value[:] = 0.0
    else:
        true_action = np.ascontiguousarray(true_action, dtype=np.int64).reshape(B)
        t.reuse_value[:] = np.reshape(reuse_value, B)
    code = K.init_roots(t.children, t.prior, t.legal, t.visit, t.value_sum, t.reward, t.discount, t.terminal,
                        t.to_play, t.minmax, t.true_action, t.params, root_logits, legal, gamma, noise_fraction,
                        to_play, true_action)
    if code != K.INIT_OK:
        raise ValueError(_INIT_ERRORS[code])
    return Workspace(t, S, np.empty((B, S + 2), np.int32), np.empty((4, B), np.int64), np.empty((5, B), np.int64),
                     np.zeros(1, np.int64), t_start)


def simulate(step_fn: StepFn, w: Workspace, n: int, backup_and_select: Callable[[int, tuple, bool], int]) -> None:
    """The S simulations: the model step for the ``n`` trees the last selection left waiting,
    then ``backup_and_select(new_node, step outputs, select_next)`` → the next ``n``."""
    A = w.tree.children.shape[2]
    action, parent_slot, child_slot = w.infer[2], w.infer[3], w.infer[4]
    no_outputs = (np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros((0, A), np.float32), _NO_DISCOUNT,
                  _no_legal(A), _NO_TO_PLAY, np.int64(0))
    S = w.num_simulations
    for s in range(S):
        if n > 0:
            t0 = time.perf_counter()
            out = step_fn(parent_slot[:n], action[:n], child_slot[:n])
            w.model_s += time.perf_counter() - t0
            w.inferences += n
            outputs = _check_step(out, n, A)
        else:  # every tree re-visited a reused child or a terminal node: no step this simulation
            outputs = no_outputs
        n = backup_and_select(s + 1, outputs, s + 1 < S)
