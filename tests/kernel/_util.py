"""Helpers shared by the kernel tests (plain functions; fixtures live in conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
#: Hard limit of one CLI subprocess (a run of the demo trainer takes ~4 s, mostly importing torch).
TIMEOUT = 90
HEAVY_MODULES = ("torch", "gymnasium", "tensorboardX", "numba")


def clean_env(*paths: str | Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: PYTHONPATH = ``paths`` (the installed fixtures) and no
    inherited plugin switches."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "LZKERNEL_PLUGINS", "PYTHONPATH")}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def lzk(args: Sequence[str | Path], env: Mapping[str, str], cwd: str | Path,
        timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``python -m lzkernel ARGS`` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "lzkernel", *map(str, args)], env=dict(env), cwd=str(cwd),
                          capture_output=True, text=True, timeout=timeout)


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr
    assert "Traceback (most recent call last)" not in proc.stdout, proc.stdout


def assert_config_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2, one paragraph on stderr (no blank line, no traceback) holding every needle."""
    assert proc.returncode == 2, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert_no_traceback(proc)
    err = proc.stderr.strip()
    assert err.startswith("lzkernel: error:"), err
    assert "\n\n" not in err, f"more than one paragraph:\n{err}"
    assert len(err.splitlines()) <= 20, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in:\n{err}"
    return err


def demo_config(path: Path, out_dir: Path, run: Mapping[str, Any] | None = None,
                trainer: Mapping[str, Any] | None = None, **sections: Any) -> Path:
    """Write a config of the demo trainer (``trainer: {name: demo_counter}``)."""
    run_section = {"out_dir": str(out_dir), "max_train_iters": 20, "checkpoint_every": 5, "log_every": 1,
                   "threads": 1, "progress": False, **(run or {})}
    trainer_section = {"name": "demo_counter", "lr": 0.1, **(trainer or {})}
    path.write_text(yaml.safe_dump({"run": run_section, "trainer": trainer_section, **sections},
                                   sort_keys=False), encoding="utf-8")
    return path


def read_metrics(run_dir: Path, resumes: bool = False) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` in order; the resume records a resumed run writes
    before its first record (``lzk_sinks.jsonl``) only with ``resumes``."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return records if resumes else [r for r in records if r.get("event") != "resume"]


def without_wall_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in records]


def read_tb_scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag → [(step, value)] from the event files under ``tb_dir``; every file must end on a
    complete record."""
    from lzk_sinks.tensorboard import read_scalars

    assert sorted(tb_dir.glob("events.out.tfevents.*")), f"no event file under {tb_dir}"
    return read_scalars(tb_dir)
