"""The Atari conv networks (``model.type: conv, downsample: true``) against LightZero 0.2.0's
Atari MuZero / EfficientZero models (SPEC-atari-efficientzero §B.2, §C.1).

LightZero's numbers were read off its models built with the Atari configs' settings (A = 6,
64 channels, 1 res block, SSL heads; MuZero ±300 supports, EfficientZero ±50 and an LSTM of
512): parameters 7,997,608 (MuZero, 64×64 frames), 6,119,592 (96×96), 11,099,072 / 8,317,888
(EfficientZero), of which 315,712 in the representation; latents 64×8×8 and 64×6×6. Ours have
48 fewer: the three 1×1 head convs (reward or value prefix, value, policy) carry no bias, which
the BatchNorm after them cancels. With LightZero's representation weights loaded in order, our
representation gave LightZero's outputs to the bit, in train and eval mode (checked once by hand;
LightZero is not a test dependency).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lzk_common.inference import fold_batchnorm
from lzk_efficientzero.config import EfficientZeroModelConfig
from lzk_efficientzero.models import build_model as build_ez
from lzk_muzero.config import MuZeroModelConfig
from lzk_muzero.models import build_model as build_mz
from lzkernel.config.loader import load_tree

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
HEAD_CONV_BIASES = 3 * 16  # LightZero's 1x1 head convs have biases; ours do not (BN follows)


def _model_cfg(config: str, cls: type) -> object:
    return cls(**load_tree(CONFIGS / config)[0]["policy"]["model"])  # with any base config merged


@pytest.mark.parametrize(("config", "cls", "build", "frame", "lightzero_params", "grid"), [
    ("atari_pong_muzero.yaml", MuZeroModelConfig, build_mz, 64, 7_997_608, 8),
    ("atari_pong_muzero.yaml", MuZeroModelConfig, build_mz, 96, 6_119_592, 6),
    ("atari_pong_efficientzero.yaml", EfficientZeroModelConfig, build_ez, 64, 11_099_072, 8),
    ("atari_pong_efficientzero.yaml", EfficientZeroModelConfig, build_ez, 96, 8_317_888, 6),
])
def test_atari_network_has_lightzero_layout(config: str, cls: type, build, frame: int,  # noqa: ANN001
                                            lightzero_params: int, grid: int) -> None:
    torch.manual_seed(0)
    model = build(_model_cfg(config, cls), (1, frame, frame), 6, frame_stack=4)
    assert model.latent_shape == (64, grid, grid)
    assert sum(p.numel() for p in model.representation.parameters()) == 315_712
    assert sum(p.numel() for p in model.parameters()) == lightzero_params - HEAD_CONV_BIASES
    obs = torch.rand(3, 4, frame, frame)
    model.train()
    model.represent(obs)  # move the BatchNorm statistics off their initial values
    model.eval()
    with torch.no_grad():
        latent = model.represent(obs)
        assert latent.shape == (3, 64, grid, grid)
        # The search folds BatchNorm into the convs, the downsampling blocks' included.
        folded = fold_batchnorm(model, drop=(model.ssl,))
        torch.testing.assert_close(folded.represent(obs), latent, rtol=1e-4, atol=1e-4)
