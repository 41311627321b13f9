"""Image augmentation of learner batches (``policy.image_augmentation``: LightZero's Atari
``use_augmentation`` with shift + intensity; lzk_common.image_augment)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from lzkernel import ConfigError
from lzk_common.image_augment import ImageAugmentation
from lzk_muzero.policy import MuZeroPolicy
from muzero_helpers import make_batch, small_policy_cfg


def _obs(b: int = 5, steps: int = 3, c: int = 2, hw: int = 8) -> torch.Tensor:
    return torch.rand(b, steps, c, hw, hw, generator=torch.Generator().manual_seed(0))


def test_shift_is_a_replicate_pad_and_crop_drawn_per_sample() -> None:
    obs = _obs()
    out = ImageAugmentation(["shift"], np.random.default_rng(7))(obs)
    draws = np.random.default_rng(7)
    d_first, d_rest = draws.integers(-4, 5, (2, 5)), draws.integers(-4, 5, (2, 5))  # [dy; dx] per sample
    assert len({tuple(d) for d in d_first.T}) > 1  # one shift per sample, not per batch
    padded = F.pad(obs.flatten(1, 2), (4, 4, 4, 4), mode="replicate").view(5, 3, 2, 16, 16)
    for b in range(5):
        for steps, d in ((slice(0, 1), d_first), (slice(1, 3), d_rest)):  # the SSL targets share one draw
            y, x = 4 + d[0, b], 4 + d[1, b]
            torch.testing.assert_close(out[b, steps], padded[b, steps, :, y:y + 8, x:x + 8], rtol=0, atol=0)


def test_intensity_scales_each_sample_by_a_clamped_normal_factor() -> None:
    obs = _obs() + 0.5  # no zero pixels: the factor is out / obs
    out = ImageAugmentation(["intensity"], np.random.default_rng(3))(obs)
    factor = (out / obs).flatten(2)  # [B, K+1, C·H·W]
    torch.testing.assert_close(factor, factor[..., :1].expand_as(factor))
    first, rest = factor[:, 0, 0], factor[:, 1:, 0]
    torch.testing.assert_close(rest, rest[:, :1].expand_as(rest))  # one factor for all targets
    assert not torch.allclose(first, rest[:, 0])
    assert ((first >= 0.9 - 1e-6) & (first <= 1.1 + 1e-6)).all() and len(set(first.tolist())) == 5
    draws = np.random.default_rng(3)
    expected = 1 + 0.05 * np.clip(draws.standard_normal(5), -2, 2)
    np.testing.assert_allclose(first.numpy(), expected, rtol=1e-6)


def test_policy_learns_on_augmented_frames_and_checkpoints_the_draws() -> None:
    cfg = small_policy_cfg(model=dict(type="conv", latent_dim=8, head_channels=2, downsample=True),
                           frame_stack=2, image_augmentation=["shift", "intensity"])
    assert cfg.validate() == []
    pol = MuZeroPolicy(cfg, (1, 16, 16), 3, seed=0)
    seen: list[torch.Tensor] = []
    loss = pol.learner.loss
    pol.learner.loss = lambda tb: (seen.append(tb.obs.clone()), loss(tb))[1]
    batch = make_batch(4, 3, 3, (2, 16, 16))
    state = pol.state_dict()
    metrics, _ = pol.learn(batch)
    assert np.isfinite(metrics["train/loss_total"])
    assert seen[0].shape == batch.obs.shape and not torch.equal(seen[0], torch.as_tensor(batch.obs))
    # The draws are part of the policy's checkpoint: a restored policy augments the same way.
    other = MuZeroPolicy(cfg, (1, 16, 16), 3, seed=1)
    other.load_state_dict(state)
    other.learner.loss = lambda tb: (seen.append(tb.obs.clone()), loss(tb))[1]
    other.learn(batch)
    torch.testing.assert_close(seen[1], seen[0], rtol=0, atol=0)

    plain = MuZeroPolicy(small_policy_cfg(model=dict(type="conv", latent_dim=8, head_channels=2)), (1, 4, 4), 3)
    assert plain.augmentation is None and plain.learner.augment is None and "augment_rng" not in plain.state_dict()


def test_image_augmentation_needs_images_and_known_kinds() -> None:
    with pytest.raises(ConfigError, match="image_augmentation"):
        MuZeroPolicy(small_policy_cfg(image_augmentation=["shift"]), (4,), 2)
    assert [f for f, _ in small_policy_cfg(image_augmentation=["crop"]).validate()] == ["image_augmentation"]
