"""Networks (SPEC §2.2), BN folding and the search adapter."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lzk_muzero.config import MuZeroModelConfig
from lzk_common.inference import fold_batchnorm
from lzk_muzero.inference import FusedMLPRecurrent, SearchNetwork
from lzk_muzero.models import build_model
from lzk_common.support import DiscreteSupport
from muzero_helpers import randomize, small_model_cfg

SUPPORT = DiscreteSupport.from_range([-10, 11, 1])


def test_cartpole_mlp_shapes_and_zero_init() -> None:
    model = build_model(MuZeroModelConfig(), (4,), 2).eval()  # the real CartPole config
    obs = torch.randn(5, 4)
    with torch.no_grad():
        latent, v, p = model.initial_inference(obs)
        nxt, r, v2, p2 = model.recurrent_inference(latent, torch.tensor([0, 1, 1, 0, 1]))
        proj = model.project(latent, with_grad=True)
    assert latent.shape == (5, 128) and v.shape == (5, 601) and p.shape == (5, 2)
    assert nxt.shape == (5, 128) and r.shape == (5, 601) and v2.shape == (5, 601) and p2.shape == (5, 2)
    assert proj.shape == (5, 1024)
    # [FAITHFUL] zero-initialised last layers: initial latents, value/reward/policy logits are 0.
    assert latent.abs().max() == 0.0
    for logits in (v, p, r, v2, p2):
        assert logits.abs().max() == 0.0
    support = DiscreteSupport.from_range([-300, 301, 1])
    assert support.decode(v).abs().max() < 1e-3
    # The residual dynamics: the latent moves away from 0 after one step (fc1 is not zero-init).
    assert nxt.abs().max() > 0.0


def test_mlp_without_residual_and_frame_stack() -> None:
    cfg = small_model_cfg(res_connection_in_dynamics=False, ssl=False)
    model = build_model(cfg, (3,), 4, frame_stack=2).eval()
    latent, v, p = model.initial_inference(torch.randn(2, 6))
    nxt, r, _, _ = model.recurrent_inference(latent, torch.tensor([3, 0]))
    assert latent.shape == (2, 16) and r.shape == (2, 21) and p.shape == (2, 4)
    assert model.ssl is None
    with pytest.raises(RuntimeError):
        model.project(latent)


@pytest.mark.parametrize("downsample", [False, True])
def test_conv_shapes(downsample: bool) -> None:
    cfg = small_model_cfg(type="conv", latent_dim=8, head_channels=2, downsample=downsample, num_res_blocks=1)
    model = build_model(cfg, (3, 9, 7), 5).eval()
    latent, v, p = model.initial_inference(torch.randn(2, 3, 9, 7))
    hw = (2, 1) if downsample else (9, 7)  # LightZero's DownSample: three stride-2 steps, each n → ⌈n/2⌉
    assert latent.shape == (2, 8, *hw) and v.shape == (2, 21) and p.shape == (2, 5)
    nxt, r, v2, p2 = model.recurrent_inference(latent, torch.tensor([4, 0]))
    assert nxt.shape == latent.shape and r.shape == (2, 21)
    assert v.abs().max() == 0.0 and r.abs().max() == 0.0 and p2.abs().max() == 0.0  # zero-init heads
    assert model.project(latent).shape == (2, 32)


def test_conv_cell_action_plane() -> None:
    """``action_planes: cell``: the dynamics sees one plane with a 1 at the action's board cell
    (a // W, a % W), and its first conv takes C + 1 channels instead of C + A."""
    cfg = small_model_cfg(type="conv", latent_dim=8, head_channels=2, action_planes="cell")
    model = build_model(cfg, (3, 3, 3), 9).eval()
    assert model.dynamics_conv[0].in_channels == 8 + 1
    seen: list[torch.Tensor] = []
    model.dynamics_conv[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0][:, 8].clone()))
    latent = model.initial_inference(torch.randn(3, 3, 3, 3))[0]
    with torch.no_grad():
        model.recurrent_inference(latent, torch.tensor([0, 5, 7]))
    plane = seen[0]  # [B, H, W]
    expected = torch.zeros(3, 3, 3)
    expected[0, 0, 0] = expected[1, 1, 2] = expected[2, 2, 1] = 1.0
    assert torch.equal(plane, expected)
    # LightZero's default keeps A constant planes.
    default = build_model(small_model_cfg(type="conv", latent_dim=8, head_channels=2), (3, 3, 3), 9)
    assert default.dynamics_conv[0].in_channels == 8 + 9
    with pytest.raises(ValueError, match="action_planes 'cell' needs one action per latent cell: 7 actions, latent 6x7"):
        build_model(cfg, (3, 6, 7), 7)


