"""The game replay buffer: segments in slot arrays, FIFO trim, (prioritised) sampling, reanalysis.

Capacity is counted in transitions (a segment's own positions, ``valid_len``; padding is not
counted) and is a hard limit: after every ``push`` at most ``capacity`` transitions are stored.
Trimming drops whole oldest segments; if one push alone exceeds the capacity its oldest new
segments are dropped too (never written).

Priorities: a new transition gets the current maximum stored priority (1 when empty) or, with
``use_max_priority_for_new_data=False``, ``|pred_value - root_value| + 1e-6``. Every stored
position gets a priority: the segment cutter only stores a segment once its K + n padding exists
(or its episode ended), so unlike LightZero's zero-priority tail (SPEC §2.5) no stored position
lacks target data, and the last K + n positions of each segment are not starved under PER.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lzk_replay.reanalyze import ReanalyzeFn, reanalyze_segments, select_round_robin
from lzk_replay.sampling import draw, importance_weights, sampling_weights
from lzk_replay.segment import GameSegment, SegmentCutter
from lzk_replay.storage import SegmentStore
from lzk_replay.targets import BootstrapFn, build_batch, observation_bootstrap
from lzkernel import Batch, ObservationValues, Trajectory

#: ``buffer.reuse_chain`` values: one backward reuse chain per segment, or LightZero's chunks.
REUSE_CHAINS = ("segment", "lightzero")
LIGHTZERO_REANALYZE_CHUNKS = 2000  # LightZero's ReZero reanalyses the buffer as 2000 chunks (SPEC §3.1)

_STATE_VERSION = 2  # 2: frames pooled (frame_pool + frame_ids); 1 (frames per slot) still loads


class GameBuffer:
    """Replay buffer of game segments (see the module docstring and :mod:`lzk_replay.storage`).

    ``push`` cuts trajectories with one :class:`SegmentCutter` per ``env_id``; pieces that have
    not ended keep their incomplete tail in the cutter. The tails and each env's last stored
    non-final segment (whose successor shares its frames) are checkpointed with the segments, so
    after a resume the next piece of an env continues its stream as it would have.
    """

    #: Extra per-slot arrays of the segment store (name -> (shape, dtype)), for subclasses.
    _extra_arrays: dict[str, tuple[tuple[int, ...], Any]] = {}

    def __init__(self, *, capacity: int, segment_length: int, unroll_steps: int, td_steps: int,
                 discount: float, frame_stack: int, obs_shape: Sequence[int], num_actions: int,
                 use_priority: bool = False, priority_alpha: float = 0.6, priority_beta: float = 0.4,
                 use_max_priority_for_new_data: bool = False, reanalyze_max_roots: int = 0,
                 reanalyze_batch_size: int = 0, reuse_chain: str = "segment", value_prefix_horizon: int = 0,
                 frame_scale: float | None = None) -> None:
        if capacity < segment_length:
            raise ValueError(f"capacity ({capacity}) must hold one segment ({segment_length})")
        if segment_length < 1 or unroll_steps < 0 or td_steps < 1 or frame_stack < 1:
            raise ValueError("need segment_length >= 1, unroll_steps >= 0, td_steps >= 1, frame_stack >= 1")
        self.capacity, self.L = int(capacity), int(segment_length)
        self.K, self.n, self.discount, self.S = int(unroll_steps), int(td_steps), float(discount), int(frame_stack)
        self.use_priority, self.alpha, self.beta = bool(use_priority), float(priority_alpha), float(priority_beta)
        self.use_max_priority_for_new_data = bool(use_max_priority_for_new_data)
        self.reanalyze_max_roots, self.reanalyze_batch_size = int(reanalyze_max_roots), int(reanalyze_batch_size)
        if reuse_chain not in REUSE_CHAINS:
            raise ValueError(f"reuse_chain must be one of {REUSE_CHAINS}, got {reuse_chain!r}")
        self.reuse_chain = reuse_chain
        self.value_prefix_horizon = int(value_prefix_horizon)  # > 0: batches carry value prefixes
        self.store = SegmentStore(self.L, self.K + self.n, self.S, tuple(obs_shape), num_actions, frame_scale,
                                  extra=self._extra_arrays)
        self._cutters: dict[int, SegmentCutter] = {}
        self._env_tail: dict[int, int] = {}  # env_id -> id of its last stored non-final segment
        self._reanalyze_cursor = 0

    # ------------------------------------------------------------------------------ properties
    @property
    def num_transitions(self) -> int:
        """Stored transitions (<= capacity)."""
        return self.store.num_transitions

    @property
    def num_segments(self) -> int:
        return self.store.next_id - self.store.base_id

    def __len__(self) -> int:
        return self.num_transitions

    def stats(self) -> dict[str, float]:
        """Scalars for logging (un-namespaced)."""
        return {"transitions": float(self.num_transitions), "segments": float(self.num_segments),
                "pending": float(sum(c.pending_transitions for c in self._cutters.values()))}

    # ------------------------------------------------------------------------------ push / trim
    def push(self, trajectories: Sequence[Trajectory]) -> int:
        """Cut and store ``trajectories``; returns the transitions cut into new segments (those
        kept back for padding are counted by a later push)."""
        segments: list[GameSegment] = []
        for traj in trajectories:
            self._check(traj)
            cutter = self._cutters.get(traj.env_id)
            if cutter is None:
                cutter = self._cutters[traj.env_id] = SegmentCutter(self.L, self.K + self.n, self.S, traj.env_id)
            segments += cutter.cut(traj)
        return self._store_segments(segments)

    def _check(self, traj: Trajectory) -> None:
        T, st = len(traj), self.store
        if traj.obs.shape != (T + 1, *st.obs_shape):
            raise ValueError(f"trajectory obs has shape {traj.obs.shape}, expected {(T + 1, *st.obs_shape)}")
        if traj.legal.shape != (T + 1, st.A) or traj.visit_dist.shape != (T, st.A):
            raise ValueError(f"trajectory legal/visit_dist shapes {traj.legal.shape}/{traj.visit_dist.shape} "
                             f"do not match T={T}, A={st.A}")
        for name in ("rewards", "root_values", "pred_values"):
            if getattr(traj, name).shape != (T,):
                raise ValueError(f"trajectory {name} has shape {getattr(traj, name).shape}, expected {(T,)}")
        for name in ("to_play", "timestep"):
            if getattr(traj, name).shape != (T + 1,):
                raise ValueError(f"trajectory {name} has shape {getattr(traj, name).shape}, expected {(T + 1,)}")

    def _store_segments(self, segments: list[GameSegment]) -> int:
        st = self.store
        if not segments:
            return 0
        # Drop the smallest FIFO prefix of (old live segments, new segments) that fits capacity.
        old_len = st.valid_len[st.live_slots()]
        lens = np.concatenate([old_len, [seg.valid_len for seg in segments]]).astype(np.int64)
        n_drop = _overflow_prefix(lens, self.capacity)
        n_old_drop = min(n_drop, old_len.shape[0])
        st.drop_oldest(n_old_drop)
        first = st.new_ids(len(segments), skip=n_drop - n_old_drop)
        new_prio = self._new_priority()
        for k, seg in enumerate(segments):
            g = first + k
            pred = self._env_tail.pop(seg.env_id, -1) if seg.index > 0 else -1
            if not seg.is_last:
                self._env_tail[seg.env_id] = g
            if g < st.base_id:
                continue  # did not fit
            if new_prio is None:
                prio = np.abs(seg.pred_values[: seg.valid_len] - seg.root_values[: seg.valid_len]) + 1e-6
            else:
                prio = np.full(seg.valid_len, new_prio)
            slot = st.write(g, seg, prio, pred)
            self._refresh_weights(np.array([slot]))
            if pred >= st.base_id:
                st.succ[st.slot_of(pred)] = g
        return int(lens[old_len.shape[0]:].sum())

    def _new_priority(self) -> float | None:
        """The priority of new data, or None for |pred - root| + 1e-6 per transition."""
        if not self.use_max_priority_for_new_data:
            return None
        return float(self.store.prio.max()) if self.store.num_transitions > 0 else 1.0

    def _refresh_weights(self, slots: np.ndarray) -> None:
        """Recompute the sampling weights of ``slots`` from their priorities and valid lengths."""
        st = self.store
        valid = np.arange(self.L)[None, :] < st.valid_len[slots][:, None]
        st.weights[slots] = sampling_weights(st.prio[slots], valid, self.use_priority, self.alpha)

    # ------------------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, rng: np.random.Generator, source: Any) -> Batch:
        """A learner batch of ``batch_size`` roots (see :class:`lzkernel.Batch`).

        Rows are oldest first (by transition id). Roots are drawn without replacement when
        ``batch_size <= num_transitions``; uniformly, or
        with probability ∝ p^α + 1e-6 and IS weights (N·P)^-β / max when ``use_priority``.
        With ``value_prefix_horizon`` H > 0 the batch carries ``target_value_prefix`` too
        (see :func:`lzk_replay.targets.value_prefix`).
        ``source.value_fn(obs [M, *O']) -> [M]`` (an :class:`lzkernel.ObservationValues`: the
        target network) is called once per batch, when any target bootstraps.
        """
        st = self.store
        if st.num_transitions == 0 or batch_size < 1:
            raise ValueError(f"cannot sample {batch_size} roots from {st.num_transitions} transitions")
        flat, prob = draw(st.weights.reshape(-1), batch_size, rng)
        slots, t = np.divmod(flat, self.L)
        # Rows oldest first (by transition id), as LightZero sorts its batch: per-batch reanalysis
        # re-searches the first rows (the most outdated targets). Slot order is age order until
        # trimming wraps the ring of slots; then newer segments sit in lower slots.
        ids = st.seg_id[slots] * self.L + t
        age = np.argsort(ids, kind="stable")
        ids, prob, slots, t = ids[age], prob[age], slots[age], t[age]
        if self.use_priority:
            weights = importance_weights(prob, st.num_transitions, self.beta)
        else:
            weights = np.ones(flat.shape[0], np.float32)
        return build_batch(st, slots, t, unroll_steps=self.K, td_steps=self.n, discount=self.discount,
                           rng=rng, bootstrap=self._bootstrap(source, rng), weights=weights,
                           indices=ids, value_prefix_horizon=self.value_prefix_horizon)

    def _bootstrap(self, source: ObservationValues, rng: np.random.Generator) -> BootstrapFn:
        """How :meth:`sample` asks ``source`` for bootstrap values (one per observation)."""
        return observation_bootstrap(self.store, source.value_fn)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> int:
        """Set the priorities of the transitions ``indices [B]`` (from ``Batch.indices``) to
        ``priorities [B]``; entries whose segment has been trimmed since are dropped. Returns the
        number of entries written."""
        st = self.store
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if indices.shape != priorities.shape:
            raise ValueError(f"{indices.shape[0]} indices but {priorities.shape[0]} priorities")
        slots, t, keep = self._locate(indices)
        slots, t = slots[keep], t[keep]
        st.prio[slots, t] = priorities[keep]
        self._refresh_weights(np.unique(slots))
        return int(keep.sum())

    def get_priorities(self, indices: np.ndarray) -> np.ndarray:
        """Priorities [B] float64 of transitions ``indices``; NaN where trimmed or invalid."""
        slots, t, keep = self._locate(np.asarray(indices, dtype=np.int64).reshape(-1))
        return np.where(keep, self.store.prio[slots, t], np.nan)

    def _locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slots, positions, stored)`` of transition ``indices = id * L + pos``; ``stored`` is
        False where the segment was trimmed (its slot may hold a newer one) or pos is invalid."""
        g, t = np.divmod(indices, self.L)
        slots = self.store.slot_of(g)
        return slots, t, self.store.is_live(g) & (t < self.store.valid_len[slots])

    # ------------------------------------------------------------------------------ reanalysis
    def reanalyze(self, source: ObservationValues, rng: np.random.Generator, *, reuse: bool = True
                  ) -> dict[str, float]:
        """ReZero whole-buffer reanalysis (backward view; value reuse when ``reuse``) with
        ``source.reanalyze_fn``; see :mod:`lzk_replay.reanalyze`. Covers every stored
        transition, or, with ``reanalyze_max_roots > 0``, whole segments round-robin up to that
        many roots per call (successive calls cycle through the buffer; ``rng`` is unused).
        Returns stats (roots, groups, calls, segments, refreshed, seconds)."""
        fn: ReanalyzeFn = source.reanalyze_fn
        if not reuse:
            def fn(obs: Any, legal: Any, to_play: Any, true_action: Any, reuse_value: Any) -> Any:  # noqa: F811
                return source.reanalyze_fn(obs, legal, to_play, np.full_like(true_action, -1), None)
        ids, self._reanalyze_cursor = select_round_robin(self.store, self._reanalyze_cursor,
                                                         self.reanalyze_max_roots)
        return reanalyze_segments(self.store, ids, fn, self.reanalyze_batch_size, self.reuse_chain_length())

    def reuse_chain_length(self) -> int:
        """Positions per reuse chain for the next reanalysis (0: a whole segment). ``lightzero``:
        max(1, N // 2000) for N stored transitions, the chunk LightZero's ReZero reanalyses as one
        backward walk (it splits the buffer into 2000 chunks; below 4000 transitions a chunk is one
        position, so nothing is reused)."""
        if self.reuse_chain == "lightzero":
            return max(1, self.num_transitions // LIGHTZERO_REANALYZE_CHUNKS)
        return 0

    # ------------------------------------------------------------------------------ checkpoint
    def _geometry(self) -> dict[str, Any]:
        st = self.store
        return {"segment_length": self.L, "unroll_steps": self.K, "td_steps": self.n,
                "frame_stack": self.S, "obs_shape": list(st.obs_shape), "num_actions": st.A,
                "obs_dtype": st.obs_dtype.str, "frame_scale": st.pool.scale}

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: JSON-able meta and the live segments' arrays (priorities
        included), plus what the cutters keep back (``cutter/<env>/<field>``) and each env's last
        stored non-final segment (meta ``env_tail``)."""
        meta, arrays = self.store.state()
        cutters = []
        for env_id, cutter in self._cutters.items():
            index, stream = cutter.state_dict()
            cutters.append([int(env_id), index])
            arrays.update({f"cutter/{env_id}/{k}": v for k, v in stream.items()})
        meta.update(version=_STATE_VERSION, geometry=self._geometry(), reanalyze_cursor=self._reanalyze_cursor,
                    cutters=cutters, env_tail=[[int(e), int(g)] for e, g in self._env_tail.items()])
        return meta, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` (same segment length, K, n, stack, obs shape, actions).
        Sampling weights are recomputed from the priorities with this buffer's α. If the
        restored data exceeds ``capacity``, the oldest segments are trimmed."""
        if meta.get("version") not in (1, _STATE_VERSION):
            raise ValueError(f"unknown buffer state version {meta.get('version')!r}")
        mine = self._geometry()
        if meta.get("version") == 1 and mine["frame_scale"] is None:  # written before frame_scale existed
            del mine["frame_scale"]
        if meta["geometry"] != mine:
            raise ValueError(f"buffer state geometry {meta['geometry']} does not match {mine}")
        self.store.load(meta, arrays)
        self._cutters.clear()
        for env_id, index in meta.get("cutters", []):  # states from before the cutters were saved: none
            prefix = f"cutter/{env_id}/"
            cutter = self._cutters[env_id] = SegmentCutter(self.L, self.K + self.n, self.S, env_id)
            cutter.load_state_dict(index, {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)})
        self._env_tail = {int(e): int(g) for e, g in meta.get("env_tail", [])}
        self._reanalyze_cursor = int(meta["reanalyze_cursor"])
        self._refresh_weights(self.store.live_slots())
        self.store.drop_oldest(_overflow_prefix(self.store.valid_len[self.store.live_slots()], self.capacity))


def _overflow_prefix(lens: np.ndarray, capacity: int) -> int:
    """The fewest leading (oldest) entries of ``lens`` to drop so that the rest sum to <= capacity."""
    excess = int(lens.sum()) - capacity
    return int(np.searchsorted(np.cumsum(lens), excess, side="left")) + 1 if excess > 0 else 0
