"""The UniZero policy: acting with exact KV-cached search, sequence values, learning.

Shapes: E env rows, M sequences, T observations per sequence, A actions, O' stacked obs shape.

Which network does what (as LightZero): acting searches with the **online** model; ``value_fn``
(bootstrap values over sampled sequences) and ``reanalyze_fn`` (buffer reanalysis searches) use
the **target** model. All run in eval mode.

Per-env state is the raw (observation, action) history of the last M = ⌊(context_length−1)/2⌋
steps (``history_pairs``), kept separately for collect and eval (LightZero issue #506 mixes them)
and dropped by ``reset_envs`` or when ``timestep`` does not follow the recorded one. Root contexts
are rebuilt from it at every ``act`` and search contexts live only for one search (see
``kv_cache.py``): no cached context depends on the weights.

Searches run on folded snapshots of the networks (:class:`~lzk_unizero.inference.InferenceNet`;
simulations in one numba kernel each unless ``search_backend: torch``), rebuilt lazily when a
version counter moves: both after every learner step (the EMA moves the
target too), on ``load_state_dict`` and on :meth:`clear_caches`. Code that changes the weights
behind the policy's back (e.g. a rank-0 weight broadcast) must call :meth:`mark_weights_changed`.
"""
from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np
import torch

from lzkernel import ActResult
from lzk_common.acting import choose_actions, search_in_chunks, torch_threads, visit_distribution
from lzk_common.policy import SearchPolicyBase, VersionedSnapshots
from lzk_common.support import DiscreteSupport
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.inference import InferenceNet, SearchSession, numba_supported, sequence_values
from lzk_unizero.kv_cache import EnvHistory, NodeStore, root_pairs, window_inputs
from lzk_unizero.learner import Learner
from lzk_unizero.model import WorldModel


