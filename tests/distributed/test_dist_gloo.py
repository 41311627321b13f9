"""Done-when 2-4: real gloo processes on loopback (world size 2), spawned by the test.

* collectives in 2 processes (our own launcher, loopback TCPStore): sums, barrier, broadcast,
  objects, gather, gradient averaging with unused parameters, loopback-only sockets;
* a few real training steps of the CartPole ReZero config under torchrun: parameters (and BN
  buffers, and the target network) bit-identical across ranks, only rank 0 wrote a run dir;
  the same run resumed with 2 ranks, and refused with 1;
* fault cases: a rank raising ends the whole run non-zero within the timeout with a message
  naming the rank and its exception; a rank hanging trips the collective timeout; no process
  is left behind.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dist_helpers import CARTPOLE_REZERO, CARTPOLE_UNIZERO, HERE, TINY, TORCHRUN, clean_env, leftover_processes, spawn_ranks, torchrun

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
]

WORKER = str(HERE / "gloo_worker.py")


def _read(out: Path, world_size: int = 2) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world_size)]


def test_gloo_collectives_in_two_processes(tmp_path: Path) -> None:
    launches = spawn_ranks([WORKER, "collectives", str(tmp_path)], 2, env=clean_env(LZK_TEST_TIMEOUT="30"),
                           timeout=90)
    for r, launch in enumerate(launches):
        assert launch.returncode == 0, f"rank {r}:\n{launch.output[-3000:]}"
    a, b = _read(tmp_path)
    for res in (a, b):
        assert res["world_size"] == 2
        assert res["sum_float"] == [2.0, 2.0] and res["sum_int"] == [3]
        assert res["broadcast"] == [1.0, 1.0, 1.0]
        assert res["object"] == {"from": 1, "stop": True}
        assert res["long_object"] == "x" * 3000  # longer than one frame
        assert res["grad_weight"] == [[1.5, 1.0]]  # mean of inputs [1, 1] and [2, 1]
        assert res["grad_unused"] is None  # no rank had a gradient: stays None
        assert res["grad_only_rank0"] == [2.0]  # (4 + 0) / 2, on both ranks
        assert res["comm_seconds"] > 0 and res["comm_calls"] >= 9
        # Single node: gloo's sockets (and anything else we listen on) stay on loopback.
        assert res["ifname"] in ("lo", "lo0")
        assert res["listening"], "expected gloo's listening socket"
        assert all(s.startswith(("127.", "::1", "::ffff:127.")) for s in res["listening"]), res["listening"]
    assert a["barrier_wait"] >= 0.8  # rank 0 waited for rank 1's 1.5 s sleep at the barrier
    assert a["gather"] == [[0], [10]] and b["gather"] is None
    assert a["gather_object"] == [{"r": 0, "pad": ""}, {"r": 1, "pad": "y" * 100}] and b["gather_object"] is None
    assert not leftover_processes([p for launch in launches for p in launch.pids])


def test_gloo_rank_raising_releases_the_other(tmp_path: Path) -> None:
    launches = spawn_ranks([WORKER, "raise", str(tmp_path)], 2, env=clean_env(LZK_TEST_TIMEOUT="30"), timeout=90)
    assert launches[1].returncode != 0 and "rank 1 fails on purpose" in launches[1].output
    assert launches[0].returncode != 0  # released from its barrier (peer closed), not left waiting
    assert launches[0].seconds < 30
    assert not leftover_processes([p for launch in launches for p in launch.pids])


def test_gloo_stuck_rank_trips_the_collective_timeout(tmp_path: Path) -> None:
    """Rank 1 alive but stuck: rank 0's collective fails after comm timeout (3 s), not 30 min."""
    launches = spawn_ranks([WORKER, "hang", str(tmp_path)], 2, env=clean_env(LZK_TEST_TIMEOUT="3"), timeout=90,
                           fail_fast_grace=2.0)
    assert launches[0].returncode != 0
    waited = json.loads((tmp_path / "rank0.json").read_text())["waited"]
    assert 2.5 <= waited < 15, waited
    assert launches[1].returncode != 0  # killed by the launcher after rank 0 failed
    assert not leftover_processes([p for launch in launches for p in launch.pids])


