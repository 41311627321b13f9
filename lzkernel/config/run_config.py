"""The ``run`` section: budgets, output, seeding, device, checkpoint and logging cadence."""
from __future__ import annotations

from dataclasses import dataclass

from lzkernel.config.schema import option


@dataclass
class RunConfig:
    """Settings every run has, whatever the algorithm."""

    seed: int = option(0, doc="Root seed; every RNG (torch, numpy, python, envs, search) derives from it.", min=0)
    out_dir: str = option("runs/default", doc="Run directory: config, metrics, TensorBoard logs, checkpoints.")
    max_env_steps: int = option(100_000, doc="Stop after this many env steps (summed over ranks' collectors).", min=1)
    max_train_iters: int = option(10**9, doc="Stop after this many learner updates.", min=1)
    max_seconds: float | None = option(
        None, doc="Stop at the first iteration boundary after this many seconds of the run's wall time (continued "
        "across resumes), with a checkpoint, as the other budgets; null: no time budget.", min=1.0)
    device: str = option("cpu", doc="'cpu', 'cuda', 'cuda:N' or 'auto' (cuda when available).")
    threads: int = option(0, doc="torch intra-op threads; 0 leaves torch's default.", min=0)
    deterministic: bool = option(
        False, doc="torch.use_deterministic_algorithms(True), and MKL's strict conditional numerical "
        "reproducibility with a fixed thread team (MKL_CBWR=AUTO,STRICT, MKL_DYNAMIC=FALSE). Runs are "
        "reproducible on one machine without it (docs/architecture.md, Seeding); this guards against "
        "alignment- and load-dependent BLAS paths at some speed cost.")
    retain_freed_memory: bool = option(
        True, doc="Keep freed heap memory in the process (glibc malloc's mmap and trim thresholds raised; "
        "lzkernel/memory.py) so that the learner's large activations are never page-faulted back in every step, "
        "whatever the heap's layout (it cost 10-15% of the learner benchmark's step on a 2-core VM). The resident "
        "size then stays at the run's peak. No effect off glibc.")
    checkpoint_every: int = option(1000, doc="Save a checkpoint every this many train iterations (0: only at the end).", min=0)
    keep_last: int = option(3, doc="Periodic checkpoints kept; older ones are deleted after a new one commits.", min=1)
    save_buffer: bool = option(True, doc="Include the replay buffer and the collector's running episodes in "
                               "checkpoints (exact resume: docs/architecture.md, Resume).")
    stall_timeout_s: float = option(
        600.0, doc="End the run (exit code 1) with one line naming where the run's thread is, and every thread's "
        "stack, when it made no progress (an env step, an update, a metrics record, a checkpoint) for this many "
        "seconds: a hung env never hangs the run silently (lzkernel/watchdog.py; a run of the Python API fails with "
        "lzkernel.Stalled instead, its process living on). 0: no deadline.", min=0)
    log_every: int = option(100, doc="Average and emit train metrics every this many train iterations.", min=1)
    progress: bool = option(True, doc="Show a console progress line.")

    def validate(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        d = self.device
        if d not in ("cpu", "cuda", "auto") and not (d.startswith("cuda:") and d[5:].isdigit()):
            problems.append(("device", f"expected 'cpu', 'cuda', 'cuda:N' or 'auto', got {d!r}"))
        if not self.out_dir.strip():
            # `run.out_dir=$OUT` with OUT unset: the run's files would land in the working directory.
            problems.append(("out_dir", "must not be empty (a directory path)"))
        return problems
