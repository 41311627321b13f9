"""lzk_common.optim.FusedAdam: torch's fused Adam/AdamW updates bit for bit, torch's state-dict
layout both ways, and no torch._dynamo import (its reason to exist)."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from lzk_common.optim import FusedAdam, adam, decay_groups


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _model(seed: int = 0, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return net.to(device)


def _set_grads(model: torch.nn.Module, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * (1 + step)).to(p.device)


def _groups(model: torch.nn.Module, decoupled: bool) -> list:
    if not decoupled:
        return list(model.parameters())
    return decay_groups(model.parameters(), {id(m.weight) for m in model if isinstance(m, torch.nn.Linear)}, 0.3)


def _pair(decoupled: bool, lr: float = 3e-3, device: str = "cpu") -> tuple:
    ours_model, torch_model = _model(device=device), _model(device=device)
    kw = dict(lr=lr, weight_decay=0.0 if decoupled else 1e-2)
    ours = FusedAdam(_groups(ours_model, decoupled), decoupled_weight_decay=decoupled, **kw)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    theirs = cls(_groups(torch_model, decoupled), fused=True, **kw)
    return ours_model, ours, torch_model, theirs


def _assert_same(m1: torch.nn.Module, o1, m2: torch.nn.Module, o2) -> None:
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["state"].keys() == s2["state"].keys()
    for i in s1["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(s1["state"][i][key], s2["state"][i][key]), (i, key)
    assert [g["params"] for g in s1["param_groups"]] == [g["params"] for g in s2["param_groups"]]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("decoupled", [False, True])
def test_updates_equal_torch_fused_adam_bit_for_bit(decoupled: bool, device: str) -> None:
    m1, o1, m2, o2 = _pair(decoupled, device=device)
    for step in range(6):
        for m, o in ((m1, o1), (m2, o2)):
            if step == 3:  # an LR change between steps, as the learners' schedules do
                for group in o.param_groups:
                    group["lr"] = 1e-3
            _set_grads(m, step)
            o.step()
    assert not torch.equal(next(m1.parameters()), next(_model(device=device).parameters()))  # it moved
    _assert_same(m1, o1, m2, o2)
    assert o1.state_dict()["param_groups"][0].keys() == o2.state_dict()["param_groups"][0].keys()


@pytest.mark.parametrize("decoupled", [False, True])
def test_state_dicts_move_between_torch_and_fused_adam(decoupled: bool) -> None:
    m1, o1, m2, o2 = _pair(decoupled)
    for step in range(3):
        for m, o in ((m1, o1), (m2, o2)):
            _set_grads(m, step)
            o.step()
    # Torch's state into a fresh FusedAdam and ours into a fresh torch Adam: both continue alike.
    m3, m4 = copy.deepcopy(m2), copy.deepcopy(m1)
    o3 = FusedAdam(_groups(m3, decoupled), lr=0.5, decoupled_weight_decay=decoupled)
    o3.load_state_dict(o2.state_dict())
    o4 = (torch.optim.AdamW if decoupled else torch.optim.Adam)(_groups(m4, decoupled), lr=0.5, fused=True)
    o4.load_state_dict(copy.deepcopy(o1.state_dict()))  # torch keeps the loaded tensors: no aliasing
    assert o3.param_groups[0]["lr"] == 3e-3  # the saved options win
    for step in range(3, 5):
        for m, o in ((m1, o1), (m2, o2), (m3, o3), (m4, o4)):
            _set_grads(m, step)
            o.step()
    _assert_same(m1, o1, m3, o3)
    _assert_same(m1, o1, m4, o4)
    _assert_same(m1, o1, m2, o2)


def test_loading_a_state_of_another_shape_names_the_mismatch() -> None:
    m1, o1, _, _ = _pair(decoupled=True)
    _set_grads(m1, 0)
    o1.step()
    plain = FusedAdam(list(_model().parameters()), lr=1e-3)
    with pytest.raises(ValueError, match="2 parameter groups, this optimizer 1"):
        plain.load_state_dict(o1.state_dict())
    small = FusedAdam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    with pytest.raises(ValueError, match="group of 6 parameters where this optimizer has 1"):
        small.load_state_dict(FusedAdam(list(_model().parameters()), lr=1e-3).state_dict())


def test_zero_grad_and_parameters_without_gradients() -> None:
    model = _model()
    opt = adam(model.parameters(), 1e-2)
    assert isinstance(opt, FusedAdam)
    frozen = list(model.parameters())[0]
    before = frozen.detach().clone()
    _set_grads(model, 0)
    frozen.grad = None  # no gradient: no state, no update
    opt.step()
    assert torch.equal(frozen, before) and frozen not in opt.state
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_a_learner_step_does_not_import_torch_dynamo() -> None:
    # torch.optim imports torch._dynamo (1 s) on first use; a run's learner must not.
    code = (
        "import sys\n"
        "sys.path.insert(0, 'tests/muzero')\n"
        "from muzero_helpers import make_batch, small_policy_cfg\n"
        "from lzk_muzero.learner import Learner\n"
        "from lzk_muzero.models import build_model\n"
        "from lzk_common.support import DiscreteSupport\n"
        "cfg = small_policy_cfg()\n"
        "model, target = build_model(cfg.model, (4,), 2), build_model(cfg.model, (4,), 2)\n"
        "vs = DiscreteSupport(-10, 11, 1.0)\n"
        "learner = Learner(model, target, cfg, vs, vs)\n"
        "learner.step(make_batch(8, 3, 2, (4,)))\n"
        "learner.load_state_dict(learner.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
