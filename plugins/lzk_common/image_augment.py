"""Image augmentation of learner batches (EfficientZero's, LightZero's ``use_augmentation`` with
``augmentation: [shift, intensity]``; SPEC-atari-efficientzero §B.2), for frame-stacked image
observations.

Kinds, applied in this order to a stacked observation [C', H, W]:

* ``shift``: the image moved by (dy, dx), each uniform in −``pad`` … ``pad`` pixels, edges
  replicated: LightZero's replicate-pad by ``pad`` then a random H×W crop. Equal to reading pixel
  (clamp(i + dy), clamp(j + dx)) for output pixel (i, j).
* ``intensity``: the image multiplied by 1 + ``scale``·clamp(N(0, 1), −2, 2).

Draws (as LightZero's two ``transform`` calls): a sample's first observation (step 0, the
representation's input) gets one draw; its K SSL target observations (steps 1 … K) share
another, so the frames they have in common are moved and scaled alike. Each sample draws its
own, where LightZero draws one shift per batch (SPEC §B.2 [BUG?]) and EfficientZero's original
code (a per-sample random crop) draws one per sample.

The random numbers come from a numpy Generator (the policy checkpoints its state); the images
are moved on the batch's device. Shapes: B batch, K unroll steps, C' stacked channels.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from lzk_common.options import IMAGE_AUGMENTATIONS as KINDS


class ImageAugmentation:
    """``__call__(obs [B, K+1, C', H, W]) → augmented obs`` (a new tensor; module docstring)."""

    def __init__(self, kinds: Sequence[str], rng: np.random.Generator, pad: int = 4, scale: float = 0.05) -> None:
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown image augmentation {unknown}; expected some of {list(KINDS)}")
        self.shift, self.intensity = "shift" in kinds, "intensity" in kinds
        self.rng, self.pad, self.scale = rng, int(pad), float(scale)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.ndim != 5:
            raise ValueError(f"image augmentation needs stacked image observations [B, K+1, C, H, W], got {tuple(obs.shape)}")
        b, steps = obs.shape[:2]
        # Two groups per sample: step 0, and steps 1..K as one image of K·C' channels.
        first = self._apply(obs[:, 0])  # [B, C', H, W]
        if steps == 1:
            return first[:, None]
        rest = self._apply(obs[:, 1:].reshape(b, -1, *obs.shape[-2:]))  # [B, K·C', H, W]
        return torch.cat([first[:, None], rest.view(b, steps - 1, *obs.shape[2:])], dim=1)

    def _apply(self, x: torch.Tensor) -> torch.Tensor:
        """One draw per row of x [N, C, H, W]."""
        n, c, h, w = x.shape
        if self.shift:
            d = torch.from_numpy(self.rng.integers(-self.pad, self.pad + 1, (2, n))).to(x.device)  # [2, N]
            rows = (torch.arange(h, device=x.device)[None, :] + d[0][:, None]).clamp_(0, h - 1)  # [N, H]
            cols = (torch.arange(w, device=x.device)[None, :] + d[1][:, None]).clamp_(0, w - 1)  # [N, W]
            x = x.gather(2, rows[:, None, :, None].expand(n, c, h, w))
            x = x.gather(3, cols[:, None, None, :].expand(n, c, h, w))
        if self.intensity:
            factor = 1.0 + self.scale * np.clip(self.rng.standard_normal(n), -2.0, 2.0)  # [N]
            x = x * torch.from_numpy(factor.astype(np.float32)).to(x.device)[:, None, None, None]
        return x
