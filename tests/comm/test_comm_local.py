"""The ``local`` comm backend: identity collectives that still check their inputs."""
from __future__ import annotations

import pytest
import torch

from lzkernel import CommBackend
from lzk_comm.local import LocalComm
from lzk_comm.plugin import lzkernel_register_comm_backends, make_local


def test_identity_collectives() -> None:
    comm = make_local(None, None)
    assert isinstance(comm, CommBackend) and isinstance(comm, LocalComm)
    assert (comm.rank, comm.world_size, comm.is_main) == (0, 1, True)
    comm.barrier()
    t = torch.tensor([3, 4], dtype=torch.int64)
    assert comm.all_reduce_sum(t) is t and t.tolist() == [3, 4]
    f = torch.ones(2, 2)
    assert comm.broadcast(f) is f and comm.broadcast(f, src=0) is f and f.sum() == 4
    obj = {"stop": True, "info": [1, 2.5, "x", None, {"k": (1, 2)}]}
    assert comm.broadcast_object(obj) is obj
    layer = torch.nn.Linear(2, 1)
    layer(torch.ones(1, 2)).sum().backward()
    before = [p.grad.clone() for p in layer.parameters()]
    comm.average_gradients(p for p in layer.parameters())  # a generator works too
    assert all(torch.equal(b, p.grad) for b, p in zip(before, layer.parameters()))
    unused = torch.nn.Parameter(torch.zeros(1))
    comm.average_gradients([unused])  # grad None: accepted
    assert unused.grad is None
    comm.close()


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.all_reduce_sum([1, 2]), TypeError),
        (lambda c: c.broadcast(3.0), TypeError),
        (lambda c: c.broadcast(torch.ones(1), src=1), ValueError),
        (lambda c: c.broadcast_object(1, src=-1), ValueError),
        (lambda c: c.broadcast_object(torch.ones(1)), TypeError),
        (lambda c: c.broadcast_object({"a": [object()]}), TypeError),
        (lambda c: c.broadcast_object({1: "x"}), TypeError),
        (lambda c: c.average_gradients([torch.ones(1), "w"]), TypeError),
    ],
)
def test_inputs_are_checked(call, error: type) -> None:
    with pytest.raises(error):
        call(LocalComm())


def test_registration() -> None:
    components = {c.name: c for c in lzkernel_register_comm_backends()}
    assert sorted(components) == ["gloo", "local", "nccl", "threads"]
    assert components["local"].config is None
    assert components["gloo"].config().timeout_s == 120.0  # minutes, not torch's 30
