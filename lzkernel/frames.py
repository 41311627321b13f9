"""Image frames stored as uint8: the one encoding every env, collector and buffer shares; and the
window of the last frames a frame-stacking policy acts on (:class:`FrameWindow`).

An env that declares :class:`lzkernel.FrameEnvSpec` emits observations ``decode_frames(q, s)``
for uint8 frames q and its ``frame_scale`` s. Storing ``encode_frames(obs, s)`` and decoding
with the same function gives back the very float32 values the env emitted (the division is
IEEE-exact and identical on both sides), so compact storage changes no number the policy sees.
"""
from __future__ import annotations

import numpy as np

#: How far (in units of one quantisation step) an observation may be from the uint8 grid before
#: :func:`encode_frames` calls it not a frame: far below a step, far above float32 rounding.
_TOLERANCE = 1e-3


def decode_frames(frames: np.ndarray, scale: float) -> np.ndarray:
    """uint8 frames [...] → float32 observations ``frames / scale`` (a float32 array as is)."""
    if frames.dtype != np.uint8:
        return frames.astype(np.float32, copy=False)
    return frames.astype(np.float32) / np.float32(scale)


def encode_frames(obs: np.ndarray, scale: float, who: str = "observations") -> np.ndarray:
    """float32 observations [...] → uint8 frames (uint8 input is returned as is).

    Raises ``ValueError`` naming ``who`` when a value is not ``k / scale`` for an integer k in
    0..255: such an env does not emit the frames it declares."""
    if obs.dtype == np.uint8:
        return obs
    q = np.rint(np.asarray(obs, np.float32) * np.float32(scale))
    if q.size and (q.min() < 0 or q.max() > 255 or np.abs(q / scale - obs).max() * scale > _TOLERANCE):
        raise ValueError(f"{who} are not uint8 frames at scale {scale}: values must be k/{scale:g} "
                         f"for integers k in 0..255 (got range {float(obs.min())}..{float(obs.max())})")
    return q.astype(np.uint8)


class FrameWindow:
    """The last S frames of every env, for acting on stacked observations.

    Stacked observation of env i: its S frames, oldest first, concatenated along the first
    observation axis: [S*O0, *O[1:]] (a vector obs [O] gives [S*O]; an image [C, H, W] gives
    [S*C, H, W]). At an episode start the first frame fills the whole window.
    """

    def __init__(self, num_envs: int, obs_shape: tuple[int, ...], stack: int, who: str = "observations") -> None:
        if stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {stack}")
        self.stack = stack
        self.obs_shape = obs_shape
        self.who = who  # what the shape error names (an env's id)
        self.frames = np.zeros((num_envs, stack, *obs_shape), np.float32)  # [E, S, *O]

    def _check(self, obs: np.ndarray) -> None:
        if tuple(obs.shape[1:]) != tuple(self.obs_shape):
            raise ValueError(f"{self.who} have shape {tuple(obs.shape[1:])} where the env spec declares obs_shape "
                             f"{tuple(self.obs_shape)}")

    def reset(self, ids: np.ndarray, obs: np.ndarray) -> None:
        """Envs ``ids`` [B] start an episode at ``obs`` [B, *O]."""
        self._check(obs)
        self.frames[ids] = obs[:, None]

    def push(self, ids: np.ndarray, obs: np.ndarray) -> None:
        """Envs ``ids`` [B] moved on to ``obs`` [B, *O]: drop the oldest frame."""
        self._check(obs)
        window = self.frames[ids]  # a copy (fancy indexing), so the shift cannot alias
        window[:, :-1] = window[:, 1:]
        window[:, -1] = obs
        self.frames[ids] = window

    def stacked(self, ids: np.ndarray) -> np.ndarray:
        """[B, S*O0, *O[1:]] stacked observations of envs ``ids`` ([B, *O] when S == 1)."""
        return self.frames[ids].reshape(len(ids), -1, *self.obs_shape[1:])
