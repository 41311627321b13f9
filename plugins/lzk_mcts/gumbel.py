"""Gumbel MuZero search (Danihelka, Guez, Schrittwieser, Silver, ICLR 2022) on the same tree
arrays, model step and ReZero reuse as the pUCT search.

What differs from pUCT (:mod:`lzk_mcts.tree`), as in the paper:

* **Root: Gumbel-Top-k with Sequential Halving.** Each root draws g ~ Gumbel(0) per legal action
  (g = 0 without noise, i.e. in eval). Simulation s visits, among the actions whose child visit
  count equals ``table[m, s]`` (:func:`considered_visits_table`, m = min(max_considered, legal
  actions)), the one with the largest ``g + logits + σ(q̂)``. The table makes the first m
  simulations visit the top m actions of ``g + logits``, then gives the survivors of each
  halving phase equal visits.
* **Interior nodes: deterministic.** The action maximising ``π'(a) − N(a)/(1 + Σ N)``, with the
  improved policy ``π' = softmax(logits + σ(q̂))``.
* **Completed Q.** Q(a) = r + γ·v of a visited child (signed by player as everywhere else); an
  unvisited child takes the mixed value ``(v̂ + Σ N · Σ_visited π q / Σ_visited π)/(1 + Σ N)``
  (v̂: the network's value of the node); q̂ rescales the completed Qs of a node's legal
  children to [0, 1] by their min and max (``gumbel_rescale: node``, mctx's, over legal actions only), or
  by the tree's min-max statistics widened by them (``tree``, the range pUCT normalises by);
  ``σ(q̂) = (c_visit + max_a N(a))·c_scale·q̂``.
* **Outputs.** The action is the Sequential Halving winner (among the most visited actions, the
  largest ``g + logits + σ(q̂)``) and the policy target is the root's improved policy
  ``softmax(logits + σ(q̂))`` over its legal actions, which — unlike visit counts of 25
  simulations over two actions — does not flatten towards uniform.

Root priors carry no Dirichlet noise (the Gumbel draw is the exploration). The ReZero
true-action child is treated as in the pUCT search: it is never searched below depth 1 and
backs up the reused value, which then is its completed Q.
"""
from __future__ import annotations

import math

import numpy as np

from . import tree as K
from .config import SearchConfig, SearchResult
from .interface import StepFn

#: log-prior floor: a legal action whose prior underflowed keeps a finite score.
_LOW_LOGIT = -1e9
#: Floor on the span (the node's completed Qs, or the tree's range) when rescaling to [0, 1].
_RESCALE_EPS = 1e-8

# Rows of the Gumbel parameter vector (float64 [4]); G_RESCALE_TREE is 1.0 for ``gumbel_rescale: tree``.
G_MAXVISIT_INIT, G_VALUE_SCALE, G_MAX_CONSIDERED, G_RESCALE_TREE = 0, 1, 2, 3


