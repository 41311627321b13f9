"""Envs in worker processes (``env.workers``, lzk_envs.workers; RELIABILITY A2, A3, S5): the same
rows as in-process, interchangeable checkpoints, a killed worker seen at once, a hung one killed
after ``step_timeout_s``, either replaced while ``env.max_restarts`` allows, errors carried back
as themselves, no orphaned processes."""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lzkernel import ConfigError
from lzk_envs.gym import EnvError, GymEnvSpec
from lzk_envs.restarts import EnvRestarts
from lzk_envs.workers import shares
from test_env_restarts import _Policy as _FirstAction  # action 0 always; records reset_envs

_MODULE = '''
import os, time
import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SlowCartPole(CartPoleEnv):
    """Hangs in its LZK_HANG_AT-th step; raises in its LZK_RAISE_AT-th."""
    steps = 0

    def step(self, action):
        SlowCartPole.steps += 1
        if SlowCartPole.steps == int(os.environ.get("LZK_HANG_AT", "-1")):
            time.sleep(600)
        if SlowCartPole.steps == int(os.environ.get("LZK_RAISE_AT", "-1")):
            raise RuntimeError("injected worker env failure")
        return super().step(action)


class TextObsCartPole(CartPoleEnv):
    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return "not numbers", r, term, trunc, info


gymnasium.register("LzkSlowCartPole-v0", entry_point=SlowCartPole, max_episode_steps=200, disable_env_checker=True)
gymnasium.register("LzkTextObs-v0", entry_point=TextObsCartPole, max_episode_steps=200, disable_env_checker=True)
'''


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "lzk_worker_envs.py").write_text(_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))  # the workers import it too
    return "lzk_worker_envs"


def _pair(env_id: str = "CartPole-v1", num_envs: int = 5, **changes: object) -> tuple[object, object]:
    spec = dataclasses.replace(GymEnvSpec.probe(env_id), **changes)
    return spec.make_vector(num_envs, 7), dataclasses.replace(spec, workers=2).make_vector(num_envs, 7)


def test_shares() -> None:
    assert shares(5, 2) == [(0, 3), (3, 2)] and shares(2, 4) == [(0, 1), (1, 1)] and shares(3, 1) == [(0, 3)]


def test_the_same_rows_as_in_process_and_checkpoints_that_go_both_ways() -> None:
    local, workers = _pair()
    try:
        assert np.array_equal(local.reset().obs, workers.reset().obs)
        rng = np.random.default_rng(0)
        for _ in range(300):  # several episodes per env, some envs left out of some steps
            actions, active = rng.integers(0, 2, 5), rng.random(5) < 0.8
            a, b = local.step(actions, active), workers.step(actions, active)
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(b, f.name)
                assert (x is None and y is None) or np.array_equal(x, y), f.name
        (m1, a1), (m2, a2) = local.state_dict(), workers.state_dict()
        assert m1 == m2 and all(np.array_equal(a1[k], a2[k]) for k in a1)  # the in-process format
        spec = GymEnvSpec.probe("CartPole-v1")
        again_local, again_workers = spec.make_vector(5, 7), dataclasses.replace(spec, workers=3).make_vector(5, 7)
        again_local.load_state_dict(m2, a2)  # a workers' checkpoint, resumed in-process
        again_workers.load_state_dict(m1, a1)  # and the other way, with another number of workers
        for _ in range(50):
            actions = rng.integers(0, 2, 5)
            rows = [v.step(actions).obs for v in (local, again_local, again_workers)]
            assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])
        again_local.close(), again_workers.close()
    finally:
        local.close(), workers.close()


def test_a_killed_worker_is_seen_at_once_and_none_is_left_behind() -> None:
    """A2: SIGKILL to a worker (as a crash in an emulator would end it): the next step raises
    within a second, naming the worker's env indices; closing leaves no process."""
    local, workers = _pair()
    local.close()
    workers.reset()
    pids = [w.proc.pid for w in workers.workers]
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EnvError, match=r"env worker \d+ \(env indices 3\.\.4\) died \(killed by signal 9\)"):
        workers.step(np.zeros(5, np.int64))
    assert time.monotonic() - t0 < 1.0
    workers.close()
    assert not any(Path(f"/proc/{p}").exists() for p in pids)


