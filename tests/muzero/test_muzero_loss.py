"""The MuZero loss against an independent per-sample computation (SPEC §2.7)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from lzk_common.losses import TensorBatch, negative_cosine
from lzk_common.latent_loss import LatentLossWeights
from lzk_muzero.loss import muzero_loss
from lzk_muzero.models import build_model
from lzk_common.support import DiscreteSupport
from muzero_helpers import make_batch, randomize, small_model_cfg

LO, HI = -10, 10  # the small support [-10, 11, 1]


def _h(x: float) -> float:
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + 0.001 * x


def _two_hot(x: float) -> np.ndarray:
    x = min(max(x, LO), HI)
    f = math.floor(x)
    out = np.zeros(HI - LO + 1)
    out[f - LO] += 1 - (x - f)
    if f < HI:
        out[f - LO + 1] += x - f
    return out


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max()
    return z - m - math.log(np.exp(z - m).sum())


def _ce(logits: torch.Tensor, target: np.ndarray) -> float:
    return float(-(target * _log_softmax(logits.detach().numpy())).sum())


def _entropy(logits: torch.Tensor) -> float:
    lp = _log_softmax(logits.detach().numpy())
    return float(-(np.exp(lp) * lp).sum())


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double().numpy(), y.detach().double().numpy()
    return float(x @ y / (max(np.linalg.norm(x), 1e-5) * max(np.linalg.norm(y), 1e-5)))


def test_loss_equals_independent_computation() -> None:
    b, k, a = 3, 2, 3
    model = build_model(small_model_cfg(), (4,), a)
    randomize(model, seed=5, std=0.2)  # eval mode: outputs do not depend on the batch
    batch = make_batch(b, k, a, (4,), seed=1)
    batch.mask[1, 0] = 0.0  # masks the SSL term of step 0 of sample 1
    w = LatentLossWeights(value=0.25, reward=1.0, policy=1.0, ssl=2.0, entropy=5e-3)
    support = DiscreteSupport.from_range([LO, HI + 1, 1])
    out = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), support, support, w)

    # Independent: per sample, step by step, with numpy/math formulas.
    totals, parts = [], {"value": [], "reward": [], "policy": [], "ssl": [], "entropy": []}
    with torch.no_grad():
        obs = torch.from_numpy(batch.obs)
        for i in range(b):
            latent, v, p = model.initial_inference(obs[i:i + 1, 0])
            value = _ce(v[0], _two_hot(_h(batch.target_value[i, 0])))
            policy = _ce(p[0], batch.target_policy[i, 0])
            ent = _entropy(p[0])
            reward = ssl = 0.0
            for j in range(k):
                latent, r, v, p = model.recurrent_inference(latent, torch.tensor([batch.actions[i, j]]))
                target_latent = model.initial_inference(obs[i:i + 1, j + 1])[0]
                cos = _cos(model.project(latent, True)[0], model.project(target_latent, False)[0])
                ssl += -cos * batch.mask[i, j]
                value += _ce(v[0], _two_hot(_h(batch.target_value[i, j + 1])))
                policy += _ce(p[0], batch.target_policy[i, j + 1])
                reward += _ce(r[0], _two_hot(_h(batch.target_reward[i, j])))
                ent += _entropy(p[0])
            loss = 2.0 * ssl + policy + 0.25 * value + reward - 5e-3 * ent
            totals.append(batch.weights[i] * loss)
            for name, x in zip(parts, (value, reward, policy, ssl, ent)):
                parts[name].append(x)
    assert np.isclose(out.loss.item(), np.mean(totals), rtol=1e-5)
    for name, values in parts.items():
        assert np.allclose(getattr(out, name).detach().numpy(), values, rtol=1e-5, atol=1e-5), name
    assert parts["ssl"][1] != 0.0  # the unmasked step still counts
    ref_root = support.decode(model.initial_inference(obs[:, 0])[1])
    assert torch.allclose(out.root_value, ref_root)


def test_ssl_weight_zero_skips_ssl_and_padding_policy_is_free() -> None:
    model = build_model(small_model_cfg(), (4,), 2)
    randomize(model, seed=6)
    batch = make_batch(4, 2, 2, (4,))
    batch.target_policy[:, 2] = 0.0  # LightZero zero policy targets past the data: no loss
    w = LatentLossWeights(ssl=0.0)
    out = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), *(DiscreteSupport.from_range([LO, HI + 1, 1]),) * 2, w)
    assert torch.all(out.ssl == 0.0)
    batch.target_policy[:, 2] = 0.5
    out2 = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), *(DiscreteSupport.from_range([LO, HI + 1, 1]),) * 2, w)
    assert torch.all(out2.policy > out.policy)


def _per_step_ssl_reference(model: torch.nn.Module, tb: TensorBatch) -> torch.Tensor:
    """The SSL sum as LightZero computes it: project at every unroll step, one call per step."""
    latent = model.initial_inference(tb.obs[:, 0])[0]
    total = torch.zeros(tb.obs.shape[0])
    for k in range(tb.actions.shape[1]):
        latent = model.recurrent_inference(latent, tb.actions[:, k])[0]
        online = model.project(latent, with_grad=True)
        with torch.no_grad():
            target = model.project(model.initial_inference(tb.obs[:, k + 1])[0], with_grad=False)
        total = total + negative_cosine(online, target) * tb.mask[:, k]
    return total


@pytest.mark.parametrize("model_type", ["mlp", "conv"])
def test_grouped_ssl_equals_per_step_calls_in_train_mode(model_type: str) -> None:
    """In train mode BatchNorm uses batch statistics, so batching the K steps is only right if
    each step keeps its own statistics: values, gradients and the representation's running
    statistics (updated by o_0 … o_K in order either way) match K separate calls."""
    obs_shape = (4,) if model_type == "mlp" else (2, 6, 6)
    cfg = small_model_cfg(type=model_type, latent_dim=4) if model_type == "conv" else small_model_cfg()
    model = build_model(cfg, obs_shape, 2)
    randomize(model, seed=3, obs_shape=obs_shape, std=0.2)
    reference = copy.deepcopy(model)
    model.train(), reference.train()
    batch = make_batch(16, 3, 2, obs_shape, seed=4)
    batch.obs[:, 2:] *= 3.0  # steps with different statistics: one shared normalisation would differ
    tb = TensorBatch.from_batch(batch, "cpu")
    w = LatentLossWeights(value=0.0, reward=0.0, policy=0.0, ssl=1.0, entropy=0.0)
    support = DiscreteSupport.from_range([LO, HI + 1, 1])
    out = muzero_loss(model, tb, support, support, w)
    expected = _per_step_ssl_reference(reference, tb)
    assert torch.allclose(out.ssl, expected, rtol=1e-4, atol=1e-5)
    out.ssl.sum().backward()
    expected.sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if q.grad is None:
            assert p.grad is None or torch.all(p.grad == 0), name
        else:
            assert torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-5), name
    first_norm = next(m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    ref_norm = next(m for m in reference.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    assert torch.allclose(first_norm.running_mean, ref_norm.running_mean, atol=1e-6)
    assert torch.allclose(first_norm.running_var, ref_norm.running_var, rtol=1e-5)
    assert int(first_norm.num_batches_tracked) == int(ref_norm.num_batches_tracked) == 4  # o_0 … o_3
    # and normalising all steps together would have given another answer
    assert not torch.allclose(out.ssl, _ungrouped_ssl(copy.deepcopy(reference), tb), rtol=1e-3)


def _ungrouped_ssl(model: torch.nn.Module, tb: TensorBatch) -> torch.Tensor:
    b, k = tb.actions.shape
    latent = model.initial_inference(tb.obs[:, 0])[0]
    latents = []
    for j in range(k):
        latent = model.recurrent_inference(latent, tb.actions[:, j])[0]
        latents.append(latent)
    online = model.project(torch.stack(latents, 1).flatten(0, 1), with_grad=True)
    target = model.project(model.initial_inference(tb.obs[:, 1:].flatten(0, 1))[0], with_grad=False)
    return (negative_cosine(online, target).view(b, k) * tb.mask[:, :k]).sum(1).detach()


def _per_step_loss_reference(model: torch.nn.Module, tb: TensorBatch, support: DiscreteSupport,
                             w: LatentLossWeights) -> torch.Tensor:
    """The whole loss step by step, in LightZero's loop order: initial inference, then for each
    step k a recurrent inference (prediction included), the initial inference of the SSL target
    o_{k+1}, and the online and target projections; one call each."""
    from lzk_common.losses import entropy, soft_cross_entropy

    b, k = tb.actions.shape
    latent, v, p = model.initial_inference(tb.obs[:, 0])
    value = soft_cross_entropy(v, support.encode(tb.target_value[:, 0]))
    policy = soft_cross_entropy(p, tb.target_policy[:, 0])
    ent = entropy(p)
    reward = torch.zeros(b)
    ssl = torch.zeros(b)
    for j in range(k):
        latent, r, v, p = model.recurrent_inference(latent, tb.actions[:, j])
        value = value + soft_cross_entropy(v, support.encode(tb.target_value[:, j + 1]))
        policy = policy + soft_cross_entropy(p, tb.target_policy[:, j + 1])
        reward = reward + soft_cross_entropy(r, support.encode(tb.target_reward[:, j]))
        ent = ent + entropy(p)
        with torch.no_grad():
            target_latent = model.initial_inference(tb.obs[:, j + 1])[0]
        online = model.project(latent, with_grad=True)
        with torch.no_grad():
            target = model.project(target_latent, with_grad=False)
        ssl = ssl + negative_cosine(online, target) * tb.mask[:, j]
    per_sample = w.ssl * ssl + w.policy * policy + w.value * value + w.reward * reward - w.entropy * ent
    return (tb.weights * per_sample).mean()


@pytest.mark.parametrize("model_type", ["mlp", "conv"])
def test_batched_prediction_equals_per_step_calls_in_train_mode(model_type: str) -> None:
    """The unroll predicts all K + 1 latents in one grouped batch after the recurrence; in train
    mode that is right only if each step keeps its own BatchNorm statistics: the loss, every
    gradient and every BatchNorm's running statistics (the prediction network's and the
    projection's included, which see unrolled latents and SSL targets alternately, step by step)
    match LightZero's step-by-step loop."""
    obs_shape = (4,) if model_type == "mlp" else (2, 6, 6)
    cfg = small_model_cfg(type=model_type, latent_dim=4) if model_type == "conv" else small_model_cfg()
    model = build_model(cfg, obs_shape, 2)
    randomize(model, seed=7, obs_shape=obs_shape, std=0.2)
    reference = copy.deepcopy(model)
    model.train(), reference.train()
    batch = make_batch(16, 3, 2, obs_shape, seed=8)
    batch.obs[:, 2:] *= 3.0  # steps with different statistics
    tb = TensorBatch.from_batch(batch, "cpu")
    w = LatentLossWeights(value=0.25, reward=1.0, policy=1.0, ssl=2.0, entropy=5e-3)
    support = DiscreteSupport.from_range([LO, HI + 1, 1])
    out = muzero_loss(model, tb, support, support, w)
    expected = _per_step_loss_reference(reference, tb, support, w)
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=1e-7)
    out.loss.backward()
    expected.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if q.grad is None:
            assert p.grad is None or torch.all(p.grad == 0), name
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    ref_norms = [m for m in reference.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for (name, m), r in zip(((n, m) for n, m in model.named_modules() if m in norms), ref_norms):
        torch.testing.assert_close(m.running_mean, r.running_mean, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(m.running_var, r.running_var, rtol=1e-5, atol=1e-6, msg=name)
        assert int(m.num_batches_tracked) == int(r.num_batches_tracked), name
    prediction_norm = next(m for n, m in model.named_modules() if n.startswith(
        "prediction") and isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    assert int(prediction_norm.num_batches_tracked) == 1 + 3 + 3  # root, K unrolled, K SSL targets


def test_negative_cosine_matches_normalised_rows() -> None:
    """The three-reduction form equals −Σ normalize(x)·normalize(y), value and gradient, including
    a zero row (its norm clamped at eps, as F.normalize does)."""
    from torch.nn import functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 32, generator=g)
    x[2] = 0.0
    y = torch.randn(6, 32, generator=g)
    y[4] = 0.0
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y1, y2 = y.clone().requires_grad_(True), y.clone().requires_grad_(True)
    ours = negative_cosine(x1, y1)
    ref = -(F.normalize(x2, dim=-1, eps=1e-5) * F.normalize(y2, dim=-1, eps=1e-5)).sum(-1)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)
    w = torch.randn(6, generator=g)
    (ours * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(y1.grad, y2.grad, rtol=1e-5, atol=1e-7)
    assert ours[2] == 0.0 and ours[4] == 0.0 and ours.abs().max() <= 1.0
    # Only the operand that needs a gradient gets one (the SSL target is detached).
    x3 = x.clone().requires_grad_(True)
    negative_cosine(x3, y).sum().backward()
    torch.testing.assert_close(x3.grad, x2.grad / w.unsqueeze(-1), rtol=1e-4, atol=1e-6)


def test_negative_cosine_gradient_is_the_derivative() -> None:
    """The written-out backward against finite differences in float64 (rows away from zero)."""
    from lzk_common.losses import _NegativeCosine

    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _NegativeCosine.apply(a, b, 1e-5), (x, y))


@pytest.mark.parametrize("shape", [(12, 5), (12, 3, 2, 2)])
def test_grouped_batchnorm_output_is_not_a_view(shape: tuple[int, ...]) -> None:
    """The grouped BatchNorm returns its [N, G·C, *S] result reshaped without autograd recording a
    view, so the in-place ReLU after it costs no copies in backward; values and gradients are bit
    for bit those of the out-of-place ReLU."""
    from lzk_common.blocks import GroupedBatchNorm1d, GroupedBatchNorm2d, batch_groups

    norm = (GroupedBatchNorm1d if len(shape) == 2 else GroupedBatchNorm2d)(shape[1]).train()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for inplace in (True, False):
        xi = x.clone().requires_grad_(True)
        with batch_groups(norm, 3):
            y = norm(xi)
        assert y._base is None and y.shape == x.shape
        out = torch.relu_(y) if inplace else torch.relu(y)
        (out * torch.arange(out.numel()).view_as(out)).sum().backward()
        grads.append(xi.grad)
    assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0


def _grouped_bn_by_repeat(norm: torch.nn.Module, x: torch.Tensor, g: int) -> torch.Tensor:
    """The grouped BatchNorm as first written (``repeat`` tiles, powers built per call): the
    reference the leaner bookkeeping must equal bit for bit."""
    from torch.nn import functional as F

    n, c = x.shape[0] // g, x.shape[1]
    xs = x.reshape(n, g * c, *x.shape[2:])
    slot_mean, slot_var = norm.running_mean.repeat(g), norm.running_var.repeat(g)
    m = float(norm.momentum)
    y = F.batch_norm(xs, slot_mean, slot_var, norm.weight.repeat(g), norm.bias.repeat(g), True, m, norm.eps)
    with torch.no_grad():
        decay = 1.0 - m
        powers = decay ** torch.arange(g - 1, -1, -1, dtype=norm.running_mean.dtype)
        for r, slots in ((norm.running_mean.data, slot_mean), (norm.running_var.data, slot_var)):
            increments = slots.view(g, c) - decay * r
            r.mul_(decay ** g).add_(powers @ increments)
        norm.num_batches_tracked.data.add_(g)
    return y.reshape(x.shape)


@pytest.mark.parametrize("shape", [(40, 24), (15, 3, 2, 2)])
def test_grouped_batchnorm_bookkeeping_is_bit_for_bit(shape: tuple[int, ...]) -> None:
    """The cat-tiled parameters and cached decay powers change nothing: output, input and
    parameter gradients and running statistics equal the repeat-based form to the bit, over
    two calls (the second reuses the cached powers)."""
    from lzk_common.blocks import GroupedBatchNorm1d, GroupedBatchNorm2d, batch_groups

    gen = torch.Generator().manual_seed(3)
    norm = (GroupedBatchNorm1d if len(shape) == 2 else GroupedBatchNorm2d)(shape[1]).train()
    with torch.no_grad():
        norm.weight.copy_(torch.rand(shape[1], generator=gen) + 0.5)
        norm.bias.copy_(torch.randn(shape[1], generator=gen))
        norm.running_mean.copy_(torch.randn(shape[1], generator=gen))
        norm.running_var.copy_(torch.rand(shape[1], generator=gen) + 0.5)
    ref = copy.deepcopy(norm)
    for call in range(2):
        x = torch.randn(*shape, generator=gen) * (call + 1) + call
        upstream = torch.randn(*shape, generator=gen)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        with batch_groups(norm, 5):
            ya = norm(xa)
        yb = _grouped_bn_by_repeat(ref, xb, 5)
        (ya * upstream).sum().backward()
        (yb * upstream).sum().backward()
        assert torch.equal(ya, yb) and torch.equal(xa.grad, xb.grad)
    for a, b in ((norm.weight.grad, ref.weight.grad), (norm.bias.grad, ref.bias.grad),
                 (norm.running_mean, ref.running_mean), (norm.running_var, ref.running_var)):
        assert torch.equal(a, b)
    assert int(norm.num_batches_tracked) == int(ref.num_batches_tracked) == 10
    assert not torch.equal(norm.running_mean, torch.zeros_like(norm.running_mean))


@pytest.mark.parametrize("shape", [(24, 6), (12, 3, 2, 2)])
def test_step_ordered_statistics_fold_in_key_order(shape: tuple[int, ...]) -> None:
    """Two grouped calls inside ``step_ordered_statistics`` (rows a_0, a_1, a_2 with keys (k, 0),
    then b_1, b_2 with keys (k, 1)) leave the running statistics of five plain BatchNorm calls in
    the order a_0, a_1, b_1, a_2, b_2, the outputs unchanged; folding call by call (no block)
    gives another answer, and an ungrouped train-mode call between deferred ones is refused."""
    from lzk_common.blocks import GroupedBatchNorm1d, GroupedBatchNorm2d, batch_groups, step_ordered_statistics

    cls = GroupedBatchNorm1d if len(shape) == 2 else GroupedBatchNorm2d
    gen = torch.Generator().manual_seed(5)
    norm = cls(shape[1]).train()
    with torch.no_grad():
        norm.running_mean.copy_(torch.randn(shape[1], generator=gen))
        norm.running_var.copy_(torch.rand(shape[1], generator=gen) + 0.5)
    plain, eager = copy.deepcopy(norm), copy.deepcopy(norm)
    # Each batch its own statistics, so that the order of the updates matters.
    a = [torch.randn(*shape, generator=gen) * (1 + k) + 2 * k for k in range(3)]
    b = [torch.randn(*shape, generator=gen) * 0.5 - 3 * k for k in range(1, 3)]

    def interleave(batches: list[torch.Tensor]) -> torch.Tensor:  # sample-major rows, as batch_groups reads them
        return torch.stack(batches, 1).flatten(0, 1)

    with step_ordered_statistics(norm):
        with batch_groups(norm, 3, keys=[(k, 0) for k in range(3)]):
            ya = norm(interleave(a))
        with batch_groups(norm, 2, keys=[(k, 1) for k in range(1, 3)]):
            yb = norm(interleave(b))
        assert norm.pending is not None and len(norm.pending) == 2
    assert norm.pending is None
    for x in (a[0], a[1], b[0], a[2], b[1]):
        plain(x)
    torch.testing.assert_close(norm.running_mean, plain.running_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(norm.running_var, plain.running_var, rtol=1e-6, atol=1e-6)
    assert int(norm.num_batches_tracked) == int(plain.num_batches_tracked) == 5
    torch.testing.assert_close(ya.view(-1, 3, *shape[1:])[:, 1], plain.train()(a[1]), rtol=1e-5, atol=1e-5)
    with batch_groups(eager, 3):  # call by call: a_0, a_1, a_2, then b_1, b_2
        eager(interleave(a))
    with batch_groups(eager, 2):
        eager(interleave(b))
    assert not torch.allclose(eager.running_mean, plain.running_mean, rtol=1e-3)
    assert yb.shape == interleave(b).shape

    with step_ordered_statistics(norm), pytest.raises(RuntimeError, match="out of order"):
        with batch_groups(norm, 2, keys=[(0, 0), (1, 0)]):
            norm(interleave(b))
        norm(a[0])
    with pytest.raises(ValueError, match="2 keys for 3 groups"):
        with batch_groups(norm, 3, keys=[(0, 0), (1, 0)]):
            pass
