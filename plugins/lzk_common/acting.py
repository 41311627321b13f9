"""Acting from a search: the collect/eval action rule, visit distributions, pure-policy
sampling, and the torch thread count while searching.

Shapes: E env rows, A actions.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np
import torch

from lzkernel import masked_softmax_weights, sample_from_weights, uniform_legal

#: ``select_action(visit_counts [E, A], legal [E, A], temperature, rng, deterministic)
#: -> (actions [E], probs [E, A])`` (``lzk_mcts.select_action``).
SelectAction = Callable[..., tuple[np.ndarray, np.ndarray]]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads (0: unchanged), restoring the previous count."""
    before = torch.get_num_threads()
    if n <= 0 or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def visit_distribution(visits: np.ndarray) -> np.ndarray:
    """Root visit counts [E, A] → normalised visit distribution [E, A] float32 (zeros stay zeros)."""
    return (visits / np.maximum(visits.sum(axis=1, keepdims=True), 1)).astype(np.float32)


def sample_legal_softmax(logits: np.ndarray, legal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row from softmax(logits) restricted to legal actions: [E, A] → [E] int64."""
    return sample_from_weights(masked_softmax_weights(logits, legal), legal, rng)


def choose_actions(select_action: SelectAction, visits: np.ndarray, legal: np.ndarray, *, collect: bool,
                   temperature: float, epsilon: float, eps_greedy: bool, rng: np.random.Generator,
                   searched: np.ndarray | None = None) -> np.ndarray:
    """The action rule of the MuZero family (SPEC §1.4) from root visits [E, A]:

    * eval: argmax of the visits over legal actions (first maximum);
    * collect with ε-greedy (``eps_greedy`` or ``epsilon`` > 0): the visit argmax, replaced by a
      uniformly random legal action with probability ε;
    * collect otherwise: sampled from visits^(1/temperature) over legal actions.

    ``searched`` [E] (a Gumbel search's own choice, ``SearchResult.action``) takes the place of
    both the argmax and the sample: its root noise already is the exploration.
    """
    if not collect or eps_greedy or epsilon > 0.0:
        actions = searched if searched is not None else select_action(visits, legal, 1.0, rng, True)[0]
        if collect:
            explore = rng.random(legal.shape[0]) < epsilon
            actions = np.where(explore, uniform_legal(legal, rng), actions)
    elif searched is not None:
        actions = searched
    else:
        actions, _ = select_action(visits, legal, float(temperature), rng, False)
    return np.asarray(actions, dtype=np.int64)


def policy_target(result: Any) -> np.ndarray:
    """The policy's training target from a SearchResult [E, A] float32: a Gumbel search's
    improved policy where it has one, else the normalised visit counts."""
    if result.policy_target is not None:
        return np.asarray(result.policy_target, np.float32)
    return visit_distribution(result.visit_counts)


def search_in_chunks(n: int, chunk: int, num_actions: int, search: Callable[[slice], Any]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Search n roots ``chunk`` at a time (``search(rows)`` → a SearchResult for those rows):
    (visit_dist [n, A] float32, root_value [n] float32). The chunk bounds the search's memory."""
    dist = np.zeros((n, num_actions), np.float32)
    values = np.zeros(n, np.float32)
    for lo in range(0, n, chunk):
        sl = slice(lo, min(n, lo + chunk))
        result = search(sl)
        dist[sl] = policy_target(result)
        values[sl] = result.root_value
    return dist, values
