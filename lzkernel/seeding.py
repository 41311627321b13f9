"""One root seed → every RNG. Streams are derived with ``numpy.random.SeedSequence``."""
from __future__ import annotations

import random
import zlib

import numpy as np


def _key_int(key: str | int) -> int:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"seed keys are strings or ints, got {key!r}")
    return key if isinstance(key, int) else zlib.crc32(key.encode("utf-8"))


def derive_seed(root: int, *keys: str | int) -> int:
    """A 31-bit seed for the stream named by ``keys`` (stable across runs and platforms)."""
    seq = np.random.SeedSequence(entropy=root, spawn_key=tuple(_key_int(k) for k in keys))
    return int(seq.generate_state(1, dtype=np.uint32)[0] & 0x7FFFFFFF)


def seed_globals(root: int, rank: int = 0) -> dict[str, int]:
    """Seed python, numpy's legacy global RNG and torch; torch's seed is the same on every rank
    so that models initialise identically before any parameter broadcast."""
    import torch

    seeds = {
        "python": derive_seed(root, "python", rank),
        "numpy": derive_seed(root, "numpy", rank),
        "torch": derive_seed(root, "torch"),
    }
    random.seed(seeds["python"])
    np.random.seed(seeds["numpy"])
    torch.manual_seed(seeds["torch"])
    return seeds


def rng_state() -> dict[str, object]:
    """Global RNG states as checkpointable values (tensors, lists, ints)."""
    import torch

    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "gauss": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, object]) -> None:
    import torch

    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))  # type: ignore[index]
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))  # type: ignore[index]
    torch.set_rng_state(state["torch"])  # type: ignore[arg-type]


def generator_state(rng: np.random.Generator) -> dict[str, object]:
    """A ``numpy.random.Generator``'s state as checkpoint-safe plain values: the 128-bit PCG64
    words become decimal strings, so ``torch.load(weights_only=True)`` accepts them anywhere."""
    state = rng.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": {k: str(v) for k, v in state["state"].items()},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def set_generator_state(rng: np.random.Generator, saved: dict[str, object]) -> None:
    """Restore what :func:`generator_state` returned."""
    rng.bit_generator.state = {
        "bit_generator": saved["bit_generator"],
        "state": {k: int(v) for k, v in saved["state"].items()},  # type: ignore[union-attr]
        "has_uint32": int(saved["has_uint32"]),  # type: ignore[arg-type]
        "uinteger": int(saved["uinteger"]),  # type: ignore[arg-type]
    }
