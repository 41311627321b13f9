"""Observations stored once: a reference-counted pool of frames that game segments point into.

A segment's padding (its successor's first K + n steps) and its S − 1 history frames are frames
of neighbouring segments of the same episode; storing them per segment would keep up to
(S + L + K + n) / L copies of every frame (1.8 for UniZero's Atari L = 20, K = 10, n = 5).
Instead :class:`~lzk_replay.storage.SegmentStore` keeps, per slot, the pool ids of its S + D
frames; consecutive segments of an episode share the ids of the frames they have in common, and
a frame is freed when the last segment referring to it is dropped.

Frames of a :class:`lzkernel.FrameEnvSpec` env (``scale`` set) are kept as uint8 (one byte per
pixel) and decoded with :func:`lzkernel.decode_frames` when a batch is built; other observations
are kept as float32.

Invariants: ``refs[i]`` is the number of (slot, position) entries that hold id i; an id is in the
free stack exactly when ``refs[i] == 0``; frames at free ids are never read.
"""
from __future__ import annotations

import numpy as np

from lzkernel import decode_frames, encode_frames


class FramePool:
    """Frames ``[P, *O]`` (uint8 at scale ``scale``, else float32) with reference counts ``[P]``."""

    def __init__(self, obs_shape: tuple[int, ...], scale: float | None = None, capacity: int = 256) -> None:
        self.obs_shape = tuple(int(x) for x in obs_shape)
        self.scale = scale
        self.dtype = np.dtype(np.uint8 if scale is not None else np.float32)
        self.frames = np.zeros((0, *self.obs_shape), self.dtype)
        self.refs = np.zeros(0, np.int64)
        self._free = np.zeros(0, np.int64)  # stack of free ids; the top is the end
        self._grow(max(1, capacity))

    @property
    def capacity(self) -> int:
        return int(self.refs.shape[0])

    @property
    def num_frames(self) -> int:
        """Frames held (referenced at least once)."""
        return self.capacity - int(self._free.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the frames held (the pool's own footprint is ``capacity`` frames)."""
        return self.num_frames * int(np.prod(self.obs_shape, dtype=np.int64)) * self.dtype.itemsize

    def _grow(self, capacity: int) -> None:
        old = self.capacity
        frames = np.zeros((capacity, *self.obs_shape), self.dtype)  # zero pages: not resident until written
        frames[:old] = self.frames
        self.frames = frames
        self.refs = np.concatenate([self.refs, np.zeros(capacity - old, np.int64)])
        # Lowest ids on top, so the pool fills from the start and untouched pages stay unmapped.
        self._free = np.concatenate([np.arange(capacity - 1, old - 1, -1, dtype=np.int64), self._free])

    def encode(self, obs: np.ndarray) -> np.ndarray:
        """Observations [n, *O] in the pool's dtype (uint8 frames are checked to be frames)."""
        if self.scale is None:
            return np.asarray(obs, np.float32)
        return encode_frames(np.asarray(obs), self.scale, who="replay observations")

    def add(self, obs: np.ndarray) -> np.ndarray:
        """Store ``obs`` [n, *O]; returns their ids [n] (references still 0: :meth:`retain` them)."""
        n = int(obs.shape[0])
        if n > self._free.shape[0]:
            cap = self.capacity
            while cap - self.num_frames < n:
                cap *= 2
            self._grow(cap)
        ids = self._free[self._free.shape[0] - n:][::-1].copy()
        self._free = self._free[: self._free.shape[0] - n]
        self.frames[ids] = self.encode(obs)
        return ids

    def retain(self, ids: np.ndarray) -> None:
        """One more reference per entry of ``ids`` (duplicates count once each)."""
        np.add.at(self.refs, np.asarray(ids, np.int64), 1)

    def release(self, ids: np.ndarray) -> None:
        """One reference fewer per entry of ``ids``; ids left without references are freed."""
        uniq, counts = np.unique(np.asarray(ids, np.int64), return_counts=True)
        self.refs[uniq] -= counts
        if (self.refs[uniq] < 0).any():
            raise AssertionError("frame pool: released more references than were held")
        freed = uniq[self.refs[uniq] == 0]
        self._free = np.concatenate([self._free, freed[::-1]])

    def decoded(self, ids: np.ndarray) -> np.ndarray:
        """Observations ``[*ids.shape, *O]`` float32 at ``ids``."""
        return decode_frames(self.frames[ids], self.scale or 1.0)

    def reset_to(self, frames: np.ndarray, refs: np.ndarray) -> None:
        """Hold exactly ``frames`` [P, *O] (ids 0..P−1) with reference counts ``refs`` [P]."""
        self.frames = np.zeros((0, *self.obs_shape), self.dtype)
        self.refs = np.zeros(0, np.int64)
        self._free = np.zeros(0, np.int64)
        self._grow(max(1, int(frames.shape[0])))
        self.frames[: frames.shape[0]] = self.encode(frames)
        self.refs[: refs.shape[0]] = refs
        self._free = np.flatnonzero(self.refs == 0)[::-1].astype(np.int64)
