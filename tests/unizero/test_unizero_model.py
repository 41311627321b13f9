"""World-model shapes, token layout, initialisation (SPEC §4.1) and config validation."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lzk_unizero.config import UniZeroModelConfig, UniZeroPolicyConfig
from lzk_unizero.model import SimNorm, WorldModel
from unizero_helpers import ATOMS, NUM_ACTIONS, OBS_DIM, random_model, tiny_cfg


def test_sequence_shapes_and_heads_read_the_right_tokens():
    model = random_model()
    B, K, E = 3, 4, 16
    obs, actions = torch.randn(B, K, OBS_DIM), torch.randint(0, NUM_ACTIONS, (B, K))
    out = model.forward_sequence(obs, actions)
    assert out.latents.shape == (B, K, E) and out.next_latent.shape == (B, K, E)
    assert out.reward.shape == (B, K, ATOMS) and out.value.shape == (B, K, ATOMS)
    assert out.policy.shape == (B, K, NUM_ACTIONS)
    # Value/policy at o_k depend on a_k? No (causal: o_k precedes a_k). Reward/next latent at a_k do.
    other = actions.clone()
    other[:, 1] = (other[:, 1] + 1) % NUM_ACTIONS
    out2 = model.forward_sequence(obs, other)
    assert torch.equal(out.value[:, :2], out2.value[:, :2]) and torch.equal(out.policy[:, :2], out2.policy[:, :2])
    assert torch.equal(out.reward[:, 0], out2.reward[:, 0])
    assert not torch.allclose(out.reward[:, 1], out2.reward[:, 1])
    assert not torch.allclose(out.value[:, 2], out2.value[:, 2])


def test_interleave_layout():
    o = torch.arange(2 * 3 * 1, dtype=torch.float32).view(2, 3, 1)
    a = -1 - torch.arange(2 * 2 * 1, dtype=torch.float32).view(2, 2, 1)
    x = WorldModel.interleave(o, a)
    assert x.shape == (2, 5, 1)
    assert x[0, :, 0].tolist() == [0, -1, 1, -2, 2]


def test_initialisation_zeroes_the_head_outputs():
    model = WorldModel(tiny_cfg(), (OBS_DIM,), NUM_ACTIONS, ATOMS, ATOMS).eval()
    for head in (model.head_value, model.head_policy, model.head_reward, model.head_next_latent):
        assert head.last.weight.abs().sum() == 0 and head.last.bias.abs().sum() == 0
    out = model.forward_sequence(torch.randn(2, 3, OBS_DIM), torch.randint(0, NUM_ACTIONS, (2, 3)))
    assert out.value.abs().max() == 0 and out.policy.abs().max() == 0 and out.reward.abs().max() == 0
    emb = model.act_emb.weight
    assert 0.005 < emb.std() < 0.05
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            assert m.bias.abs().sum() == 0
        if isinstance(m, nn.LayerNorm):
            assert torch.all(m.weight == 1) and torch.all(m.bias == 0)


@pytest.mark.parametrize("init", ["lightzero", "scaled"])
def test_initialisation(init: str):
    """``lightzero``: LightZero's init_weights as it runs, every Linear and Embedding N(0, 0.02)
    (its kaiming branch for Linear is unreachable); ``scaled``: Linear kaiming-normal fan_out
    under BN. Both: Embedding N(0, 0.02), Conv2d kaiming-normal fan_out under BN."""
    torch.manual_seed(0)
    cfg = tiny_cfg(embed_dim=64, encoder="conv", conv_channels=[32, 64], init=init)
    model = WorldModel(cfg, (3, 16, 16), NUM_ACTIONS, ATOMS, ATOMS)
    heads = {id(h.last) for h in (model.head_value, model.head_policy, model.head_reward, model.head_next_latent)}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and id(m) not in heads]
    assert len(linears) >= 8
    for m in linears:
        want = 0.02 if init == "lightzero" else (2.0 / m.out_features) ** 0.5
        assert abs(float(m.weight.detach().std()) / want - 1.0) < 0.2, m
    assert abs(float(model.act_emb.weight.detach().std()) - 0.02) < 0.005
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs
    for m in convs:
        fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
        assert abs(float(m.weight.detach().std()) / (2.0 / fan_out) ** 0.5 - 1.0) < 0.15, m


def test_conv_encoder_and_simnorm():
    cfg = tiny_cfg(encoder="conv", final_norm="SimNorm", simnorm_group=8, conv_channels=[4, 8])
    model = WorldModel(cfg, (3, 16, 16), NUM_ACTIONS, ATOMS, ATOMS).eval()
    lat = model.encode(torch.randn(2, 5, 3, 16, 16))
    assert lat.shape == (2, 5, 16)
    torch.testing.assert_close(lat.view(2, 5, 2, 8).sum(-1), torch.ones(2, 5, 2))
    x = torch.randn(4, 16)
    torch.testing.assert_close(SimNorm(4)(x).view(4, 4, 4).sum(-1), torch.ones(4, 4))


def test_defaults_are_the_cartpole_config_and_validation_catches_mistakes():
    cfg = UniZeroPolicyConfig()
    m = cfg.model
    assert (m.embed_dim, m.num_layers, m.num_heads, m.context_length, m.max_tokens) == (64, 2, 2, 8, 20)
    assert m.pos_encoding == "rope" and m.final_norm == "LN" and m.dropout == 0.1
    assert (cfg.unroll_steps, cfg.td_steps, cfg.discount, cfg.batch_size) == (5, 5, 0.997, 256)
    assert (cfg.lr, cfg.weight_decay, cfg.adam_betas, cfg.grad_clip) == (1e-4, 1e-4, [0.9, 0.95], 5.0)
    assert (cfg.obs_loss_weight, cfg.reward_loss_weight, cfg.policy_loss_weight, cfg.value_loss_weight) == (
        10.0, 1.0, 1.0, 0.5)
    assert (cfg.num_simulations, cfg.eval_num_simulations, cfg.target_update_theta) == (25, 50, 0.05)
    assert cfg.validate() == []
    bad = UniZeroPolicyConfig(model=UniZeroModelConfig(embed_dim=10, num_heads=3, context_length=30),
                              unroll_steps=10)
    fields = {f for f, _ in bad.validate()}
    assert {"model.num_heads", "model.context_length", "unroll_steps"} <= fields
