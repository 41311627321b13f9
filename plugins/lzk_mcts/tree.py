"""Batched search trees as arrays, and the numba kernels that select leaves and back up values.

A batch of B trees with N = S + 1 node slots each. Node 0 is the root; simulation s (0-based)
creates node s + 1 in every tree that runs a model step in that simulation (with ReZero reuse or
a terminal leaf a tree may skip a simulation's step, leaving that slot unused). Every created
node is expanded at creation: it gets the step's reward, discount, legal mask, player to move
and a prior over its legal children, so "child index >= 0" ⇔ "child visited" (a node is created
and backed up in the same simulation).

Conventions (the general search interface, mctx's model of it):

* a node's value is from the view of **its** player to move (``to_play[b, n]``, -1 for
  single-player trees); the reward of the edge into a node is for the player who moved (the
  parent's). Q of parent p's action into child c is ``r_c + γ_c·σ·v_c``, σ = +1 when c's player
  is p's, −1 otherwise (alternating two-player games: always −1);
* ``discount[b, n]`` is γ of the edge into n; γ = 0 marks a **terminal** node: it is never
  expanded, its value is 0, and a simulation that selects it backs up from it without a step;
* ``legal[b, n]`` is n's legal mask (the root's from the caller; below it from the step, or all);
* value normalisation is min-max (MuZero) or none (AlphaZero's raw Q in [−1, 1]); an unvisited
  child scores with the parent's mean Q (LightZero's MuZero) or 0 (AlphaZero).

Formulas follow SPEC §2.3 (LightZero ``cnode.cpp``) and §3.2 (``*_with_reuse``):

* pUCT: ``prior_score = (log((N + c2 + 1)/c2) + c1)·√N/(1 + n_child)·prior`` with N the parent's
  visit count − 1 (= its children's visits, because of the +1 at expansion/preparation), or below
  the root the parent's own visit count (``SearchConfig.parent_visits = "node"``, AlphaZero);
* value score: the unvisited value, else Q, then (min-max) normalised and clipped to [0, 1];
* min-max normalisation: ``(v − min)/max(max − min, δ)`` when ``max − min > 0``, else ``v``;
* ties: every action with score ≥ max − 1e-6 is a candidate; the first one when
  deterministic, else one drawn from a per-tree splitmix64 stream seeded by the driver.

The kernels run over all B trees per call: ``select_leaves`` (descend to a leaf) and
``expand_and_backup`` (create the new nodes, back up); the driver calls them fused as
``backup_and_select``, so a simulation costs one compiled call plus one model step.
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
LEAF_EXPAND = 0  # new node: expand with the step's output, back up its value
LEAF_REUSE_EXPAND = 1  # first visit of the root's true-action child: expand, back up reuse_value
LEAF_REUSE_VISITED = 2  # true-action child already expanded: no step, back up reuse_value
LEAF_TERMINAL = 3  # an expanded terminal node: no step, back up its value 0

# Rows of ``Tree.params`` (float64 [7]), packed to keep the kernels' argument lists short.
P_DISCOUNT, P_PB_C_BASE, P_PB_C_INIT, P_DELTA, P_MINMAX, P_UNVISITED_ZERO, P_NODE_VISITS = 0, 1, 2, 3, 4, 5, 6
NUM_PARAMS = 7

# What a step's output carries besides reward, value and logits (flags of ``expand_and_backup``).
HAS_DISCOUNT, HAS_LEGAL, HAS_TO_PLAY = 1, 2, 4


@dataclass
class Tree:
    """The arrays of B search trees (N node slots, A actions). float64 inside the kernels so
    that a per-node Python reference computes bit-identical scores (tests/mcts/reference.py).

    Arrays are allocated uninitialised; ``init_roots`` fills every field before a search.
    """

    children: np.ndarray  # [B, N, A] int32: child node index, -1 = not expanded
    prior: np.ndarray  # [B, N, A] float64: prior of each child (0 on illegal actions)
    legal: np.ndarray  # [B, N, A] bool: legal actions at each node
    visit: np.ndarray  # [B, N] int32: visit_count (the root starts at 1)
    value_sum: np.ndarray  # [B, N] float64: Σ backed-up values, from the node's player's view
    reward: np.ndarray  # [B, N] float64: reward of the edge into the node (0 at the root)
    discount: np.ndarray  # [B, N] float64: γ of the edge into the node (0: terminal)
    terminal: np.ndarray  # [B, N] bool: the node ends the game (never expanded)
    to_play: np.ndarray  # [B, N] int64: player to move at the node; -1 = single player
    minmax: np.ndarray  # [B, 2] float64: (min, max) of the tree's min-max stats
    true_action: np.ndarray  # [B] int64: ReZero true action at the root, -1 = no reuse
    reuse_value: np.ndarray  # [B] float64: v_{t+1} backed up through the true-action child
    params: np.ndarray  # [NUM_PARAMS] float64: discount, pb_c_base, pb_c_init, δ, min-max?, unvisited 0?, N = node visits?

    @classmethod
    def allocate(cls, batch: int, num_nodes: int, num_actions: int) -> "Tree":
        b, n, a = batch, num_nodes, num_actions
        return cls(
            children=np.empty((b, n, a), np.int32),
            prior=np.empty((b, n, a), np.float64),
            legal=np.empty((b, n, a), np.bool_),
            visit=np.empty((b, n), np.int32),
            value_sum=np.empty((b, n), np.float64),
            reward=np.empty((b, n), np.float64),
            discount=np.empty((b, n), np.float64),
            terminal=np.empty((b, n), np.bool_),
            to_play=np.empty((b, n), np.int64),
            minmax=np.empty((b, 2), np.float64),
            true_action=np.empty(b, np.int64),
            reuse_value=np.empty(b, np.float64),
            params=np.empty(NUM_PARAMS, np.float64),
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
def _value_score(value: float, vmin: float, vmax: float, delta: float, minmax: bool) -> float:
    """The value part of a score: min-max normalised and clipped to [0, 1], or the raw value."""
    return clip01(minmax_normalize(value, vmin, vmax, delta)) if minmax else value


@_jit_inline
def _ucb(factor: float, prior: float, child_n: float, value: float, vmin: float, vmax: float, delta: float,
         minmax: bool) -> float:
    # factor/(1 + n)·prior evaluates exactly as the SPEC's left-to-right pb_c·prior.
    return factor / (1.0 + child_n) * prior + _value_score(value, vmin, vmax, delta, minmax)


@_jit
def prior_score(prior: float, parent_n: float, child_n: float, pb_c_base: float, pb_c_init: float) -> float:
    """pUCT exploration term ``(log((N + c2 + 1)/c2) + c1)·√N/(1 + n_child)·prior``."""
    return pb_c_factor(parent_n, pb_c_base, pb_c_init) / (1.0 + child_n) * prior


@_jit
def ucb_score(prior: float, parent_n: float, child_n: float, value: float, vmin: float, vmax: float,
              delta: float, pb_c_base: float, pb_c_init: float) -> float:
    """``prior_score + clip01(normalize(value))``; ``value`` is the child's Q (signed for two
    players) when visited, else the parent's mean_q (min-max normalisation)."""
    return _ucb(pb_c_factor(parent_n, pb_c_base, pb_c_init), prior, child_n, value, vmin, vmax, delta, True)


