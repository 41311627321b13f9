"""Game segments: fixed-length pieces of an episode, padded with their successor's first K + n steps.

A :class:`~lzkernel.Trajectory` is cut into segments of ``L`` transitions, counted from the episode
start. A full segment that is not the last of its episode carries ``K + n`` padding transitions
copied from the stream that follows it (its successor, or several successors when K + n > L), so
targets for every one of its L positions can be built from the segment alone. Lengths (SPEC §2.4),
with ``P = min(K + n, transitions left after the segment)``::

    frames       S - 1 + D + 1   (S = frame stack; frames[i : i + S] is the stacked obs at step i)
    actions      D = L + P       (D = min(L, T) for the episode's final, unpadded segment)
    rewards      min(D, L + K + n - 1)   (the last padding reward is never read by any target)
    root_values  D
    visit_dist   D
    legal, to_play, timestep   D + 1  (one per observation)

So a full segment with full padding has S + L + K + n frames, L + K + n actions, L + K + n - 1
rewards and L + K + n root values / visit distributions.

:class:`SegmentCutter` keeps one env's stream across calls: a piece that has not ``ended`` keeps
its last segments back until their padding has arrived (the segment collector case). An episode
collector only sends ended episodes, which are cut completely. What is kept is part of the
buffer's checkpoint (:meth:`SegmentCutter.state_dict`), so a resumed run continues the stream.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lzkernel import Trajectory


def stacked_shape(obs_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
    """Shape O' of a stacked observation: frames are concatenated along the first axis
    (vectors ``[S*O]``, images ``[S*C, H, W]``)."""
    if len(obs_shape) == 0:
        raise ValueError("observations must have at least one dimension")
    return (frame_stack * int(obs_shape[0]), *map(int, obs_shape[1:]))


@dataclass
class GameSegment:
    """One segment of an episode (lengths in the module docstring; D = ``len(actions)``)."""

    frames: np.ndarray  # [S - 1 + D + 1, *O] unstacked frames, S - 1 history frames first
    actions: np.ndarray  # [D] int64
    rewards: np.ndarray  # [min(D, L + K + n - 1)] float32
    visit_dist: np.ndarray  # [D, A] float32
    root_values: np.ndarray  # [D] float32
    pred_values: np.ndarray  # [D] float32 (initial priorities only; not stored by the buffer)
    legal: np.ndarray  # [D + 1, A] bool
    to_play: np.ndarray  # [D + 1] int64
    timestep: np.ndarray  # [D + 1] int64
    valid_len: int  # min(D, L): the segment's own transitions (the rest is padding)
    done: bool  # the data reaches the episode's end: frames[-1] is its final observation
    terminal: bool  # done and the end is terminal (no bootstrap from the final observation)
    is_last: bool  # the episode's final segment
    index: int  # segment number within the episode (as far as this cutter has seen it)
    env_id: int = 0

    def __len__(self) -> int:
        return int(self.actions.shape[0])


_STEP_FIELDS = ("actions", "rewards", "visit_dist", "root_values", "pred_values")  # one per transition
_OBS_FIELDS = ("legal", "to_play", "timestep")  # one per observation


class SegmentCutter:
    """Cuts one env's trajectory pieces into :class:`GameSegment` s, carrying what cannot be cut yet.

    Invariant of the kept stream: it starts at the first step of the open (not yet emitted)
    segment; ``frames`` holds S - 1 history frames before it, then one frame per observation.
    Pieces of one episode must be contiguous: a piece's ``obs[0]`` is the previous piece's
    ``obs[T]`` (checked through ``timestep``). A piece that does not continue the kept stream
    (a new episode, or a gap) first :meth:`flush` es it as a truncated episode.
    """

    def __init__(self, segment_length: int, pad: int, frame_stack: int, env_id: int = 0) -> None:
        if segment_length < 1 or pad < 0 or frame_stack < 1:
            raise ValueError("need segment_length >= 1, pad >= 0, frame_stack >= 1")
        self.L, self.pad, self.S, self.env_id = segment_length, pad, frame_stack, env_id
        self._stream: dict[str, np.ndarray] | None = None
        self._index = 0  # index of the open segment within its episode

    @property
    def pending_transitions(self) -> int:
        """Transitions kept back (waiting for padding or for the episode to continue)."""
        return 0 if self._stream is None else int(self._stream["actions"].shape[0])

    def cut(self, traj: Trajectory) -> list[GameSegment]:
        """Append ``traj`` to the stream; return every segment whose padding is now complete
        (all of them when ``traj.ended``)."""
        out: list[GameSegment] = []
        s = self._stream
        if s is not None and int(traj.timestep[0]) != int(s["timestep"][-1]):
            out += self.flush()  # not a continuation: close the kept episode as truncated
            s = None
        if s is None:
            first = np.asarray(traj.obs[:1])
            s = {"frames": np.concatenate([np.repeat(first, self.S - 1, axis=0), traj.obs])}
            # copies: the caller may reuse its arrays while this stream is kept
            s.update({k: np.array(getattr(traj, k)) for k in _STEP_FIELDS + _OBS_FIELDS})
            self._index = 0
        else:  # obs[0] / legal[0] / ... duplicate the kept stream's last observation
            s["frames"] = np.concatenate([s["frames"], traj.obs[1:]])
            for k in _STEP_FIELDS:
                s[k] = np.concatenate([s[k], getattr(traj, k)])
            for k in _OBS_FIELDS:
                s[k] = np.concatenate([s[k], getattr(traj, k)[1:]])
        self._stream = s
        out += self._emit(ended=traj.ended, terminal=traj.terminal)
        return out

    def state_dict(self) -> tuple[int, dict[str, np.ndarray]]:
        """(index of the open segment within its episode, the kept stream's arrays: ``frames``
        and one per step or observation field; empty when nothing is kept)."""
        return self._index, {} if self._stream is None else {k: v.copy() for k, v in self._stream.items()}

    def load_state_dict(self, index: int, stream: dict[str, np.ndarray]) -> None:
        """Keep what :meth:`state_dict` returned (a later piece continues it)."""
        fields = {"frames", *_STEP_FIELDS, *_OBS_FIELDS}
        if stream and set(stream) != fields:
            raise ValueError(f"cutter stream has fields {sorted(stream)}, expected {sorted(fields)}")
        self._index, self._stream = int(index), ({k: np.array(v) for k, v in stream.items()} if stream else None)

    def flush(self) -> list[GameSegment]:
        """Emit everything kept, as an episode truncated at the last observation (bootstrap from
        it is allowed), and forget the stream."""
        if self._stream is None:
            return []
        return self._emit(ended=True, terminal=False)

    def _emit(self, ended: bool, terminal: bool) -> list[GameSegment]:
        s, L, S, out = self._stream, self.L, self.S, []
        assert s is not None
        while True:
            T = int(s["actions"].shape[0])
            if not (T >= L + self.pad or (ended and T > 0)):
                break
            D = min(T, L + self.pad)
            done = ended and D == T
            out.append(GameSegment(
                frames=s["frames"][: S + D].copy(),
                actions=s["actions"][:D].astype(np.int64),
                rewards=s["rewards"][: min(D, L + self.pad - 1)].astype(np.float32),
                visit_dist=s["visit_dist"][:D].astype(np.float32),
                root_values=s["root_values"][:D].astype(np.float32),
                pred_values=s["pred_values"][:D].astype(np.float32),
                legal=s["legal"][: D + 1].astype(bool),
                to_play=s["to_play"][: D + 1].astype(np.int64),
                timestep=s["timestep"][: D + 1].astype(np.int64),
                valid_len=min(D, L), done=done, terminal=done and terminal,
                is_last=ended and T <= L, index=self._index, env_id=self.env_id,
            ))
            self._index += 1
            # Drop the emitted segment's own L steps; frames keep S - 1 history frames.
            s["frames"] = s["frames"][L:]
            for k in _STEP_FIELDS:
                s[k] = s[k][L:]
            for k in _OBS_FIELDS:
                s[k] = s[k][L:]
        if ended:
            self._stream, self._index = None, 0
        return out
