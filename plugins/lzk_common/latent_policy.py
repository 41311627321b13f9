"""The policy of the latent-model family (MuZero, EfficientZero): acting (collect / eval),
replay callbacks (value targets, reanalysis) and learning, around one online model and its
target copy. Algorithms subclass :class:`LatentSearchPolicy` with their model, learner and
search snapshot; everything here follows from those.

Shapes: E env rows, R reanalysed roots, M observations, A actions, O' stacked observation shape.

Which network does what (as LightZero):
* acting (collect and eval) searches with the **online** model;
* ``value_fn`` (n-step bootstrap values) and ``reanalyze_fn`` use the **target** model;
* both always run in eval semantics through BN-folded snapshots (:class:`~lzk_common.inference.SearchSnapshot`) that are
  rebuilt lazily when a version counter moves: the online one after every learner step, the
  target one after every target assignment. Code that changes the weights behind the policy's
  back (e.g. a rank-0 weight broadcast) must call :meth:`LatentSearchPolicy.mark_weights_changed`.
"""
from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np
import torch

from lzkernel import ActResult, ConfigError
from lzk_common.acting import choose_actions, policy_target, sample_legal_softmax, search_in_chunks, torch_threads
from lzk_common.policy import SearchPolicyBase, VersionedSnapshots
from lzk_common.support import DiscreteSupport
from lzk_common.image_augment import ImageAugmentation
from lzk_common.inference import SearchSnapshot
from lzk_common.options import LatentPolicyOptions


