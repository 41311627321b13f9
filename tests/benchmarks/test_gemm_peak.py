"""``benchmarks/gemm_peak.py``: the matmuls of a step are recorded with their shapes and timed
alone; the step's share of that peak is their time over the step's."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import gemm_peak


def test_records_forward_and_backward_products() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(128, 32)

    def step() -> None:
        net.zero_grad()
        net(x).square().sum().backward()

    with gemm_peak._RecordMatmuls() as rec:
        step()
    # Forward: 2 addmm; backward: grad of the input of layer 2 and the weights of both (the first
    # layer's input needs no gradient).
    assert sum(rec.products.values()) == 5
    macs = sum(c * b * m * k * n for (_, b, m, k, n, *_), c in rec.products.items())
    assert macs == 128 * (32 * 64 + 64 * 8) + 128 * 8 * 64 + (64 * 128 * 32 + 8 * 128 * 64)
    profile = gemm_peak.matmul_profile(step, step_seconds=1.0, threads=1)
    assert profile["products"] == 5 and abs(profile["matmul_gmac"] - macs / 1e9) < 1e-12
    assert 0 < profile["share_of_peak"] < 1 and profile["peak_gmac_per_s"] > profile["achieved_gmac_per_s"]


def test_bf16_products_are_timed_in_bf16() -> None:
    a = torch.randn(16, 8)
    with gemm_peak._RecordMatmuls() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.linear(a, torch.randn(4, 8))
    ((product, count),) = rec.products.items()
    assert product[5] == "bfloat16" and count == 1
    assert gemm_peak.time_product(product, repeats=3) > 0


def test_interleaved_share_alternates_step_and_its_matmuls() -> None:
    """A step that runs its two products and then sleeps: the sweep times the products alone, so
    the share is well below 1 and every round's ratio is bounded by the median's neighbours."""
    import time

    a, b = torch.randn(64, 64), torch.randn(64, 64)
    calls = []

    def step() -> None:
        calls.append(1)
        a @ b
        a @ b.t()
        time.sleep(0.01)

    r = gemm_peak.interleaved_share(step, rounds=3, threads=1, warmup=1)
    assert len(calls) == 1 + 1 + 3  # recorded once, then warm-up and timed rounds
    assert 0 < r["share_min"] <= r["share_of_peak"] <= r["share_max"] < 0.5
    assert r["step_seconds"] >= 0.01 and 0 < r["gemm_seconds"] < r["step_seconds"]
