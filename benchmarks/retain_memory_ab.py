"""``run.retain_freed_memory`` inside real runs: the same seeded run for a fixed number of updates,
with the setting off and on in alternating processes, timed by the run's own phase clock.

    python benchmarks/retain_memory_ab.py configs/cartpole_muzero.yaml --iters 200 --rounds 2

Prints, per run, the wall time, the learner's seconds per update (``time/learn_s`` over the
updates) and the run process's minor page faults per update (``getrusage`` of the child). Seeded
runs repeat, so both sides do the same work; only the allocator setting differs. Evaluation and
periodic checkpoints are switched off so that they do not blur the learner's figure.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lzkernel.plot import load_series


def run_once(config: str, iters: int, retain: bool) -> dict[str, float]:
    """One run of ``iters`` updates; {wall_s, learn_ms_per_update, faults_per_update}."""
    out = Path(tempfile.mkdtemp(prefix="retain_ab_")) / "run"
    faults0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lzkernel", "run", config, f"run.out_dir={out}",
                    f"run.max_train_iters={iters}", f"run.retain_freed_memory={str(retain).lower()}",
                    "run.progress=false", f"run.log_every={iters}", "evaluator.every_train_iters=1000000000",
                    "run.checkpoint_every=0"],
                   check=True, capture_output=True)
    wall = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
    learn_s = float(load_series(out, "time/learn_s").y[-1])  # the phase clock is cumulative
    return {"wall_s": wall, "learn_ms_per_update": learn_s / iters * 1e3, "faults_per_update": faults / iters}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--iters", type=int, default=200, help="updates per run")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of lines")
    args = parser.parse_args()
    rows = []
    for r in range(args.rounds):
        for retain in (False, True):
            row = {"round": r, "retain_freed_memory": retain, **run_once(args.config, args.iters, retain)}
            rows.append(row)
            if not args.json:
                print(f"round {r} retain={str(retain).lower():5s} wall {row['wall_s']:6.1f} s  learn "
                      f"{row['learn_ms_per_update']:6.1f} ms/update  minor faults {row['faults_per_update']:7.0f} "
                      f"per update", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
