"""Running LightZero 0.2.0 (the rival kit, ``../shared/rival/``) on one seed, for the side-by-side
time-to-solve race of ``time_to_solve.py --against-lightzero``.

The kit's ``setup.sh`` installs LightZero into its own venv (once, about a minute) and exports
``LZ_PY``; ``lightzero_train.py ALGO`` runs LightZero's CartPole config for ALGO with the same
success test as ours (``LZ_EVAL_EPISODES`` episodes, mean ≥ ``LZ_STOP``) and logs every
evaluation to ``ALGO_evals.jsonl``: ``t_end_eval`` (seconds since its start), ``envstep``,
``train_iter``, ``stop``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: LightZero's CartPole configs the kit runs.
ALGOS = ("rezero", "muzero", "efficientzero", "unizero")
#: LightZero 0.2.0's evaluation interval (``eval_freq``, train iterations; it also evaluates at
#: iteration 0) in those configs, as every solved LightZero run recorded under benchmarks/results/
#: shows (train_iters_to_solve = (evals − 1) × interval); UniZero's is not recorded.
EVAL_EVERY = {"muzero": 100, "rezero": 200, "efficientzero": 200}


def default_rival_dir() -> Path:
    """``$LZ_RIVAL_DIR``, else ``../shared/rival`` next to the repository."""
    return Path(os.environ.get("LZ_RIVAL_DIR", ROOT.parent / "shared" / "rival"))


def algo_of(config: str) -> str | None:
    """LightZero's algorithm for one of our CartPole configs, by its name (``cartpole_rezero`` →
    'rezero'); None where the kit has no counterpart (e.g. ``cartpole_rezero_ez``: LightZero ships
    ReZero-EZ for Atari only)."""
    stem = Path(config).stem
    name = stem.removeprefix("cartpole_")
    return name if stem.startswith("cartpole_") and name in ALGOS else None


def parse_evals(path: Path) -> dict[str, Any]:
    """LightZero's evaluations log → {solved, seconds_to_solve, env_steps_to_solve,
    train_iters_to_solve, evals, last_env_steps, last_train_iter}: the first evaluation with ``stop``."""
    records = []
    if path.exists():
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    solved = next((r for r in records if r.get("stop")), None)
    return {
        "solved": solved is not None,
        "seconds_to_solve": round(solved["t_end_eval"], 1) if solved else None,
        "env_steps_to_solve": solved["envstep"] if solved else None,
        "train_iters_to_solve": solved["train_iter"] if solved else None,
        "evals": len(records),
        "last_env_steps": records[-1]["envstep"] if records else None,
        "last_train_iter": records[-1]["train_iter"] if records else None,
    }


def run_lightzero(algo: str, seed: int, threshold: float, episodes: int, timeout: float, out_dir: Path,
                  rival_dir: Path) -> dict[str, Any]:
    """One LightZero run of ``algo`` with ``seed`` under the same success test, killed after
    ``timeout`` seconds; its evaluations parsed (:func:`parse_evals`) plus the process's exit."""
    if algo not in ALGOS:
        raise ValueError(f"LightZero's kit runs {', '.join(ALGOS)}; got {algo!r}")
    setup, driver = rival_dir / "setup.sh", rival_dir / "lightzero_train.py"
    for f in (setup, driver):
        if not f.is_file():
            raise FileNotFoundError(f"rival kit: {f} not found (--rival-dir or LZ_RIVAL_DIR)")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LZ_BENCH_DIR": str(out_dir), "LZ_EVAL_EPISODES": str(episodes),
           "LZ_STOP": str(threshold), "LZ_SEED": str(seed)}
    cmd = f'. "{setup}" && exec timeout -k 10 {int(timeout)} "$LZ_PY" "{driver}" {algo}'
    t0 = time.monotonic()
    with open(out_dir / "log", "w") as log:
        rc = subprocess.run(["bash", "-c", cmd], env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return {"seed": seed, "returncode": rc, "process_seconds": round(time.monotonic() - t0, 1),
            **parse_evals(out_dir / f"{algo}_evals.jsonl")}


def run_lightzero_driver(rival_dir: Path, driver: str, arrays: dict[str, Any]) -> dict[str, Any]:
    """Run ``benchmarks/DRIVER`` in the rival kit's venv on ``arrays`` (saved as ``in.npz``);
    return the arrays it writes to ``out.npz``. Exits with its output tail if it fails."""
    import numpy as np  # benchmarks that only race do not need it here

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(src, **arrays)
        script = Path(__file__).with_name(driver)
        cmd = f'. "{rival_dir / "setup.sh"}" && exec "$LZ_PY" "{script}" "{src}" "{dst}"'
        proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"LightZero's side ({driver}) failed (exit {proc.returncode})")
        return dict(np.load(dst))