def considered_visits(num_considered: int, num_simulations: int) -> list[int]:
    """Sequential Halving's schedule for m considered actions: entry s is the child visit count
    that the action visited by simulation s has before that simulation.

    Phases halve the considered actions (m, m/2, …, floor 2); in each phase every survivor gets
    ``max(1, S // (⌈log2 m⌉ · survivors))`` more visits, round-robin, until S entries. With one
    action (or none) that action takes every simulation.
    """
    if num_considered <= 1:
        return list(range(num_simulations))
    phases = int(math.ceil(math.log2(num_considered)))
    visits = [0] * num_considered
    survivors = num_considered
    order: list[int] = []
    while len(order) < num_simulations:
        extra = max(1, num_simulations // (phases * survivors))
        for _ in range(extra):
            order.extend(visits[:survivors])
            for i in range(survivors):
                visits[i] += 1
        survivors = max(2, survivors // 2)
    return order[:num_simulations]


def considered_visits_table(max_considered: int, num_simulations: int) -> np.ndarray:
    """[max_considered + 1, S] int32: row m is :func:`considered_visits` (m, S)."""
    return np.array([considered_visits(m, num_simulations) for m in range(max_considered + 1)], np.int32)


# ---------------------------------------------------------------------------------------------
# Numba kernels
# ---------------------------------------------------------------------------------------------


@K._jit_inline
def _sigma_q_into(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax, raw_value, gparams, b,
                  node, out) -> int:
    """σ(q̂) of every legal child of ``node`` into ``out`` [A] (0 elsewhere); returns Σ N of its
    children. Completed Q: a visited child's r + γ·(±v), an unvisited one's the mixed value.
    q̂ spans the children's completed Qs, or (``G_RESCALE_TREE``) those and the tree's min-max
    statistics ``minmax[b]`` (the same frame: every node's Q from its parent's view)."""
    A = children.shape[2]
    me = to_play[b, node]
    sum_n = 0
    max_n = 0
    weighted = 0.0
    weight = 0.0
    for a in range(A):
        out[a] = 0.0
        if not legal[b, node, a]:
            continue
        c = children[b, node, a]
        if c >= 0:
            n = visit[b, c]
            v = K._node_value(visit, value_sum, b, c)
            q = reward[b, c] + discount[b, c] * (-v if to_play[b, c] != me else v)
            out[a] = q
            sum_n += n
            max_n = max(max_n, n)
            p = max(prior[b, node, a], 1e-30)
            weighted += p * q
            weight += p
    mixed = raw_value[b, node]
    if sum_n > 0 and weight > 0.0:
        mixed = (raw_value[b, node] + sum_n * (weighted / weight)) / (sum_n + 1.0)
    lo = np.inf
    hi = -np.inf
    for a in range(A):
        if not legal[b, node, a]:
            continue
        if children[b, node, a] < 0:
            out[a] = mixed
        lo = min(lo, out[a])
        hi = max(hi, out[a])
    if gparams[G_RESCALE_TREE] != 0.0:  # empty statistics are (inf, -inf): no change
        lo = min(lo, minmax[b, 0])
        hi = max(hi, minmax[b, 1])
    scale = (gparams[G_MAXVISIT_INIT] + max_n) * gparams[G_VALUE_SCALE] / max(hi - lo, _RESCALE_EPS)
    for a in range(A):
        if legal[b, node, a]:
            out[a] = (out[a] - lo) * scale
    return sum_n


@K._jit_inline
def _log_prior(p: float) -> float:
    return math.log(p) if p > 0.0 else _LOW_LOGIT


@K._jit_inline
def _root_action(children, prior, legal, visit, gumbel, b, sigma, wanted) -> int:
    """The legal root action with child visits == ``wanted`` (any, if ``wanted`` < 0) that
    maximises g + log π + σ(q̂); the first such maximum. -1 if none has that count."""
    best = -np.inf
    pick = -1
    for a in range(children.shape[2]):
        if not legal[b, 0, a]:
            continue
        c = children[b, 0, a]
        n = visit[b, c] if c >= 0 else 0
        if wanted >= 0 and n != wanted:
            continue
        s = gumbel[b, a] + _log_prior(prior[b, 0, a]) + sigma[a]
        if s > best:
            best = s
            pick = a
    return pick


@K._jit_inline
def _interior_action(children, prior, legal, visit, b, node, sigma, sum_n, work) -> int:
    """argmax over legal a of softmax(log π + σ(q̂))(a) − N(a)/(1 + Σ N) (first maximum)."""
    A = children.shape[2]
    m = -np.inf
    for a in range(A):
        if legal[b, node, a]:
            work[a] = _log_prior(prior[b, node, a]) + sigma[a]
            m = max(m, work[a])
    total = 0.0
    for a in range(A):
        if legal[b, node, a]:
            work[a] = math.exp(work[a] - m)
            total += work[a]
    best = -np.inf
    pick = -1
    for a in range(A):
        if not legal[b, node, a]:
            continue
        c = children[b, node, a]
        n = visit[b, c] if c >= 0 else 0
        s = work[a] / total - n / (1.0 + sum_n)
        if s > best:
            best = s
            pick = a
    return pick


@K._jit
def gumbel_select_leaves(next_node, children, prior, legal, visit, value_sum, reward, discount, terminal, to_play,
                         minmax, true_action, raw_value, gumbel, table, num_considered, gparams, path, leaf, infer,
                         max_depth) -> int:
    """Descend every tree with the Gumbel rules (root: Sequential Halving; below: the improved
    policy's deterministic rule); outputs as :func:`lzk_mcts.tree.select_leaves`."""
    B, N, A = children.shape
    sigma = np.empty(A, np.float64)
    work = np.empty(A, np.float64)
    n_infer = 0
    for b in range(B):
        node = 0
        plen = 1
        path[b, 0] = 0
        ta = true_action[b]
        while True:
            sum_n = _sigma_q_into(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax,
                                  raw_value, gparams, b, node, sigma)
            if node == 0:
                a = _root_action(children, prior, legal, visit, gumbel, b, sigma,
                                 table[num_considered[b], min(sum_n, table.shape[1] - 1)])
                if a < 0:  # off the schedule (cannot happen when every simulation visits the root)
                    a = _root_action(children, prior, legal, visit, gumbel, b, sigma, -1)
            else:
                a = _interior_action(children, prior, legal, visit, b, node, sigma, sum_n, work)
            # The leaf bookkeeping below is select_leaves' own, written out again on purpose: an
            # inlined shared helper returning (node, plen, n_infer) made the pUCT descent's tree
            # time 1.3-1.6x slower at 64 x 50 (benchmarks/mcts.py), and it is the hot path.
            reused = node == 0 and a == ta
            child = children[b, node, a]
            if child < 0:
                infer[0, n_infer] = b
                infer[1, n_infer] = node
                infer[2, n_infer] = a
                infer[3, n_infer] = node * B + b
                infer[4, n_infer] = next_node * B + b
                leaf[0, b] = K.LEAF_REUSE_EXPAND if reused else K.LEAF_EXPAND
                leaf[1, b] = n_infer
                n_infer += 1
                max_depth[0] = max(max_depth[0], plen)
                break
            path[b, plen] = child
            plen += 1
            node = child
            if reused:
                leaf[0, b] = K.LEAF_REUSE_VISITED
                leaf[1, b] = -1
                max_depth[0] = max(max_depth[0], 1)
                break
            if terminal[b, child]:
                leaf[0, b] = K.LEAF_TERMINAL
                leaf[1, b] = -1
                max_depth[0] = max(max_depth[0], plen - 1)
                break
        leaf[3, b] = plen
    return n_infer


@K._jit
def gumbel_backup_and_select(new_node, rewards, values, logits, discounts, legals, to_plays, flags, select_next,
                             children, prior, legal, visit, value_sum, reward, discount, terminal, to_play, minmax,
                             params, true_action, reuse_value, raw_value, gumbel, table, num_considered, gparams,
                             path, leaf, infer, max_depth) -> int:
    """Expand and back up this simulation (:func:`lzk_mcts.tree.expand_and_backup`), keep each
    new node's own value v̂ (its value after its first backup), then select the next leaves."""
    K.expand_and_backup(new_node, rewards, values, logits, discounts, legals, to_plays, flags, children, prior,
                        legal, visit, value_sum, reward, discount, terminal, to_play, minmax, params, reuse_value,
                        path, leaf, infer)
    for b in range(children.shape[0]):
        if visit[b, new_node] == 1:  # created in this simulation (unused slots keep 0 visits)
            raw_value[b, new_node] = value_sum[b, new_node]
    if not select_next:
        return 0
    return gumbel_select_leaves(new_node + 1, children, prior, legal, visit, value_sum, reward, discount, terminal,
                                to_play, minmax, true_action, raw_value, gumbel, table, num_considered, gparams, path,
                                leaf, infer, max_depth)


@K._jit
def gumbel_read_roots(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax, raw_value, gumbel,
                      gparams, visit_counts, policy, action) -> None:
    """Given the root visits ``visit_counts`` [B, A] (:func:`lzk_mcts.tree.read_roots`): the
    improved policy softmax(log π + σ(q̂)) [B, A] (0 on illegal actions) and the Sequential
    Halving winner [B] (among the most visited, the largest g + log π + σ(q̂))."""
    B, N, A = children.shape
    sigma = np.empty(A, np.float64)
    for b in range(B):
        _sigma_q_into(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax, raw_value, gparams,
                      b, 0, sigma)
        most = 0
        m = -np.inf
        for a in range(A):
            if legal[b, 0, a]:
                most = max(most, visit_counts[b, a])
                m = max(m, _log_prior(prior[b, 0, a]) + sigma[a])
        total = 0.0
        for a in range(A):
            policy[b, a] = math.exp(_log_prior(prior[b, 0, a]) + sigma[a] - m) if legal[b, 0, a] else 0.0
            total += policy[b, a]
        for a in range(A):
            policy[b, a] /= total
        action[b] = _root_action(children, prior, legal, visit, gumbel, b, sigma, most)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def gumbel_search(
    step_fn: StepFn,
    root_logits: np.ndarray,
    legal: np.ndarray,
    to_play: np.ndarray,
    root_value: np.ndarray,
    config: SearchConfig,
    rng: np.random.Generator,
    *,
    add_noise: bool,
    true_action: np.ndarray | None = None,
    reuse_value: np.ndarray | None = None,
    keep_tree: bool = False,
) -> SearchResult:
    """Gumbel MuZero search over B roots (arguments as :func:`lzk_mcts.search`, which calls
    this for ``config.algorithm == "gumbel"``). ``root_value`` [B] is the network's value of
    each root (v̂ of the mixed value); ``add_noise`` draws the root Gumbel noise (else g = 0).

    Returns a SearchResult with ``policy_target`` [B, A] float32 (the improved policy) and
    ``action`` [B] int64 (the Sequential Halving winner) set.
    """
    from .driver import prepare, simulate  # the driver dispatches here: imported late

    root_logits = np.ascontiguousarray(root_logits, dtype=np.float32)
    B, A = root_logits.shape
    root_value = np.asarray(root_value, dtype=np.float64).reshape(-1)
    if root_value.shape != (B,):
        raise ValueError(f"root_value must be [B] = [{B}]; got {root_value.shape}")
    # Gumbel explores by its root draw: the priors take no Dirichlet noise.
    w = prepare(root_logits, legal, to_play, config, true_action, reuse_value, np.zeros((B, A)), 0.0)
    t, S = w.tree, config.num_simulations
    raw_value = np.zeros((B, S + 1), np.float64)
    raw_value[:, 0] = root_value
    gumbel = rng.gumbel(size=(B, A)) if add_noise else np.zeros((B, A))
    gumbel = np.ascontiguousarray(np.where(t.legal[:, 0], gumbel, 0.0), dtype=np.float64)
    max_considered = min(config.gumbel_max_considered, A)
    table = considered_visits_table(max_considered, S)
    num_considered = np.minimum(t.legal[:, 0].sum(axis=1), max_considered).astype(np.int64)
    gparams = np.array([config.gumbel_maxvisit_init, config.gumbel_value_scale, max_considered,
                        1.0 if config.gumbel_rescale == "tree" else 0.0], np.float64)

    tree_args = (t.children, t.prior, t.legal, t.visit, t.value_sum, t.reward, t.discount, t.terminal, t.to_play)
    gumbel_args = (raw_value, gumbel, table, num_considered, gparams, w.path, w.leaf, w.infer, w.max_depth)
    simulate(step_fn, w, gumbel_select_leaves(1, *tree_args, t.minmax, t.true_action, *gumbel_args),
             lambda new_node, outputs, more: gumbel_backup_and_select(
                 new_node, *outputs, more, *tree_args, t.minmax, t.params, t.true_action, t.reuse_value,
                 *gumbel_args))

    visit_counts = np.empty((B, A), np.int32)
    value = np.empty(B, np.float32)
    policy = np.empty((B, A), np.float64)
    chosen = np.empty(B, np.int64)
    K.read_roots(t.children, t.visit, t.value_sum, visit_counts, value)
    gumbel_read_roots(t.children, t.prior, t.legal, t.visit, t.value_sum, t.reward, t.discount, t.to_play, t.minmax,
                      raw_value, gumbel, gparams, visit_counts, policy, chosen)
    return SearchResult(visit_counts, value, w.stats(), t if keep_tree else None,
                        policy_target=policy.astype(np.float32), action=chosen)