@pytest.mark.parametrize("kind", ["mlp", "mlp_plain", "conv"])
def test_folded_bn_equals_eval_mode(kind: str) -> None:
    if kind == "conv":
        cfg, obs_shape = small_model_cfg(type="conv", latent_dim=8, head_channels=2), (2, 5, 5)
    else:
        cfg, obs_shape = small_model_cfg(res_connection_in_dynamics=(kind == "mlp")), (4,)
    model = build_model(cfg, obs_shape, 3)
    randomize(model, seed=1)
    folded = fold_batchnorm(model, drop=(model.ssl,))
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in folded.modules())
    assert folded.ssl is None and model.ssl is not None  # the live model keeps its SSL heads
    obs = torch.randn(6, *obs_shape)
    a = torch.tensor([0, 1, 2, 2, 1, 0])
    with torch.no_grad():
        ref = model.initial_inference(obs) + model.recurrent_inference(model.initial_inference(obs)[0], a)
        got = folded.initial_inference(obs) + folded.recurrent_inference(folded.initial_inference(obs)[0], a)
    for x, y in zip(ref, got):
        assert torch.allclose(x, y, atol=1e-5, rtol=1e-5)


def test_fused_mlp_equals_eval_mode() -> None:
    model = build_model(small_model_cfg(), (4,), 3)
    randomize(model, seed=2)
    folded = fold_batchnorm(model, drop=(model.ssl,))
    assert FusedMLPRecurrent.supports(folded) and not FusedMLPRecurrent.supports(model)
    s, a = torch.randn(7, 16), torch.tensor([0, 1, 2, 0, 1, 2, 2])
    with torch.no_grad():
        nxt, r, v, p = model.recurrent_inference(s, a)
        f_nxt, rv, f_p = FusedMLPRecurrent(folded)(s, a)
    for x, y in ((nxt, f_nxt), (r, rv[0]), (v, rv[1]), (p, f_p)):
        assert torch.allclose(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fuse_max_batch", [256, 0])  # fused path, generic (folded model) path
def test_recurrent_fn_store_and_decoding(fuse_max_batch: int) -> None:
    model = build_model(small_model_cfg(), (4,), 3)
    randomize(model, seed=3, std=0.2)
    net = SearchNetwork(model, SUPPORT, SUPPORT, fuse_max_batch=fuse_max_batch)
    assert (net.fused is not None) == True  # noqa: E712 - the small MLP qualifies for fusion
    obs = torch.randn(4, 4)
    latent, value, logits = net.initial(obs)
    with torch.no_grad():
        ref_latent, ref_v, ref_p = model.initial_inference(obs)
    assert np.allclose(value, SUPPORT.decode(ref_v).numpy(), atol=1e-4)
    assert np.allclose(logits, ref_p.numpy(), atol=1e-5)

    fn = net.begin(latent, num_simulations=3)

    def step(trees: np.ndarray, parents: np.ndarray, action: np.ndarray, new_node: int) -> tuple[np.ndarray, ...]:
        out = fn(parents * 4 + trees, action, new_node * 4 + trees)  # slots: node·B + b, B = 4
        return out.reward, out.value, out.prior_logits

    # Simulation 0: every tree expands action (b % 3) from the root into node 1.
    r1, v1, p1 = step(np.arange(4), np.zeros(4, np.int64), np.arange(4) % 3, 1)
    # Simulation 1: trees 1 and 3 only, from node 1 with action 2, into node 2.
    r2, v2, p2 = step(np.array([1, 3]), np.array([1, 1]), np.array([2, 2]), 2)
    with torch.no_grad():
        s1, rr1, vv1, pp1 = model.recurrent_inference(ref_latent, torch.arange(4) % 3)
        s2, rr2, vv2, pp2 = model.recurrent_inference(s1[[1, 3]], torch.tensor([2, 2]))
    assert np.allclose(r1, SUPPORT.decode(rr1).numpy(), atol=1e-4)
    assert np.allclose(v1, SUPPORT.decode(vv1).numpy(), atol=1e-4)
    assert np.allclose(p1, pp1.numpy(), atol=1e-5)
    assert np.allclose(r2, SUPPORT.decode(rr2).numpy(), atol=1e-4)
    assert np.allclose(v2, SUPPORT.decode(vv2).numpy(), atol=1e-4)
    assert np.allclose(p2, pp2.numpy(), atol=1e-5)
    assert r1.dtype == v1.dtype == p1.dtype == np.float32 and p2.flags.c_contiguous
    assert torch.allclose(net.latents.tensor[[2 * 4 + 1, 2 * 4 + 3]], s2, atol=1e-5)
    assert net.forward_calls == 2 and net.forward_seconds > 0.0


def test_recurrent_fn_with_different_supports() -> None:
    cfg = small_model_cfg(reward_support_range=[-5, 6, 1])
    model = build_model(cfg, (4,), 2)
    randomize(model, seed=4, std=0.2)
    rs = DiscreteSupport.from_range([-5, 6, 1])
    net = SearchNetwork(model, SUPPORT, rs)
    assert net.fused is None and not net.joint_decode
    latent, _, _ = net.initial(torch.randn(3, 4))
    out = net.begin(latent, 1)(np.arange(3), np.array([0, 1, 0]), 3 + np.arange(3))  # node 0 → node 1, B = 3
    r, v = out.reward, out.value
    with torch.no_grad():
        _, rr, vv, _ = model.recurrent_inference(latent, torch.tensor([0, 1, 0]))
    assert np.allclose(r, rs.decode(rr).numpy(), atol=1e-4) and np.allclose(v, SUPPORT.decode(vv).numpy(), atol=1e-4)


def test_ssl_heads_skip_the_bias_that_batchnorm_cancels() -> None:
    """The SSL heads' Linear layers before a BatchNorm skip their bias (a broadcast pass and a
    column sum on [B·K, 1024] per layer): in train mode the projection and its gradients equal
    those of plain Linear layers with the same (nonzero) bias within float rounding, the bias gets
    no gradient, and the state dict keeps LightZero's layout (every layer has a bias)."""
    import copy

    from lzk_common.blocks import BatchNormedLinear, SSLHeads

    torch.manual_seed(0)
    heads = SSLHeads(16, 64, 64, 32, 64).train()
    with torch.no_grad():
        for m in heads.modules():
            if isinstance(m, BatchNormedLinear):
                m.bias.uniform_(-1.0, 1.0)
    reference = copy.deepcopy(heads)
    for seq in (reference.projection, reference.prediction_head):
        for i, m in enumerate(seq):
            if isinstance(m, BatchNormedLinear):
                plain = torch.nn.Linear(m.in_features, m.out_features)
                plain.load_state_dict(m.state_dict())
                seq[i] = plain
    assert sum(isinstance(m, BatchNormedLinear) for m in heads.modules()) == 4
    x = torch.randn(40, 16)
    out, ref = heads(x), reference(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    for (name, p), q in zip(heads.named_parameters(), reference.parameters()):
        if name.endswith("bias") and not p.requires_grad:
            assert p.grad is None and q.grad.abs().max() < 1e-4, name  # BatchNorm cancels it
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert set(heads.state_dict()) == set(reference.state_dict())
