"""The AlphaZero policy: batched search with the real game, acting, learning.

Every act searches all E rows together through ``lzk_mcts`` with
:class:`lzk_mcts.SimulatorModel`: each expanded node keeps its own cloned simulator state (never
replayed from the root), one batched network call per simulation evaluates every tree's new
non-terminal node, terminal nodes take the game's outcome as the reward of their edge and are
never expanded, Q is the raw mean backed-up value (no min-max normalisation), an unvisited child
scores 0, and signs follow the player to move at each node.

Collect mode: Dirichlet(α) noise at the root, drawn anew every move from the policy's seeded
generator; a game's first ``sample_moves`` moves are sampled in proportion to visits^(1/τ), later
ones take the most visited. Eval mode: no noise, deterministic ties, the most visited move,
``eval_num_simulations``. The policy target stored is the root's visit distribution.

Shapes: E env rows, A actions, O observation shape.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

import lzk_mcts
from lzk_alphazero.config import AlphaZeroPolicyConfig
from lzk_alphazero.learner import AlphaZeroLearner
from lzk_alphazero.model import AlphaZeroNet
from lzk_common.acting import torch_threads, visit_distribution
from lzk_common.inference import fold_batchnorm
from lzk_common.policy import SearchPolicyBase, VersionedSnapshots
from lzk_common.symmetry import batch_symmetries
from lzkernel import ActResult, Batch, ConfigError, SimulatorEnvSpec


def root_value(result: lzk_mcts.SearchResult, pred_value: np.ndarray) -> np.ndarray:
    """The mean of every evaluation the search made below and at each root [E], from the view of
    the player to move there: the shared search's root value averages the S backed-up values over
    the root's S + 1 visits (LightZero's MuZero root, whose first visit backs up nothing), which
    would pull an AlphaZero root value toward 0 by 1/(S + 1). Here the root's own network value is
    that first visit: (v0 + Σ backed-up) / (S + 1) = root_value + v0 / (S + 1)."""
    root_visits = 1.0 + np.asarray(result.visit_counts, np.float64).sum(axis=1)
    value = np.asarray(result.root_value, np.float64) + np.asarray(pred_value, np.float64) / root_visits
    return value.astype(np.float32)


class AlphaZeroPolicy(SearchPolicyBase):
    """AlphaZero acting + learning (implements :class:`lzkernel.LearningPolicy`).

    Args:
        cfg: the policy config.
        env_spec: a :class:`lzkernel.SimulatorEnvSpec` (its vector envs report the states the
            search clones; its simulator steps them).
        device, seed, average_gradients: as for every lzk_common policy.
    """

    cfg: AlphaZeroPolicyConfig

    def __init__(self, cfg: AlphaZeroPolicyConfig, env_spec: SimulatorEnvSpec, *, device: str | torch.device = "cpu",
                 seed: int = 0, average_gradients: Callable[[Any], None] | None = None) -> None:
        if not isinstance(env_spec, SimulatorEnvSpec):
            raise ConfigError(f"policy 'alphazero' searches with the real game: env '{env_spec.id}' has no simulator "
                              f"(use a board game, env.name: openspiel)")
        super().__init__(cfg, env_spec.obs_shape, env_spec.num_actions, device=device, seed=seed)
        self.simulator = env_spec.make_simulator()
        self.attach(AlphaZeroNet(self.obs_shape, self.num_actions, cfg.model),
                    lambda model, _: AlphaZeroLearner(model, cfg, average_gradients=average_gradients), target=False)
        # The search's network: an eval copy with every BatchNorm folded into the conv before it
        # (the same function up to float rounding, 2 ops fewer per conv at every simulation).
        self._nets: VersionedSnapshots[torch.nn.Module] = VersionedSnapshots(lambda _: fold_batchnorm(self.model))
        self.network_seconds = 0.0
        #: Random board symmetries of training positions (None: off, or no symmetric game).
        self.symmetries = batch_symmetries(env_spec, cfg.augment_symmetries, seed)

    def mark_weights_changed(self) -> None:
        self._nets.bump()

    # -- the network as the search sees it -------------------------------------------------------
    def evaluate(self, obs: np.ndarray, legal: np.ndarray | None = None, to_play: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(policy logits [n, A], value [n]) float32 of observations [n, *O] with the current
        weights (eval mode), for the player to move in each."""
        t0 = time.perf_counter()
        net = self._nets.get("online")
        with torch.inference_mode():
            logits, value = net(torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device))
        out = logits.float().cpu().numpy(), value.float().cpu().numpy()
        self.network_seconds += time.perf_counter() - t0
        return out

    def search(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, states: Sequence[Any], sims: int, *,
               add_noise: bool, deterministic: bool) -> tuple[lzk_mcts.SearchResult, np.ndarray, dict[str, float]]:
        """One batched search of E roots → (SearchResult, network values at the roots [E],
        ``search/...`` metrics: ms, the shares of the network, the simulator and the tree, and the
        shared search's tree_ms, model_ms (simulator and network), inferences_per_sim, max_depth)."""
        t0 = time.perf_counter()
        net0 = self.network_seconds
        with torch_threads(self.cfg.search_threads):
            logits, pred_value = self.evaluate(obs)
            model = lzk_mcts.SimulatorModel(self.simulator, self.evaluate, discount=self.cfg.discount)
            model.begin(states, sims)
            config = self.cfg.search_config(sims, value_normalization="none", unvisited_value="zero",
                                            parent_visits="node")
            result = lzk_mcts.search(model, logits, legal, np.asarray(to_play, dtype=np.int64), config, self.rng,
                                     add_noise=add_noise, deterministic=deterministic)
        total = max(time.perf_counter() - t0, 1e-12)
        network = self.network_seconds - net0
        metrics = {"search/ms": total * 1e3, "search/network_share": network / total,
                   "search/simulator_share": model.simulator_seconds / total,
                   "search/tree_share": max(0.0, 1.0 - (network + model.simulator_seconds) / total),
                   # the shared search's names, as every search-based policy logs them
                   "search/max_depth": result.stats["search/max_depth"],
                   "search/tree_ms": result.stats["search/tree_ms"], "search/model_ms": result.stats["search/model_ms"],
                   "search/inferences_per_sim": result.stats["search/inferences_per_sim"]}
        return result, pred_value, metrics

    # -- acting --------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str, env_ids: np.ndarray,
            temperature: float = 1.0, epsilon: float = 0.0, timestep: np.ndarray | None = None,
            states: Sequence[Any] | None = None) -> ActResult:
        """One decision per row (see the module docstring); ``states`` [E] are required: the
        search starts from clones of them."""
        if mode not in ("collect", "eval"):
            raise ValueError(f"mode must be 'collect' or 'eval', got {mode!r}")
        if states is None:
            raise ValueError("policy 'alphazero' needs the env's simulator states (StepBatch.states) at every act")
        legal = np.asarray(legal, dtype=bool)
        collect = mode == "collect"
        sims = self.cfg.num_simulations if collect else self.cfg.eval_simulations
        result, pred_value, metrics = self.search(obs, legal, to_play, states, sims, add_noise=collect,
                                                  deterministic=not collect)
        visits = result.visit_counts
        actions, _ = lzk_mcts.select_action(visits, legal, 1.0, self.rng, True)  # the most visited
        if collect:
            moves = np.zeros(len(legal), np.int64) if timestep is None else np.asarray(timestep, np.int64)
            sample = moves < self.cfg.sample_moves
            if sample.any():
                sampled, _ = lzk_mcts.select_action(visits[sample], legal[sample], float(temperature), self.rng, False)
                actions[sample] = sampled
        return ActResult(np.asarray(actions, dtype=np.int64), visit_distribution(visits),
                         root_value(result, pred_value), pred_value.astype(np.float32), metrics)

    # -- learning ------------------------------------------------------------------------------
    def learn(self, batch: Batch) -> tuple[dict[str, float], np.ndarray]:
        """One learner step on a K = 0 batch (each position under a random symmetry of the game
        when ``augment_symmetries``) → (metrics ``train/*``, priorities [B])."""
        out = self.learner.step(batch if self.symmetries is None else self.symmetries(batch))
        self._nets.bump("online")
        return out


