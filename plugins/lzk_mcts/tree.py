"""Batched MuZero tree as arrays, and the numba kernels that select leaves and back up values.

A batch of B trees with N = S + 1 node slots each. Node 0 is the root; simulation s (0-based)
creates node s + 1 in every tree that runs inference in that simulation (with ReZero reuse a
tree may skip a simulation's inference, leaving that slot unused). Every created node is
expanded at creation: it gets the network's reward and a prior over its children, so
"child index >= 0" ⇔ "child visited" (a node is created and backed up in the same simulation).

Formulas follow SPEC §2.3 (LightZero ``cnode.cpp``) and §3.2 (``*_with_reuse``):

* pUCT: ``prior_score = (log((N + c2 + 1)/c2) + c1)·√N/(1 + n_child)·prior`` with N the parent's
  visit count − 1 (= its children's visits, because of the +1 at expansion/preparation);
* value score: the parent's ``mean_q`` for an unvisited child, else ``r + γ·v`` (``r − γ·v``
  for two players), then min-max normalised and clipped to [0, 1];
* min-max normalisation: ``(v − min)/max(max − min, δ)`` when ``max − min > 0``, else ``v``;
* ties: every action with score ≥ max − 1e-6 is a candidate; the first one when
  deterministic, else one drawn from a per-tree splitmix64 stream seeded by the driver.

The kernels run over all B trees per call: ``select_leaves`` (descend to a leaf) and
``expand_and_backup`` (create the new nodes, back up); the driver calls them fused as
``backup_and_select``, so a simulation costs one compiled call plus one model call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

# error_model="numpy": no zero-division checks in the hot loops (every division is guarded).
# nogil: searches in different threads can overlap. inline="always" on the per-node helpers:
# numba does not inline across njit functions by itself, and calls that pass a dozen array
# structs cost ~2.5x the whole search time (measured at B=64, S=50).
_jit = njit(cache=True, nogil=True, error_model="numpy")
_jit_inline = njit(cache=True, nogil=True, error_model="numpy", inline="always")

#: Scores within this distance of the best one are tied (LightZero's epsilon).
TIE_EPS = 1e-6

# Leaf kinds written by ``select_leaves`` and read by ``expand_and_backup``.
LEAF_EXPAND = 0  # new node: expand with the network output, back up the network value
LEAF_REUSE_EXPAND = 1  # first visit of the root's true-action child: expand, back up reuse_value
LEAF_REUSE_VISITED = 2  # true-action child already expanded: no inference, back up reuse_value

# Rows of ``Tree.params`` (float64 [4]), packed to keep the kernels' argument lists short.
P_DISCOUNT, P_PB_C_BASE, P_PB_C_INIT, P_DELTA = 0, 1, 2, 3


@dataclass
class Tree:
    """The arrays of B search trees (N node slots, A actions). float64 inside the kernels so
    that a per-node Python reference computes bit-identical scores (tests/mcts/reference.py).

    Arrays are allocated uninitialised; ``init_roots`` fills every field before a search.
    """

    children: np.ndarray  # [B, N, A] int32: child node index, -1 = not expanded
    prior: np.ndarray  # [B, N, A] float64: prior of each child (0 on illegal root actions)
    root_legal: np.ndarray  # [B, A] bool: legal actions at the root (all legal below it)
    visit: np.ndarray  # [B, N] int32: visit_count (the root starts at 1)
    value_sum: np.ndarray  # [B, N] float64
    reward: np.ndarray  # [B, N] float64: reward of the edge into the node (0 at the root)
    to_play: np.ndarray  # [B, N] int64: player to move at the node; -1 = single player tree
    minmax: np.ndarray  # [B, 2] float64: (min, max) of the tree's min-max stats
    true_action: np.ndarray  # [B] int64: ReZero true action at the root, -1 = no reuse
    reuse_value: np.ndarray  # [B] float64: v_{t+1} backed up through the true-action child
    params: np.ndarray  # [4] float64: discount, pb_c_base, pb_c_init, value_delta_max

    @classmethod
    def allocate(cls, batch: int, num_nodes: int, num_actions: int) -> "Tree":
        b, n, a = batch, num_nodes, num_actions
        return cls(
            children=np.empty((b, n, a), np.int32),
            prior=np.empty((b, n, a), np.float64),
            root_legal=np.empty((b, a), np.bool_),
            visit=np.empty((b, n), np.int32),
            value_sum=np.empty((b, n), np.float64),
            reward=np.empty((b, n), np.float64),
            to_play=np.empty((b, n), np.int64),
            minmax=np.empty((b, 2), np.float64),
            true_action=np.empty(b, np.int64),
            reuse_value=np.empty(b, np.float64),
            params=np.empty(4, np.float64),
        )

    def parent_of(self, b: int, node: int) -> int:
        """Parent of ``node`` in tree ``b`` (-1 for the root or an unused slot); for inspection."""
        hits = np.argwhere(self.children[b] == node)
        return int(hits[0, 0]) if len(hits) else -1


# ---------------------------------------------------------------------------------------------
# Scalar formulas (public so that golden tests can call them directly)
# ---------------------------------------------------------------------------------------------


@_jit_inline
def minmax_normalize(v: float, vmin: float, vmax: float, delta: float) -> float:
    """SPEC min-max normalisation: ``(v − min)/max(max − min, δ)`` if the span is positive,
    else ``v`` unchanged (this includes empty stats, where max − min = −inf)."""
    span = vmax - vmin
    if span > 0.0:
        return (v - vmin) / max(span, delta)
    return v


@_jit_inline
def clip01(x: float) -> float:
    return min(max(x, 0.0), 1.0)


@_jit_inline
def pb_c_factor(parent_n: float, pb_c_base: float, pb_c_init: float) -> float:
    """The per-parent part of pUCT, ``(log((N + c2 + 1)/c2) + c1)·√N``; N = parent
    visit_count − 1 (its children's visits). Computed once per node during selection."""
    return (math.log((parent_n + pb_c_base + 1.0) / pb_c_base) + pb_c_init) * math.sqrt(parent_n)


@_jit_inline
def _ucb(factor: float, prior: float, child_n: float, value: float, vmin: float, vmax: float, delta: float) -> float:
    # factor/(1 + n)·prior evaluates exactly as the SPEC's left-to-right pb_c·prior.
    return factor / (1.0 + child_n) * prior + clip01(minmax_normalize(value, vmin, vmax, delta))


@_jit
def prior_score(prior: float, parent_n: float, child_n: float, pb_c_base: float, pb_c_init: float) -> float:
    """pUCT exploration term ``(log((N + c2 + 1)/c2) + c1)·√N/(1 + n_child)·prior``."""
    return pb_c_factor(parent_n, pb_c_base, pb_c_init) / (1.0 + child_n) * prior


@_jit
def ucb_score(prior: float, parent_n: float, child_n: float, value: float, vmin: float, vmax: float,
              delta: float, pb_c_base: float, pb_c_init: float) -> float:
    """``prior_score + clip01(normalize(value))``; ``value`` is the child's Q (signed for two
    players) when visited, else the parent's mean_q."""
    return _ucb(pb_c_factor(parent_n, pb_c_base, pb_c_init), prior, child_n, value, vmin, vmax, delta)


@_jit_inline
def arm_score(reward: float, reuse_value: float, two_player: bool, discount: float, vmin: float, vmax: float,
              delta: float) -> float:
    """ReZero score of a *visited* true-action child at the root: clip01(normalize(r + γ·v))
    with v = reuse_value (−reuse_value for two players); no exploration bonus."""
    v = -reuse_value if two_player else reuse_value
    return clip01(minmax_normalize(reward + discount * v, vmin, vmax, delta))


# ---------------------------------------------------------------------------------------------
# Per-tree helpers
# ---------------------------------------------------------------------------------------------


@_jit_inline
def _splitmix64(state: np.ndarray, b: int) -> np.uint64:
    """Next value of tree b's splitmix64 stream (reproducible tie-breaking, no global RNG)."""
    z = state[b] + np.uint64(0x9E3779B97F4A7C15)
    state[b] = z
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@_jit_inline
def _softmax_into(logits: np.ndarray, legal: np.ndarray, use_mask: bool, out: np.ndarray) -> None:
    """Max-subtracted softmax of ``logits`` [A] restricted to ``legal`` (all when not
    ``use_mask``), written to ``out`` [A] with zeros elsewhere. Sequential sums on purpose:
    the reference implementation sums in the same order."""
    m = -np.inf
    for a in range(logits.shape[0]):
        if (not use_mask or legal[a]) and logits[a] > m:
            m = logits[a]
    total = 0.0
    for a in range(logits.shape[0]):
        if not use_mask or legal[a]:
            e = math.exp(float(logits[a]) - m)
            out[a] = e
            total += e
        else:
            out[a] = 0.0
    for a in range(logits.shape[0]):
        out[a] = out[a] / total


@_jit_inline
def _node_value(visit: np.ndarray, value_sum: np.ndarray, b: int, n: int) -> float:
    v = visit[b, n]
    return value_sum[b, n] / v if v > 0 else 0.0


@_jit_inline
def _mean_q(children, visit, value_sum, reward, root_legal, b, node, parent_q, discount) -> float:
    """LightZero ``compute_mean_q``: mean of r + γ·v over visited children (unsigned even for
    two players); at the root the plain mean (0 when none is visited), elsewhere
    (parent_q + Σ Q)/(visited + 1) with parent_q the mean_q one level up on this descent."""
    total = 0.0
    count = 0
    for a in range(children.shape[2]):
        if node == 0 and not root_legal[b, a]:
            continue
        c = children[b, node, a]
        if c >= 0:  # created ⇔ visited (a node is expanded and backed up in one simulation)
            total += reward[b, c] + discount * _node_value(visit, value_sum, b, c)
            count += 1
    if node == 0 and count > 0:
        return total / count
    return (parent_q + total) / (count + 1)


@_jit_inline
def _select_child(children, prior, root_legal, visit, value_sum, reward, to_play, minmax, params,
                  true_action, reuse_value, deterministic, rng_state, scores, b, node, mean_q) -> int:
    """Scores every legal child of ``node`` into ``scores`` [A] and returns the chosen action:
    the first of the tied best when deterministic, else a uniformly drawn one."""
    discount, c2, c1, delta = params[P_DISCOUNT], params[P_PB_C_BASE], params[P_PB_C_INIT], params[P_DELTA]
    vmin, vmax = minmax[b, 0], minmax[b, 1]
    two_player = to_play[b, 0] != -1
    factor = pb_c_factor(float(visit[b, node] - 1), c2, c1)
    num_actions = children.shape[2]
    best = -np.inf
    for a in range(num_actions):
        if node == 0 and not root_legal[b, a]:
            scores[a] = -np.inf  # never a candidate: the root has at least one legal action
            continue
        c = children[b, node, a]
        if c < 0:
            s = _ucb(factor, prior[b, node, a], 0.0, mean_q, vmin, vmax, delta)
        elif node == 0 and a == true_action[b]:
            s = arm_score(reward[b, c], reuse_value[b], two_player, discount, vmin, vmax, delta)
        else:
            v = _node_value(visit, value_sum, b, c)
            q = reward[b, c] + discount * (-v if two_player else v)
            s = _ucb(factor, prior[b, node, a], float(visit[b, c]), q, vmin, vmax, delta)
        scores[a] = s
        if s > best:
            best = s
    threshold = best - TIE_EPS
    k = 0
    for a in range(num_actions):
        if scores[a] >= threshold:
            if deterministic:
                return a
            k += 1
    pick = 0 if k == 1 else int(_splitmix64(rng_state, b) % np.uint64(k))
    for a in range(num_actions):
        if scores[a] >= threshold:
            if pick == 0:
                return a
            pick -= 1
    return -1  # unreachable: k >= 1


@_jit_inline
def _backup(visit, value_sum, reward, to_play, minmax, discount, path, b, plen, value, leaf_to_play) -> None:
    """LightZero ``cbackpropagate`` from the leaf path[b, plen − 1] up to the root (included),
    widening the tree's min-max stats at every node. Two players: values are signed by
    whether the node's player is the leaf's player."""
    two_player = to_play[b, 0] != -1
    boot = value
    for i in range(plen - 1, -1, -1):
        n = path[b, i]
        r = reward[b, n]
        visit[b, n] += 1
        if two_player:
            same = to_play[b, n] == leaf_to_play
            value_sum[b, n] += boot if same else -boot
            q = r + discount * -(value_sum[b, n] / visit[b, n])
            boot = (-r if same else r) + discount * boot
        else:
            value_sum[b, n] += boot
            q = r + discount * (value_sum[b, n] / visit[b, n])
            boot = r + discount * boot
        if q < minmax[b, 0]:
            minmax[b, 0] = q
        if q > minmax[b, 1]:
            minmax[b, 1] = q


# ---------------------------------------------------------------------------------------------
# Batch kernels (all B trees per call)
# ---------------------------------------------------------------------------------------------

# Codes returned by ``init_roots`` (the driver turns them into ValueError messages).
INIT_OK, INIT_NO_LEGAL, INIT_BAD_TO_PLAY, INIT_BAD_TRUE_ACTION = 0, 1, 2, 3


@_jit
def init_roots(children, prior, root_legal, visit, value_sum, reward, to_play, minmax, true_action,
               logits, legal, gamma, noise_fraction, root_to_play, root_true_action) -> int:
    """Reset the trees and prepare the roots (LightZero ``prepare``); returns an INIT_* code.

    prior = softmax of ``logits`` [B, A] over the legal actions; when ``noise_fraction`` > 0,
    p ← (1 − f)·p + f·η with η = ``gamma`` [B, A] renormalised over the legal actions (a
    Dirichlet draw; uniform if every gamma underflowed). Root visit_count = 1 with no value;
    empty min-max stats. ``root_true_action`` [B] (-1 = no reuse) must be legal where set.
    """
    B, N, A = children.shape
    for b in range(B):
        num_legal = 0
        gamma_sum = 0.0
        for a in range(A):
            root_legal[b, a] = legal[b, a]
            if legal[b, a]:
                num_legal += 1
                gamma_sum += gamma[b, a]
        if num_legal == 0:
            return INIT_NO_LEGAL
        tp = root_to_play[b]
        if tp != -1 and tp != 1 and tp != 2:
            return INIT_BAD_TO_PLAY
        ta = root_true_action[b]
        if ta >= A or (ta >= 0 and not legal[b, ta]):
            return INIT_BAD_TRUE_ACTION
        true_action[b] = ta if ta >= 0 else -1
        children[b, :, :] = -1
        visit[b, :] = 0
        value_sum[b, :] = 0.0
        reward[b, :] = 0.0
        to_play[b, :] = -1
        _softmax_into(logits[b], legal[b], True, prior[b, 0])
        if noise_fraction > 0.0:
            for a in range(A):
                if legal[b, a]:
                    eta = gamma[b, a] / gamma_sum if gamma_sum > 0.0 else 1.0 / num_legal
                    prior[b, 0, a] = (1.0 - noise_fraction) * prior[b, 0, a] + noise_fraction * eta
        visit[b, 0] = 1
        to_play[b, 0] = tp
        minmax[b, 0] = np.inf
        minmax[b, 1] = -np.inf
    return INIT_OK


@_jit
def select_leaves(children, prior, root_legal, visit, value_sum, reward, to_play, minmax, params,
                  true_action, reuse_value, deterministic, rng_state, path, leaf, infer, max_depth) -> int:
    """Descend every tree from its root to a leaf; returns B', the number of trees that need
    inference, whose (batch index, parent node, action) go to ``infer[:, :B']``.

    Per tree b: ``path[b, :leaf[3, b]]`` = existing nodes on the descent, root first;
    ``leaf[:3, b]`` = (LEAF_* kind, inference slot, virtual to_play at the leaf).
    """
    B, N, A = children.shape
    scores = np.empty(A, np.float64)
    n_infer = 0
    for b in range(B):
        node = 0
        plen = 1
        path[b, 0] = 0
        vtp = to_play[b, 0]  # LightZero's "virtual to_play", flipped at every ply for two players
        parent_q = 0.0
        ta = true_action[b]
        while True:
            mean_q = _mean_q(children, visit, value_sum, reward, root_legal, b, node, parent_q, params[P_DISCOUNT])
            parent_q = mean_q
            a = _select_child(children, prior, root_legal, visit, value_sum, reward, to_play, minmax, params,
                              true_action, reuse_value, deterministic, rng_state, scores, b, node, mean_q)
            if vtp != -1:
                vtp = 2 if vtp == 1 else 1
            reused = node == 0 and a == ta
            child = children[b, node, a]
            if child < 0:  # unexpanded: the new node comes from this simulation's inference
                infer[0, n_infer] = b
                infer[1, n_infer] = node
                infer[2, n_infer] = a
                leaf[0, b] = LEAF_REUSE_EXPAND if reused else LEAF_EXPAND
                leaf[1, b] = n_infer
                n_infer += 1
                max_depth[0] = max(max_depth[0], plen)  # depth of the node to create
                break
            path[b, plen] = child
            plen += 1
            node = child
            if reused:  # ReZero: the true-action subtree is never searched below depth 1
                leaf[0, b] = LEAF_REUSE_VISITED
                leaf[1, b] = -1
                max_depth[0] = max(max_depth[0], 1)
                break
        leaf[2, b] = vtp
        leaf[3, b] = plen
    return n_infer


@_jit
def expand_and_backup(new_node, rewards, values, logits, children, prior, root_legal, visit, value_sum, reward,
                      to_play, minmax, params, reuse_value, path, leaf, infer) -> None:
    """Create node ``new_node`` under each leaf that got inference (``rewards``/``values`` [B'],
    ``logits`` [B', A] in ``infer`` order; prior = softmax over all A actions) and back up every
    tree: the network value, or ``reuse_value`` for ReZero true-action leaves."""
    B = children.shape[0]
    for b in range(B):
        kind = leaf[0, b]
        plen = leaf[3, b]
        if kind == LEAF_REUSE_VISITED:
            value = reuse_value[b]
        else:
            j = leaf[1, b]
            children[b, infer[1, j], infer[2, j]] = new_node
            reward[b, new_node] = rewards[j]
            to_play[b, new_node] = leaf[2, b]
            _softmax_into(logits[j], root_legal[b], False, prior[b, new_node])
            path[b, plen] = new_node
            plen += 1
            value = float(values[j]) if kind == LEAF_EXPAND else reuse_value[b]
        _backup(visit, value_sum, reward, to_play, minmax, params[P_DISCOUNT], path, b, plen, value, leaf[2, b])


@_jit
def backup_and_select(new_node, rewards, values, logits, select_next, children, prior, root_legal, visit,
                      value_sum, reward, to_play, minmax, params, true_action, reuse_value, deterministic,
                      rng_state, path, leaf, infer, max_depth) -> int:
    """``expand_and_backup`` for this simulation then, if ``select_next``, ``select_leaves`` for
    the next one: one compiled call per simulation keeps the driver's overhead at a few µs."""
    expand_and_backup(new_node, rewards, values, logits, children, prior, root_legal, visit, value_sum, reward,
                      to_play, minmax, params, reuse_value, path, leaf, infer)
    if not select_next:
        return 0
    return select_leaves(children, prior, root_legal, visit, value_sum, reward, to_play, minmax, params,
                         true_action, reuse_value, deterministic, rng_state, path, leaf, infer, max_depth)


@_jit
def read_roots(children, visit, value_sum, visit_counts, root_value) -> None:
    """Root outputs: ``visit_counts`` [B, A] child visits (0 where unexpanded or illegal) and
    ``root_value`` [B] = value_sum / visit_count (= Σ backed-up values / (S + 1))."""
    B, N, A = children.shape
    for b in range(B):
        for a in range(A):
            c = children[b, 0, a]
            visit_counts[b, a] = visit[b, c] if c >= 0 else 0
        root_value[b] = value_sum[b, 0] / visit[b, 0]
