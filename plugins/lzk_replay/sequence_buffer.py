"""The UniZero replay buffer: sequence bootstrap values and history-window buffer reanalysis.

:class:`SequenceGameBuffer` is a :class:`~lzk_replay.buffer.GameBuffer` (same storage, trim,
sampling, priorities and, except for the bootstrap values, the same batches) with two changes.

Sequence bootstrap values (SPEC §4.5). ``value_fn(obs [M, K+1, *O'], actions [M, K]) -> [M, K+1]``
runs the target model over one teacher-forced sequence per sampled root (t, data length D =
``n_data``): the observations at steps ``min(t + n + j, D)``, j = 0..K, with the actions between
them (the stored action where the step is < D, else a uniformly random one). Unroll offset k
bootstraps from step ``b_k = min(t + k + n, D)`` (c + m in :mod:`lzk_replay.targets`) and takes the
sequence value at ``idx_k = min(k, max(D - t - n, 0))``: the *first* position holding b_k, because
later repeats of the final frame are conditioned on padding. Reward sums, terminal cut-offs,
two-player signs, zeros past the data, mask and policy targets are GameBuffer's (shared code:
only the :data:`~lzk_replay.targets.BootstrapFn` differs). Decisions against LightZero:

* all K + 1 sequence values are used (LightZero drops the last observation and duplicates the
  K-th value; its last target is discarded by the learner anyway);
* no ``start_pos``: every sequence is positioned from 0 (LightZero passes the timesteps of t…,
  which puts the bootstrap sequence n steps early: SPEC §4.5 [BUG?]);
* ``value_fn`` gets only the samples with at least one bootstrapping entry (M <= B), once per
  batch, and is not called when nothing bootstraps. The random padding actions are drawn after
  the batch's own, so for the same rng the drawn roots and every non-value field equal
  GameBuffer's.

Buffer reanalysis (:mod:`lzk_replay.sequence_reanalyze`): ``⌈R / max(1, ⌊L/K⌋)⌉`` segments (R =
``reanalyze_sequences``, the LightZero sequence budget) from the oldest ``reanalyze_partition``
fraction, favouring less-reanalysed ones; every own position is searched once from its history
window. Write-back: visit distributions **and** root values. LightZero writes only the visits;
UniZero's value targets come from ``value_fn``, not from stored root values, so writing them
changes no target and keeps each stored (visits, root value) pair from the same search (the
priorities of new data are the only other reader, and they are computed at push time).

The per-segment reanalysis counter is an extra store array (``reanalyze_count``), saved with the
buffer state; a state without it (a GameBuffer state, an older checkpoint) loads as zeros.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from lzk_replay.buffer import GameBuffer
from lzk_replay.sequence_reanalyze import (COUNT_FIELD, SequenceReanalyzeFn, num_candidates,
                                           reanalyze_sequence_segments, select_segments)
from lzk_replay.storage import SegmentStore
from lzk_replay.targets import BootstrapFn
from lzkernel import Batch, SequenceValues

#: obs [M, K+1, *O'] float32, actions [M, K] int64 -> values [M, K+1] float32 (target model)
SequenceValueFn = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: LightZero asserts reanalyze_partition <= 0.75; larger values (up to 1) are allowed here.
LIGHTZERO_MAX_PARTITION = 0.75


def sequence_bootstrap(store: SegmentStore, value_fn: SequenceValueFn, td_steps: int,
                       rng: np.random.Generator) -> BootstrapFn:
    """The bootstrap provider of UniZero's sequence values (module docstring). Rows of ``c``
    must be consecutive steps t, t+1, …, t+K (as :func:`~lzk_replay.targets.build_batch` makes)."""

    def values(s2: np.ndarray, c: np.ndarray, b: np.ndarray, boot: np.ndarray) -> np.ndarray:
        rows = np.nonzero(boot.any(axis=1))[0]  # samples with something to bootstrap
        slots, t = s2[rows, 0], c[rows, :1]  # [M], [M, 1]
        K = c.shape[1] - 1
        D = store.n_data[slots][:, None]  # [M, 1]
        j = np.arange(K + 1)
        steps = np.minimum(t + td_steps + j, D)  # [M, K+1]: observation steps of the sequence
        obs = store.stacked_obs(np.broadcast_to(slots[:, None], steps.shape), steps)
        a_step = t + td_steps + j[:K]  # [M, K]: the action after sequence position j
        random_actions = rng.integers(0, store.A, size=a_step.shape, dtype=np.int64)
        stored = store.actions[slots[:, None], np.minimum(a_step, store.W - 1)]
        actions = np.where(a_step < D, stored, random_actions)
        v = np.asarray(value_fn(obs, actions), dtype=np.float64)
        if v.shape != steps.shape:
            raise ValueError(f"value_fn returned shape {v.shape} for {steps.shape[0]} sequences of {K + 1}")
        idx = np.minimum(j, np.maximum(D - t - td_steps, 0))  # first position holding b_k
        per_k = np.zeros(boot.shape)
        per_k[rows] = np.take_along_axis(v, idx, axis=1)
        return per_k[boot]

    return values


class SequenceGameBuffer(GameBuffer):
    """GameBuffer with UniZero sequence bootstrap values and history-window buffer reanalysis.

    Sampling, priorities, push/trim and checkpoints are inherited; see the module docstring for
    what differs. ``reanalyze_partition`` P in (0, 1] (LightZero asserts P <= 0.75),
    ``reanalyze_sequences`` R >= 1, ``reanalyze_batch_size`` roots per ``reanalyze_fn`` call (0: one).
    """

    _extra_arrays = {COUNT_FIELD: ((), np.int64)}

    def __init__(self, *, capacity: int, segment_length: int, unroll_steps: int, td_steps: int,
                 discount: float, frame_stack: int, obs_shape: Sequence[int], num_actions: int,
                 use_priority: bool = False, priority_alpha: float = 0.6, priority_beta: float = 0.4,
                 use_max_priority_for_new_data: bool = False, reanalyze_partition: float = LIGHTZERO_MAX_PARTITION,
                 reanalyze_sequences: int = 160, reanalyze_batch_size: int = 256,
                 frame_scale: float | None = None) -> None:
        if not 0.0 < reanalyze_partition <= 1.0:
            raise ValueError(f"reanalyze_partition must be in (0, 1], got {reanalyze_partition}")
        if reanalyze_sequences < 1:
            raise ValueError(f"reanalyze_sequences must be >= 1, got {reanalyze_sequences}")
        super().__init__(capacity=capacity, segment_length=segment_length, unroll_steps=unroll_steps,
                         td_steps=td_steps, discount=discount, frame_stack=frame_stack, obs_shape=obs_shape,
                         num_actions=num_actions, use_priority=use_priority, priority_alpha=priority_alpha,
                         priority_beta=priority_beta, use_max_priority_for_new_data=use_max_priority_for_new_data,
                         reanalyze_batch_size=reanalyze_batch_size, frame_scale=frame_scale)
        self.reanalyze_partition, self.reanalyze_sequences = float(reanalyze_partition), int(reanalyze_sequences)

    @property
    def reanalyze_counts(self) -> np.ndarray:
        """[num_segments] int64: how often each live segment has been reanalysed, oldest first."""
        return getattr(self.store, COUNT_FIELD)[self.store.live_slots()].copy()

    @property
    def segments_per_reanalysis(self) -> int:
        """⌈R / max(1, ⌊L/K⌋)⌉: LightZero draws ⌊L/K⌋ sequences per segment (before the cap at
        the number of candidates)."""
        return math.ceil(self.reanalyze_sequences / max(1, self.L // max(self.K, 1)))

    def sample(self, batch_size: int, rng: np.random.Generator, source: Any) -> Batch:
        """As :meth:`GameBuffer.sample`, with ``source.sequence_value_fn(obs [M, K+1, *O'],
        actions [M, K]) -> [M, K+1]`` (an :class:`lzkernel.SequenceValues`) evaluating one
        bootstrap sequence per sample (called at most once)."""
        return super().sample(batch_size, rng, source)

    def _bootstrap(self, source: SequenceValues, rng: np.random.Generator) -> BootstrapFn:  # type: ignore[override]
        return sequence_bootstrap(self.store, source.sequence_value_fn, self.n, rng)

    def reanalyze(self, source: SequenceValues, rng: np.random.Generator,  # type: ignore[override]
                  *, reuse: bool = True) -> dict[str, float]:
        """Reanalyse the segments drawn by :func:`~lzk_replay.sequence_reanalyze.select_segments`
        (their counts incremented), every own position once from its history window of up to
        M = ``source.history_pairs`` past (observation, action) pairs, with
        ``source.window_reanalyze_fn(obs [R, W, *O'], actions [R, W-1], n_obs [R], legal [R, A],
        to_play [R]) -> (visit_dist [R, A], root_value [R])``, W = M + 1 (``reuse`` does not
        apply: UniZero reanalysis has no backward view). Returns stats (roots, segments,
        candidates, calls, refreshed, window_obs_mean, seconds); does nothing on an empty buffer."""
        history = int(source.history_pairs)
        reanalyze_fn: SequenceReanalyzeFn = source.window_reanalyze_fn
        if history < 0:
            raise ValueError(f"history must be >= 0, got {history}")
        ids = select_segments(self.store, self.reanalyze_partition, self.segments_per_reanalysis, rng)
        getattr(self.store, COUNT_FIELD)[self.store.slot_of(ids)] += 1
        stats = reanalyze_sequence_segments(self.store, ids, reanalyze_fn, history, self.reanalyze_batch_size)
        stats["candidates"] = float(num_candidates(self.num_segments, self.reanalyze_partition))
        return stats

    def stats(self) -> dict[str, float]:
        counts = self.reanalyze_counts
        return {**super().stats(), "reanalyze_count_mean": float(counts.mean()) if counts.size else 0.0}
