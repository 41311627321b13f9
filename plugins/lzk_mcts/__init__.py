"""lzk_mcts: batched MCTS over arrays for every search-based policy — a learned model (MuZero,
ReZero reuse, UniZero, EfficientZero) or a real simulator (AlphaZero) — with a numba core.

A library other plugins import; it registers no components. Modules: ``config`` (SearchConfig,
SearchResult), ``interface`` (StepOutput, the slot numbering, SlotStore), ``tree`` (the Tree
arrays and the numba kernels), ``driver`` (``search``), ``gumbel`` (Gumbel MuZero's root and
interior rules, ``SearchConfig.algorithm == "gumbel"``), ``slots`` (ArraySlots, ObjectSlots),
``simulator`` (SimulatorModel: the step over cloned simulator states), ``action``
(``select_action``, pure numpy).

```python
search(step_fn, root_logits [B, A] float32, legal [B, A] bool, to_play [B] int64,
       config: SearchConfig, rng: np.random.Generator, *, add_noise: bool, deterministic: bool,
       true_action: [B] int64 | None = None, reuse_value: [B] float32 | None = None,
       keep_tree: bool = False, root_value: [B] float32 | None = None) -> SearchResult
step_fn(parent_slot [B'] int64, action [B'] int64, child_slot [B'] int64)
    -> StepOutput(reward [B'], value [B'], prior_logits [B', A],
                  discount [B'] | None, legal [B', A] | None, to_play [B'] | None)
select_action(visit_counts [B, A], legal [B, A], temperature: float, rng, deterministic: bool)
    -> (actions [B] int64, probs [B, A] float32)
```

* ``step_fn`` is called once per simulation with only the trees that need a step (never with
  B' = 0); node n of tree b is slot n·B + b (roots: slots 0 … B−1), simulation s creates node
  s + 1, and the caller keeps each node's embedding at its slot.
* Explicit per node (see :mod:`lzk_mcts.tree`): the legal mask (the root's from the caller,
  below it from the step, or all), the player to move (from the step, or alternating in
  two-player trees), γ of the edge into the node (0: terminal, never expanded, value 0), and,
  per search, the value normalisation (``minmax`` or ``none``) and the value of unvisited
  children (``parent_mean`` or ``zero``). Values are from the view of the node's player; an
  edge's reward is the mover's; backups sign both by player identity, not by ply parity.
* ``SearchResult.visit_counts`` [B, A] int32 (rows sum to S, 0 on illegal actions),
  ``root_value`` [B] float32 (Σ backed-up values / (S + 1), from the root player's view),
  ``stats``: "search/inferences_per_sim" (mean trees stepped per simulation),
  "search/max_depth", "search/tree_ms", "search/model_ms"; ``tree`` when ``keep_tree``.
* ``SearchConfig.algorithm``: "puct" (default, below) or "gumbel" (:mod:`lzk_mcts.gumbel`,
  which needs ``root_value`` and also returns ``SearchResult.policy_target`` and ``.action``).
* ``true_action[b]`` >= 0 turns on ReZero backward-view reuse for root b (SPEC §3.2); -1 (any
  negative) means none.

Decisions where we differ from LightZero (SPEC §2.3/§3.2 [BUG?] items):

* the model runs once per simulation (LightZero's driver runs it twice and drops one result);
* ties (scores >= max − 1e-6) are broken by a per-tree splitmix64 stream seeded from ``rng``,
  not a wall-clock ``rand()``: searches are reproducible; ``deterministic`` (first candidate)
  is honoured by every search, reuse included (LightZero's reuse search is always random), so
  eval can pass ``deterministic=True``;
* single/two-player is decided per root from its ``to_play`` (LightZero: from the batch max),
  and the sign of a backup by who moves at each node, so games where a player moves twice
  search correctly;
* kept on purpose: the root's +1 preparation visit and the Σ/(S + 1) root value, the 0.01
  min-max span floor, the unsigned mean_q used for unvisited children in two-player mode;
* tree arithmetic is float64 (LightZero: float32), so scores can be checked exactly.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .action import select_action
    from .config import SearchConfig, SearchResult
    from .driver import search
    from .interface import SlotStore, StepFn, StepOutput
    from .simulator import SimulatorModel
    from .slots import ArraySlots, ObjectSlots
    from .tree import Tree

# Lazy exports (PEP 562): ``lzkernel plugins`` imports ``lzk_mcts.plugin``, hence this package,
# and numba costs about a second to import; it is loaded on first use of ``search``/``Tree``.
_EXPORTS = {
    "ArraySlots": ".slots",
    "ObjectSlots": ".slots",
    "SearchConfig": ".config",
    "SearchResult": ".config",
    "SimulatorModel": ".simulator",
    "SlotStore": ".interface",
    "StepFn": ".interface",
    "StepOutput": ".interface",
    "Tree": ".tree",
    "search": ".driver",
    "select_action": ".action",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
