"""benchmarks/env_steps_pooled.py: the Kaplan–Meier median of env steps to solve over recorded
runs, unsolved runs right-censored, and the pooling of race JSONs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import env_steps_pooled as pooled

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "env_steps_pooled.py"


def test_km_curve_by_hand() -> None:
    # 5 runs: solved at 100; stopped unsolved at 200; solved at 300 and 400; stopped at 500.
    runs = [(100.0, True), (200.0, False), (300.0, True), (400.0, True), (500.0, False)]
    rows = pooled.km_curve(runs)
    assert [(t, n, d) for t, _, n, d in rows] == [(100.0, 5, 1), (300.0, 3, 1), (400.0, 2, 1)]
    assert [s for _, s, _, _ in rows] == pytest.approx([4 / 5, 4 / 5 * 2 / 3, 4 / 5 * 2 / 3 * 1 / 2])
    # S(300) = 0.533 > 0.5, S(400) = 0.267: the median is 400. Counting the unsolved runs as
    # "never" would also give 400 here, dropping them would give 300.
    assert pooled.km_median(runs) == 400.0


def test_km_median_without_censoring_is_the_sample_median_for_odd_counts() -> None:
    assert pooled.km_median([(3.0, True), (1.0, True), (2.0, True)]) == 2.0
    # Even counts: the smallest t with S(t) <= 1/2, i.e. the lower middle value.
    assert pooled.km_median([(4.0, True), (1.0, True), (2.0, True), (3.0, True)]) == 2.0


def test_censoring_below_the_median_moves_it_up() -> None:
    # One run stopped early (at 50): of the 4 at risk after it, two must solve before S <= 1/2:
    # 300. Counting it as never solved (as a censored median of five does) would give 400.
    runs = [(50.0, False), (200.0, True), (300.0, True), (400.0, True), (500.0, True)]
    assert pooled.km_median(runs) == 300.0


def test_median_beyond_every_run_is_none() -> None:
    assert pooled.km_median([(100.0, True), (200.0, False), (300.0, False)]) is None


def test_a_solve_and_a_stop_at_the_same_time_count_the_solve_first() -> None:
    rows = pooled.km_curve([(100.0, False), (100.0, True), (200.0, True)])
    assert rows[0] == (100.0, pytest.approx(2 / 3), 3, 1)
    assert rows[1][2] == 1  # the stopped run left the risk set after 100


def test_bootstrap_interval_brackets_the_median_and_is_reproducible() -> None:
    runs = [(float(t), True) for t in range(100, 2100, 100)]
    lo, hi = pooled.bootstrap_interval(runs, reps=300, seed=1)
    assert lo is not None and hi is not None and lo < pooled.km_median(runs) < hi
    assert pooled.bootstrap_interval(runs, reps=300, seed=1) == (lo, hi)
    # Mostly unsolved: the upper bound lies beyond the runs.
    assert pooled.bootstrap_interval([(100.0, True), (200.0, False), (300.0, False)], reps=200)[1] is None


def _race(path: Path, algo: str, lz: list[dict], ours: list[dict] | None = None, threshold: float = 195.0) -> Path:
    path.write_text(json.dumps({"threshold": threshold, "eval_episodes": 10, "results": ours or [],
                                "lightzero": {"algo": algo, "results": lz}}))
    return path


def _r(seed: int, steps: int | None, solved: bool, last: int | None = None, secs: float = 1.0) -> dict:
    return {"seed": seed, "solved": solved, "env_steps_to_solve": steps if solved else None,
            "last_env_steps": last if last is not None else steps, "process_seconds": secs}


def test_lightzero_runs_pool_files_of_one_algo_and_test_and_drop_copies(tmp_path: Path) -> None:
    a = _race(tmp_path / "a.json", "muzero", [_r(0, 500, True), _r(1, None, False, last=3000)])
    b = _race(tmp_path / "b.json", "muzero", [_r(0, 500, True), _r(2, 800, True, secs=2.0)])  # a's seed 0 again
    c = _race(tmp_path / "c.json", "rezero", [_r(0, 900, True)])
    d = _race(tmp_path / "d.json", "muzero", [_r(3, 100, True)], threshold=150.0)  # another success test
    e = _race(tmp_path / "e.json", "muzero", [{"seed": 4, "solved": False, "env_steps_to_solve": None}])
    runs = pooled.lightzero_runs([a, b, c, d, e], "muzero")
    assert sorted((r["seed"], r["env_steps"], r["solved"]) for r in runs) == [
        (0, 500.0, True), (1, 3000.0, False), (2, 800.0, True)]


def test_our_runs_refuse_a_seed_twice(tmp_path: Path) -> None:
    first = tmp_path / "ours1.json"
    first.write_text(json.dumps({"results": [_r(0, 700, True)]}))
    second = tmp_path / "ours2.json"
    second.write_text(json.dumps({"results": [_r(0, 700, True)]}))
    assert [r["env_steps"] for r in pooled.our_runs([first])] == [700.0]
    with pytest.raises(SystemExit, match="seed 0"):
        pooled.our_runs([first, second])
    other_test = tmp_path / "ours3.json"
    other_test.write_text(json.dumps({"threshold": 475.0, "eval_episodes": 10, "results": [_r(1, 700, True)]}))
    with pytest.raises(SystemExit, match="success test 475.0/10"):
        pooled.our_runs([other_test])


def test_cli_compares_the_two_medians(tmp_path: Path) -> None:
    # LightZero: 2 of 5 solved (300, 400), three stopped beyond: its median lies beyond its runs.
    lz = _race(tmp_path / "race.json", "rezero", [_r(0, 300, True), _r(1, 400, True), _r(2, None, False, last=450),
                                                  _r(3, None, False, last=500), _r(4, None, False, last=600)])
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"results": [_r(0, 200, True), _r(1, 900, True), _r(2, 350, True)]}))
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "rezero", "--ours", str(ours), "--lightzero", str(lz),
                           "--bootstrap", "50", "--json-out", str(out)], capture_output=True, text=True, check=True)
    assert "> 600" in proc.stdout
    summary = json.loads(out.read_text())
    assert summary["ours"]["km_median_env_steps"] == 350.0
    assert summary["lightzero"]["km_median_env_steps"] is None
    assert summary["lightzero"]["runs"] == 5 and summary["lightzero"]["solved"] == 2
    assert summary["ours_le_lightzero"] is True  # 350 <= its longest run (600) < its median


def test_our_unsolved_run_without_its_env_steps_counts_as_slowest(tmp_path: Path) -> None:
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"results": [_r(0, 100, True), _r(1, 200, True),
                                            {"seed": 2, "solved": False, "env_steps_to_solve": None}]}))
    runs = pooled.our_runs([ours])
    assert runs[2]["env_steps"] is None and not runs[2]["solved"]
    summary = pooled.side_summary(runs, reps=20)
    # Censored beyond every run: S(200) = 1/3, so the median is 200 (dropping it would give 100).
    assert summary["km_median_env_steps"] == 200.0 and summary["longest_run_env_steps"] == 200.0
    json.dumps(summary, allow_nan=False)  # no Infinity in the written JSON


def test_time_to_solve_records_how_far_an_unsolved_run_got(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time_to_solve

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        out_dir = Path(next(a.split("=", 1)[1] for a in cmd if a.startswith("run.out_dir=")))
        out_dir.mkdir(parents=True)
        rows = [{"event": "eval", "train_iter": 100, "env_steps": 900, "wall_time": 5.0, "eval/return_mean": 120.0},
                {"event": "collect", "train_iter": 100, "env_steps": 1400, "wall_time": 6.0}]
        (out_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(time_to_solve.subprocess, "run", fake_run)
    r = time_to_solve.run_seed("configs/cartpole_muzero.yaml", 3, 195.0, 10, 100_000, 60.0, tmp_path, [])
    assert not r["solved"] and r["env_steps_to_solve"] is None and r["last_env_steps"] == 1400
    assert r["last_train_iter"] == 100  # the last evaluation's, not a later record's


@pytest.mark.parametrize("ours, theirs, expected", [
    ((300.0, 900.0), (400.0, 900.0), True),
    ((500.0, 900.0), (400.0, 900.0), False),
    ((500.0, 900.0), (None, 600.0), True),    # theirs only known to exceed 600
    ((700.0, 900.0), (None, 600.0), None),    # ours 700 against "more than 600": open
    ((None, 900.0), (400.0, 600.0), False),   # ours exceeds 900 > 400
    ((None, 300.0), (400.0, 600.0), None),    # ours "more than 300" against 400: open
    ((None, 400.0), (400.0, 600.0), False),   # ours "more than 400" against 400
    ((None, 300.0), (None, 600.0), None),
])
def test_compare_medians_leaves_open_what_the_runs_do_not_settle(ours, theirs, expected) -> None:
    side = lambda m, longest: {"km_median_env_steps": m, "longest_run_env_steps": longest}  # noqa: E731
    assert pooled.compare_medians(side(*ours), side(*theirs)) is expected


def _it(seed: int, iters: int | None, solved: bool, evals: int, last_iter: int | None = None) -> dict:
    """A per-seed result as time_to_solve writes it, for the updates measure (evaluations at
    0, I, 2I, …)."""
    return {"seed": seed, "solved": solved, "train_iters_to_solve": iters if solved else None, "evals": evals,
            "env_steps_to_solve": 10 * iters if solved else None, "last_env_steps": 999,
            **({"last_train_iter": last_iter} if last_iter is not None else {})}


def test_eval_interval_from_the_solved_runs_of_a_batch() -> None:
    assert pooled.eval_interval([_it(0, 600, True, 4), _it(1, 1400, True, 8), _it(2, None, False, 9)]) == 200
    assert pooled.eval_interval([_it(0, None, False, 9)]) is None  # nothing solved to infer it from
    assert pooled.eval_interval([_it(0, 600, True, 4), _it(1, 600, True, 7)]) is None  # disagree: refuse to guess


def test_updates_of_a_run_solved_or_censored_at_its_last_evaluation() -> None:
    assert pooled._run_of(_it(0, 800, True, 5), "updates", 200) == (800.0, True)
    assert pooled._run_of(_it(1, None, False, 9, last_iter=1650), "updates", 200) == (1650.0, False)  # recorded
    assert pooled._run_of(_it(2, None, False, 9), "updates", 200) == (1600.0, False)  # (9 − 1) × 200
    assert pooled._run_of(_it(3, None, False, 9), "updates", None) == (None, False)  # unknown
    assert pooled._run_of(_it(4, 800, True, 5)) == (8000.0, True)  # env steps, the default measure


def test_lightzero_runs_in_updates_use_its_config_interval_where_no_run_solved(tmp_path: Path) -> None:
    # A ReZero batch where nothing solved: its unsolved runs are censored with LightZero's own
    # evaluation interval for ReZero (200), not dropped.
    none_solved = _race(tmp_path / "a.json", "rezero", [_it(0, None, False, 7), _it(1, None, False, 4)])
    some_solved = _race(tmp_path / "b.json", "rezero", [_it(2, 300, True, 4), _it(3, None, False, 3)])  # I = 100
    runs = pooled.lightzero_runs([none_solved, some_solved], "rezero", measure="updates")
    assert sorted((r["seed"], r["updates"], r["solved"]) for r in runs) == [
        (0, 1200.0, False), (1, 600.0, False), (2, 300.0, True), (3, 200.0, False)]
    assert pooled.LIGHTZERO_EVAL_EVERY["rezero"] == 200


def test_cli_measure_updates(tmp_path: Path) -> None:
    lz = _race(tmp_path / "race.json", "muzero", [_it(0, 300, True, 4), _it(1, 1300, True, 14),
                                                  _it(2, None, False, 10), _it(3, 700, True, 8)])
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"results": [_it(0, 200, True, 3), _it(1, 800, True, 9), _it(2, None, False, 26)]}))
    out = tmp_path / "summary.json"
    subprocess.run([sys.executable, str(SCRIPT), "muzero", "--ours", str(ours), "--lightzero", str(lz),
                    "--measure", "updates", "--bootstrap", "50", "--json-out", str(out)],
                   capture_output=True, text=True, check=True)
    summary = json.loads(out.read_text())
    assert summary["measure"] == "updates"
    # LightZero: solved 300, 700, 1300, censored at 900: S(700) = 1/2, so 700. Ours: 200, 800, >2500: 800.
    assert summary["lightzero"]["km_median_updates"] == 700.0
    assert summary["ours"]["km_median_updates"] == 800.0
    assert summary["ours_le_lightzero"] is False


def test_lightzero_eval_interval_matches_every_recorded_solved_run() -> None:
    """The fallback interval per algorithm is what LightZero's recorded runs show."""
    from _results import RESULTS
    checked = 0
    for path in RESULTS.glob("*.json"):
        d = json.loads(path.read_text())
        lz = d.get("lightzero") if isinstance(d, dict) else None
        if not isinstance(lz, dict) or lz.get("algo") not in pooled.LIGHTZERO_EVAL_EVERY:
            continue
        for r in lz["results"]:
            if r["solved"] and r.get("evals"):
                assert r["train_iters_to_solve"] == (r["evals"] - 1) * pooled.LIGHTZERO_EVAL_EVERY[lz["algo"]], path.name
                checked += 1
    assert checked >= 20
