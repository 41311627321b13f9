"""The learner's matmul precision: ``learn_dtype: auto`` picks bfloat16 where the machine runs it
natively, float32 elsewhere.

Native bf16 means hardware bf16 dot products: on CPU the AMX tiles (``amx_bf16``) or AVX-512 BF16
(``avx512_bf16``) read from ``/proc/cpuinfo``; on CUDA ``torch.cuda.is_bf16_supported()``. Without
them oneDNN emulates bf16 matmuls, which was measured 10–15× slower than float32 on AVX2 and
plain AVX-512 CPUs: ``auto`` never picks bf16 there.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

#: CPU flags (``/proc/cpuinfo``) that mean native bf16 matmuls.
NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpuinfo_field(name: str, cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The value of the first line keyed exactly ``name`` in ``cpuinfo`` (the first CPU's), or ''
    where absent or unreadable (not Linux). Keys match whole ('cpu' is not 'cpu family')."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (the first ``flags`` line of ``cpuinfo``); empty where unreadable
    (not Linux)."""
    return frozenset(cpuinfo_field("flags", cpuinfo).split())


def native_bf16(device: str, flags: Iterable[str] | None = None) -> bool:
    """Whether ``device`` multiplies bfloat16 natively. ``flags``: the CPU flags (default: read
    from this machine), for CPU devices."""
    if device.startswith("cuda"):
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    have = frozenset(cpu_flags() if flags is None else flags)
    return any(f in have for f in NATIVE_BF16_CPU_FLAGS)


def resolve_learn_dtype(option: str, device: str, flags: Iterable[str] | None = None) -> str:
    """``learn_dtype`` as the learner runs it: 'float32' or 'bfloat16' (``auto``: bfloat16 exactly
    where :func:`native_bf16`)."""
    if option == "auto":
        return "bfloat16" if native_bf16(device, flags) else "float32"
    if option not in ("float32", "bfloat16"):
        raise ValueError(f"learn_dtype must be 'auto', 'float32' or 'bfloat16', got {option!r}")
    return option
