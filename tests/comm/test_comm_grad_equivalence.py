"""Data-parallel semantics of ``average_gradients`` (DistributedDataParallel's): W ranks, each
with an equal share of a batch and a mean loss, end with the gradient, and after an optimizer
step the parameters, of one process on the whole batch (up to float summation order), and
bit-identical to each other. Gloo shares the helper (``lzk_comm.common.average_gradients``);
``tests/distributed/test_dist_gloo.py`` checks it over a real transport.
"""
from __future__ import annotations

import copy

import pytest
import torch

from lzk_comm.threads import ThreadComm, run_ranks


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    model.scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))  # a second dtype: its own all-reduce
    return model


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean over the batch [B] of a squared error, plus a batch-independent penalty."""
    return ((model(x) * model.scale.float() - y) ** 2).mean() + 0.1 * (model.scale ** 2).sum()


@pytest.mark.usefixtures("one_thread_and_seed")
@pytest.mark.parametrize("world_size", [2, 4])
def test_averaged_step_equals_one_process_on_the_concatenated_batch(world_size: int) -> None:
    base = _model()
    x, y = torch.randn(8, 5), torch.randn(8, 3)  # [B=8]: 8 / W rows per rank

    def rank_main(comm: ThreadComm) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        model = copy.deepcopy(base)  # built outside the threads: torch's global RNG is shared
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        rows = slice(comm.rank * 8 // world_size, (comm.rank + 1) * 8 // world_size)
        _loss(model, x[rows], y[rows]).backward()
        comm.average_gradients(list(model.parameters()))
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        opt.step()
        return grads, {k: p.detach().clone() for k, p in model.named_parameters()}

    results = run_ranks(world_size, rank_main, timeout_s=20)

    single = copy.deepcopy(base)
    _loss(single, x, y).backward()
    torch.optim.SGD(single.parameters(), lr=0.5).step()
    for name, p in single.named_parameters():
        for grads, params in results:
            assert torch.allclose(grads[name], p.grad, rtol=1e-5, atol=1e-6), name
            assert torch.allclose(params[name], p.detach(), rtol=1e-5, atol=1e-6), name
        for grads, params in results[1:]:  # one summed buffer: identical on every rank
            assert torch.equal(grads[name], results[0][0][name]) and torch.equal(params[name], results[0][1][name])
