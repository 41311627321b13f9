"""Memory over a long run: resident set size (RSS) of a training run at given env-step marks.

    python benchmarks/memory.py configs/cartpole_unizero.yaml --marks 5000 50000

Runs `lzkernel run CONFIG` once up to the last mark (stop_value off, evaluation rare, so the run
reaches it) and reads `sys/rss_mb`, the process's current RSS that the loop logs with every collect,
from metrics.jsonl. Flat memory means the figure at the last mark is close to the one at the
first: the buffer grows with the data (bounded by its capacity), nothing else should.
Extra arguments are config overrides, e.g. `update_schedule.ratio=0.05` to spend the budget on
env steps rather than learner updates (memory does not depend on the update count). Results are
printed and written as JSON (`--json-out`, default benchmarks/results/memory_<config>.json).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import write_results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--marks", type=int, nargs="+", default=[5000, 50000], help="env steps to report RSS at")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--json-out", default=None)
    ap.add_argument("overrides", nargs="*", help="extra config overrides")
    args = ap.parse_intermixed_args()
    marks = sorted(args.marks)
    name = Path(args.config).stem
    with tempfile.TemporaryDirectory(prefix="mem_") as tmp:
        out_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "lzkernel", "run", args.config, f"run.seed={args.seed}",
               f"run.out_dir={out_dir}", f"run.max_env_steps={marks[-1]}", "run.progress=false",
               "evaluator.stop_value=null", "evaluator.every_train_iters=1000000", *args.overrides]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        seconds = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    collects = [r for r in records if r.get("event") == "collect" and "sys/rss_mb" in r]
    rows = []
    for mark in marks:
        r = next((c for c in collects if c["env_steps"] >= mark), collects[-1])
        rows.append({"mark": mark, "env_steps": r["env_steps"], "train_iter": r["train_iter"],
                     "rss_mb": r["sys/rss_mb"], "buffer_transitions": r.get("buffer/transitions")})
    summary = {"config": args.config, "overrides": args.overrides, "seconds": round(seconds, 1),
               "peak_rss_mb": max(c["sys/rss_mb"] for c in collects), "marks": rows}
    print(f"{'mark':>7} {'env_steps':>9} {'iters':>7} {'rss_mb':>8} {'buffer':>8}")
    for r in rows:
        print(f"{r['mark']:>7} {r['env_steps']:>9} {r['train_iter']:>7} {r['rss_mb']:>8.1f} "
              f"{str(r['buffer_transitions']):>8}")
    print(f"peak RSS {summary['peak_rss_mb']:.1f} MB over {seconds:.0f} s")
    write_results(summary, f"memory_{name}.json", args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