class LatentSearchPolicy(SearchPolicyBase):
    """Acting + learning of a latent-model policy (implements :class:`lzkernel.LearningPolicy`
    and :class:`lzkernel.ObservationValues`). Subclasses name their learner, search snapshot
    and model builder in the class header (see :meth:`__init_subclass__`).

    Args:
        cfg: the policy config (a :class:`~lzk_common.options.LatentPolicyOptions` with a
            ``model`` section that has ``value_support_range`` and ``reward_support_range``).
        obs_shape: one env observation's shape (unstacked); the model sees ``frame_stack`` of them.
        num_actions: A.
        device: torch device of the models.
        seed: seeds the policy's ``np.random.Generator`` (Dirichlet noise, tie-breaking, action
            sampling). Torch's initial weights come from torch's global RNG (the trainer's job).
        average_gradients: multi-rank hook called between backward and clipping.
        search_module: provides ``search``, ``select_action`` and ``SearchConfig`` (default
            ``lzk_mcts``; tests may pass a fake).
        symmetries: random board symmetries applied to every learner batch
            (:func:`lzk_common.symmetry.batch_symmetries`), or None.
    """

    cfg: LatentPolicyOptions
    #: ``learner_class(model, target_model, cfg, value_support, reward_support, average_gradients=…)``,
    #: a :class:`~lzk_common.learner.LatentLearner`.
    learner_class: type
    #: ``snapshot_class(model, value_support, reward_support, *snapshot_args(), backend=…)``, a
    #: :class:`~lzk_common.inference.SearchSnapshot`.
    snapshot_class: type
    #: ``build_model(model_cfg, obs_shape, num_actions, frame_stack)`` → the network.
    build_model: Callable[..., torch.nn.Module]

    def __init_subclass__(cls, *, learner: type | None = None, snapshot: type | None = None,
                          model: Callable[..., torch.nn.Module] | None = None, **kwargs: Any) -> None:
        """An algorithm declares its parts in the class header:
        ``class P(LatentSearchPolicy, learner=…, snapshot=…, model=build_model)``."""
        super().__init_subclass__(**kwargs)
        if learner is not None:
            cls.learner_class = learner
        if snapshot is not None:
            cls.snapshot_class = snapshot
        if model is not None:
            cls.build_model = staticmethod(model)

    def __init__(
        self,
        cfg: LatentPolicyOptions,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        average_gradients: Callable[[Any], None] | None = None,
        search_module: ModuleType | Any | None = None,
        symmetries: Callable[[Any], Any] | None = None,
    ) -> None:
        if search_module is None:
            import lzk_mcts as search_module
        super().__init__(cfg, obs_shape, num_actions, device=device, seed=seed)
        self.symmetries = symmetries
        self._search = search_module
        self.value_support = DiscreteSupport.from_range(cfg.model.value_support_range, self.device)
        self.reward_support = DiscreteSupport.from_range(cfg.model.reward_support_range, self.device)
        self.attach(self._build_model(),
                    lambda model, target: self.learner_class(model, target, cfg, self.value_support,
                                                             self.reward_support, average_gradients=average_gradients))
        self._snapshots: VersionedSnapshots[SearchSnapshot] = VersionedSnapshots(self._build_snapshot)
        self._target_updated = False  # by the last learn(): the target's buffers changed too
        if cfg.image_augmentation:
            if len(self.env_obs_shape) != 3:
                raise ConfigError(f"policy.image_augmentation: needs image observations [C, H, W]; this env's "
                                  f"observations have shape {self.env_obs_shape}")
            self.augmentation = ImageAugmentation(cfg.image_augmentation, np.random.default_rng([seed, 2]))
            self.learner.augment = self.augmentation

    def _build_model(self) -> torch.nn.Module:
        """The online network for ``self.env_obs_shape``, ``self.num_actions`` and the config
        (torch's global RNG draws its initial weights). A model the config cannot build for this
        env (e.g. a conv model on vector observations) is a configuration error."""
        try:
            return type(self).build_model(self.cfg.model, self.env_obs_shape, self.num_actions, self.cfg.frame_stack)
        except ValueError as exc:
            raise ConfigError(f"policy.model: {exc}") from None

    def snapshot_args(self) -> tuple[Any, ...]:
        """Extra positional arguments of ``snapshot_class`` (none by default)."""
        return ()

    # ------------------------------------------------------------------------------------------
    @property
    def model_version(self) -> int:
        return self._snapshots.versions["online"]

    @property
    def target_version(self) -> int:
        return self._snapshots.versions["target"]

    def mark_weights_changed(self) -> None:
        """Invalidate both inference snapshots (call after changing weights directly)."""
        self._snapshots.bump()

    def _build_snapshot(self, which: str) -> SearchSnapshot:
        """The search snapshot of the ``which`` ('online' or 'target') model's current weights."""
        model = self.model if which == "online" else self.target_model
        return self.snapshot_class(model, self.value_support, self.reward_support, *self.snapshot_args(),
                                   backend=self.cfg.search_backend)

    def _snapshot(self, which: str) -> SearchSnapshot:
        return self._snapshots.get(which)

    def _search_config(self, num_simulations: int) -> Any:
        return self.cfg.search_config(num_simulations)

    def _run_search(
        self, snap: SearchSnapshot, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, num_simulations: int,
        *, add_noise: bool, deterministic: bool, true_action: np.ndarray | None = None,
        reuse_value: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray, dict[str, float]]:
        """Root inference + search. Returns (SearchResult, predicted root values [B], metrics);
        ``search/network_share`` is the time in the network (root and recurrent inference, with
        decoding) over the whole call."""
        t0 = time.perf_counter()
        with torch_threads(self.cfg.search_threads), torch.inference_mode():
            latent, pred_value, logits = snap.initial(self._obs_tensor(obs))
            f0 = snap.forward_seconds - (time.perf_counter() - t0)  # root inference counts as network
            result = self._search.search(
                snap.begin(latent, num_simulations), logits, legal, np.asarray(to_play, dtype=np.int64),
                self._search_config(num_simulations), self.rng, add_noise=add_noise, deterministic=deterministic,
                true_action=true_action, reuse_value=reuse_value, root_value=pred_value,  # used by Gumbel only
            )
        total = time.perf_counter() - t0
        metrics = dict(result.stats)  # lzk_mcts.SearchResult.stats: search/* figures
        metrics["search/ms"] = total * 1e3
        metrics["search/network_share"] = (snap.forward_seconds - f0) / max(total, 1e-12)
        return result, pred_value, metrics

    # ------------------------------------------------------------------------------------------
    def act(
        self,
        obs: np.ndarray,
        legal: np.ndarray,
        to_play: np.ndarray,
        *,
        mode: str,
        env_ids: np.ndarray,
        temperature: float = 1.0,
        epsilon: float = 0.0,
        timestep: np.ndarray | None = None,
        states: Sequence[Any] | None = None,
    ) -> ActResult:
        """Choose one action per row.

        ``collect``: search with root Dirichlet noise, then sample from visits^(1/temperature)
        over legal actions; with ``eps_greedy`` (or ``epsilon`` > 0) take the visit argmax and
        replace it by a uniformly random legal action with probability ``epsilon``; with
        ``collect_with_pure_policy`` no search: sample from the legal softmax of the policy
        logits (visit_dist zeros, root_value = predicted value).
        ``eval``: no noise, deterministic tie-breaking, argmax of visits, ``eval_num_simulations``.
        With ``search_algorithm: gumbel`` the search's own choice is played (the Sequential Halving
        winner; Gumbel noise in collect, none in eval) and its improved policy is the stored
        target; the visit temperature has no effect.
        ``env_ids``, ``timestep`` and ``states`` are unused (the family keeps no per-env state and
        searches its learned model).
        """
        if mode not in ("collect", "eval"):
            raise ValueError(f"mode must be 'collect' or 'eval', got {mode!r}")
        legal = np.asarray(legal, dtype=bool)
        snap = self._snapshot("online")
        n_rows = legal.shape[0]
        if mode == "collect" and self.cfg.collect_with_pure_policy:
            t0 = time.perf_counter()
            with torch_threads(self.cfg.search_threads):
                _, pred_value, logits = snap.initial(self._obs_tensor(obs))
            actions = sample_legal_softmax(logits, legal, self.rng)
            zeros = np.zeros((n_rows, self.num_actions), np.float32)
            return ActResult(actions, zeros, pred_value, pred_value.copy(),
                             {"search/ms": (time.perf_counter() - t0) * 1e3})

        collect = mode == "collect"
        sims = self.cfg.num_simulations if collect else self.cfg.eval_simulations
        result, pred_value, metrics = self._run_search(
            snap, obs, legal, to_play, sims, add_noise=collect, deterministic=not collect)
        actions = choose_actions(self._search.select_action, result.visit_counts, legal, collect=collect,
                                 temperature=temperature, epsilon=epsilon, eps_greedy=self.cfg.eps_greedy,
                                 rng=self.rng, searched=result.action)
        return ActResult(actions, policy_target(result), np.asarray(result.root_value, dtype=np.float32),
                         pred_value, metrics)

    # ------------------------------------------------------------------------------------------
    def value_fn(self, obs: np.ndarray) -> np.ndarray:
        """Target-network values of obs [M, *O'] → [M] float32 (eval mode, chunked)."""
        return self._snapshot("target").values(self._obs_tensor(obs), self.cfg.mini_infer_size)

    def reanalyze_fn(
        self,
        obs: np.ndarray,
        legal: np.ndarray,
        to_play: np.ndarray,
        true_action: np.ndarray,
        reuse_value: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fresh searches from target-network roots: (visit_dist [R, A] float32, root_value [R] float32).

        Root noise when ``reanalyze_noise``; with ``reuse_value`` [R] (ReZero), the search reuses
        it through ``true_action`` [R] (negative = no reuse for that root). Roots are searched in
        chunks of ``search_chunk``.
        """
        snap = self._snapshot("target")
        legal = np.asarray(legal, dtype=bool)
        to_play = np.asarray(to_play, dtype=np.int64)

        def search(sl: slice) -> Any:
            ta = rv = None
            if reuse_value is not None:
                ta = np.where(np.asarray(true_action[sl]) < 0, -1, true_action[sl]).astype(np.int64)
                rv = np.asarray(reuse_value[sl], dtype=np.float32)
            return self._run_search(snap, obs[sl], legal[sl], to_play[sl], self.cfg.num_simulations,
                                    add_noise=self.cfg.reanalyze_noise, deterministic=False,
                                    true_action=ta, reuse_value=rv)[0]

        return search_in_chunks(legal.shape[0], self.cfg.search_chunk, self.num_actions, search)

    # ------------------------------------------------------------------------------------------
    def learn(self, batch: Any) -> tuple[dict[str, float], np.ndarray]:
        """One learner step on ``batch`` → (metrics ``train/*``, priorities [B] float32)."""
        if self.symmetries is not None:
            batch = self.symmetries(batch)
        metrics, priorities, self._target_updated = self.learner.step(batch)
        self._snapshots.bump("online", *(("target",) if self._target_updated else ()))
        return metrics, priorities

    def updated_buffers(self) -> list[torch.Tensor]:
        """The online BN statistics, and the target's when the last step assigned the target
        (it copied this rank's statistics)."""
        out = super().updated_buffers()
        if self._target_updated:
            out += [b for b in self.target_model.buffers() if b.is_floating_point()]
        return out
