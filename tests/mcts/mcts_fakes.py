"""Fake models for the search tests, written per tree as ``model(batch_idx [B'], parent_node [B'],
action [B'], new_node) -> (reward, value, logits)``, and :func:`search`, which runs
``lzk_mcts.search`` with such a model through the slot interface (checking the slot numbering:
slot = node·B + b, one new node index per step)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import lzk_mcts
from lzk_mcts import StepOutput

#: A per-tree test model: (batch_idx, parent_node, action, new_node) -> (reward, value, logits).
TreeModel = Callable[[np.ndarray, np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def as_step(model: TreeModel, batch: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], StepOutput]:
    """The search step of a per-tree test model, for ``batch`` trees."""

    def step(parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        b, new_nodes = np.divmod(child_slot, batch)[::-1]
        assert (new_nodes == new_nodes[0]).all(), "one step creates one node index in every tree it serves"
        assert (parent_slot % batch == b).all(), "parent and child slots belong to the same tree"
        out = model(b, parent_slot // batch, np.asarray(action).copy(), int(new_nodes[0]))
        return out if isinstance(out, StepOutput) else StepOutput(*out)

    return step


def search(model: TreeModel, root_logits: np.ndarray, *args: Any, **kwargs: Any) -> Any:
    """``lzk_mcts.search`` with a per-tree test model."""
    return lzk_mcts.search(as_step(model, np.asarray(root_logits).shape[0]), root_logits, *args, **kwargs)


class FakeModel:
    """A ``recurrent_fn`` whose outputs are a deterministic function of (row id, path).

    It rebuilds each tree's paths from the (parent_node, action, new_node) calls, which also
    checks the node-numbering contract (parents exist, a node is created once per tree), and
    records every call. ``mode``: "continuous" (uniform values/rewards, normal logits),
    "discrete" (few distinct values, so exact score ties are common) or "tiny" (values ~1e-3,
    so the min-max span floor matters).
    """

    def __init__(self, num_actions: int, row_ids, seed: int = 0, mode: str = "continuous") -> None:
        self.num_actions = num_actions
        self.row_ids = [int(r) for r in row_ids]
        self.seed = seed
        self.mode = mode
        self.paths = [{0: ()} for _ in self.row_ids]
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []

    def outputs(self, row_id: int, path: tuple[int, ...]) -> tuple[np.float32, np.float32, np.ndarray]:
        g = np.random.default_rng([self.seed, row_id, len(path), *path])
        if self.mode == "discrete":
            reward = g.integers(-1, 2) * 0.5
            value = g.integers(-1, 2) * 0.5
            logits = g.integers(0, 2, size=self.num_actions).astype(np.float64)
        else:
            scale = 1e-3 if self.mode == "tiny" else 1.0
            reward = g.uniform(-1, 1) * scale
            value = g.uniform(-1, 1) * scale
            logits = g.normal(size=self.num_actions)
        return np.float32(reward), np.float32(value), logits.astype(np.float32)

    def reference_model(self, row: int):
        """model(path) for ``reference.reference_search`` on batch row ``row``."""
        return lambda path: self.outputs(self.row_ids[row], path)

    def __call__(self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray, new_node: int):
        assert len(batch_idx) > 0, "recurrent_fn must not be called with an empty batch"
        self.calls.append((batch_idx.copy(), parent_node.copy(), action.copy(), new_node))
        n = len(batch_idx)
        rewards = np.empty(n, np.float32)
        values = np.empty(n, np.float32)
        logits = np.empty((n, self.num_actions), np.float32)
        for j, (b, p, a) in enumerate(zip(batch_idx, parent_node, action)):
            paths = self.paths[b]
            assert new_node not in paths, "a node index is created once per tree"
            paths[new_node] = paths[int(p)] + (int(a),)  # KeyError: parent never created
            rewards[j], values[j], logits[j] = self.outputs(self.row_ids[b], paths[new_node])
        return rewards, values, logits

    @property
    def inferences(self) -> int:
        return sum(len(c[0]) for c in self.calls)


def random_roots(rng: np.random.Generator, batch: int, num_actions: int, two_player: bool):
    """Random root logits [B, A] float32, legal [B, A] (>= 1 legal per row), to_play [B]."""
    logits = rng.normal(size=(batch, num_actions)).astype(np.float32)
    legal = rng.random((batch, num_actions)) < 0.7
    legal[np.arange(batch), rng.integers(0, num_actions, batch)] = True
    to_play = rng.integers(1, 3, batch) if two_player else np.full(batch, -1)
    return logits, legal, to_play.astype(np.int64)


def random_reuse(rng: np.random.Generator, legal: np.ndarray, scale: float = 1.0):
    """true_action [B] (a legal action, or -1 for about a quarter of the rows), reuse_value [B]."""
    batch = legal.shape[0]
    true_action = np.array([rng.choice(np.flatnonzero(row)) for row in legal], np.int64)
    true_action[rng.random(batch) < 0.25] = -1
    reuse_value = (rng.uniform(-1, 1, batch) * scale).astype(np.float32)
    return true_action, reuse_value
