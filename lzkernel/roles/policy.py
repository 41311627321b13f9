"""Policies: the acting side (collectors and evaluators), the learning side (the loop), and the
value sources replay buffers ask for targets.

A policy component's factory returns a :class:`LearningPolicy`. What a buffer needs from the
policy to build targets is a separate, named Protocol (:class:`ObservationValues`,
:class:`SequenceValues`): a buffer declares which one it needs and a policy which ones it
provides (``Component.needs`` / ``Component.provides``), so that a wrong pairing fails when the
config is checked, not at the first sample.

Shape letters: E env rows, M observations or sequences, R reanalysed roots, T sequence length,
W window length, A actions, O' stacked observation shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from lzkernel.roles.data import Batch


@dataclass
class ActResult:
    """One decision per env row."""

    action: np.ndarray  # [E] int64
    visit_dist: np.ndarray  # [E, A] float32: the policy target to store (normalised root visits; zeros without search)
    root_value: np.ndarray  # [E] float32: searched root value (or the predicted value)
    pred_value: np.ndarray  # [E] float32: the network's value at the root, for priorities
    metrics: Mapping[str, float] | None = None  # e.g. search/... timings of this call


@runtime_checkable
class ActingPolicy(Protocol):
    """The acting side of a policy (collect and eval modes)."""

    def act(
        self,
        obs: np.ndarray,  # [E, *O'] observations (frame-stacked when the policy stacks frames)
        legal: np.ndarray,  # [E, A] bool
        to_play: np.ndarray,  # [E] int64
        *,
        mode: str,  # "collect" (noise, sampled action) or "eval" (no noise, greedy)
        env_ids: np.ndarray,  # [E] int64 ids of the rows' envs (for per-env state such as caches)
        temperature: float = 1.0,
        epsilon: float = 0.0,
        timestep: np.ndarray | None = None,  # [E] int64 step index within the episode
        states: Sequence[Any] | None = None,  # [E] simulator states (StepBatch.states), read-only
    ) -> ActResult: ...

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Episodes ended for ``env_ids``: drop any per-env state (no-op for MuZero)."""


@dataclass(frozen=True)
class TargetSpec:
    """A policy's learning geometry: what its batches look like. The replay buffer is built from
    it (the loop passes it to the buffer factory), so no other role reads a policy's config."""

    unroll_steps: int  # K: recurrent steps per sample (0: the root only, as AlphaZero)
    td_steps: int  # n of the n-step value targets (buffers with outcome targets ignore it)
    discount: float  # γ of the value targets
    frame_stack: int  # observations stacked into one network input
    batch_size: int  # samples per learner step
    #: H of value-prefix targets (EfficientZero): > 0 asks the buffer for
    #: ``Batch.target_value_prefix``, the reward sums restarting every H unroll steps; 0: none.
    value_prefix_horizon: int = 0


@runtime_checkable
class LearningPolicy(ActingPolicy, Protocol):
    """What the training loop uses of a policy, besides acting.

    Multi-rank runs: the loop broadcasts :meth:`replicated_tensors` from rank 0 once (then calls
    :meth:`mark_weights_changed`) and, after every :meth:`learn`, averages
    :meth:`updated_buffers` over ranks; gradients are averaged inside ``learn`` through the
    ``average_gradients`` the factory got from ``run.comm``.
    """

    #: The policy's random stream (root noise, tie-breaking, sampling); saved per rank.
    rng: np.random.Generator

    @property
    def target_spec(self) -> TargetSpec: ...

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        """(visit temperature, ε) of collection at these counters."""

    def learn(self, batch: Batch) -> tuple[dict[str, float], np.ndarray]:
        """One learner step → (metrics ``train/*``, new priorities [B] float32)."""

    def replicated_tensors(self) -> list[Any]:
        """Every tensor that must be identical on all ranks (parameters and buffers of every model)."""

    def updated_buffers(self) -> list[Any]:
        """The floating buffers the last :meth:`learn` changed from this rank's data alone
        (BatchNorm running statistics): the loop averages them over ranks."""

    def mark_weights_changed(self) -> None:
        """Weights were changed from outside (a broadcast, a load): drop derived snapshots."""

    def state_dict(self) -> dict[str, Any]:
        """Models, optimizer, counters, RNG and any per-env acting state (e.g. histories that
        root windows are built from, so a resumed run acts as the uninterrupted one): loadable
        with ``torch.load(weights_only=True)``."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------------------------------------
# Value sources: what replay buffers ask of a policy to build and refresh targets
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class ObservationValues(Protocol):
    """Values and fresh searches of single observations (the ``game`` buffer: MuZero, ReZero)."""

    def value_fn(self, obs: np.ndarray) -> np.ndarray:
        """Target-network values of obs [M, *O'] → [M] float32 (bootstrap values)."""

    def reanalyze_fn(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, true_action: np.ndarray,
                     reuse_value: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Fresh target-network searches of R roots → (visit_dist [R, A], root_value [R]) float32.
        With ``reuse_value`` [R] (ReZero), root r reuses it through ``true_action[r]`` (< 0: none)."""


@runtime_checkable
class SequenceValues(Protocol):
    """Values and searches over histories (the ``unizero`` buffer: UniZero's world model)."""

    #: M: past (observation, action) pairs in a root window (windows of M + 1 observations).
    history_pairs: int

    def sequence_value_fn(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Values of every observation of M teacher-forced sequences: obs [M, T, *O'], actions
        [M, T−1] → [M, T] float32."""

    def window_reanalyze_fn(self, obs: np.ndarray, actions: np.ndarray, n_obs: np.ndarray, legal: np.ndarray,
                            to_play: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fresh searches from R right-padded history windows obs [R, W, *O'] (the first
        ``n_obs[r]`` real, the last real one the root), actions [R, W−1] → (visit_dist [R, A],
        root_value [R]) float32."""


@runtime_checkable
class SearchCaches(Protocol):
    """A policy that keeps search state built with its weights (UniZero's search buffers)."""

    def clear_caches(self) -> None:
        """Drop what was built with the old weights (trainers call it after each epoch)."""
