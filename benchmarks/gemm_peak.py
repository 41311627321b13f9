"""The machine's matmul rate for a learner step's own shapes, and the step's share of it.

A learner step is recorded once under a dispatch mode that notes every matrix product it runs
(``mm``/``addmm``/``bmm``, forward and backward, with their shapes and dtypes). Each distinct
product is then timed alone, back to back, with the same threads: the sum over the step's
products of their isolated times is what the step would cost if it did nothing but matmuls at
the speed this machine runs them. ``peak GMAC/s`` = the step's MACs over that time; the step's
share of the peak = that time over the step's measured time (1.0 = nothing but matmuls, each as
fast as alone).

    from gemm_peak import matmul_profile, interleaved_share
    profile = matmul_profile(lambda: policy.learn(batch), step_seconds, threads=2)
    shares = interleaved_share(lambda: policy.learn(batch), rounds=10, threads=2)

On a shared (virtual) machine the rate of both sides drifts by 10–30% over seconds, so a step
median and a matmul median taken a minute apart can disagree by more than the gap being
measured. :func:`interleaved_share` alternates one step and one sweep of the step's products
(each as often as the step runs it, operands allocated once), round by round, and reports the
median of the per-round ratios: numerator and denominator see the same machine.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
            torch.ops.aten.baddbmm.default}

#: A product: (op name, batch, M, K, N, dtype name, transposed operands).
Product = tuple[str, int, int, int, int, str, bool, bool]


class _RecordMatmuls(TorchDispatchMode):
    """Counts the matrix products run inside it by shape (layout included: a backward's
    transposed operand is timed transposed too)."""

    def __init__(self) -> None:
        super().__init__()
        self.products: Counter[Product] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _MATMULS:
            a, b = (args[1], args[2]) if func in (torch.ops.aten.addmm.default, torch.ops.aten.baddbmm.default) \
                else (args[0], args[1])
            batched = a.dim() == 3
            m, k = a.shape[-2:]
            n = b.shape[-1]
            self.products[("bmm" if batched else "mm", a.shape[0] if batched else 1, int(m), int(k), int(n),
                           str(a.dtype).removeprefix("torch."), _transposed(a), _transposed(b))] += 1
        return func(*args, **(kwargs or {}))


def _transposed(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t.stride(-1) != 1 and t.stride(-2) == 1


def _operand(batch: int, rows: int, cols: int, dtype: torch.dtype, transposed: bool) -> torch.Tensor:
    shape = (batch, rows, cols) if batch > 1 else (rows, cols)
    if transposed:
        return torch.randn(*shape[:-2], cols, rows).to(dtype).transpose(-1, -2)
    return torch.randn(*shape).to(dtype)


def time_product(p: Product, repeats: int = 20) -> float:
    """Median seconds of one product ``p`` run alone (after a warm-up)."""
    _, batch, m, k, n, dtype_name, ta, tb = p
    dtype = getattr(torch, dtype_name)
    a, b = _operand(batch, m, k, dtype, ta), _operand(batch, k, n, dtype, tb)
    op = torch.bmm if batch > 1 else torch.mm
    reps = max(3, repeats)
    for _ in range(3):
        op(a, b)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        op(a, b)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def record_products(step: Callable[[], Any]) -> Counter[Product]:
    """The products ``step`` runs (forward and backward), with how often."""
    with _RecordMatmuls() as rec:
        step()
    return rec.products


def _sweep(products: Counter[Product]) -> Callable[[], float]:
    """A function that runs every product ``count`` times back to back and returns the seconds
    it took; the operands are allocated once, here."""
    jobs = []
    for (_, batch, m, k, n, dtype_name, ta, tb), count in products.items():
        dtype = getattr(torch, dtype_name)
        a, b = _operand(batch, m, k, dtype, ta), _operand(batch, k, n, dtype, tb)
        jobs.append((torch.bmm if batch > 1 else torch.mm, a, b, count))

    def run() -> float:
        t0 = time.perf_counter()
        for op, a, b, count in jobs:
            for _ in range(count):
                op(a, b)
        return time.perf_counter() - t0

    return run


def interleaved_share(step: Callable[[], Any], rounds: int, threads: int, warmup: int = 2) -> dict[str, float]:
    """``rounds`` rounds of (one ``step``, one sweep of its products alone), after ``warmup``
    rounds: {step_seconds, gemm_seconds (medians), share_of_peak (median of the per-round
    gemm/step ratios), share_min, share_max}."""
    torch.set_num_threads(threads)
    sweep = _sweep(record_products(step))
    steps, gemms, ratios = [], [], []
    for i in range(warmup + rounds):
        t0 = time.perf_counter()
        step()
        t_step = time.perf_counter() - t0
        t_gemm = sweep()
        if i >= warmup:
            steps.append(t_step)
            gemms.append(t_gemm)
            ratios.append(t_gemm / t_step)
    return {"step_seconds": statistics.median(steps), "gemm_seconds": statistics.median(gemms),
            "share_of_peak": statistics.median(ratios), "share_min": min(ratios), "share_max": max(ratios)}


def matmul_profile(step: Callable[[], Any], step_seconds: float, threads: int) -> dict[str, float]:
    """Records ``step`` once, times its products alone with ``threads`` threads, and compares
    with ``step_seconds`` (the step's measured median): {matmul_gmac, gemm_seconds,
    peak_gmac_per_s, achieved_gmac_per_s, share_of_peak, products}."""
    torch.set_num_threads(threads)
    products = record_products(step)
    gemm_s = macs = 0.0
    for p, count in products.items():
        _, batch, m, k, n, *_ = p
        gemm_s += count * time_product(p)
        macs += count * batch * m * k * n
    gmac = macs / 1e9
    return {"matmul_gmac": gmac, "gemm_seconds": gemm_s, "peak_gmac_per_s": gmac / max(gemm_s, 1e-12),
            "achieved_gmac_per_s": gmac / max(step_seconds, 1e-12), "share_of_peak": gemm_s / max(step_seconds, 1e-12),
            "products": float(sum(products.values()))}
