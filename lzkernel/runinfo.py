"""What a run directory says about its run, read without torch: its metric history (records of
an abandoned history dropped), whether a process is running it, and how far it is
(``lzkernel status``).

A run directory's state, in order of evidence: **running** (its lock file names a live process
on this host), **finished / stopped / failed** (``summary.json``, written when the run ended),
**ended without a summary** (metrics but neither: killed with ``kill -9``, a power cut, or a run
of an lzkernel before ``summary.json``), **empty** (nothing recorded yet). Counters are the
summary's where it has them, else the newest of the last metric record and the newest checkpoint.
"""
from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from lzkernel.errors import ConfigError


@dataclass
class History:
    """The records of ``metrics.jsonl`` a caller kept, in logged order, without those a resume from
    an earlier iteration superseded; the names of every metric logged; the last record."""

    records: list[dict[str, Any]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    last: dict[str, Any] | None = None


#: ``event`` of the record a resumed run writes before its first metrics (``lzk_sinks.jsonl``):
#: the checkpoint it resumed from, with that checkpoint's ``train_iter``, ``env_steps`` and
#: ``wall_time``. The records logged after that checkpoint was saved (``wall_time`` above it)
#: belong to an abandoned history: the resumed run records them again or never reaches them.
RESUME_EVENT = "resume"


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def eval_history(run_dir: Path) -> History:
    """The live history's evaluation records (none without a metrics.jsonl)."""
    if not (run_dir / "metrics.jsonl").is_file():
        return History()
    return read_history(run_dir, lambda rec: rec.get("event") == "eval")


def eval_returns(history: History) -> list[Any]:
    """The ``eval/return_mean`` of each evaluation record that logged one, oldest first."""
    return [r["eval/return_mean"] for r in history.records if isinstance(r.get("eval/return_mean"), (int, float))]


def read_history(run_dir: Path, keep: Callable[[dict[str, Any]], bool] = lambda rec: True) -> History:
    """``run_dir/metrics.jsonl`` read once: the records ``keep`` accepts (only those are held in
    memory), without those of abandoned histories (a crash after the last checkpoint, a rewind
    with ``--resume PATH``, a damaged newest checkpoint skipped).

    A resume record (:data:`RESUME_EVENT`) drops the kept records logged after its checkpoint was
    saved (``wall_time`` above the checkpoint's: a run's clock goes on from its checkpoint's, so
    the live history's records are in ``wall_time`` order); the resume records themselves are not
    kept. Run directories written before resume records existed fall back to the iteration: a
    record whose ``train_iter`` goes back starts a new history from that iteration (the kept
    records from there on are dropped). A resume record without ``wall_time`` (a checkpoint
    written before meta held it: the clock restarted at 0) cuts by iteration too. Either way the
    clock may have restarted, so the records before it are of an earlier clock: a later resume
    record compares ``wall_time`` only with the records of the current clock, and cuts the
    earlier ones by iteration (``train_iter`` above its checkpoint's). A line cut by a crash is
    skipped. ConfigError when there is no metrics.jsonl."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no metrics.jsonl (not a run directory of `lzkernel run`)")
    out = History()
    last_iter = -1
    era, eras = 0, []  # the clock each kept record was logged on (parallel to out.records)

    def cut(drop: Callable[[dict[str, Any], int], bool]) -> None:
        nonlocal eras
        kept = [(r, e) for r, e in zip(out.records, eras) if not drop(r, e)]
        out.records, eras = [r for r, _ in kept], [e for _, e in kept]
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash, or damaged
            if not isinstance(rec, dict):
                continue
            it = rec.get("train_iter")
            if rec.get("event") == RESUME_EVENT:
                wall = rec.get("wall_time")
                if _is_num(wall):
                    cut(lambda r, e: (_is_num(r.get("wall_time")) and r["wall_time"] > wall) if e == era
                        else (isinstance(it, int) and r.get("train_iter", -1) > it))
                elif isinstance(it, int):  # a checkpoint without its wall time: by iteration
                    cut(lambda r, e: r.get("train_iter", -1) > it)
                    era += 1  # and the clock restarted at 0 (lzkernel.run: elapsed 0)
                if isinstance(it, int):
                    last_iter = it
                out.last = rec
                continue
            out.names.update(k for k in rec if "/" in k)
            if isinstance(it, int):
                if it < last_iter:
                    cut(lambda r, e: r.get("train_iter", -1) >= it)
                    era += 1  # a resume before resume records: its clock may have restarted
                last_iter = it
            out.last = rec
            if keep(rec):
                out.records.append(rec)
                eras.append(era)
    return out


def _newest_checkpoint_meta(run_dir: Path) -> dict[str, Any] | None:
    """``meta.json`` of the newest complete checkpoint in ``run_dir/ckpt`` (None if none)."""
    from lzkernel.checkpoint import CheckpointStore

    for step in reversed(CheckpointStore(run_dir / "ckpt").complete_steps()):
        try:
            return json.loads((step / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return None


def status(run_dir: Path) -> dict[str, Any]:
    """The state of the run in ``run_dir`` (module docstring), its counters, last and best
    evaluation, and its budgets from ``config.yaml``; ConfigError when it is not a run directory."""
    from lzkernel import rundir
    from lzkernel.checkpoint import pid_alive
    from lzkernel.config.strict_yaml import parse

    require_run_dir(run_dir)
    out: dict[str, Any] = {"run_dir": str(run_dir)}
    stamp = rundir.lock_stamp(run_dir)
    host = socket.gethostname()
    running = stamp is not None and stamp[1] == host and pid_alive(stamp[0])
    if not (run_dir / "config.yaml").is_file():
        if running:  # the lock is taken first, the run files are written once torch is up
            return {**out, "state": "starting", "pid": stamp[0], "started": stamp[2], "train_iter": 0,
                    "env_steps": 0, "wall_time": 0.0, "eval_last": None, "eval_best": None,
                    "max_train_iters": None, "max_env_steps": None, "max_seconds": None}
        raise ConfigError(f"{run_dir}: not a run directory of `lzkernel run` (no config.yaml)")
    summary_path = run_dir / "summary.json"
    summary = _read_summary(summary_path)
    # Which came later, this summary or the lock's run? By the files' own times (one clock: this
    # filesystem's), not the stamp's, which another host's clock wrote.
    lock_mtime = _mtime(run_dir / rundir.LOCK_NAME)
    if summary is not None and (running or (lock_mtime is not None and summary_path.stat().st_mtime < lock_mtime)):
        summary = None  # an earlier run's: this one is going on, or started after it and died
    if running:
        out.update(state="running", pid=stamp[0], started=stamp[2])
    elif summary is not None:
        out.update(state=summary["status"], stop_reason=summary.get("stop_reason"), stop_kind=summary.get("stop_kind"),
                   error=summary.get("error"))
    elif stamp is not None and stamp[1] != host:
        out["state"] = f"held by pid {stamp[0]} on {stamp[1]} (not this host: cannot tell if it runs)"
    else:
        out["state"] = "ended without a summary (killed?)" if (run_dir / "metrics.jsonl").is_file() else "empty"
    history = eval_history(run_dir)
    last = summary if summary is not None else (history.last or {})
    for key in ("train_iter", "env_steps", "wall_time"):
        out[key] = last.get(key, 0)
    newest = _newest_checkpoint_meta(run_dir)
    if newest is not None and newest.get("train_iter", 0) > out["train_iter"]:  # saved after the last record
        out.update({k: newest.get(k, out[k]) for k in ("train_iter", "env_steps", "wall_time")})
    returns = eval_returns(history)
    out["eval_last"] = returns[-1] if returns else None
    out["eval_best"] = max(returns) if returns else None
    cfg = parse((run_dir / "config.yaml").read_text(encoding="utf-8"))
    budgets = _block(cfg, "run")
    out.update({k: budgets.get(k) for k in ("max_train_iters", "max_env_steps", "max_seconds")})
    out.update(what(cfg))
    return out


def _block(cfg: Any, name: str) -> dict[str, Any]:
    block = cfg.get(name) if isinstance(cfg, dict) else None
    return block if isinstance(block, dict) else {}


def what(cfg: Any) -> dict[str, Any]:
    """What a run's ``config.yaml`` (parsed) trains: ``trainer`` and ``policy`` names, ``env``
    (the gymnasium id, the game, or the env plugin's name) and ``seed`` (None where not given)."""
    env = _block(cfg, "env")
    return {"trainer": _block(cfg, "trainer").get("name"), "policy": _block(cfg, "policy").get("name"),
            "env": env.get("id") or env.get("game") or env.get("name"), "seed": _block(cfg, "run").get("seed")}


def _read_summary(path: Path) -> dict[str, Any] | None:
    """``summary.json`` as a mapping, or None when it is absent or unreadable (cut, damaged)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("status"), str) else None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _share(done: Any, budget: Any) -> float:
    return float(done) / float(budget) if isinstance(budget, (int, float)) and budget > 0 else 0.0


def budget_clock(wall: float, train_iter: int, env_steps: int, max_train_iters: Any, max_env_steps: Any,
                 max_seconds: Any = None) -> str:
    """``H:MM:SS`` of the run so far and, while less than the whole budget is done, the share of
    ``run.max_train_iters``, ``run.max_env_steps`` or ``run.max_seconds`` done (whichever is
    further) and the time to go at the run's average pace so far: ``0:02:31, 8% of the budget,
    ~0:27:00 to go`` (the progress line's and ``lzkernel status``'s clock; the time to the
    budget, not to solving)."""
    share = max(_share(train_iter, max_train_iters), _share(env_steps, max_env_steps), _share(wall, max_seconds))
    text = clock(wall)
    if 0.0 < share < 1.0:
        text += f", {share:.0%} of the budget, ~{clock(wall * (1.0 - share) / share)} to go"
    return text


def format_status(st: dict[str, Any]) -> str:
    """One line: ``runs/x: running (pid 123) | rezero/muzero on CartPole-v0, seed 0 | iter 1,200 |
    env 8,123 | eval 187.3 (best 200.0) | 0:02:31, 8% of the budget, ~0:27:00 to go`` (the budget's
    share and time to go while running)."""
    state = st["state"]
    if state in ("running", "starting"):
        state = f"{state} (pid {st['pid']})"
    elif st.get("stop_reason") or st.get("error"):
        state = f"{state}: {st.get('error') or st['stop_reason']}"
    parts = [f"{st['run_dir']}: {state}"]
    algo = "/".join(dict.fromkeys(str(n) for n in (st.get("trainer"), st.get("policy")) if n))  # muzero once
    ran = " on ".join(x for x in (algo, str(st.get("env") or "")) if x)
    label = ", ".join(x for x in (ran, "" if st.get("seed") is None else f"seed {st['seed']}") if x)
    if label:
        parts.append(label)
    parts += [f"iter {st['train_iter']:,}", f"env {st['env_steps']:,}"]
    if st["eval_last"] is not None:
        parts.append(f"eval {eval_text(st['eval_last'])} (best {eval_text(st['eval_best'])})")
    wall = float(st["wall_time"] or 0.0)
    if st["state"] == "running":
        parts.append(budget_clock(wall, st["train_iter"], st["env_steps"], st["max_train_iters"], st["max_env_steps"],
                                  st.get("max_seconds")))
    else:
        parts.append(clock(wall))
    return " | ".join(parts)


def format_solved(sts: list[dict[str, Any]]) -> str | None:
    """The line under several runs' status lines: how many solved (``stop_kind`` "solved") and,
    of those, the median wall time, iteration and env steps to solve; None for fewer than two
    runs or when none has ended yet."""
    ended = [st for st in sts if st["state"] not in ("running", "starting")]
    if len(sts) < 2 or not ended:
        return None
    solved = [st for st in sts if st.get("stop_kind") == "solved"]
    going = len(sts) - len(ended)
    line = f"solved {len(solved)} of {len(sts)}" + (f" so far ({going} still running)" if going else "")
    if solved:
        wall, it, env = (statistics.median(float(st[k] or 0) for st in solved)
                         for k in ("wall_time", "train_iter", "env_steps"))
        line += f"; median of the solved: {clock(wall)} | iter {it:,.0f} | env {env:,.0f}"
    return line


def clock(seconds: float) -> str:
    """``H:MM:SS`` of a duration (the progress line's and ``lzkernel status``'s clock)."""
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def status_lines(dirs: Sequence[str]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """``lzkernel status``'s work: the status of each run (a sweep's directory stands for its
    runs), its line, and one error line per directory that is not a run's (a bad one spoils no
    other line); the "solved" line follows the lines of several runs (one per point of a grid
    with seeds: the runs in one ``seed_<S>`` parent)."""
    from lzkernel.sweep import expand_sweeps, sweep_unstarted

    report, lines, errors, ran = [], [], [], []
    for d in expand_sweeps(dirs):
        try:
            report.append(status(Path(d)))
        except ConfigError as exc:
            errors.append(f"lzkernel: error: {exc}")
            continue
        ran.append(d)
        lines.append(format_status(report[-1]))
    for d in dirs:  # a sweep stopped before some of its runs: they are named, not left out
        try:
            lines += [f"{run}: not started (listed in {Path(d) / 'sweep.json'})" for run in sweep_unstarted(Path(d))]
        except ConfigError as exc:
            errors.append(f"lzkernel: error: {exc}")
    return report, lines + solved_lines(report, ran), errors


def solved_lines(sts: list[dict[str, Any]], dirs: Sequence[str | Path]) -> list[str]:
    """The "solved" lines under several runs' status lines (``dirs``: their directories): one
    per group of seeds when there are several (a grid with seeds: how each point did,
    :func:`lzkernel.sweep.seed_groups`), else one over all the runs."""
    from lzkernel.sweep import seed_groups

    groups = seed_groups(dirs)
    if sum(len(g) > 1 for g in groups.values()) > 1:
        return [f"{parent.name}: {line}" for parent, ids in groups.items()
                if (line := format_solved([sts[i] for i in ids]))]
    line = format_solved(sts)
    return [line] if line else []


def require_run_dir(path: Path) -> None:
    """ConfigError unless ``path`` is a directory (``status``/``plot`` of a run)."""
    if not path.is_dir():
        raise ConfigError(f"{path}: " + ("not a run directory (a file)" if path.exists() else "no such run directory"))


def eval_text(value: float) -> str:
    """An evaluation return for a status line: one decimal for CartPole's 195.3, three places
    for a board game's 0.25 or -0.125 (returns in [-1, 1])."""
    if abs(value) >= 10:
        return f"{value:.1f}"
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def watch(dirs: Sequence[str], every: float, *, out: TextIO = sys.stdout, sleep: Callable[[float], None] = time.sleep,
          rounds: int | None = None) -> int:
    """``lzkernel status --watch``: the status lines again every ``every`` seconds (the screen
    cleared first on a terminal; a directory's error is a line of the screen), until no run is
    running or starting (nor held on another host, nor a sweep writing into a directory given:
    it starts its next run) in two rounds in a row with the same runs, Ctrl-C (exit 0), or
    ``rounds`` rounds (tests). Returns 2 when a directory was not a run's in the last round (at
    once when no directory is), else 0."""
    from lzkernel.sweep import sweep_running

    seen: list[str] | None = None
    n = 0
    try:
        while True:
            report, lines, errors = status_lines(dirs)
            live = sum(st["state"] in ("running", "starting") or st["state"].startswith("held by") for st in report)
            sweeping = any(sweep_running(Path(d)) for d in dirs)
            if out.isatty():
                out.write("\033[H\033[J")
            out.write(f"{time.strftime('%H:%M:%S')}  {live} of {len(report)} runs running"
                      f"{', a sweep going on' if sweeping else ''} (every {every:g} s; Ctrl-C to stop)\n")
            out.write("".join(line + "\n" for line in [*lines, *errors]))
            out.flush()
            if errors and not report:
                return 2
            runs = [st["run_dir"] for st in report]
            n += 1
            ended = live == 0 and not sweeping
            if (rounds is not None and n >= rounds) or (ended and runs == seen):
                return 2 if errors else 0
            seen = runs if ended else None
            sleep(every)
    except KeyboardInterrupt:
        return 0
