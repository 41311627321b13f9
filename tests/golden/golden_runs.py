"""Golden runs: short seeded CPU runs of each CartPole config whose metrics must not move.

A refactor of the contracts between plugins (the search interface, the loop, the shared policy
library) must leave the numbers alone. These runs pin them: each shipped CartPole config is run
through ``lzkernel run`` with one torch thread and a tiny budget, and the learning-relevant metrics
of every event (losses, returns, search statistics, buffer sizes) plus a digest of the final
model parameters are compared with the stored record, to the last bit.

Bit-for-bit agreement holds only on the same kind of machine and software (float rounding in
the matmul kernels depends on the CPU's instruction set and the library versions), so the record
carries a fingerprint of both and the test compares only where it matches; elsewhere it compares
the integer-valued fields (env steps, episode counts, buffer sizes) that do not depend on
rounding until the trajectories diverge, and says so.

numba's fast-math kernels round differently in the process that compiles them than in later
processes that load them from numba's cache, so :func:`warm_caches` first runs every config for
a few steps (compiling into the cache) and the compared runs all load cached kernels.

    python tests/golden/golden_runs.py --write     # re-record (only after a deliberate change of numbers)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).with_name("golden.json")

#: Config stem -> extra overrides (on top of COMMON). Budgets small enough for a few seconds each,
#: large enough that reanalysis, target updates and evaluations all happen.
RUNS: dict[str, list[str]] = {
    "cartpole_rezero": ["policy.model.latent_dim=32", "policy.model.proj_hidden=64", "policy.model.proj_out=64",
                        "policy.model.pred_hidden=32", "policy.model.pred_out=64", "policy.batch_size=32",
                        "policy.target_update_freq=10", "trainer.reanalyze_min_transitions=100",
                        "collector.envs=2", "collector.n_episode=2", "update_schedule.updates_per_collect=10",
                        "buffer.reuse_chain=segment"],  # reuse must happen in 500 env steps (lightzero: none below 4000)
    "cartpole_rezero_fast": ["policy.batch_size=32", "trainer.reanalyze_min_transitions=100",
                             "policy.target_update_freq=10", "collector.envs=2", "collector.n_episode=2",
                             "update_schedule.updates_per_collect=10"],
    "cartpole_muzero": ["policy.model.latent_dim=32", "policy.model.proj_hidden=64", "policy.model.proj_out=64",
                        "policy.model.pred_hidden=32", "policy.model.pred_out=64", "policy.batch_size=32",
                        "policy.target_update_freq=10", "trainer.reanalyze_ratio=0.25",
                        "collector.envs=2", "collector.n_episode=2", "update_schedule.updates_per_collect=10"],
    "cartpole_unizero": ["policy.model.embed_dim=16", "policy.batch_size=32", "policy.eval_num_simulations=4",
                         "trainer.buffer_reanalyze_freq=1", "trainer.reanalyze_min_transitions=100",
                         "buffer.reanalyze_sequences=8", "update_schedule.ratio=0.05",
                         "collector.envs=2", "collector.num_segments=2", "collector.segment_length=20",
                         "buffer.segment_length=20"],
}
COMMON = ["run.max_env_steps=500", "run.threads=1", "run.checkpoint_every=1000", "run.log_every=5",
          "run.progress=false", "policy.num_simulations=6", "evaluator.envs=2", "evaluator.episodes=2",
          "evaluator.every_train_iters=10", "evaluator.stop_value=1e9"]

#: Metrics that measure time or memory (not the computation): never compared.
_VOLATILE_PREFIXES = ("time/", "sys/")
_VOLATILE_SUFFIXES = ("seconds", "_ms", "/ms", "steps_per_second", "network_share")


def fingerprint() -> dict[str, str]:
    """What bit-for-bit agreement depends on: CPU instruction set and numeric library versions."""
    import numba
    import numpy
    import torch

    from lzk_common.precision import cpuinfo_field, native_bf16

    # The vendor too: MKL and oneDNN pick different float32 kernels on AMD and Intel CPUs of the
    # same capability (an AVX-512 EPYC did not reproduce the Xeon's record), and native bf16 makes
    # ``learn_dtype: auto`` choose bfloat16.
    return {"machine": platform.machine(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_vendor": cpuinfo_field("vendor_id"), "native_bf16": str(native_bf16("cpu")),
            "torch": torch.__version__, "numpy": numpy.__version__, "numba": numba.__version__,
            "python": platform.python_version()}


def _kept(key: str) -> bool:
    if key in ("wall_time",):
        return False
    return not key.startswith(_VOLATILE_PREFIXES) and not key.endswith(_VOLATILE_SUFFIXES)


def _param_digest(ckpt: Path) -> str:
    """sha256 over the final checkpoint's online and target model tensors (names, dtypes, bytes)."""
    import torch

    state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)
    policy = state["trainer"]["policy"]
    h = hashlib.sha256()
    for part in ("model", "target_model"):
        for name, t in sorted(policy[part].items()):
            h.update(f"{part}.{name}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _lzkernel_run(stem: str, out_dir: Path, extra: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "lzkernel", "run", str(ROOT / "configs" / f"{stem}.yaml"),
            f"run.out_dir={out_dir}", *COMMON, *RUNS[stem], *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def warm_caches(tmp: Path, timeout: float = 600) -> None:
    """Compile every numba kernel the golden runs use into numba's on-disk cache (a short run of
    each config: acting, evaluation and a few updates)."""
    for stem in RUNS:
        proc = _lzkernel_run(stem, tmp / f"warm_{stem}", ["run.max_env_steps=60", "evaluator.every_train_iters=2"],
                             timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"warm-up run {stem} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def run_one(stem: str, out_dir: Path, timeout: float = 600) -> dict[str, Any]:
    """Run config ``stem`` with the golden overrides into ``out_dir``; its comparable record."""
    proc = _lzkernel_run(stem, out_dir, [], timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"golden run {stem} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    events = []
    for line in (out_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        events.append({k: v for k, v in rec.items() if _kept(k)})
    ckpts = sorted((out_dir / "ckpt").glob("step_*"))
    return {"events": events, "params": _param_digest(ckpts[-1])}


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write tests/golden/golden.json")
    args = parser.parse_args()
    record: dict[str, Any] = {"fingerprint": fingerprint(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        warm_caches(Path(tmp))
        for stem in RUNS:
            record["runs"][stem] = run_one(stem, Path(tmp) / stem)
            print(f"{stem}: {len(record['runs'][stem]['events'])} events, params {record['runs'][stem]['params'][:12]}")
    if args.write:
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
