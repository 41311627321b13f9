"""Image frames stored as uint8: the one encoding every env, collector and buffer shares.

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
