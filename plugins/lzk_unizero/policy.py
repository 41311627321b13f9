"""The UniZero policy: acting with exact KV-cached search, sequence values, learning.

Shapes: E env rows, M sequences, T observations per sequence, A actions, O' stacked obs shape.

Which network does what (as LightZero): acting searches with the **online** model; ``value_fn``
(bootstrap values over sampled sequences) uses the **target** model. Both run in eval mode.

Per-env state is the raw (observation, action) history of the last M = ⌊(context_length−1)/2⌋
steps, kept separately for collect and eval (LightZero issue #506 mixes them) and dropped by
``reset_envs`` or when ``timestep`` does not follow the recorded one. Root contexts are rebuilt
from it at every ``act`` and search contexts live only for one search (see ``kv_cache.py``), so
weight changes need no cache clearing (:meth:`clear_caches` is a documented no-op for trainers
that call it after each epoch, as LightZero's loop does).
"""
from __future__ import annotations

import contextlib
import copy
import time
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from lzkernel import ActResult, generator_state, set_generator_state
from lzk_muzero.models import stacked_obs_shape
from lzk_muzero.support import DiscreteSupport
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.inference import SearchSession, root_inference, sequence_values
from lzk_unizero.kv_cache import EnvHistory, root_pairs, window_inputs
from lzk_unizero.learner import Learner
from lzk_unizero.model import WorldModel


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    if n <= 0 or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class UniZeroPolicy:
    """UniZero acting + learning (implements :class:`lzkernel.ActingPolicy`).

    Args mirror :class:`lzk_muzero.policy.MuZeroPolicy`: ``obs_shape`` is one unstacked env
    observation; ``seed`` seeds the policy's numpy RNG (noise, tie-breaking, sampling).
    """

    def __init__(self, cfg: UniZeroPolicyConfig, obs_shape: Sequence[int], num_actions: int, *,
                 device: str | torch.device = "cpu", seed: int = 0,
                 average_gradients: Callable[[Any], None] | None = None,
                 search_module: ModuleType | Any | None = None) -> None:
        if search_module is None:
            import lzk_mcts as search_module
        problems = cfg.validate()
        if problems:
            raise ValueError("invalid UniZero config: " + "; ".join(f"{k}: {m}" for k, m in problems))
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_actions = int(num_actions)
        self.obs_shape = stacked_obs_shape(tuple(obs_shape), cfg.frame_stack)
        self.rng = np.random.default_rng(seed)
        self._search = search_module
        self.value_support = DiscreteSupport.from_range(cfg.model.value_support_range, self.device)
        self.reward_support = DiscreteSupport.from_range(cfg.model.reward_support_range, self.device)
        self.model = WorldModel(cfg.model, self.obs_shape, num_actions, self.value_support.size,
                                self.reward_support.size).to(self.device)
        self.target_model = copy.deepcopy(self.model).eval()
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self.learner = Learner(self.model, self.target_model, cfg, self.value_support, self.reward_support,
                               average_gradients=average_gradients)
        self.capacity = cfg.model.context_length
        self.history = EnvHistory(root_pairs(self.capacity))

    @property
    def learner_steps(self) -> int:
        return self.learner.steps

    # ------------------------------------------------------------------------------------------
    def _search_config(self, num_simulations: int) -> Any:
        c = self.cfg
        return self._search.SearchConfig(
            num_simulations=num_simulations, discount=c.discount, pb_c_base=c.pb_c_base, pb_c_init=c.pb_c_init,
            dirichlet_alpha=c.dirichlet_alpha, noise_fraction=c.noise_fraction, value_delta_max=c.value_delta_max)

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str, env_ids: np.ndarray,
            temperature: float = 1.0, epsilon: float = 0.0, timestep: np.ndarray | None = None) -> ActResult:
        """One decision per row: root window from the env's history, then a batched search.

        ``collect``: root Dirichlet noise, action sampled from visits^(1/temperature) (with
        ``epsilon`` > 0: visit argmax replaced by a random legal action with probability ε);
        ``eval``: no noise, deterministic ties, visit argmax, ``eval_num_simulations``.
        """
        if mode not in ("collect", "eval"):
            raise ValueError(f"mode must be 'collect' or 'eval', got {mode!r}")
        t0 = time.perf_counter()
        obs = np.asarray(obs, dtype=np.float32)
        legal = np.asarray(legal, dtype=bool)
        keys = [(mode, int(e)) for e in np.asarray(env_ids).reshape(-1)]
        ts = None if timestep is None else np.asarray(timestep, dtype=np.int64)
        w_obs, w_act, n_obs = window_inputs(self.history, keys, obs, ts)
        collect = mode == "collect"
        sims = self.cfg.num_simulations if collect else self.cfg.eval_num_simulations
        with _torch_threads(self.cfg.search_threads), torch.inference_mode():
            self.model.eval()
            ctx, v_logits, p_logits, _ = root_inference(
                self.model, torch.as_tensor(w_obs, device=self.device), torch.as_tensor(w_act, device=self.device),
                torch.as_tensor(n_obs, device=self.device), self.capacity)
            pred_value = self.value_support.decode(v_logits).float().cpu().numpy()
            session = SearchSession(self.model, ctx, sims, self.value_support, self.reward_support)
            result = self._search.search(
                session, p_logits.float().cpu().numpy(), legal, np.asarray(to_play, dtype=np.int64),
                self._search_config(sims), self.rng, add_noise=collect, deterministic=not collect)
        visits = result.visit_counts
        if not collect or epsilon > 0.0:
            actions, _ = self._search.select_action(visits, legal, 1.0, self.rng, True)
            if collect:
                u = np.where(legal, self.rng.random(legal.shape), -1.0)
                explore = self.rng.random(len(keys)) < epsilon
                actions = np.where(explore, u.argmax(axis=1), actions)
        else:
            actions, _ = self._search.select_action(visits, legal, float(temperature), self.rng, False)
        actions = np.asarray(actions, dtype=np.int64)
        for b, key in enumerate(keys):
            self.history.record(key, obs[b], int(actions[b]), None if ts is None else int(ts[b]))
        visit_dist = (visits / np.maximum(visits.sum(axis=1, keepdims=True), 1)).astype(np.float32)
        metrics = dict(getattr(result, "stats", {}) or {})
        metrics["search/ms"] = (time.perf_counter() - t0) * 1e3
        metrics["search/root_context_tokens"] = float((2 * n_obs - 1).mean())
        return ActResult(actions, visit_dist, np.asarray(result.root_value, dtype=np.float32), pred_value, metrics)

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Episodes ended: drop those envs' histories for ``mode``."""
        for e in env_ids:
            self.history.reset((mode, int(e)))

    def clear_caches(self) -> None:
        """Called after weight changes. Nothing cached depends on weights (root contexts are
        rebuilt per ``act``, search contexts per search), so this keeps the env histories."""

    # ------------------------------------------------------------------------------------------
    def value_fn(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Target-model values of every observation of M sequences: obs [M, T, *O'], actions
        [M, T−1] (the actions between them) → [M, T] float32, in chunks of ``mini_infer_size``."""
        out = np.zeros(obs.shape[:2], np.float32)
        with torch.inference_mode():
            self.target_model.eval()
            for lo in range(0, obs.shape[0], self.cfg.mini_infer_size):
                sl = slice(lo, lo + self.cfg.mini_infer_size)
                v = sequence_values(self.target_model, torch.as_tensor(obs[sl], dtype=torch.float32, device=self.device),
                                    torch.as_tensor(actions[sl], dtype=torch.int64, device=self.device),
                                    self.value_support)
                out[sl] = v.float().cpu().numpy()
        return out

    def learn(self, batch: Any) -> tuple[dict[str, float], np.ndarray]:
        """One learner step on ``batch`` (fields of ``lzk_replay.Batch``) → (metrics, priorities [B])."""
        return self.learner.step(batch)

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "target_model": self.target_model.state_dict(),
            "learner": self.learner.state_dict(),
            "rng": generator_state(self.rng),  # plain values: loads with weights_only=True
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target_model.load_state_dict(state["target_model"])
        self.learner.load_state_dict(state["learner"])
        rng = state.get("rng")
        if rng is not None:
            set_generator_state(self.rng, rng)
