"""``lzkernel run CONFIG --seeds 0 1 2``: one run per seed, one after another, each in its own
directory ``<run.out_dir>/seed_<S>``, then one status line per seed.

Each seed runs as its own ``lzkernel run`` process (same config, overrides and plugin options,
plus ``run.seed=S`` and its directory), so nothing one run leaves in a process (numba's and
torch's thread pools, signal handlers, plugin state) reaches the next, and each run directory is
exactly what a single run would write: ``lzkernel status``, ``plot`` (the seeds drawn as a median
with a band), ``eval`` and ``--resume auto`` work on them unchanged. One at a time, because on a
small machine two runs side by side halve each other's speed.

A seed that fails (exit 1) is reported and the next one starts. A signal (Ctrl-C, SIGTERM, to
this process or its whole group) is passed on to the running seed once, which saves and stops, and
ends the sweep; its exit code is then the stopped seed's (128 + N). Otherwise it is the first
non-zero one of the seeds, else 0. Continuing a stopped sweep: the same command with ``--resume
auto`` (each seed resumes its own directory, or starts if it has none yet).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from lzkernel.config.redact import redact_argv
from lzkernel.errors import ConfigError

#: Exit codes of a seed stopped by a signal (128 + SIGINT, 128 + SIGTERM): they end the sweep.
STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def start_sweep(args: Any, kernel: Any, out_dir: str) -> int:
    """``lzkernel run --seeds`` (``args``: the parsed command line; ``out_dir``: the resolved
    ``run.out_dir``): every seed's config validated and its directory checked here (exit 2 before
    any seed starts), then :func:`run_seeds`."""
    from lzkernel.checkpoint import refuse_fresh_run_into
    from lzkernel.cli import plugin_argv
    from lzkernel.config.loader import load_config

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("--seeds runs one process per seed; it cannot run under a multi-rank launcher "
                          "(launch each seed's run on its own)")
    if len(set(args.seeds)) != len(args.seeds):
        raise ConfigError(f"--seeds {' '.join(map(str, args.seeds))}: a seed is repeated (each gets one run directory)")
    if args.resume not in (None, "auto"):
        raise ConfigError(f"--resume {args.resume} with --seeds: a checkpoint belongs to one run; use --resume auto "
                          "(each seed resumes its own directory)")
    if any(o.lstrip("+").startswith("run.seed=") for o in args.overrides):
        raise ConfigError("run.seed=... with --seeds: give the seeds with --seeds alone")
    # run.out_dir (the file's or an override's) is the sweep's directory; each seed gets its own below it
    overrides = [o for o in args.overrides if not o.lstrip("+").startswith("run.out_dir=")]
    for seed in args.seeds:
        directory = seed_dir(out_dir, seed)
        load_config(args.config, [*overrides, f"run.seed={seed}", f"run.out_dir={directory}"], kernel.registry)
        if args.resume is None:
            refuse_fresh_run_into(directory)
    passed = [*plugin_argv(args), *["-v"] * args.verbose, *["--traceback"] * args.traceback]
    return run_seeds(args.config, overrides, args.seeds, out_dir, passed, args.resume)


def expand_sweeps(dirs: Sequence[str]) -> list[str]:
    """Each directory as given, except a sweep's: its seeds' run directories instead
    (:func:`seed_dirs`; ``lzkernel status`` and ``plot`` take a sweep's directory so)."""
    return [str(x) for d in dirs for x in (seed_dirs(Path(d)) or [d])]


def seed_dir(out_dir: str | Path, seed: int) -> Path:
    """Where seed ``seed`` of a sweep writes its run."""
    return Path(out_dir) / f"seed_{seed}"


def seed_dirs(path: Path) -> list[Path]:
    """The seeds' run directories of the sweep in ``path``, in seed order; [] when ``path`` is not
    a sweep's directory (it is a run directory itself, or holds no ``seed_<S>`` runs)."""
    if not path.is_dir() or (path / "config.yaml").exists():
        return []
    runs = [d for d in path.glob("seed_*") if d.name[5:].lstrip("-").isdigit() and (d / "config.yaml").is_file()]
    return sorted(runs, key=lambda d: int(d.name[5:]))


def seed_command(config: str, overrides: Sequence[str], seed: int, out_dir: Path, pass_args: Sequence[str],
                 resume: str | None) -> list[str]:
    """The ``lzkernel run`` command line of one seed: the sweep's config, overrides and options
    (``pass_args``), with the seed and its directory."""
    tail = ["--resume", resume] if resume else []
    return [sys.executable, "-m", "lzkernel", "run", config, *overrides, f"run.seed={seed}",
            f"run.out_dir={out_dir}", *pass_args, *tail]


def run_seeds(config: str, overrides: Sequence[str], seeds: Sequence[int], out_dir: str,
              pass_args: Sequence[str], resume: str | None) -> int:
    """Run ``seeds`` one after another (module docstring); returns the sweep's exit code.

    Each seed runs in its own session, so a signal to the sweep's process group (Ctrl-C, a
    ``timeout``, a batch scheduler) reaches the seed once, through this process, not twice (a
    second signal makes a run exit at once, without saving). ``pass_args``: the plugin and
    logging options every seed gets."""
    from lzkernel.launch import die_with_parent

    codes: dict[int, int] = {}
    current: list[subprocess.Popen[bytes]] = []
    stop: list[int] = []  # the signals received: no further seed starts

    def forward(signum: int, frame: Any) -> None:
        stop.append(signum)
        for proc in current:  # the running seed saves and stops (a second signal: at once)
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i, seed in enumerate(seeds):
            if stop:
                break
            directory = seed_dir(out_dir, seed)
            cmd = seed_command(config, overrides, seed, directory, pass_args, resume)
            print(f"lzkernel: seed {seed} ({i + 1} of {len(seeds)}) in {directory}: {shlex.join(redact_argv(cmd[3:]))}",
                  file=sys.stderr, flush=True)
            proc = subprocess.Popen(cmd, env=os.environ.copy(), start_new_session=True,
                                    preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
            current[:] = [proc]
            if stop:  # a signal came while the seed was being started: it did not reach it
                proc.send_signal(stop[-1])
            code = proc.wait()
            current.clear()
            codes[seed] = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says
            if code < 0 or codes[seed] in STOPPED:  # stopped by a signal (ours, or one sent to the seed)
                stop.append(codes[seed] - 128)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _report(codes, seeds, out_dir)
    if not stop:
        return next((code for code in codes.values() if code != 0), 0)
    if len(codes) < len(seeds):
        print("lzkernel: sweep stopped; continue it with the same command and --resume auto", file=sys.stderr,
              flush=True)
    # Stopped: the exit code says so (the stopped seed's 128 + N, or 128 + N of a signal between seeds).
    return next((code for code in reversed(codes.values()) if code > 128), 128 + stop[0])


def _report(codes: dict[int, int], seeds: Sequence[int], out_dir: str) -> None:
    """One status line per seed run, with its exit code; then how many solved, and how fast."""
    from lzkernel.runinfo import format_solved, format_status, status

    print(f"lzkernel: {len(codes)} of {len(seeds)} seeds run:", file=sys.stderr, flush=True)
    statuses = []
    for seed, code in codes.items():
        try:
            statuses.append(status(seed_dir(out_dir, seed)))
            line = format_status(statuses[-1])
        except Exception as exc:  # noqa: BLE001 - a seed that wrote nothing still gets its line (exc names it)
            line = str(exc)
        print(f"  exit {code:>3}  {line}", file=sys.stderr, flush=True)
    solved = format_solved(statuses)
    if solved is not None:
        print(f"  {solved}", file=sys.stderr, flush=True)
