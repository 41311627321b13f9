"""Preallocated slot arrays holding game segments, addressed by global segment ids.

Every stored segment gets the next global id ``g`` (ids only grow). The live ids are the range
``[base_id, next_id)``: trimming advances ``base_id`` (FIFO, whole segments). Segment ``g`` lives
in slot ``g % num_slots``; the slot arrays double (and live segments are re-laid) when the live
range would not fit. Per-transition data is slot-aligned too: ``prio[slot, pos]`` for the
segment's own positions ``pos < valid_len[slot]``, so no separate lookup table exists that could
drift out of step with the segments (the SPEC §2.5 trim misalignment cannot happen by design).

A transition's public *index* is ``g * L + pos``: unique for ever, so an index whose segment has
been trimmed is recognisable (``g < base_id``) and a priority update for it is dropped.

Width ``W = L + K + n`` per step; frames ``S + W`` per slot (frame ``f`` is step ``f - (S - 1)``).
Entries past a segment's data are zero (legal: False).

Frames are not slot arrays: ``frame_ids [N, S + W]`` point into a :class:`~lzk_replay.frame_pool.
FramePool`, and a segment shares the ids of the frames it has in common with its predecessor
(its first S + D_pred − L frames are the predecessor's frames from position L on), so every
observation is stored once (uint8 for a :class:`lzkernel.FrameEnvSpec` env) and stacks are
built at sampling time.

An owner may add *extra* per-slot arrays (e.g. a reanalysis counter): they live with the segment
like the built-in ones (zeroed when a segment is written, moved when the slots grow, saved), and a
saved state that lacks one loads it as zeros (states written before the extra existed).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from lzk_replay.frame_pool import FramePool
from lzk_replay.segment import GameSegment, stacked_shape

_META_FIELDS = {  # per-slot scalars
    "seg_id": np.int64,  # global id stored in the slot, -1 when free
    "n_data": np.int64,  # D: actions stored, padding included
    "valid_len": np.int64,  # min(D, L)
    "done": np.bool_,  # the data reaches the episode end (frame S - 1 + D is the final obs)
    "terminal": np.bool_,  # done and no bootstrap past the end
    "is_last": np.bool_,  # the episode's final segment
    "succ": np.int64,  # global id of the successor segment (-1: none stored yet / none)
}


class SegmentStore:
    """The slot arrays (shapes with N = ``num_slots``):

    ``frame_ids [N, S+W]`` (into :attr:`pool`), ``actions [N, W]``, ``rewards [N, W]``, ``visit_dist [N, W, A]``,
    ``root_values [N, W]``, ``legal [N, W+1, A]``, ``to_play [N, W+1]``, ``timestep [N, W+1]``,
    ``prio [N, L]``, ``weights [N, L]`` (sampling weights, zero where nothing is stored), the
    per-slot fields of ``_META_FIELDS`` and the owner's ``extra`` arrays ``[N, *shape]``.
    """

    def __init__(self, segment_length: int, pad: int, frame_stack: int, obs_shape: tuple[int, ...],
                 num_actions: int, frame_scale: float | None = None, initial_slots: int = 16,
                 extra: Mapping[str, tuple[tuple[int, ...], Any]] | None = None) -> None:
        """``frame_scale``: observations are uint8 frames at this scale (:class:`lzkernel.FrameEnvSpec`);
        ``extra``: name -> (per-slot shape, dtype) of the owner's extra arrays (module docstring)."""
        self.L, self.pad, self.S = segment_length, pad, frame_stack
        self.extra: dict[str, tuple[tuple[int, ...], Any]] = {}  # set below, once the built-ins are known
        self.W = segment_length + pad
        self.obs_shape = tuple(int(x) for x in obs_shape)
        self.stacked_shape = stacked_shape(self.obs_shape, frame_stack)
        self.A = int(num_actions)
        self.pool = FramePool(self.obs_shape, frame_scale)
        self.obs_dtype = self.pool.dtype
        self.base_id = 0  # oldest live global id
        self.next_id = 0  # id the next stored segment gets
        self.num_transitions = 0  # sum of valid_len over live segments
        self.num_slots = 0
        clash = set(extra or {}) & set(self._shapes())
        if clash:
            raise ValueError(f"extra arrays {sorted(clash)} clash with built-in ones")
        self.extra = {k: (tuple(shape), dt) for k, (shape, dt) in (extra or {}).items()}
        self._alloc(max(1, initial_slots), keep=False)

    # ----------------------------------------------------------------------------------- layout
    def _shapes(self) -> dict[str, tuple[tuple[int, ...], Any]]:
        W, S, A = self.W, self.S, self.A
        shapes: dict[str, tuple[tuple[int, ...], Any]] = {
            "frame_ids": ((S + W,), np.int32),
            "actions": ((W,), np.int64),
            "rewards": ((W,), np.float32),
            "visit_dist": ((W, A), np.float32),
            "root_values": ((W,), np.float32),
            "legal": ((W + 1, A), np.bool_),
            "to_play": ((W + 1,), np.int64),
            "timestep": ((W + 1,), np.int64),
            "prio": ((self.L,), np.float64),
            "weights": ((self.L,), np.float64),  # sampling weights (owner-computed, not saved)
        }
        shapes.update({k: ((), dt) for k, dt in _META_FIELDS.items()})
        shapes.update(self.extra)
        return shapes

    @property
    def array_names(self) -> tuple[str, ...]:
        return tuple(self._shapes())

    @property
    def saved_names(self) -> tuple[str, ...]:
        """The arrays a checkpoint holds: all but the sampling weights (derived from ``prio``)."""
        return tuple(n for n in self.array_names if n != "weights")

    def _alloc(self, num_slots: int, keep: bool = True) -> None:
        """(Re)allocate ``num_slots`` zeroed slots; with ``keep`` move the live segments from
        their old slots to ``g % num_slots``."""
        live = self.live_ids()
        new_slots = live % num_slots
        for name, (shape, dt) in self._shapes().items():
            arr = np.zeros((num_slots, *shape), dtype=dt)
            if keep and live.size:
                arr[new_slots] = getattr(self, name)[live % self.num_slots]
            setattr(self, name, arr)
        self.seg_id[:] = -1
        self.seg_id[new_slots] = live  # (live segments not kept are filled in by the caller)
        self.num_slots = num_slots

    def ensure_slots(self, live_count: int) -> None:
        """Grow (doubling) so that ``live_count`` consecutive ids fit in distinct slots."""
        if live_count > self.num_slots:
            n = self.num_slots
            while n < live_count:
                n *= 2
            self._alloc(n)

    # ----------------------------------------------------------------------------------- ids
    def live_ids(self) -> np.ndarray:
        """[n_live] int64 global ids, oldest first."""
        return np.arange(self.base_id, self.next_id, dtype=np.int64)

    def live_slots(self) -> np.ndarray:
        """[n_live] slots of the live ids, oldest first."""
        return self.live_ids() % self.num_slots

    def slot_of(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids, dtype=np.int64) % self.num_slots

    def is_live(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        return (ids >= self.base_id) & (ids < self.next_id)

    # ----------------------------------------------------------------------------------- writes
    def drop_oldest(self, count: int) -> None:
        """Free the ``count`` oldest live segments (FIFO trim)."""
        count = min(count, self.next_id - self.base_id)
        if count <= 0:
            return
        slots = self.slot_of(np.arange(self.base_id, self.base_id + count))
        self.pool.release(self.frame_ids[slots][self._frame_mask(slots)])
        self.num_transitions -= int(self.valid_len[slots].sum())
        self.seg_id[slots] = -1
        self.prio[slots] = 0.0
        self.weights[slots] = 0.0  # a free slot is never sampled
        self.valid_len[slots] = 0
        self.base_id += count

    def new_ids(self, count: int, skip: int = 0) -> int:
        """Reserve ``count`` consecutive new ids and return the first; the first ``skip`` of them
        are dead on arrival (they did not fit, so every older segment has been dropped already).
        Grows the slots so that the live range fits."""
        first = self.next_id
        if skip and self.base_id != self.next_id:
            raise ValueError("new segments may only be skipped once every older one is dropped")
        base = first + skip if skip else self.base_id
        self.ensure_slots(first + count - base)
        self.next_id, self.base_id = first + count, base
        return first

    def _frame_mask(self, slots: np.ndarray) -> np.ndarray:
        """[n, S+W] bool: the frame positions ``slots`` use (S + D frames each)."""
        return np.arange(self.S + self.W)[None, :] < (self.S + self.n_data[slots])[:, None]

    def _frame_ids(self, seg: GameSegment, pred: int) -> np.ndarray:
        """Pool ids [S + D] of ``seg``'s frames: shared with live predecessor ``pred`` (-1: none)
        where both hold the frame, new pool entries for the rest."""
        n = seg.frames.shape[0]
        shared = 0
        if pred >= 0 and bool(self.is_live(pred)):
            ps = int(pred % self.num_slots)
            shared = max(0, min(n, self.S + int(self.n_data[ps]) - self.L))
            old = self.frame_ids[ps, self.L: self.L + shared].astype(np.int64)
            # The cutter emits consecutive segments of one stream, so these are the same frames;
            # a mismatch would silently corrupt every stack built from them.
            if not np.array_equal(self.pool.frames[old], self.pool.encode(seg.frames[:shared])):
                raise AssertionError(f"segment {pred}'s frames from position {self.L} do not continue into its successor")
        ids = np.empty(n, np.int64)
        if shared:
            ids[:shared] = old
            ids[shared:] = self.pool.add(seg.frames[shared:])
        elif self.S > 1 and np.array_equal(seg.frames[: self.S - 1], np.broadcast_to(seg.frames[self.S - 1], seg.frames[: self.S - 1].shape)):
            # A stream's start: the cutter fills the S - 1 history frames with the first frame.
            ids[self.S - 1:] = self.pool.add(seg.frames[self.S - 1:])
            ids[: self.S - 1] = ids[self.S - 1]
        else:
            ids[:] = self.pool.add(seg.frames)
        self.pool.retain(ids)
        return ids

    def write(self, g: int, seg: GameSegment, prio: np.ndarray, pred: int = -1) -> int:
        """Store ``seg`` as live id ``g`` (``base_id <= g < next_id``, slot already free or
        stale) with priorities ``prio [valid_len]``; returns the slot. ``pred``: the global id
        of the segment it continues (the same episode's previous segment), -1 when none, whose
        frames it shares."""
        slot = int(g % self.num_slots)
        D, V = len(seg), seg.valid_len
        for name in ("frame_ids", "actions", "rewards", "visit_dist", "root_values", "legal",
                     "to_play", "timestep", "prio", "weights", *self.extra):
            getattr(self, name)[slot] = 0
        self.frame_ids[slot, : seg.frames.shape[0]] = self._frame_ids(seg, pred)
        self.actions[slot, :D] = seg.actions
        self.rewards[slot, : seg.rewards.shape[0]] = seg.rewards
        self.visit_dist[slot, :D] = seg.visit_dist
        self.root_values[slot, :D] = seg.root_values
        self.legal[slot, : D + 1] = seg.legal
        self.to_play[slot, : D + 1] = seg.to_play
        self.timestep[slot, : D + 1] = seg.timestep
        self.prio[slot, :V] = prio
        self.seg_id[slot], self.n_data[slot], self.valid_len[slot] = g, D, V
        self.done[slot], self.terminal[slot], self.is_last[slot] = seg.done, seg.terminal, seg.is_last
        self.succ[slot] = -1
        self.num_transitions += V
        return slot

    def refresh_padding(self) -> int:
        """Copy visit distributions and root values from successors into the padding of their
        live predecessors (after reanalysis changed them). Returns the segments refreshed.

        Padding can reach past the successor's own L steps into its padding (K + n > L), so the
        copy runs ceil((K + n) / L) passes: after pass r the first r * L padding steps are fresh.
        """
        slots = self.live_slots()
        succ = self.succ[slots]
        has = (succ >= 0) & self.is_live(succ) & (self.n_data[slots] > self.L)
        p_slot, s_slot = slots[has], self.slot_of(succ[has])
        if p_slot.size == 0:
            return 0
        pad = self.n_data[p_slot] - self.L
        pair, j = np.nonzero(np.arange(self.pad)[None, :] < pad[:, None])
        dst, src = p_slot[pair], s_slot[pair]
        for _ in range(-(-self.pad // self.L)):
            self.visit_dist[dst, self.L + j] = self.visit_dist[src, j]
            self.root_values[dst, self.L + j] = self.root_values[src, j]
        return int(p_slot.size)

    # ----------------------------------------------------------------------------------- reads
    def stacked_obs(self, slots: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Stacked observations ``[*steps.shape, *O']`` float32 at ``steps`` of ``slots`` (same
        shape). Frames past a segment's final observation repeat it (LightZero's padding=True),
        so a step beyond the end stacks the final frame S times once it is S - 1 steps past."""
        f = steps[..., None] + np.arange(self.S)  # frames of step i: f = i .. i + S - 1
        f = np.minimum(f, (self.S - 1 + self.n_data[slots])[..., None])
        x = self.pool.decoded(self.frame_ids[np.broadcast_to(slots[..., None], f.shape), f])  # [..., S, *O]
        return x.reshape(*steps.shape, *self.stacked_shape)

    @property
    def frames(self) -> np.ndarray:
        """Every slot's frames decoded, ``[N, S+W, *O]`` float32, for inspection and tests: it
        materialises the whole buffer (positions past a segment's data hold arbitrary frames)."""
        return self.pool.decoded(self.frame_ids)

    def slot_frames(self, slot: int) -> np.ndarray:
        """The S + D frames [S + D, *O] float32 of the segment in ``slot`` (frame f is step f − (S − 1))."""
        return self.pool.decoded(self.frame_ids[slot, : self.S + int(self.n_data[slot])])

    # ----------------------------------------------------------------------------------- state
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Live segments only, oldest first; ``frame_pool`` holds each frame they use once and
        ``frame_ids`` index into it (so the state is proportional to the frames stored)."""
        slots = self.live_slots()
        meta = {"base_id": self.base_id, "next_id": self.next_id, "num_slots": self.num_slots}
        arrays = {name: getattr(self, name)[slots].copy() for name in self.saved_names}
        used = self._frame_mask(slots)
        uniq, inverse = np.unique(arrays["frame_ids"][used], return_inverse=True)
        arrays["frame_ids"][:] = 0
        arrays["frame_ids"][used] = inverse.reshape(-1)
        arrays["frame_pool"] = self.pool.frames[uniq]
        return meta, arrays

    def load(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state` (the owner recomputes ``weights``); missing extras load as zeros."""
        self.base_id, self.next_id = int(meta["base_id"]), int(meta["next_id"])
        n_live = self.next_id - self.base_id
        self._alloc(max(int(meta["num_slots"]), n_live, 1), keep=False)
        slots = self.live_slots()
        shapes = self._shapes()
        if "frames" in arrays:  # a state written before frames were pooled: one copy per slot position
            frames = np.asarray(arrays["frames"])
            arrays = {**arrays, "frame_pool": frames.reshape(-1, *self.obs_shape),
                      "frame_ids": np.arange(frames.shape[0] * frames.shape[1]).reshape(frames.shape[:2])}
        for name in self.saved_names:
            shape = shapes[name][0]
            if name in self.extra and name not in arrays:
                continue  # a state from before this extra existed: zeros (from _alloc)
            arr = np.asarray(arrays[name])
            if arr.shape != (n_live, *shape):
                raise ValueError(f"buffer array {name!r} has shape {arr.shape}, expected {(n_live, *shape)}")
            getattr(self, name)[slots] = arr
        used = self.frame_ids[slots][self._frame_mask(slots)]
        pool = np.asarray(arrays["frame_pool"])
        if used.size and (used.min() < 0 or used.max() >= pool.shape[0]):
            raise ValueError(f"buffer array 'frame_ids' points outside 'frame_pool' ({pool.shape[0]} frames)")
        self.pool.reset_to(pool, np.bincount(used, minlength=pool.shape[0]))
        self.num_transitions = int(self.valid_len[slots].sum())