def test_a_hung_env_is_killed_after_the_step_timeout(env_module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A3: an env that hangs in step: the worker is killed after step_timeout_s and the error says so."""
    monkeypatch.setenv("LZK_HANG_AT", "3")
    spec = dataclasses.replace(GymEnvSpec.probe(f"{env_module}:LzkSlowCartPole-v0"), workers=2, step_timeout_s=1.0)
    venv = spec.make_vector(2, 0)
    venv.reset()
    t0 = time.monotonic()
    with pytest.raises(EnvError, match=r"did not answer within 1 s \(env.step_timeout_s\).*killed"):
        for _ in range(5):
            venv.step(np.zeros(2, np.int64))
    assert 1.0 <= time.monotonic() - t0 < 5.0
    hung = [w for w in venv.workers if w.proc.poll() is not None]
    assert len(hung) == 1 and hung[0].proc.returncode == -signal.SIGKILL
    venv.close()


def test_a_lost_worker_is_replaced_while_max_restarts_allow() -> None:
    """A2 with restarts: a killed worker's envs start anew in a new worker from their restart
    seeds (an unstepped row too), counted in ``restarted``; the other rows are untouched; the
    state resumes in-process; a second loss in a row past ``max_restarts`` ends it, naming both."""
    import gymnasium
    from lzk_envs.restarts import restart_seed

    local, workers = _pair(restarts=EnvRestarts(1, 0.0))
    try:
        local.reset(), workers.reset()
        for _ in range(3):
            local.step(np.ones(5, np.int64)), workers.step(np.ones(5, np.int64))
        old = workers.workers[1].proc
        os.kill(old.pid, signal.SIGKILL)
        active = np.array([True, True, True, True, False])
        mine, theirs = local.step(np.zeros(5, np.int64), active), workers.step(np.zeros(5, np.int64), active)
        assert theirs.restarted is not None and theirs.restarted.tolist() == [0, 0, 0, 1, 1]
        assert theirs.abandoned().tolist() == [False, False, False, True, True]
        assert np.array_equal(theirs.obs[:3], mine.obs[:3]) and not theirs.terminated[3:].any()
        for i in (3, 4):  # env i's first restart seed, as in-process
            fresh = gymnasium.make("CartPole-v1")
            assert np.array_equal(theirs.obs[i], fresh.reset(seed=restart_seed(7, i, 1))[0].astype(np.float32))
            fresh.close()
        assert old.poll() is not None and workers.workers[1].proc.pid != old.pid
        meta, arrays = workers.state_dict()
        assert meta["restarts"]["in_a_row"] == [0, 0, 0, 1, 1] and meta["restarts"]["failures"] == 2
        again = GymEnvSpec.probe("CartPole-v1").make_vector(5, 7)
        again.load_state_dict(meta, arrays)  # resumes in-process
        for _ in range(5):
            assert np.array_equal(again.step(np.ones(5, np.int64)).obs, workers.step(np.ones(5, np.int64)).obs)
        again.close()
        os.kill(workers.workers[1].proc.pid, signal.SIGKILL)  # no episode of env 3 or 4 ended since
        with pytest.raises(EnvError, match=r"env indices 3\.\.4, replacing worker \d+\) died .*1 restart in a row did not help "
                                           r"\(env.max_restarts\); the first failure: env worker \d+"):
            workers.step(np.zeros(5, np.int64))
    finally:
        local.close(), workers.close()


def test_a_hung_worker_is_killed_and_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A3 handled like A1: the hung worker is killed after step_timeout_s, its env restarts in
    a new worker, and stepping goes on."""
    fault = str(Path(__file__).resolve().parents[1] / "fault")  # lzk_fault_envs' HangCartPole-v0
    monkeypatch.syspath_prepend(fault)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([fault, *sys.path]))
    flag = tmp_path / "hang"
    flag.touch()
    for key, value in (("LZK_HANG_RANK", "0"), ("LZK_HANG_AT", "3"), ("LZK_HANG_FLAG", str(flag))):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RANK", raising=False)
    spec = dataclasses.replace(GymEnvSpec.probe("lzk_fault_envs:HangCartPole-v0"), workers=2, step_timeout_s=1.0,
                               restarts=EnvRestarts(2, 0.0))
    venv = spec.make_vector(2, 0)
    try:
        venv.reset()
        pids = [w.proc.pid for w in venv.workers]
        t0 = time.monotonic()
        counts = [venv.step(np.zeros(2, np.int64)).restarted for _ in range(8)]
        assert 1.0 <= time.monotonic() - t0 < 30.0
        assert [c.tolist() for c in counts if c is not None] in ([[1, 0]], [[0, 1]])  # one worker hung once
        replaced = [p for k, p in enumerate(pids) if venv.workers[k].proc.pid != p]
        assert not flag.exists() and len(replaced) == 1 and not Path(f"/proc/{replaced[0]}").exists()
    finally:
        venv.close()


