"""Which parameters each optimizer decays (SPEC §2.7 step 7; LightZero 0.2.0's
``configure_optimizers`` for AdamW: the weights of Linear, Conv and recurrent layers)."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from lzk_common.learner import build_optimizer


class _Net(nn.Module):
    """Every kind of parameter the family's models hold: Linear, Conv, norms, an embedding and
    recurrent layers (EfficientZero's value-prefix LSTM is an ``nn.LSTMCell``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn, self.ln = nn.BatchNorm1d(8), nn.LayerNorm(8)
        self.emb = nn.Embedding(5, 8)
        self.cell = nn.LSTMCell(8, 6)
        self.lstm = nn.LSTM(8, 6)
        self.gru = nn.GRUCell(8, 6)


def _cfg(optimizer: str) -> SimpleNamespace:
    return SimpleNamespace(optimizer=optimizer, lr=1e-3, weight_decay=0.5)


def test_adamw_decays_linear_conv_and_recurrent_weight_matrices_only() -> None:
    net = _Net()
    decay, no_decay = build_optimizer(net, _cfg("adamw")).param_groups
    assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in net.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == sorted([
        "fc.weight", "conv.weight",
        "cell.weight_ih", "cell.weight_hh", "lstm.weight_ih_l0", "lstm.weight_hh_l0",
        "gru.weight_ih", "gru.weight_hh",
    ])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(net.parameters()))


def test_adam_and_sgd_decay_every_parameter() -> None:
    net = _Net()
    for name in ("adam", "sgd"):
        groups = build_optimizer(net, _cfg(name)).param_groups
        assert len(groups) == 1 and groups[0]["weight_decay"] == 0.5
        assert {id(p) for p in groups[0]["params"]} == {id(p) for p in net.parameters()}


def test_adamw_step_shrinks_the_lstm_weights_by_decay_alone() -> None:
    """With zero gradients AdamW's step is the decoupled decay w ← w·(1 − lr·λ): the LSTM's
    weight matrices shrink, its biases stay."""
    torch.manual_seed(0)
    net = _Net()
    opt = build_optimizer(net, _cfg("adamw"))
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(net.named_parameters())
    torch.testing.assert_close(after["cell.weight_ih"], before["cell.weight_ih"] * (1 - 1e-3 * 0.5))
    torch.testing.assert_close(after["cell.bias_ih"], before["cell.bias_ih"])