@_jit_inline
def _arm_score(reward: float, reuse_value: float, opponent: bool, discount: float, vmin: float, vmax: float,
               delta: float, minmax: bool) -> float:
    v = -reuse_value if opponent else reuse_value
    return _value_score(reward + discount * v, vmin, vmax, delta, minmax)


@_jit
def arm_score(reward: float, reuse_value: float, two_player: bool, discount: float, vmin: float, vmax: float,
              delta: float) -> float:
    """ReZero score of a *visited* true-action child at the root: clip01(normalize(r + γ·v))
    with v = reuse_value (−reuse_value for two players); no exploration bonus."""
    return _arm_score(reward, reuse_value, two_player, discount, vmin, vmax, delta, True)


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
def _mean_q(children, legal, visit, value_sum, reward, discount, b, node, parent_q) -> float:
    """LightZero ``compute_mean_q``: mean of r + γ·v over visited children (unsigned even for
    two players, as LightZero); at the root the plain mean (0 when none is visited), elsewhere
    (parent_q + Σ Q)/(visited + 1) with parent_q the mean_q one level up on this descent."""
    total = 0.0
    count = 0
    for a in range(children.shape[2]):
        if not legal[b, node, a]:
            continue
        c = children[b, node, a]
        if c >= 0:  # created ⇔ visited (a node is expanded and backed up in one simulation)
            total += reward[b, c] + discount[b, c] * _node_value(visit, value_sum, b, c)
            count += 1
    if node == 0 and count > 0:
        return total / count
    return (parent_q + total) / (count + 1)


