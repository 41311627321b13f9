"""Search with a real environment: a model step that clones and steps simulator states and asks
a network (or any evaluator) for priors and values of the states reached.

Each node's embedding is its own simulator state, cloned from its parent's and stepped once
(never replayed from the root). One batched evaluator call per simulation covers every tree whose
new node is not terminal; a terminal node takes the game's outcome as the reward of the edge
into it (discount 0: the search never expands it).

Shapes: B trees, n new nodes, A actions, O observation shape.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from lzkernel import Simulator
from lzk_mcts.interface import StepOutput
from lzk_mcts.slots import ObjectSlots

#: ``evaluate(obs [n, *O], legal [n, A], to_play [n]) -> (prior_logits [n, A], value [n])``,
#: the value from the view of the player to move.
Evaluator = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class SimulatorModel:
    """The ``step_fn`` of searches over simulator states (AlphaZero's model).

    ``begin(root_states)`` clones the B roots into slots 0 … B−1 of a fresh search with
    ``num_simulations``; the model then serves ``lzk_mcts.search`` until the next ``begin``.
    ``discount`` is γ of non-terminal edges (1 for board games). Counts ``evaluator_seconds`` and
    ``simulator_seconds`` for the search's time split.
    """

    def __init__(self, simulator: Simulator, evaluate: Evaluator, *, discount: float = 1.0) -> None:
        self.simulator = simulator
        self.evaluate = evaluate
        self.discount = float(discount)
        self.states = ObjectSlots()
        self.evaluator_seconds = 0.0
        self.simulator_seconds = 0.0

    def begin(self, root_states: Sequence[Any], num_simulations: int) -> SimulatorModel:
        """Start a search from ``root_states`` [B] (cloned: the caller's states are not touched)."""
        t0 = time.perf_counter()
        b = len(root_states)
        self.states.reserve(num_simulations + 1, b)
        self.states.put(np.arange(b), [self.simulator.clone(s) for s in root_states])
        self.simulator_seconds += time.perf_counter() - t0
        return self

    def __call__(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        t0 = time.perf_counter()
        sim = self.simulator
        states = [sim.clone(s) for s in self.states.take(parent_slot)]
        view = sim.step(states, np.asarray(action, dtype=np.int64))
        self.states.put(child_slot, states)
        t1 = time.perf_counter()
        n = len(states)
        live = ~np.asarray(view.terminal, dtype=bool)
        logits = np.zeros((n, sim.num_actions), np.float32)
        value = np.zeros(n, np.float32)
        if live.any():
            lg, v = self.evaluate(view.obs[live], view.legal[live], view.to_play[live])
            logits[live], value[live] = lg, v
        self.simulator_seconds += t1 - t0
        self.evaluator_seconds += time.perf_counter() - t1
        discount = np.where(live, self.discount, 0.0).astype(np.float32)
        return StepOutput(reward=np.asarray(view.reward, np.float32), value=value, prior_logits=logits,
                          discount=discount, legal=np.asarray(view.legal, dtype=bool),
                          to_play=np.asarray(view.to_play, dtype=np.int64))
