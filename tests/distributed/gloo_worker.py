"""One rank of the spawned gloo tests: ``python gloo_worker.py MODE OUT_DIR``.

Initialises :class:`lzk_comm.torch_dist.TorchDistComm` from torchrun-style variables (set by
``dist_helpers.spawn_ranks``), runs MODE and writes ``OUT_DIR/rank<R>.json``.

* ``collectives``: every collective with known answers, and the sockets this process listens on;
* ``raise``: rank 1 raises after the first all-reduce, rank 0 waits in a barrier;
* ``hang``: rank 1 sleeps without entering the collective rank 0 waits in (timeout test).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)


def listening_sockets() -> list[str]:
    """``addr:port`` of every TCP socket this process listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A = LISTEN
                addr, port = f[1].split(":")
                out.append(f"{_addr(addr)}:{int(port, 16)}")
    return out


def _addr(hexaddr: str) -> str:
    if len(hexaddr) == 8:
        return ".".join(str(int(hexaddr[i:i + 2], 16)) for i in (6, 4, 2, 0))
    words = [hexaddr[i:i + 8] for i in range(0, 32, 8)]
    raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
    import ipaddress

    return str(ipaddress.IPv6Address(raw))


def collectives(comm) -> dict:  # noqa: ANN001
    r, w = comm.rank, comm.world_size
    out: dict = {"rank": r, "world_size": w, "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}
    out["sum_float"] = comm.all_reduce_sum(torch.tensor([r + 0.5, 2.0 * r])).tolist()
    out["sum_int"] = comm.all_reduce_sum(torch.tensor([r + 1], dtype=torch.int64)).tolist()
    t0 = time.monotonic()
    if r == 1:
        time.sleep(1.5)
    comm.barrier()
    out["barrier_wait"] = time.monotonic() - t0
    out["broadcast"] = comm.broadcast(torch.full((3,), float(r)), src=1).tolist()
    out["object"] = comm.broadcast_object({"from": r, "stop": True}, src=1)
    out["long_object"] = comm.broadcast_object("x" * 3000 if r == 0 else None, src=0)
    g = comm.gather(torch.tensor([r * 10]), dst=0)
    out["gather"] = [t.tolist() for t in g] if g is not None else None
    out["gather_object"] = comm.gather_object({"r": r, "pad": "y" * (100 * r)}, dst=0)
    lin = torch.nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.fill_(1.0)
        lin.bias.fill_(0.0)
    unused = torch.nn.Parameter(torch.zeros(2))
    only_rank0 = torch.nn.Parameter(torch.zeros(1))
    loss = lin(torch.tensor([[r + 1.0, 1.0]])).sum()
    if r == 0:
        loss = loss + 4 * only_rank0.sum()
    loss.backward()
    comm.average_gradients([*lin.parameters(), unused, only_rank0])
    out["grad_weight"] = lin.weight.grad.tolist()
    out["grad_unused"] = None if unused.grad is None else unused.grad.tolist()
    out["grad_only_rank0"] = only_rank0.grad.tolist()
    out["listening"] = listening_sockets()
    out["comm_seconds"], out["comm_calls"] = comm.seconds, comm.calls
    return out


def main() -> None:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    timeout = float(os.environ.get("LZK_TEST_TIMEOUT", "30"))
    from lzk_comm.torch_dist import TorchDistComm

    comm = TorchDistComm("gloo", timeout_s=timeout)
    try:
        if mode == "collectives":
            result = collectives(comm)
        elif mode == "raise":
            comm.all_reduce_sum(torch.ones(1))
            if comm.rank == 1:
                raise RuntimeError("rank 1 fails on purpose")
            comm.barrier()
            result = {"rank": comm.rank}
        elif mode == "hang":
            comm.all_reduce_sum(torch.ones(1))
            if comm.rank == 1:
                time.sleep(120)
            t0 = time.monotonic()
            try:
                comm.all_reduce_sum(torch.ones(1))
            except RuntimeError as exc:
                (out_dir / f"rank{comm.rank}.json").write_text(
                    json.dumps({"waited": time.monotonic() - t0, "error": str(exc)[:300]}))
                raise
            result = {"rank": comm.rank}
        else:
            raise SystemExit(f"unknown mode {mode}")
        (out_dir / f"rank{comm.rank}.json").write_text(json.dumps(result))
    finally:
        comm.close()


if __name__ == "__main__":
    main()
