"""``lzkernel run CONFIG --seeds ...`` (lzkernel.sweep): one run directory per seed, one after
another; a failing seed does not stop the others, a signal stops the sweep after the running
seed saved, ``--resume auto`` continues it; bad combinations are refused before any seed runs."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import yaml
from fault_helpers import assert_one_line_error, loop_config, lzk, popen, read_metrics, wait_for


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_each_seed_gets_its_own_run_and_a_status_line(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 6})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "3", "5"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["seed_3", "seed_5", "sweep.json"]
    for seed in (3, 5):
        run_dir = out / f"seed_{seed}"
        resolved = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]
        assert (resolved["seed"], resolved["out_dir"]) == (seed, str(run_dir))
        assert _summary(run_dir)["status"] == "finished" and read_metrics(run_dir)[-1]["train_iter"] == 6
        assert f"exit   0  {run_dir}: finished" in proc.stderr
    assert "ran 2 of 2 runs" in proc.stderr and "  solved 0 of 2\n" in proc.stderr  # fault_loop never solves
    # The sweep's directory stands for its seeds' run directories in `lzkernel status` (and plot).
    status = lzk(["status", "--json", out], tmp_path)
    assert status.returncode == 0, status.stderr
    assert [(r["run_dir"], r["seed"]) for r in json.loads(status.stdout)] == [(str(out / "seed_3"), 3),
                                                                              (str(out / "seed_5"), 5)]


def test_a_failing_seed_does_not_stop_the_others(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 6}, trainer={"raise_rank": 0, "raise_at_iter": 2})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    for seed in (0, 1):
        assert _summary(out / f"seed_{seed}")["status"] == "failed"
        assert f"exit   1  {out / f'seed_{seed}'}: failed" in proc.stderr


@pytest.mark.parametrize("target", ["sweep", "group"])
def test_a_signal_stops_the_sweep_and_resume_auto_continues_it(tmp_path: Path, target: str) -> None:
    """SIGTERM to the sweep alone, or to its whole process group (what `timeout` and batch
    schedulers send): either way the running seed gets it once, saves and stops, and no other
    seed starts."""
    out = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 200, "checkpoint_every": 10},
                      trainer={"sleep_s": 0.02})
    proc = popen(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1"], tmp_path, start_new_session=True)
    first = out / "seed_0"
    try:
        wait_for(lambda: (first / "metrics.jsonl").is_file() and len(read_metrics(first)) >= 20, 60,
                 "20 iterations of seed 0", proc)
        if target == "sweep":
            proc.send_signal(signal.SIGTERM)  # passed on to the running seed
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-3000:]
    assert _summary(first)["status"] == "stopped" and not (out / "seed_1").exists()  # saved, not killed
    assert "ran 1 of 2 runs" in err and "continue it with the same command and --resume auto" in err
    assert "continue with:" not in err  # the stopped seed's own line would resume that seed alone
    status = lzk(["status", out], tmp_path)  # the seed that never started is named
    assert status.returncode == 0 and f"{out / 'seed_1'}: not started (listed in {out / 'sweep.json'})" in status.stdout
    # Without --resume the same sweep is refused (seed 0 holds checkpoints), before any seed runs.
    assert_one_line_error(lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1"], tmp_path),
                          "seed_0' already holds checkpoints")

    proc2 = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1", "trainer.sleep_s=0", "--resume", "auto"],
                tmp_path)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    for seed in (0, 1):
        assert _summary(out / f"seed_{seed}")["status"] == "finished"
        assert read_metrics(out / f"seed_{seed}")[-1]["train_iter"] == 200
    assert "resumed from" in proc2.stderr


def test_bad_combinations_are_refused_before_any_seed_runs(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", out)
    base = ["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1"]
    assert_one_line_error(lzk([*base, "--resume", str(tmp_path)], tmp_path), "a checkpoint belongs to one run")
    assert_one_line_error(lzk([*base, "run.seed=4"], tmp_path), "run.seed=... with --seeds")
    assert_one_line_error(lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "0"], tmp_path), "a seed is repeated")
    assert_one_line_error(lzk([*base, "trainer.lr=abc"], tmp_path), "trainer.lr")
    assert_one_line_error(lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "2", "-1"], tmp_path),
                          "run.seed", "(from a command-line override)")  # every seed validated first
    assert_one_line_error(lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "--seeds", "0", "1"], tmp_path),
                          "--seeds runs one process per run")
    assert not out.exists()


def test_split_values_and_grid_points() -> None:
    from lzkernel.errors import ConfigError
    from lzkernel.sweep import grid_points, split_values

    assert split_values("1e-3, 3e-3") == ["1e-3", "3e-3"]
    assert split_values("[64,64],[128, 128],{a: 1, b: 2},'x,y'") == ["[64,64]", "[128, 128]", "{a: 1, b: 2}", "'x,y'"]
    assert split_values("it's,b") == ["it's", "b"]  # a quote opens only a value
    assert grid_points(["a.x=1,2", "+b.y=p/q,r"]) == [
        ("a.x=1,b.y=p_q", ["a.x=1", "+b.y=p/q"]), ("a.x=1,b.y=r", ["a.x=1", "+b.y=r"]),
        ("a.x=2,b.y=p_q", ["a.x=2", "+b.y=p/q"]), ("a.x=2,b.y=r", ["a.x=2", "+b.y=r"])]
    for bad, needle in [(["a.x"], "expected KEY=VALUE1"), (["run.seed=1,2"], "what the sweep sets"),
                        (["run={seed: 1},{seed: 2}"], "what the sweep sets"), (["a.x=1", "a.x=2"], "given twice"),
                        (["a={x: 1},{x: 2}", "a.x=3,4"], "given twice"), (["a.x=1,1"], "distinct"),
                        (["a.x=1e-3,0.001"], "1e-3 and 0.001 are one value"), (["a.x=1,"], "non-empty"),
                        (["~a.x=1"], "expected KEY=VALUE1"), (["sink.api_token=a,b"], "is a secret"),
                        (["a.x=[1,2"], "not valid YAML")]:
        with pytest.raises(ConfigError, match=needle):
            grid_points(bad)


def test_grid_directories_are_distinct_and_short_enough() -> None:
    from lzkernel.errors import ConfigError
    from lzkernel.sweep import plan

    with pytest.raises(ConfigError, match="share the directory 'a.x=p_q'"):
        plan("out", ["a.x=p/q,p_q"], [])
    with pytest.raises(ConfigError, match="over the file-name limit of 255"):
        plan("out", ["a.x=1" + "0" * 260 + ",2"], [])
    runs = plan("out", ["a.x=1,2"], [0])
    assert [(str(r.directory), r.overrides) for r in runs] == [("out/a.x=1/seed_0", ("a.x=1", "run.seed=0")),
                                                               ("out/a.x=2/seed_0", ("a.x=2", "run.seed=0"))]


def test_a_grid_with_seeds_runs_every_point_and_seed(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 3})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--grid", "trainer.lr=0.1,0.5", "--seeds", "0", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [out / f"trainer.lr={lr}" / f"seed_{seed}" for lr in ("0.1", "0.5") for seed in (0, 1)]
    for run_dir in runs:
        resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
        lr, seed = run_dir.parent.name.split("=")[1], int(run_dir.name[5:])
        assert (resolved["trainer"]["lr"], resolved["run"]["seed"]) == (float(lr), seed)
        assert _summary(run_dir)["status"] == "finished"
    assert "trainer.lr=0.1, seed 0 (1 of 4)" in proc.stderr and "trainer.lr=0.5, seed 1 (4 of 4)" in proc.stderr
    assert "ran 4 of 4 runs" in proc.stderr
    assert "  trainer.lr=0.1: solved 0 of 2\n" in proc.stderr and "  trainer.lr=0.5: solved 0 of 2\n" in proc.stderr
    # status and config --diff take the grid's directory for all its runs.
    status = lzk(["status", "--json", out], tmp_path)
    assert [r["run_dir"] for r in json.loads(status.stdout)] == [str(r) for r in runs]
    diff = lzk(["config", cfg, "-p", "lzk_fault_plugin", "--diff", out], tmp_path)
    assert diff.returncode == 1, diff.stderr
    assert "trainer.lr: 0.1 → trainer.lr=0.1/seed_0: 0.1, trainer.lr=0.1/seed_1: 0.1, trainer.lr=0.5/seed_0: 0.5, " \
           "trainer.lr=0.5/seed_1: 0.5" in diff.stdout, diff.stdout


def test_a_grid_of_two_keys_without_seeds(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 2})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--grid", "trainer.lr=0.1,0.5", "--grid", "trainer.sleep_s=0,0.001"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = [f"trainer.lr={a},trainer.sleep_s={b}" for a in ("0.1", "0.5") for b in ("0", "0.001")]
    assert sorted(p.name for p in out.iterdir()) == sorted([*points, "sweep.json"])
    order = [proc.stderr.index(f"lzkernel: {p} (") for p in points]
    assert order == sorted(order)  # the first key varies slowest
    resolved = yaml.safe_load((out / points[1] / "config.yaml").read_text())
    assert (resolved["trainer"]["lr"], resolved["trainer"]["sleep_s"], resolved["run"]["seed"]) == (0.1, 0.001, 0)


def test_mapping_values_a_mixed_directory_and_a_plain_parent(tmp_path: Path) -> None:
    """Values that YAML would misread in a path (``{...}``, `` #``) still name one directory each;
    a seeds sweep and a grid into one directory are both its runs (``sweep.json``), in the order
    they ran; a directory that no sweep wrote is not taken for one."""
    out = tmp_path / "mix"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 1})
    assert lzk(["run", cfg, "-p", "lzk_fault_plugin", "--seeds", "0"], tmp_path).returncode == 0
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--grid",
                "trainer={name: fault_loop, lr: 0.2},{name: fault_loop, lr: 0.3}", "--grid", "run.log_every=1 #x"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = [out / f"trainer={{name: fault_loop, lr: {lr}}},run.log_every=1 #x" for lr in ("0.2", "0.3")]
    for point, lr in zip(points, (0.2, 0.3)):
        resolved = yaml.safe_load((point / "config.yaml").read_text())
        assert resolved["run"]["out_dir"] == str(point) and resolved["trainer"]["lr"] == lr
    status = lzk(["status", "--json", out], tmp_path)
    assert [r["run_dir"] for r in json.loads(status.stdout)] == [str(out / "seed_0"), *map(str, points)]
    # A plain parent of runs, one named with '=' by hand: not a sweep's directory.
    plain = tmp_path / "plain"
    assert lzk(["run", loop_config(tmp_path / "p.yaml", plain / "lr=0.1", run={"max_train_iters": 1}), "-p",
                "lzk_fault_plugin"], tmp_path).returncode == 0
    assert lzk(["status", plain], tmp_path).returncode == 2


def test_bad_grids_are_refused_before_any_run(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    cfg = loop_config(tmp_path / "c.yaml", out)
    base = ["run", cfg, "-p", "lzk_fault_plugin"]
    assert_one_line_error(lzk([*base, "--grid", "trainer.lr=0.1,0.5", "trainer.lr=0.3"], tmp_path),
                          "--grid varies trainer.lr, which an override also sets")
    assert_one_line_error(lzk([*base, "--grid", "trainer={name: fault_loop},{name: fault_loop, lr: 1}",
                               "trainer.lr=0.3"], tmp_path), "--grid varies trainer, which an override also sets")
    assert_one_line_error(lzk([*base, "--grid", "trainer.lr=0.1,abc"], tmp_path), "trainer.lr")  # every point validated
    assert_one_line_error(lzk([*base, "--grid", "run.out_dir=a,b"], tmp_path), "what the sweep sets")
    assert_one_line_error(lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "--grid", "trainer.lr=1,2"],
                              tmp_path), "--grid runs one process per run")
    assert not out.exists()


def test_eval_sums_up_each_group_of_seeds() -> None:
    from lzkernel.evaluate import over_seeds

    def report(mean: float) -> dict:
        return {"metrics": {"eval/return_mean": mean}}

    seeds = ["s/seed_0", "s/seed_1"]
    assert over_seeds(seeds, [report(1.0), report(3.0)]) == [
        "2 seeds: return mean over seeds 2.000  std 1.000  min 1.000  max 3.000"]
    grid = ["g/a=1/seed_0", "g/a=1/seed_1", "g/a=2/seed_0", "g/a=2/seed_1", "g/b=1"]
    lines = over_seeds(grid, [report(1.0), report(3.0), report(5.0), report(5.0), report(9.0)])
    assert lines == ["a=1: 2 seeds: return mean over seeds 2.000  std 1.000  min 1.000  max 3.000",
                     "a=2: 2 seeds: return mean over seeds 5.000  std 0.000  min 5.000  max 5.000"]
    assert over_seeds(["run"], [report(1.0)]) == []


def test_dry_run_lists_every_run_and_starts_none(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    cfg = loop_config(tmp_path / "c.yaml", out)
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--grid", "trainer.lr=0.1,0.5", "--seeds", "0", "1", "--dry-run"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith(f"trainer.lr=0.1, seed 0 (1 of 4) in {out / 'trainer.lr=0.1' / 'seed_0'}: ")
    assert "trainer.lr=0.5 run.seed=1" in lines[3] and not out.exists()  # nothing started, nothing written
    assert_one_line_error(lzk(["run", cfg, "-p", "lzk_fault_plugin", "--dry-run"], tmp_path), "--dry-run lists the runs")
    assert_one_line_error(lzk(["run", cfg, "-p", "lzk_fault_plugin", "--grid", "trainer.lr=0.1,abc", "--dry-run"],
                              tmp_path), "trainer.lr")  # validated as for a real sweep
