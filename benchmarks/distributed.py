"""Distributed throughput: the CartPole ReZero config under 1 and 2 gloo ranks (torchrun).

    python benchmarks/distributed.py                      # worlds 1 and 2, 300 train iterations
    python benchmarks/distributed.py --worlds 1 2 --train-iters 500

Each world size runs ``torchrun --standalone --nproc_per_node=W -m lzkernel run CONFIG
comm.name=gloo run.threads=1 ...`` in a fresh process tree, with evaluation switched off and
checkpoints only at the end, so the numbers are collect + reanalyse + learn + collectives. From
rank 0's ``metrics.jsonl`` it reports, over the whole run (start-up excluded: ``wall_time``
starts with the run context; the JSON also holds the window between the first and the last
train record, which spans whole epochs only when ``--train-iters`` covers several collects):

* env steps per second (summed over ranks: what the run collects),
* train iterations per second (one iteration = one synchronised update on every rank, each on
  its own batch of ``policy.batch_size``),
* seconds spent in collectives on rank 0 (``time/comm_s``: gradient and BN all-reduces,
  decision broadcasts, transition sums — *including waiting for the slower rank*), also as a
  fraction of wall time.

The table goes to stdout, JSON to ``--json-out`` (default ``benchmarks/results/distributed.json``).
Note: with the ``fixed`` schedule (100 updates per collect) W ranks collect W times as many
transitions per update; the per-update batch per rank is unchanged.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import write_results

ROOT = Path(__file__).resolve().parents[1]


def run_world(world: int, args: argparse.Namespace, out_root: Path) -> dict:
    out_dir = out_root / f"world{world}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "--max-restarts=0", "-m", "lzkernel", "run", str(args.config), f"run.out_dir={out_dir}",
           "comm.name=gloo", f"comm.timeout_s={args.comm_timeout}", "run.threads=1", "run.progress=false",
           f"run.max_train_iters={args.train_iters}", f"run.max_env_steps={args.max_env_steps}",
           "run.checkpoint_every=0", f"run.log_every={args.log_every}", f"run.seed={args.seed}",
           "trainer.eval_at_start=false", "evaluator.every_train_iters=1000000000", *args.extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=args.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        rc = -1
    elapsed = time.monotonic() - t0
    records = []
    metrics = out_dir / "metrics.jsonl"
    if metrics.exists():
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    train = [r for r in records if r.get("event") == "train"]
    result: dict = {"world_size": world, "returncode": rc, "process_seconds": round(elapsed, 1)}
    if rc != 0 or len(train) < 2:
        result["error_tail"] = output[-3000:]
        return result
    first, last = train[0], train[-1]
    dt = last["wall_time"] - first["wall_time"]
    comm_dt = last.get("time/comm_s", 0.0) - first.get("time/comm_s", 0.0)
    result.update({
        "train_iters": last["train_iter"],
        "env_steps": last["env_steps"],
        "wall_seconds": last["wall_time"],
        "steady": {
            "seconds": round(dt, 2),
            "env_steps_per_s": round((last["env_steps"] - first["env_steps"]) / dt, 1),
            "train_iters_per_s": round((last["train_iter"] - first["train_iter"]) / dt, 2),
            "comm_seconds": round(comm_dt, 2),
            "comm_fraction": round(comm_dt / dt, 3),
        },
        "whole_run": {
            "env_steps_per_s": round(last["env_steps"] / last["wall_time"], 1),
            "train_iters_per_s": round(last["train_iter"] / last["wall_time"], 2),
            "comm_seconds": last.get("time/comm_s", 0.0),
            "comm_fraction": round(last.get("time/comm_s", 0.0) / last["wall_time"], 3),
        },
        "phases_s": {k[5:-2]: v for k, v in last.items() if k.startswith("time/")},
    })
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "cartpole_rezero.yaml"))
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--train-iters", type=int, default=300)
    p.add_argument("--max-env-steps", type=int, default=1_000_000)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--comm-timeout", type=float, default=300.0)
    p.add_argument("--timeout", type=float, default=1800.0, help="per world size, seconds")
    p.add_argument("--json-out", default=None, help="summary path (default benchmarks/results/distributed.json, "
                                                      "never replacing an existing one)")
    p.add_argument("extra", nargs="*", help="more config overrides, e.g. policy.batch_size=128")
    args = p.parse_args()

    results = []
    with tempfile.TemporaryDirectory(prefix="lzk_dist_bench_") as tmp:
        for world in args.worlds:
            print(f"world size {world}: running ...", file=sys.stderr, flush=True)
            results.append(run_world(world, args, Path(tmp)))

    print(f"{'ranks':>5} {'env steps/s':>12} {'train it/s':>11} {'comm s':>8} {'comm %':>7} "
          f"{'iters':>6} {'env steps':>10} {'wall s':>7}")
    for r in results:
        if "whole_run" not in r:
            print(f"{r['world_size']:>5}  FAILED (rc {r['returncode']}):\n{r.get('error_tail', '')}")
            continue
        w = r["whole_run"]
        print(f"{r['world_size']:>5} {w['env_steps_per_s']:>12} {w['train_iters_per_s']:>11} {w['comm_seconds']:>8} "
              f"{100 * w['comm_fraction']:>6.1f}% {r['train_iters']:>6} {r['env_steps']:>10} {r['wall_seconds']:>7.1f}")
    report = {
        "benchmark": "distributed", "config": os.path.relpath(args.config, ROOT), "backend": "gloo",
        "launcher": "torchrun --standalone", "train_iters": args.train_iters, "overrides": args.extra,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "results": results,
    }
    write_results(report, "distributed.json", args.json_out)
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