class UniZeroPolicy(SearchPolicyBase):
    """UniZero acting + learning (implements :class:`lzkernel.LearningPolicy` and
    :class:`lzkernel.SequenceValues`).

    Args mirror :class:`lzk_muzero.policy.MuZeroPolicy`: ``obs_shape`` is one unstacked env
    observation; ``seed`` seeds the policy's numpy RNG (noise, tie-breaking, sampling).
    """

    cfg: UniZeroPolicyConfig

    def __init__(self, cfg: UniZeroPolicyConfig, obs_shape: Sequence[int], num_actions: int, *,
                 device: str | torch.device = "cpu", seed: int = 0,
                 average_gradients: Callable[[Any], None] | None = None,
                 search_module: ModuleType | Any | None = None) -> None:
        if search_module is None:
            import lzk_mcts as search_module
        problems = cfg.validate()
        if problems:
            raise ValueError("invalid UniZero config: " + "; ".join(f"{k}: {m}" for k, m in problems))
        super().__init__(cfg, obs_shape, num_actions, device=device, seed=seed)
        self._search = search_module
        self.value_support = DiscreteSupport.from_range(cfg.model.value_support_range, self.device)
        self.reward_support = DiscreteSupport.from_range(cfg.model.reward_support_range, self.device)
        self.attach(WorldModel(cfg.model, self.obs_shape, num_actions, self.value_support.size,
                               self.reward_support.size),
                    lambda model, target: Learner(model, target, cfg, self.value_support, self.reward_support,
                                                  average_gradients=average_gradients))
        self.capacity = cfg.model.context_length
        self.history = EnvHistory(root_pairs(self.capacity))
        self._store: NodeStore | None = None  # search contexts; buffers reused across searches
        self._nets: VersionedSnapshots[InferenceNet] = VersionedSnapshots(self._build_net)

    @property
    def history_pairs(self) -> int:
        """M: past (observation, action) pairs in a root window (window length M + 1 observations)."""
        return self.history.max_pairs

    def mark_weights_changed(self) -> None:
        """Invalidate both search snapshots (call after changing weights directly)."""
        self._nets.bump()

    def _build_net(self, which: str) -> InferenceNet:
        return InferenceNet(self.model if which == "online" else self.target_model, self.capacity)

    def _net(self, which: str) -> InferenceNet:
        """The search snapshot of the online or target model at its current weight version."""
        model = self.model if which == "online" else self.target_model
        if model.training:  # the encoder's BatchNorm must use running statistics
            model.eval()
        return self._nets.get(which)

    def updated_buffers(self) -> list[torch.Tensor]:
        """The online and the target model's floating buffers: the learner runs both in train
        mode (the target computes the next-latent labels), so both move with this rank's batch."""
        return [b for m in (self.model, self.target_model) for b in m.buffers() if b.is_floating_point()]

    # ------------------------------------------------------------------------------------------
    def _search_windows(self, which: str, w_obs: np.ndarray, w_act: np.ndarray, n_obs: np.ndarray,
                        legal: np.ndarray, to_play: np.ndarray, sims: int, *, add_noise: bool,
                        deterministic: bool) -> tuple[Any, np.ndarray]:
        """Search B root windows (``root_inference`` format) with the ``which`` ('online' or
        'target') model → (SearchResult, root values [B] predicted by the model). The one search
        path of ``act`` and ``reanalyze_fn``."""
        t0 = time.perf_counter()
        with torch_threads(self.cfg.search_threads), torch.inference_mode():
            net = self._net(which)
            if self._store is None or self._store.dtype != net.dtype or self._store.device != net.device:
                cfg = self.cfg.model
                self._store = NodeStore(self.capacity, cfg.num_layers, cfg.embed_dim, net.device, net.dtype)
            session = SearchSession(
                net, self._store, torch.as_tensor(w_obs, dtype=net.dtype, device=self.device),
                torch.as_tensor(w_act, dtype=torch.int64, device=self.device), n_obs, sims,
                self.value_support, self.reward_support, backend=self._backend(net))
            pred_value = self.value_support.decode(session.root_value_logits).float().cpu().numpy()
            result = self._search.search(
                session, session.root_policy_logits.float().cpu().numpy(), legal,
                np.asarray(to_play, dtype=np.int64), self._search_config(sims), self.rng,
                add_noise=add_noise, deterministic=deterministic)
        share = session.forward_seconds / max(time.perf_counter() - t0, 1e-12)
        result.stats["search/network_share"] = share
        return result, pred_value

    def _backend(self, net: InferenceNet) -> str:
        """``search_backend``, except that numba serves float32 CPU snapshots only."""
        return "numba" if self.cfg.search_backend == "numba" and numba_supported(net) else "torch"

    def _search_config(self, num_simulations: int) -> Any:
        return self.cfg.search_config(num_simulations)

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str, env_ids: np.ndarray,
            temperature: float = 1.0, epsilon: float = 0.0, timestep: np.ndarray | None = None,
            states: Sequence[Any] | None = None) -> ActResult:
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
        result, pred_value = self._search_windows("online", w_obs, w_act, n_obs, legal, to_play, sims,
                                                  add_noise=collect, deterministic=not collect)
        visits = result.visit_counts
        actions = choose_actions(self._search.select_action, visits, legal, collect=collect, temperature=temperature,
                                 epsilon=epsilon, eps_greedy=False, rng=self.rng)
        for b, key in enumerate(keys):
            self.history.record(key, obs[b], int(actions[b]), None if ts is None else int(ts[b]))
        metrics = dict(result.stats)  # lzk_mcts.SearchResult.stats: search/* figures
        metrics["search/ms"] = (time.perf_counter() - t0) * 1e3
        metrics["search/root_context_tokens"] = float((2 * n_obs - 1).mean())
        return ActResult(actions, visit_distribution(visits), np.asarray(result.root_value, dtype=np.float32),
                         pred_value, metrics)

    def state_dict(self) -> dict[str, Any]:
        """As :meth:`SearchPolicyBase.state_dict`, plus the per-env histories (``env_history``:
        per (mode, env) the observations [n, *O'] as a tensor, the actions and the next timestep),
        so that a resumed run acts from the windows the uninterrupted run would have."""
        history = [{"mode": mode, "env": int(env), "obs": torch.from_numpy(np.ascontiguousarray(obs)),
                    "actions": actions, "next_t": next_t}
                   for (mode, env), obs, actions, next_t in self.history.state()]
        return {**super().state_dict(), "env_history": history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.history.load([((h["mode"], int(h["env"])), h["obs"].numpy(), list(h["actions"]), h["next_t"])
                           for h in state.get("env_history", [])])  # older states: no history

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Episodes ended: drop those envs' histories for ``mode``."""
        for e in env_ids:
            self.history.reset((mode, int(e)))

    def clear_caches(self) -> None:
        """Called after weight changes (LightZero's loop does after each epoch): drops the search
        snapshots and frees the search buffers. No search context outlives its search, so there
        is nothing else to invalidate; env histories are env state and are kept."""
        self._nets.drop()
        if self._store is not None:
            self._store.release()

    # ------------------------------------------------------------------------------------------
    def window_reanalyze_fn(self, obs: np.ndarray, actions: np.ndarray, n_obs: np.ndarray, legal: np.ndarray,
                     to_play: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Buffer reanalysis (SPEC §4.5 ``reanalyze_buffer``): fresh searches from R history windows
        with the **target** model → (visit_dist [R, A] float32, rows summing to 1; root_value [R]
        float32).

        obs [R, W, *O'] right-padded windows in :func:`~lzk_unizero.inference.root_inference`'s
        format (W <= ``history_pairs`` + 1; the last of the first ``n_obs[r]`` observations is the
        root), actions [R, W−1] the actions between them, legal [R, A], to_play [R]. Unlike
        LightZero (context-free roots), a root sees the same window ``act`` saw when it acted.
        ``num_simulations`` simulations, root Dirichlet noise when ``reanalyze_noise``, random
        tie-breaking from the policy RNG; searched in chunks of ``search_chunk`` roots.
        """
        obs = np.asarray(obs, dtype=np.float32)
        legal = np.asarray(legal, dtype=bool)
        to_play = np.asarray(to_play, dtype=np.int64)
        n_obs = np.asarray(n_obs, dtype=np.int64)

        def search(sl: slice) -> Any:
            return self._search_windows("target", obs[sl], actions[sl], n_obs[sl], legal[sl], to_play[sl],
                                        self.cfg.num_simulations, add_noise=self.cfg.reanalyze_noise,
                                        deterministic=False)[0]

        return search_in_chunks(obs.shape[0], self.cfg.search_chunk, self.num_actions, search)

    # ------------------------------------------------------------------------------------------
    def sequence_value_fn(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
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
        """One learner step on ``batch`` (:class:`lzkernel.Batch`) → (metrics, priorities [B])."""
        out = self.learner.step(batch)
        self.mark_weights_changed()  # the optimizer moved the online model, the EMA the target
        return out
