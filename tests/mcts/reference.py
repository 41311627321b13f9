"""A straightforward per-node MuZero search in pure Python, written from SPEC §2.3 and §3.2
(LightZero ``cnode.cpp`` semantics), for oracle tests of the batched numba search.

One root at a time, nodes are objects with a children dict, ties broken deterministically
(the first action among the scores >= max − 1e-6). Arithmetic is Python float (float64) in the
same order as the formulas in the SPEC, so scores match the batched search bit for bit.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

TIE_EPS = 1e-6

#: model(path) -> (reward, value, logits [A]) for the node reached by ``path`` (root actions first)
Model = Callable[[tuple[int, ...]], tuple[float, float, Sequence[float]]]


class MinMaxStats:
    def __init__(self, delta: float) -> None:
        self.minimum = math.inf
        self.maximum = -math.inf
        self.delta = delta

    def update(self, v: float) -> None:
        self.maximum = max(self.maximum, v)
        self.minimum = min(self.minimum, v)

    def normalize(self, v: float) -> float:
        if self.maximum - self.minimum > 0:
            return (v - self.minimum) / max(self.maximum - self.minimum, self.delta)
        return v


class Node:
    def __init__(self, prior: float) -> None:
        self.prior = prior
        self.visit_count = 0
        self.value_sum = 0.0
        self.reward = 0.0
        self.to_play = -1
        self.children: dict[int, Node] = {}

    def expanded(self) -> bool:
        return len(self.children) > 0

    def value(self) -> float:
        return self.value_sum / self.visit_count if self.visit_count > 0 else 0.0

    def expand(self, to_play: int, reward: float, logits: Sequence[float], legal_actions: list[int]) -> None:
        """Store the reward; one child per legal action with a max-subtracted softmax prior."""
        self.to_play = to_play
        self.reward = reward
        m = max(float(logits[a]) for a in legal_actions)
        exps = [math.exp(float(logits[a]) - m) for a in legal_actions]
        total = 0.0
        for e in exps:
            total += e
        for a, e in zip(legal_actions, exps):
            self.children[a] = Node(e / total)


def clip01(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def compute_mean_q(node: Node, is_root: bool, parent_q: float, discount: float) -> float:
    total = 0.0
    visits = 0
    for child in node.children.values():
        if child.visit_count > 0:
            total += child.reward + discount * child.value()
            visits += 1
    if is_root and visits > 0:
        return total / visits
    return (parent_q + total) / (visits + 1)


def ucb_score(child: Node, mm: MinMaxStats, parent_mean_q: float, total_children_visits: int, cfg,
              two_player: bool) -> float:
    n = float(total_children_visits)
    pb_c = (math.log((n + cfg.pb_c_base + 1.0) / cfg.pb_c_base) + cfg.pb_c_init) * math.sqrt(n) / (1 + child.visit_count)
    prior_score = pb_c * child.prior
    if child.visit_count == 0:
        value_score = parent_mean_q
    elif two_player:
        value_score = child.reward + cfg.discount * (-child.value())
    else:
        value_score = child.reward + cfg.discount * child.value()
    return prior_score + clip01(mm.normalize(value_score))


def arm_score(child: Node, mm: MinMaxStats, parent_mean_q: float, total_children_visits: int, cfg,
              two_player: bool, reuse_value: float) -> float:
    if child.visit_count == 0:
        return ucb_score(child, mm, parent_mean_q, total_children_visits, cfg, two_player)
    v = -reuse_value if two_player else reuse_value
    return clip01(mm.normalize(child.reward + cfg.discount * v))


def select_child(node: Node, mm: MinMaxStats, mean_q: float, cfg, two_player: bool, true_action: int,
                 reuse_value: float, is_root: bool) -> int:
    scores = {}
    for a, child in node.children.items():
        if is_root and a == true_action:
            scores[a] = arm_score(child, mm, mean_q, node.visit_count - 1, cfg, two_player, reuse_value)
        else:
            scores[a] = ucb_score(child, mm, mean_q, node.visit_count - 1, cfg, two_player)
    best = max(scores.values())
    return min(a for a, s in scores.items() if s >= best - TIE_EPS)


def backpropagate(path: list[Node], mm: MinMaxStats, to_play: int, value: float, discount: float,
                  two_player: bool) -> None:
    bootstrap = value
    for node in reversed(path):
        if two_player:
            node.value_sum += bootstrap if node.to_play == to_play else -bootstrap
            node.visit_count += 1
            mm.update(node.reward + discount * -node.value())
            if node.to_play == to_play:
                bootstrap = -node.reward + discount * bootstrap
            else:
                bootstrap = node.reward + discount * bootstrap
        else:
            node.value_sum += bootstrap
            node.visit_count += 1
            mm.update(node.reward + discount * node.value())
            bootstrap = node.reward + discount * bootstrap


def reference_search(model: Model, root_logits: Sequence[float], legal: Sequence[bool], to_play: int, cfg,
                     true_action: int = -1, reuse_value: float = 0.0) -> tuple[list[int], float, int]:
    """Search one root; returns (visit counts per action, root value, number of model calls)."""
    num_actions = len(root_logits)
    two_player = to_play != -1
    root = Node(0.0)
    root.expand(to_play, 0.0, root_logits, [a for a in range(num_actions) if legal[a]])
    root.visit_count += 1  # the preparation visit, with no value
    mm = MinMaxStats(cfg.value_delta_max)
    calls = 0
    for _ in range(cfg.num_simulations):
        node, path, actions = root, [root], []
        virtual_to_play = to_play
        parent_q = 0.0
        is_root = True
        reused = False
        while node.expanded():
            mean_q = compute_mean_q(node, is_root, parent_q, cfg.discount)
            parent_q = mean_q
            a = select_child(node, mm, mean_q, cfg, two_player, true_action, reuse_value, is_root)
            if two_player:
                virtual_to_play = 2 if virtual_to_play == 1 else 1
            node = node.children[a]
            path.append(node)
            actions.append(a)
            reused = is_root and a == true_action
            is_root = False
            if reused:  # ReZero: stop at depth 1 on the true action
                break
        if reused and node.expanded():
            value = reuse_value  # no inference
        else:
            reward, v, logits = model(tuple(actions))
            calls += 1
            node.expand(virtual_to_play, float(reward), logits, list(range(num_actions)))
            value = reuse_value if reused else float(v)
        backpropagate(path, mm, virtual_to_play, value, cfg.discount, two_player)
    counts = [root.children[a].visit_count if a in root.children else 0 for a in range(num_actions)]
    return counts, root.value(), calls