def test_a_worker_found_lost_while_saving_is_replaced_and_reported_at_the_next_step() -> None:
    """A worker that died between two steps (the learner was running) is first seen by
    state_dict: it is replaced, the state holds its new envs with pending_restarts, and both the
    live run's next step and a resumed in-process load report those rows as restarted; the two
    then step alike."""
    import gymnasium
    from lzk_envs.restarts import restart_seed

    local, workers = _pair(restarts=EnvRestarts(3, 0.0))
    local.close()
    try:
        workers.reset()
        for _ in range(3):
            workers.step(np.ones(5, np.int64))
        os.kill(workers.workers[1].proc.pid, signal.SIGKILL)
        meta, arrays = workers.state_dict()
        assert meta["pending_restarts"] == [0, 0, 0, 1, 1] and meta["restarts"]["in_a_row"] == [0, 0, 0, 1, 1]
        resumed = GymEnvSpec.probe("CartPole-v1").make_vector(5, 7)
        loaded = resumed.load_state_dict(meta, arrays)
        live = workers.step(np.ones(5, np.int64), np.array([True, True, True, False, True]))
        for batch in (loaded, live):
            assert batch.restarted is not None and batch.restarted.tolist() == [0, 0, 0, 1, 1]
            assert batch.abandoned().tolist() == [False, False, False, True, True]
        fresh = gymnasium.make("CartPole-v1")
        assert np.array_equal(live.obs[4], fresh.reset(seed=restart_seed(7, 4, 1))[0].astype(np.float32))
        assert np.array_equal(live.obs[3:], loaded.obs[3:])  # restarted rows: not stepped, the new first states
        resumed.step(np.ones(5, np.int64), np.array([True, True, True, False, False]))  # the live run's step
        for _ in range(5):
            assert np.array_equal(resumed.step(np.zeros(5, np.int64)).obs, workers.step(np.zeros(5, np.int64)).obs)
        assert workers.state_dict()[0].get("pending_restarts") is None  # reported: none pending any more
        resumed.close()
        # Lost twice before its rows were taken: both losses count; taken, they are no longer pending.
        for _ in range(2):
            os.kill(workers.workers[1].proc.pid, signal.SIGKILL)
            meta, _ = workers.state_dict()
        assert meta["pending_restarts"] == [0, 0, 0, 2, 2] and min(meta["restarts"]["in_a_row"][3:]) >= 2
        ids, taken = workers.take_restarts()
        assert ids.tolist() == [3, 4] and taken.restarted.tolist() == [2, 2] and taken.obs.shape == (2, 4)
        assert workers.take_restarts() is None and workers.state_dict()[0].get("pending_restarts") is None
        assert workers.step(np.zeros(5, np.int64)).restarted is None  # stepped as any row
    finally:
        workers.close()