# -- real training under torchrun ----------------------------------------------------------------


def _train_args(out: Path, dump: Path, *extra: str) -> list[str]:
    return ["run", "-p", "lzk_probe", str(CARTPOLE_REZERO), f"run.out_dir={out}", "trainer.name=rezero_probe",
            f"+trainer.dump_dir={dump}", "comm.name=gloo", "comm.timeout_s=60", *TINY, *extra]


def _dumps(dump: Path) -> list[dict]:
    return [torch.load(dump / f"rank{r}.pt", weights_only=True) for r in range(2)]


def _assert_identical(a: dict, b: dict) -> None:
    for key in ("params", "buffers", "target"):
        assert a[key].keys() == b[key].keys()
        differ = [k for k in a[key] if not torch.equal(a[key][k], b[key][k])]
        assert not differ, f"{key} differ across ranks: {differ[:5]}"


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_torchrun_training_keeps_ranks_identical_and_resumes(tmp_path: Path) -> None:
    out, dump = tmp_path / "run", tmp_path / "dump"
    launch = torchrun(_train_args(out, dump), 2, timeout=240)
    assert launch.returncode == 0, launch.output[-5000:]
    assert not leftover_processes(launch.pids, marker=str(out))
    a, b = _dumps(dump)
    assert (a["rank"], b["rank"]) == (0, 1)
    # Every rank ran the same number of updates and saw the same summed env steps ...
    for key in ("train_iter", "env_steps", "epoch", "learner_steps", "reanalyses"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert a["train_iter"] == 12 and a["reanalyses"] > 0
    # ... from different data: each rank collected with its own seeds.
    assert a["collector_env_steps"] + b["collector_env_steps"] == a["env_steps"]
    assert a["collector_env_steps"] != b["collector_env_steps"]
    # Bit-identical parameters, BatchNorm statistics and target network.
    _assert_identical(a, b)
    # Only rank 0 wrote the run directory.
    assert a["run_dir"] == str(out) and b["run_dir"] is None
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["event"] == "train"]
    assert [r["train_iter"] for r in train] == [3, 6, 9, 12]  # one writer: no duplicates
    assert "time/comm_s" in train[-1] and train[-1]["time/comm_s"] > 0
    assert json.loads((out / "versions.json").read_text())["world_size"] == 2
    assert len(list((out / "tb").glob("events.*"))) == 1
    steps = sorted(p.name for p in (out / "ckpt").glob("step_*"))
    assert steps == ["step_000000000006", "step_000000000012"]

    # Resume with the same world size: counters, per-rank buffers and weights continue.
    launch = torchrun(_train_args(out, dump, "run.max_train_iters=18", "--resume", "auto"), 2, timeout=240)
    assert launch.returncode == 0, launch.output[-5000:]
    c, d = _dumps(dump)
    assert c["train_iter"] == d["train_iter"] == 18
    assert c["env_steps"] == d["env_steps"] > a["env_steps"]
    assert d["collector_env_steps"] > b["collector_env_steps"]  # rank 1 continued its own counters
    _assert_identical(c, d)
    assert not leftover_processes(launch.pids, marker=str(out))

    # Another world size is refused with a clear message (exit 2, no traceback).
    proc = subprocess.run(
        [sys.executable, "-m", "lzkernel", *_train_args(out, dump, "run.max_train_iters=24", "comm.name=local",
                                                         "~comm.timeout_s", "--resume", "auto")],
        env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "written by a run with 2 rank(s)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_torchrun_unizero_keeps_ranks_identical(tmp_path: Path) -> None:
    """The UniZero segment trainer on 2 gloo ranks, buffer reanalysis included: same updates,
    bit-identical online and EMA target networks (LayerNorm/BatchNorm buffers too)."""
    out, dump = tmp_path / "run", tmp_path / "dump"
    args = ["run", "-p", "lzk_probe", str(CARTPOLE_UNIZERO), f"run.out_dir={out}", "trainer.name=unizero_probe",
            f"+trainer.dump_dir={dump}", "comm.name=gloo", "comm.timeout_s=60",
            "run.threads=1", "run.progress=false", "run.max_train_iters=12", "run.max_env_steps=100000",
            "run.checkpoint_every=6", "run.log_every=3", "policy.num_simulations=4", "policy.eval_num_simulations=4",
            "policy.batch_size=16", "policy.model.embed_dim=16", "collector.envs=2", "collector.num_segments=2",
            "collector.segment_length=10", "buffer.segment_length=10", "evaluator.envs=2", "evaluator.episodes=2",
            "evaluator.every_train_iters=6", "update_schedule.ratio=0.1", "trainer.buffer_reanalyze_freq=1",
            "buffer.reanalyze_sequences=4"]
    launch = torchrun(args, 2, timeout=240)
    assert launch.returncode == 0, launch.output[-5000:]
    assert not leftover_processes(launch.pids, marker=str(out))
    a, b = _dumps(dump)
    for key in ("train_iter", "env_steps", "epoch", "learner_steps", "reanalyses"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert a["train_iter"] == 12 and a["reanalyses"] > 0
    # Every env step is either delivered (counted in env_steps) or in an unfinished piece.
    taken = a["collector_env_steps"] + b["collector_env_steps"]
    assert taken - a["collector_pending"] - b["collector_pending"] == a["env_steps"]
    _assert_identical(a, b)


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_torchrun_rank_raising_fails_the_run_and_names_the_rank(tmp_path: Path) -> None:
    """Through the console script: rank 1 raises before its 3rd update while rank 0 waits in the
    gradient all-reduce. The run exits non-zero well within comm.timeout_s, torchrun's summary
    and our own line name rank 1 and its exception, and no process is left."""
    out = tmp_path / "run"
    args = ["run", "-p", "lzk_probe", str(CARTPOLE_REZERO), f"run.out_dir={out}", "trainer.name=rezero_probe",
            "+trainer.fault_rank=1", "+trainer.fault_at_iter=3", "comm.name=gloo", "comm.timeout_s=60", *TINY]
    launch = torchrun(args, 2, timeout=120, module=False)
    assert launch.returncode != 0
    assert "lzkernel: error: rank 1: RuntimeError: injected fault on rank 1 before update 3" in launch.output
    assert "Root Cause" in launch.output and "rank      : 1 (local_rank: 1)" in launch.output
    assert launch.seconds < 60 + 30  # within the comm timeout (plus start-up), not torch's 30 minutes
    assert not leftover_processes(launch.pids, marker=str(out))


@pytest.mark.slow  # three 2-rank launches
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_torchrun_resume_is_exact(tmp_path: Path) -> None:
    """2 ranks: 20 iterations straight and 10 (inside an epoch of 4 updates) + resume + 10 end
    with bit-identical checkpoints (every rank's buffer, episodes and RNGs) and metrics."""
    sys.path.insert(0, str(HERE.parent / "fault"))
    import resume_helpers

    straight, split, dump = tmp_path / "straight", tmp_path / "split", tmp_path / "dump"
    for out, extra in ((straight, ["run.max_train_iters=20"]), (split, ["run.max_train_iters=10"]),
                       (split, ["run.max_train_iters=20", "--resume", "auto"])):
        launch = torchrun(_train_args(out, dump, "run.checkpoint_every=0", *extra), 2, timeout=240)
        assert launch.returncode == 0, launch.output[-5000:]
    diffs = resume_helpers.differences(straight, split, 20)
    assert not diffs, "\n".join(diffs[:25])
    ckpt = resume_helpers.checkpoint(split / "ckpt/step_000000000010")
    assert any(k.startswith("arrays/rank1/collector/player/env/") for k in ckpt)  # rank 1's own episodes