@_jit_inline
def _select_child(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax, params,
                  true_action, reuse_value, deterministic, rng_state, scores, b, node, unvisited) -> int:
    """Scores every legal child of ``node`` into ``scores`` [A] and returns the chosen action:
    the first of the tied best when deterministic, else a uniformly drawn one. ``unvisited`` is
    the value an unvisited child scores with."""
    c2, c1, delta = params[P_PB_C_BASE], params[P_PB_C_INIT], params[P_DELTA]
    use_minmax = params[P_MINMAX] != 0.0
    vmin, vmax = minmax[b, 0], minmax[b, 1]
    me = to_play[b, node]
    # N of the exploration term: the visits of the node's children (visit − 1: the root's first
    # visit is its initialisation, a node's its expansion), or below the root the node's own
    # visits (SearchConfig.parent_visits = "node"), which count its expansion.
    parent_n = visit[b, node] - 1 if node == 0 or params[P_NODE_VISITS] == 0.0 else visit[b, node]
    factor = pb_c_factor(float(parent_n), c2, c1)
    num_actions = children.shape[2]
    best = -np.inf
    for a in range(num_actions):
        if not legal[b, node, a]:
            scores[a] = -np.inf  # never a candidate: a non-terminal node has a legal action
            continue
        c = children[b, node, a]
        if c < 0:
            s = _ucb(factor, prior[b, node, a], 0.0, unvisited, vmin, vmax, delta, use_minmax)
        elif node == 0 and a == true_action[b]:
            s = _arm_score(reward[b, c], reuse_value[b], to_play[b, c] != me, discount[b, c], vmin, vmax, delta,
                           use_minmax)
        else:
            v = _node_value(visit, value_sum, b, c)
            q = reward[b, c] + discount[b, c] * (-v if to_play[b, c] != me else v)
            s = _ucb(factor, prior[b, node, a], float(visit[b, c]), q, vmin, vmax, delta, use_minmax)
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
def _backup(visit, value_sum, reward, discount, to_play, minmax, path, b, plen, value, leaf_to_play) -> None:
    """LightZero ``cbackpropagate`` from the leaf path[b, plen − 1] up to the root (included),
    widening the tree's min-max stats at every node. ``boot`` is the return from the leaf's
    player's view: a node adds it signed by whether its player is the leaf's, and the edge into
    a node adds its reward signed by whether the mover (the parent's player) is the leaf's,
    discounted by the edge's γ. The min-max statistic of a node is its Q from its parent's view
    (for the root, LightZero's: as if its parent were the other player)."""
    two_player = to_play[b, 0] != -1
    boot = value
    for i in range(plen - 1, -1, -1):
        n = path[b, i]
        r = reward[b, n]
        g = discount[b, n]
        visit[b, n] += 1
        mover = to_play[b, path[b, i - 1]] if i > 0 else (3 - to_play[b, 0] if two_player else -1)
        same = to_play[b, n] == leaf_to_play
        value_sum[b, n] += boot if same else -boot
        v = value_sum[b, n] / visit[b, n]
        q = r + g * (-v if to_play[b, n] != mover else v)
        boot = (r if mover == leaf_to_play else -r) + g * boot
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
def init_roots(children, prior, legal, visit, value_sum, reward, discount, terminal, to_play, minmax,
               true_action, params, logits, root_legal, gamma, noise_fraction, root_to_play,
               root_true_action) -> int:
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
            legal[b, 0, a] = root_legal[b, a]
            if root_legal[b, a]:
                num_legal += 1
                gamma_sum += gamma[b, a]
        if num_legal == 0:
            return INIT_NO_LEGAL
        tp = root_to_play[b]
        if tp != -1 and tp != 1 and tp != 2:
            return INIT_BAD_TO_PLAY
        ta = root_true_action[b]
        if ta >= A or (ta >= 0 and not root_legal[b, ta]):
            return INIT_BAD_TRUE_ACTION
        true_action[b] = ta if ta >= 0 else -1
        children[b, :, :] = -1
        visit[b, :] = 0
        value_sum[b, :] = 0.0
        reward[b, :] = 0.0
        discount[b, 0] = params[P_DISCOUNT]
        terminal[b, :] = False
        to_play[b, :] = -1
        _softmax_into(logits[b], root_legal[b], True, prior[b, 0])
        if noise_fraction > 0.0:
            for a in range(A):
                if root_legal[b, a]:
                    eta = gamma[b, a] / gamma_sum if gamma_sum > 0.0 else 1.0 / num_legal
                    prior[b, 0, a] = (1.0 - noise_fraction) * prior[b, 0, a] + noise_fraction * eta
        visit[b, 0] = 1
        to_play[b, 0] = tp
        minmax[b, 0] = np.inf
        minmax[b, 1] = -np.inf
    return INIT_OK