def test_a_player_resumed_from_a_state_saved_across_a_lost_worker_restarts_its_rows() -> None:
    """The player's checkpoint taken when a worker was found lost: the player takes the
    restarted rows at once (RestartingVectorEnv), so the saving run and a run resumed from its
    checkpoint (in-process) go on alike: the restarted envs' pieces start at their new first
    states, the failures are counted once, the policy resets those envs, and both play the same
    steps and pieces."""
    from lzk_workers.rollout import EpisodePlayer

    spec = dataclasses.replace(GymEnvSpec.probe("CartPole-v1"), restarts=EnvRestarts(1, 0.0))
    player = EpisodePlayer(dataclasses.replace(spec, workers=2).make_vector(4, 3), spec, 1, mode="collect", record=True)
    try:
        player.play(_FirstAction(), np.array([1, 1, 1, 1]))
        player.play_segments(_FirstAction(), 50, n_segments=0, n_episode=1)  # stops with the others mid-episode
        before = player.pending_transitions.copy()
        assert before[2:].sum() > 0  # the lost worker's envs hold a running piece
        os.kill(player.venv.workers[1].proc.pid, signal.SIGKILL)
        meta, arrays = player.state_dict()
        assert "pending_restarts" not in meta["env"]  # the player took them before saving
        live_policy = _FirstAction()
        live = player.play_segments(live_policy, 7, n_segments=12)
    finally:
        player.close()
    resumed = EpisodePlayer(spec.make_vector(4, 3), spec, 1, mode="collect", record=True)
    policy = _FirstAction()
    resumed.load_state_dict(meta, arrays)
    assert resumed.timestep[2:].tolist() == [0, 0] and resumed.pending_transitions[2:].tolist() == [0, 0]
    assert resumed.pending_transitions[:2].tolist() == before[:2].tolist()  # the other share goes on
    result = resumed.play_segments(policy, 7, n_segments=12)
    assert policy.resets[0] == [2, 3] and live_policy.resets[0] == [2, 3] and result.env_failures == 2
    assert (result.env_steps, result.env_failures) == (live.env_steps, live.env_failures)
    assert [(len(p.actions), p.ended) for p in result.pieces] == [(len(p.actions), p.ended) for p in live.pieces]
    for mine, theirs in zip(result.pieces, live.pieces):
        assert all(np.array_equal(a, b) for a, b in zip(mine.obs, theirs.obs))
    resumed.close()


def test_random_openings_open_the_rows_a_resumed_load_reports_restarted() -> None:
    """With random openings over env workers, a state saved across a lost worker (pending
    restarts) resumes with the restarted rows opened, as the live run's next step opens them."""
    from lzk_workers.openings import with_openings

    spec = dataclasses.replace(GymEnvSpec.probe("CartPole-v1"), restarts=EnvRestarts(1, 0.0))
    venv = with_openings(dataclasses.replace(spec, workers=2).make_vector(4, 3), 3, np.random.default_rng(0))
    try:
        venv.reset()
        venv.step(np.zeros(4, np.int64))
        os.kill(venv.venv.workers[1].proc.pid, signal.SIGKILL)
        meta, arrays = venv.state_dict()
    finally:
        venv.close()
    assert meta["env"]["pending_restarts"] == [0, 0, 1, 1]
    resumed = with_openings(spec.make_vector(4, 3), 3, np.random.default_rng(1))
    batch = resumed.load_state_dict(meta, arrays)
    assert batch.restarted.tolist() == [0, 0, 1, 1]
    saved = np.random.default_rng()
    from lzkernel import set_generator_state

    set_generator_state(saved, meta["opening_rng"])
    assert resumed.rng.bit_generator.state != saved.bit_generator.state  # the restarted rows drew their openings
    resumed.close()


def _hanging_reset_spec(max_restarts: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[GymEnvSpec, Path]:
    """HangCartPole over two workers (step timeout 1 s, no backoff) and the flag file whose
    creation makes the next process to reset an env hang there (lzk_fault_envs)."""
    fault = str(Path(__file__).resolve().parents[1] / "fault")  # lzk_fault_envs' HangCartPole-v0
    monkeypatch.syspath_prepend(fault)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([fault, *sys.path]))
    flag = tmp_path / "hang"
    monkeypatch.setenv("LZK_HANG_RESET_FLAG", str(flag))
    monkeypatch.delenv("LZK_HANG_RANK", raising=False)
    spec = dataclasses.replace(GymEnvSpec.probe("lzk_fault_envs:HangCartPole-v0"), workers=2, step_timeout_s=1.0,
                               restarts=EnvRestarts(max_restarts, 0.0))
    return spec, flag


