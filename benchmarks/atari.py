"""Pong with the MuZero and UniZero Atari configs on this CPU: acting speed, learner speed, replay
bytes per transition and memory.

    python benchmarks/atari.py                         # short default (~2-4 minutes on 2 cores)
    python benchmarks/atari.py --env-steps 100000 --capacity 50000 --act-steps 50 --updates 10

For each config, built through the registry exactly as `lzkernel run` builds it (full-size models):

* **collect**: the collector's envs acting with the policy's collect-mode search for
  ``--act-steps`` steps per env: env steps/s, and the network's share of the acting time
  (``search/network_share``: root and recurrent inference over the whole act call; the rest is
  the emulator, preprocessing and the tree);
* **replay**: ``--env-steps`` env steps of uniformly random play pushed into the config's replay
  buffer with its capacity set to ``--capacity`` (so the second half of the run is at capacity):
  bytes per stored transition (frames in the pool + every per-transition slot array), against one
  uint8 frame; RSS at the half and at the end (flat once the buffer is full);
* **learner**: ``--updates`` sample + learn steps at the config's batch size: ms per update.

Results are printed and written as JSON (``--json-out``, default benchmarks/results/atari.json).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from _results import write_results  # noqa: E402

CONFIGS = ("configs/atari_pong_muzero.yaml", "configs/atari_pong_efficientzero.yaml", "configs/atari_pong_unizero.yaml")


def build(config: str, capacity: int) -> dict[str, Any]:
    """Env spec, policy, buffer and collector of ``config`` (buffer capacity ``capacity``)."""
    from lzkernel.config.loader import load_config
    from lzkernel.pluginmanager import Kernel
    from lzkernel.run import RunContext

    kernel = Kernel()
    cfg = load_config(ROOT / config, [f"buffer.capacity={capacity}", "run.out_dir=/nonexistent"], kernel.registry)
    run = RunContext(kernel, cfg, argv=[])
    env_spec = run.build("env")
    policy = run.build("policy", env_spec=env_spec)
    spec = policy.target_spec
    return {"cfg": cfg, "env_spec": env_spec, "policy": policy, "spec": spec,
            "buffer": run.build("buffer", env_spec=env_spec, target_spec=spec),
            "collector": run.build("collector", env_spec=env_spec, frame_stack=spec.frame_stack)}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        import os

        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_acting(parts: dict[str, Any], steps_per_env: int) -> dict[str, float]:
    from lzk_workers.rollout import EpisodePlayer

    env_spec, policy = parts["env_spec"], parts["policy"]
    envs = parts["cfg"].section("collector").envs
    player = EpisodePlayer(env_spec.make_vector(envs, 0), env_spec, parts["spec"].frame_stack, mode="collect",
                           record=False)
    player.restart()
    t0 = time.perf_counter()
    result = player.play_segments(policy, steps_per_env, n_segments=envs, temperature=0.25)
    seconds = time.perf_counter() - t0
    player.close()
    return {"env_steps": result.env_steps, "seconds": round(seconds, 2),
            "env_steps_per_s": round(result.env_steps / seconds, 2),
            "network_share": round(result.policy_metrics.get("search/network_share", float("nan")), 3),
            "search_ms": round(result.policy_metrics.get("search/ms", float("nan")), 1)}


def buffer_bytes(buffer: Any) -> dict[str, float]:
    """Bytes per stored transition: the frames in the pool, and every slot array of the live segments."""
    st = buffer.store
    live = st.live_slots()
    n = max(buffer.num_transitions, 1)
    fixed = sum(getattr(st, name)[live].nbytes for name in st.array_names)
    frame = int(np.prod(st.obs_shape)) * st.pool.dtype.itemsize
    return {"transitions": buffer.num_transitions, "frame_bytes": frame,
            "frames_per_transition": round(st.pool.num_frames / n, 4),
            "frame_bytes_per_transition": round(st.pool.nbytes / n, 1),
            "fixed_bytes_per_transition": round(fixed / n, 1),
            "bytes_per_transition": round((st.pool.nbytes + fixed) / n, 1),
            "goal_bytes_per_transition": round(1.1 * frame + fixed / n, 1)}


def fill_replay(parts: dict[str, Any], env_steps: int) -> dict[str, Any]:
    """Random play pushed into the buffer; RSS sampled along the way."""
    from lzk_workers.rollout import EpisodePlayer, RandomActor

    env_spec, buffer = parts["env_spec"], parts["buffer"]
    envs = parts["cfg"].section("collector").envs
    L = buffer.L
    player = EpisodePlayer(env_spec.make_vector(envs, 1), env_spec, parts["spec"].frame_stack, mode="collect",
                           record=True)
    actor = RandomActor(np.random.default_rng(0))
    done, marks = 0, []
    t0 = time.perf_counter()
    while done < env_steps:
        result = player.play_segments(actor, L, n_segments=envs)
        buffer.push(result.pieces)
        done += result.env_steps
        marks.append((done, rss_mb(), buffer.num_transitions))
    seconds = time.perf_counter() - t0
    player.close()
    full_at = next((d for d, _, n in marks if n >= 0.95 * buffer.capacity), None)
    half = next(r for d, r, _ in marks if d >= done / 2)
    return {"env_steps": done, "seconds": round(seconds, 1), "env_steps_per_s": round(done / seconds, 1),
            "capacity": buffer.capacity, "buffer_full_at_env_steps": full_at,
            "rss_mb_half": round(half, 1), "rss_mb_end": round(marks[-1][1], 1),
            "rss_growth_second_half": round(marks[-1][1] / half - 1.0, 4), **buffer_bytes(buffer)}


def measure_learner(parts: dict[str, Any], updates: int) -> dict[str, float]:
    policy, buffer, spec = parts["policy"], parts["buffer"], parts["spec"]
    rng = np.random.default_rng(0)
    sample_s, learn_s = [], []
    for i in range(updates + 1):  # the first update warms up (allocations, lazy snapshots)
        t0 = time.perf_counter()
        batch = buffer.sample(spec.batch_size, rng, policy)
        t1 = time.perf_counter()
        policy.learn(batch)
        t2 = time.perf_counter()
        if i:
            sample_s.append(t1 - t0)
            learn_s.append(t2 - t1)
    return {"batch_size": spec.batch_size, "updates": updates,
            "sample_ms": round(1e3 * float(np.mean(sample_s)), 1), "learn_ms": round(1e3 * float(np.mean(learn_s)), 1),
            "ms_per_update": round(1e3 * float(np.mean(sample_s) + np.mean(learn_s)), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--env-steps", type=int, default=20_000, help="random env steps pushed into the buffer")
    ap.add_argument("--capacity", type=int, default=10_000, help="buffer capacity (reached halfway by default)")
    ap.add_argument("--act-steps", type=int, default=4, help="collect-mode acting steps per env")
    ap.add_argument("--updates", type=int, default=2, help="timed learner updates (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    import os

    import torch

    torch.set_num_threads(args.threads)
    rows = {}
    for config in args.configs:
        parts = build(config, args.capacity)
        name = Path(config).stem
        print(f"== {name}", flush=True)
        replay = fill_replay(parts, args.env_steps)
        print(f"replay  {replay}", flush=True)
        learner = measure_learner(parts, args.updates)
        print(f"learner {learner}", flush=True)
        acting = measure_acting(parts, args.act_steps)
        print(f"collect {acting}", flush=True)
        rows[name] = {"collect": acting, "replay": replay, "learner": learner}
        parts["collector"].close()
    print()
    print(f"{'config':<22} {'collect st/s':>12} {'net share':>9} {'learn ms':>9} {'B/trans':>8} {'goal B':>8} "
          f"{'RSS half':>9} {'RSS end':>8} {'growth':>7}")
    for name, r in rows.items():
        c, rep, le = r["collect"], r["replay"], r["learner"]
        print(f"{name:<22} {c['env_steps_per_s']:>12} {c['network_share']:>9} {le['ms_per_update']:>9} "
              f"{rep['bytes_per_transition']:>8} {rep['goal_bytes_per_transition']:>8} {rep['rss_mb_half']:>9} "
              f"{rep['rss_mb_end']:>8} {rep['rss_growth_second_half']:>7}")
    load = os.getloadavg()
    summary = {"args": vars(args), "cpu_count": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in load],
               "results": rows}
    write_results(summary, "atari.json", args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
