"""A per-node Gumbel MuZero search in pure Python, written from the paper (Danihelka et al.,
ICLR 2022: Sequential Halving with Gumbel at the root, the deterministic improved-policy rule
below it, completed Q by the mixed value), for oracle tests of ``lzk_mcts.gumbel``.

One root at a time, nodes are objects; ties go to the first action. Two-player trees alternate.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

#: model(path) -> (reward, value, logits [A]) of the node reached by ``path`` (root actions first)
Model = Callable[[tuple[int, ...]], tuple[float, float, Sequence[float]]]


class Node:
    def __init__(self, logits: Sequence[float], value: float, reward: float, legal: Sequence[bool]) -> None:
        self.legal = [a for a in range(len(logits)) if legal[a]]
        m = max(float(logits[a]) for a in self.legal)
        exps = {a: math.exp(float(logits[a]) - m) for a in self.legal}
        total = sum(exps.values())
        self.prior = {a: e / total for a, e in exps.items()}
        self.raw_value = value
        self.reward = reward
        self.visits = 0
        self.value_sum = 0.0
        self.children: dict[int, Node] = {}

    def value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0


def sigma_q(node: Node, discount: float, two_player: bool, c_visit: float, c_scale: float,
            tree_range: tuple[float, float] | None = None) -> dict[int, float]:
    """σ of the rescaled completed Q of every legal action of ``node``: rescaled by the completed
    Qs' own min and max, widened by ``tree_range`` (min, max of the tree's Qs) when given."""
    q = {a: c.reward + discount * (-c.value() if two_player else c.value()) for a, c in node.children.items()}
    n = {a: node.children[a].visits if a in node.children else 0 for a in node.legal}
    total_n = sum(n.values())
    mixed = node.raw_value
    if total_n > 0:
        w = sum(node.prior[a] for a in q)
        mixed = (node.raw_value + total_n * sum(node.prior[a] * q[a] for a in q) / w) / (total_n + 1)
    completed = {a: q.get(a, mixed) for a in node.legal}
    lo, hi = min(completed.values()), max(completed.values())
    if tree_range is not None:
        lo, hi = min(lo, tree_range[0]), max(hi, tree_range[1])
    return {a: (c_visit + max(n.values())) * c_scale * (v - lo) / max(hi - lo, 1e-8) for a, v in completed.items()}


def halving_schedule(m: int, sims: int) -> list[int]:
    """Visit count of the action each simulation must pick (Sequential Halving over m actions),
    rebuilt by simulating the phases: each phase splits its budget evenly over the survivors."""
    if m <= 1:
        return list(range(sims))
    phases = math.ceil(math.log2(m))
    out: list[int] = []
    counts = [0] * m
    alive = m
    while len(out) < sims:
        for _ in range(max(1, sims // (phases * alive))):
            for i in range(alive):
                out.append(counts[i])
                counts[i] += 1
        alive = max(2, alive // 2)
    return out[:sims]


def reference_gumbel_search(model: Model, root_logits: Sequence[float], root_value: float, legal: Sequence[bool],
                            gumbel: Sequence[float], cfg, two_player: bool = False
                            ) -> tuple[list[int], list[float], int]:
    """Search one root; returns (visit counts per action, improved policy, chosen action)."""
    A = len(root_logits)
    root = Node(root_logits, root_value, 0.0, legal)
    root.visits = 1
    m = min(cfg.gumbel_max_considered, len(root.legal))
    schedule = halving_schedule(m, cfg.num_simulations)
    args = (cfg.discount, two_player, cfg.gumbel_maxvisit_init, cfg.gumbel_value_scale)
    # The tree's min-max statistics: every backed-up node's Q from its parent's view,
    # r + γ·(±v) (the root's reward is 0; in two-player trees a parent is always the other player).
    stats = [math.inf, -math.inf]

    def sigma(node: Node) -> dict[int, float]:
        return sigma_q(node, *args, tree_range=tuple(stats) if cfg.gumbel_rescale == "tree" else None)

    def root_pick(wanted: int) -> int:
        s = sigma(root)
        cands = [a for a in root.legal if (root.children[a].visits if a in root.children else 0) == wanted]
        return max(cands, key=lambda a: (gumbel[a] + math.log(root.prior[a]) + s[a], -a))

    for sim in range(cfg.num_simulations):
        node, path, actions = root, [root], []
        while True:
            if node is root:
                a = root_pick(schedule[sim])
            else:
                s = sigma(node)
                z = {b: math.log(node.prior[b]) + s[b] for b in node.legal}
                mz = max(z.values())
                e = {b: math.exp(v - mz) for b, v in z.items()}
                tot = sum(e.values())
                n_all = sum(c.visits for c in node.children.values())
                a = max(node.legal, key=lambda b: (e[b] / tot - (node.children[b].visits if b in node.children
                                                                   else 0) / (1 + n_all), -b))
            actions.append(a)
            if a not in node.children:
                reward, value, logits = model(tuple(actions))
                child = Node(logits, float(value), float(reward), [True] * A)
                node.children[a] = child
                path.append(child)
                break
            node = node.children[a]
            path.append(node)
        ret = path[-1].raw_value  # the return from the view of path[i]'s player
        for i in range(len(path) - 1, -1, -1):
            n = path[i]
            n.visits += 1
            n.value_sum += ret
            q = n.reward + cfg.discount * (-n.value() if two_player else n.value())
            stats[0], stats[1] = min(stats[0], q), max(stats[1], q)
            # the parent's view: the edge reward is the mover's; the child's return is the opponent's
            ret = n.reward + cfg.discount * (-ret if two_player else ret)
    counts = [root.children[a].visits if a in root.children else 0 for a in range(A)]
    s = sigma(root)
    z = {a: math.log(root.prior[a]) + s[a] for a in root.legal}
    mz = max(z.values())
    e = {a: math.exp(v - mz) for a, v in z.items()}
    tot = sum(e.values())
    policy = [e[a] / tot if a in e else 0.0 for a in range(A)]
    return counts, policy, root_pick(max(counts[a] for a in root.legal))