@pytest.mark.parametrize("max_restarts", [0, 2])
def test_a_worker_lost_while_loading_is_replaced_and_its_rows_start_anew(max_restarts: int,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """A resumed run's load hangs one worker (its env's replay): the worker is killed after the
    step timeout and, while restarts are allowed, replaced: its envs start from their restart
    seeds and are reported restarted, the other share is restored as saved, and the two shares
    then step as any rows; with max_restarts 0 the load ends with the worker named."""
    import gymnasium
    from lzk_envs.restarts import restart_seed

    spec, flag = _hanging_reset_spec(max_restarts, monkeypatch, tmp_path)
    saving = spec.make_vector(4, 5)
    try:
        saving.reset()
        for _ in range(3):
            saved = saving.step(np.zeros(4, np.int64))
        meta, arrays = saving.state_dict()
    finally:
        saving.close()
    resumed = spec.make_vector(4, 5)
    try:
        flag.touch()  # the first worker to reset an env in its replay hangs there
        if max_restarts == 0:
            with pytest.raises(EnvError, match=r"env worker \d+ \(env indices (0\.\.1|2\.\.3)\) did not answer within 1 s"):
                resumed.load_state_dict(meta, arrays)
            return
        batch = resumed.load_state_dict(meta, arrays)
        assert not flag.exists() and batch.restarted is not None
        lost = np.flatnonzero(batch.restarted)
        assert batch.restarted.tolist() in ([1, 1, 0, 0], [0, 0, 1, 1])
        kept = np.flatnonzero(batch.restarted == 0)
        assert np.array_equal(batch.obs[kept], saved.obs[kept])  # the other share restored as saved
        for i in lost:  # started anew from restart 1's seed, not replayed
            fresh = gymnasium.make("CartPole-v0")
            assert np.array_equal(batch.obs[i], fresh.reset(seed=restart_seed(5, int(i), 1))[0].astype(np.float32))
        assert [resumed.books[k]["in_a_row"] for k in range(2)] == [batch.restarted[:2].tolist(), batch.restarted[2:].tolist()]
        after = resumed.step(np.zeros(4, np.int64))
        assert after.restarted is None and after.obs.shape == (4, 4)
    finally:
        resumed.close()


@pytest.mark.parametrize("max_restarts", [1, 3])
def test_a_replacement_that_hangs_is_one_more_failure_in_a_row(max_restarts: int, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """The worker started for a lost one hangs while starting its envs: it is killed and counts
    as another failure in a row of those envs; a third worker takes over while restarts are left,
    else the error names the replacement and the first loss."""
    spec, flag = _hanging_reset_spec(max_restarts, monkeypatch, tmp_path)
    venv = spec.make_vector(4, 0)
    try:
        venv.reset()
        first = venv.workers[1].proc.pid
        flag.touch()  # the next process to reset an env hangs there: the replacement
        os.kill(first, signal.SIGKILL)
        if max_restarts == 1:
            with pytest.raises(EnvError, match=rf"replacing worker {first}\) did not answer within 1 s .* killed; 1 "
                                               rf"restart in a row did not help .*the first failure: env worker "
                                               rf"{first} \(env indices 2\.\.3\) died"):
                venv.step(np.zeros(4, np.int64))
            return
        batch = venv.step(np.zeros(4, np.int64))
        assert batch.restarted is not None and batch.restarted.tolist() == [0, 0, 2, 2] and not flag.exists()
        assert venv.books[1]["in_a_row"] == [2, 2] and venv.workers[1].replaces not in (None, first)
        assert venv.step(np.zeros(4, np.int64)).obs.shape == (4, 4)
    finally:
        venv.close()


def test_errors_come_back_as_themselves_and_restarts_work_in_a_worker(env_module: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LZK_RAISE_AT", "2")
    spec = dataclasses.replace(GymEnvSpec.probe(f"{env_module}:LzkSlowCartPole-v0"), workers=2)
    venv = spec.make_vector(2, 0)
    venv.reset()
    with pytest.raises(EnvError, match=r"\(env index \d, seed \d, step \d of its episode\) raised RuntimeError"):
        for _ in range(3):
            venv.step(np.zeros(2, np.int64))
    venv.close()
    venv = dataclasses.replace(spec, restarts=EnvRestarts(1, 0.0)).make_vector(2, 0)
    venv.reset()
    counts = [b.restarted for b in (venv.step(np.zeros(2, np.int64)) for _ in range(3))]
    assert sum(int(c.sum()) for c in counts if c is not None) == 2  # each worker's env raised at its 2nd step
    venv.close()
    text = dataclasses.replace(GymEnvSpec.probe(f"{env_module}:LzkTextObs-v0"), workers=1).make_vector(1, 0)
    text.reset()
    with pytest.raises(ConfigError, match="returned an observation of type str"):
        text.step(np.zeros(1, np.int64))
    text.close()


def test_workers_ignore_ctrl_c_which_is_the_trainers_to_handle() -> None:
    local, workers = _pair(num_envs=2)
    local.close()
    workers.reset()
    for w in workers.workers:
        os.kill(w.proc.pid, signal.SIGINT)
    time.sleep(0.2)
    assert workers.step(np.zeros(2, np.int64)).obs.shape == (2, 4)  # still answering
    workers.close()


def test_a_run_with_env_workers_is_the_run_without_them(tmp_path: Path) -> None:
    """A tiny ReZero run with ``env.workers=2`` logs the same numbers as with the envs in-process
    (every env row is the same), and resumes from its checkpoint with ``env.workers=0``."""
    import json
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    tiny = ["run.progress=false", "run.threads=1", "run.log_every=1", "policy.num_simulations=4",
            "update_schedule.updates_per_collect=2", "collector.envs=3", "collector.n_episode=3", "evaluator.envs=2",
            "evaluator.episodes=2", "evaluator.every_train_iters=4", "policy.batch_size=16", "run.max_train_iters=8",
            "run.checkpoint_every=4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LZKERNEL")}

    def run(out: Path, *extra: str) -> list[dict]:
        proc = subprocess.run([sys.executable, "-m", "lzkernel", "run", str(repo / "configs" / "cartpole_rezero_fast.yaml"),
                               f"run.out_dir={out}", *tiny, *extra], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/", "wall")) and "seconds" not in k
                 and not k.endswith("ms") and "per_second" not in k and "_share" not in k} for r in records]

    local, workers = run(tmp_path / "local"), run(tmp_path / "workers", "env.workers=2")
    assert local == workers and any("collect/return_mean" in r for r in local)
    resumed = run(tmp_path / "workers", "run.max_train_iters=12", "--resume", "auto")
    assert max(r.get("train_iter", 0) for r in resumed) == 12


def test_review_cases_sessions_progress_indices_ids_and_tracebacks(env_module: str, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """Workers run in their own session with a close-on-exec socket; a restart's wait longer than
    step_timeout_s is progress, not a hang; a restore mismatch names the run's env index; an id
    the trainer alone registered gets a hint; a worker's error carries its traceback."""
    import gymnasium
    from lzk_envs.workers import WorkerTraceback

    local, workers = _pair(num_envs=5)
    local.reset(), workers.reset()
    for w in workers.workers:
        assert os.getsid(w.proc.pid) != os.getsid(0)  # a Ctrl-C to our group does not reach it
        flags = next(line for line in Path(f"/proc/{w.proc.pid}/fdinfo/3").read_text().splitlines()
                     if line.startswith("flags:")) if Path(f"/proc/{w.proc.pid}/fdinfo/3").exists() else None
        assert flags is None or int(flags.split()[1], 8) & 0o2000000  # O_CLOEXEC
    meta, arrays = local.state_dict()
    arrays["obs"][4] += 1.0  # env 4 would not come back
    spec = GymEnvSpec.probe("CartPole-v1")
    again = dataclasses.replace(spec, workers=2).make_vector(5, 7)
    with pytest.raises(ValueError, match=r"env indices \[4\]") as err:
        again.load_state_dict(meta, arrays)
    assert isinstance(err.value.__cause__, WorkerTraceback) and "Traceback" in str(err.value.__cause__)
    for v in (local, workers, again):
        v.close()

    monkeypatch.setenv("LZK_RAISE_AT", "2")
    slow = dataclasses.replace(GymEnvSpec.probe(f"{env_module}:LzkSlowCartPole-v0"), workers=1, step_timeout_s=1.0,
                               restarts=EnvRestarts(1, 2.5))
    venv = slow.make_vector(1, 0)
    venv.reset()
    t0 = time.monotonic()
    restarted = [venv.step(np.zeros(1, np.int64)).restarted for _ in range(2)]
    assert restarted[1] is not None and restarted[1].tolist() == [1] and time.monotonic() - t0 >= 2.5
    venv.close()

    gymnasium.register("LzkTrainerOnly-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    try:
        with pytest.raises(ConfigError, match="needs its module:Id form"):
            dataclasses.replace(GymEnvSpec.probe("LzkTrainerOnly-v0"), workers=1).make_vector(1, 0)
    finally:
        gymnasium.registry.pop("LzkTrainerOnly-v0", None)