@_jit
def select_leaves(next_node, children, prior, legal, visit, value_sum, reward, discount, terminal, to_play, minmax,
                  params, true_action, reuse_value, deterministic, rng_state, path, leaf, infer, max_depth) -> int:
    """Descend every tree from its root to a leaf; returns B', the number of trees that need a
    model step, whose (batch index, parent node, action, parent slot, child slot) go to
    ``infer[:, :B']`` (slot of node n in tree b: n·B + b; the child is ``next_node``).

    Per tree b: ``path[b, :leaf[3, b]]`` = existing nodes on the descent, root first;
    ``leaf[:2, b]`` = (LEAF_* kind, step slot).
    """
    B, N, A = children.shape
    scores = np.empty(A, np.float64)
    unvisited_zero = params[P_UNVISITED_ZERO] != 0.0
    n_infer = 0
    for b in range(B):
        node = 0
        plen = 1
        path[b, 0] = 0
        parent_q = 0.0
        ta = true_action[b]
        while True:
            if unvisited_zero:
                unvisited = 0.0
            else:
                unvisited = _mean_q(children, legal, visit, value_sum, reward, discount, b, node, parent_q)
                parent_q = unvisited
            a = _select_child(children, prior, legal, visit, value_sum, reward, discount, to_play, minmax, params,
                              true_action, reuse_value, deterministic, rng_state, scores, b, node, unvisited)
            reused = node == 0 and a == ta
            child = children[b, node, a]
            if child < 0:  # unexpanded: the new node comes from this simulation's model step
                infer[0, n_infer] = b
                infer[1, n_infer] = node
                infer[2, n_infer] = a
                infer[3, n_infer] = node * B + b
                infer[4, n_infer] = next_node * B + b
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
            if terminal[b, child]:  # the game is over here: back up its value 0, no step
                leaf[0, b] = LEAF_TERMINAL
                leaf[1, b] = -1
                max_depth[0] = max(max_depth[0], plen - 1)
                break
        leaf[3, b] = plen
    return n_infer


@_jit
def expand_and_backup(new_node, rewards, values, logits, discounts, legals, to_plays, flags, children, prior,
                      legal, visit, value_sum, reward, discount, terminal, to_play, minmax, params, reuse_value,
                      path, leaf, infer) -> None:
    """Create node ``new_node`` under each leaf that got a model step (outputs in ``infer``
    order: ``rewards``/``values`` [B'], ``logits`` [B', A], and where ``flags`` has HAS_*:
    ``discounts`` [B'], ``legals`` [B', A], ``to_plays`` [B']) and back up every tree: the step's
    value (0 at a terminal), ``reuse_value`` for ReZero true-action leaves, 0 at terminal leaves.

    Defaults without the flags: γ = params discount (never terminal), every action legal, and
    the player alternates in two-player trees (stays -1 in single-player ones)."""
    B = children.shape[0]
    has_discount = (flags & HAS_DISCOUNT) != 0
    has_legal = (flags & HAS_LEGAL) != 0
    has_to_play = (flags & HAS_TO_PLAY) != 0
    for b in range(B):
        kind = leaf[0, b]
        plen = leaf[3, b]
        if kind == LEAF_REUSE_VISITED:
            value = reuse_value[b]
        elif kind == LEAF_TERMINAL:
            value = 0.0
        else:
            j = leaf[1, b]
            parent = infer[1, j]
            children[b, parent, infer[2, j]] = new_node
            reward[b, new_node] = rewards[j]
            g = discounts[j] if has_discount else params[P_DISCOUNT]
            discount[b, new_node] = g
            is_terminal = has_discount and g == 0.0
            terminal[b, new_node] = is_terminal
            if has_to_play:
                to_play[b, new_node] = to_plays[j]
            else:
                p = to_play[b, parent]
                to_play[b, new_node] = -1 if p == -1 else 3 - p
            for a in range(legal.shape[2]):
                legal[b, new_node, a] = legals[j, a] if has_legal else True
            if is_terminal:
                prior[b, new_node, :] = 0.0
            else:
                _softmax_into(logits[j], legal[b, new_node], has_legal, prior[b, new_node])
            path[b, plen] = new_node
            plen += 1
            if is_terminal:
                value = 0.0
            else:
                value = float(values[j]) if kind == LEAF_EXPAND else reuse_value[b]
        leaf_node = path[b, plen - 1]
        _backup(visit, value_sum, reward, discount, to_play, minmax, path, b, plen, value, to_play[b, leaf_node])


@_jit
def backup_and_select(new_node, rewards, values, logits, discounts, legals, to_plays, flags, select_next, children,
                      prior, legal, visit, value_sum, reward, discount, terminal, to_play, minmax, params,
                      true_action, reuse_value, deterministic, rng_state, path, leaf, infer, max_depth) -> int:
    """``expand_and_backup`` for this simulation then, if ``select_next``, ``select_leaves`` for
    the next one: one compiled call per simulation keeps the driver's overhead at a few µs."""
    expand_and_backup(new_node, rewards, values, logits, discounts, legals, to_plays, flags, children, prior, legal,
                      visit, value_sum, reward, discount, terminal, to_play, minmax, params, reuse_value, path, leaf,
                      infer)
    if not select_next:
        return 0
    return select_leaves(new_node + 1, children, prior, legal, visit, value_sum, reward, discount, terminal, to_play,
                         minmax, params, true_action, reuse_value, deterministic, rng_state, path, leaf, infer,
                         max_depth)


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
