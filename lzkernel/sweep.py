"""Sweeps: ``lzkernel run CONFIG --seeds 0 1 2`` runs one seed after another, each in its own
directory ``<run.out_dir>/seed_<S>``; ``--grid KEY=V1,V2`` (repeatable) runs every combination
of the values given (the grid's points, in the order written), each in
``<run.out_dir>/<KEY=V,...>`` or, with ``--seeds``, in ``<run.out_dir>/<KEY=V,...>/seed_<S>``.
Then one status line per run, and how many solved (per point of a grid).

Each run is its own ``lzkernel run`` process (same config, overrides and plugin options, plus the
point's overrides, ``run.seed=S`` and its directory), so nothing one run leaves in a process
(numba's and torch's thread pools, signal handlers, plugin state) reaches the next, and each run
directory is exactly what a single run would write: ``lzkernel status``, ``plot`` (runs that
differ only in their seed drawn as a median with a band), ``eval``, ``config --diff`` and
``--resume auto`` work on them, and take the sweep's directory for all its runs. One at a time,
because on a small machine two runs side by side halve each other's speed.

A run that fails (exit 1) is reported and the next one starts. A signal (Ctrl-C, SIGTERM, to
this process or its whole group) is passed on to the running run once, which saves and stops, and
ends the sweep; its exit code is then the stopped run's (128 + N). Otherwise it is the first
non-zero one of the runs, else 0. Continuing a stopped sweep: the same command with ``--resume
auto`` (each run resumes its own directory, or starts if it has none yet).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lzkernel.config.redact import redact_argv
from lzkernel.errors import ConfigError

#: Exit codes of a seed stopped by a signal (128 + SIGINT, 128 + SIGTERM): they end the sweep.
STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)
#: Keys a sweep sets itself: a grid cannot vary them.
_OWN_KEYS = ("run.seed", "run.out_dir")
#: Set in the environment of a sweep's runs: a stopped run leaves the "continue with" line to the
#: sweep, whose own command resumes every seed.
SWEEP_CHILD_ENV = "LZKERNEL_SWEEP_CHILD"
#: The file in a sweep's directory that lists its runs (:func:`record_runs`).
SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its directory, its overrides (the grid point's, then ``run.seed``), and
    the point it belongs to ("" without a grid) and its seed (None: the config's)."""

    directory: Path
    overrides: tuple[str, ...]
    point: str
    seed: int | None


def split_values(text: str) -> list[str]:
    """``a,[1,2],{x: 1},'p,q'`` → the values at the top level of commas (inside brackets, braces
    and quotes a comma belongs to the value)."""
    values, depth, quote, start = [], 0, "", 0
    for k, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and not text[start:k].strip():  # a quote opens only a value (not "it's")
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:k].strip())
            start = k + 1
    values.append(text[start:].strip())
    return values


def grid_points(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The points of ``--grid KEY=V1,V2,...`` (each ``spec`` one key): ``(name, overrides)`` for
    every combination, the first key varying slowest; the name, ``KEY=V,KEY=V``, is the point's
    directory (a ``/`` in a value becomes ``_``). ConfigError naming ``--grid`` for a bad spec."""
    import yaml

    from lzkernel.config.loader import parse_override
    from lzkernel.config.redact import is_secret_path

    axes: list[list[str]] = []
    keys: list[str] = []
    for spec in specs:
        op, bare, text = parse_override(spec)
        key = op + bare
        if op == "~" or text is None or not bare or bare.startswith("-"):
            raise ConfigError(f"--grid {spec}: expected KEY=VALUE1,VALUE2,... (e.g. --grid policy.lr=1e-3,3e-3)")
        if any(_nested(bare, own) for own in _OWN_KEYS):
            raise ConfigError(f"--grid {spec}: {bare} holds what the sweep sets ({', '.join(_OWN_KEYS)}; use --seeds "
                              "for seeds; each run's directory is below run.out_dir)")
        if is_secret_path(bare):
            raise ConfigError(f"--grid {spec}: {bare} is a secret (its values would name directories); run those "
                              "runs one by one")
        if any(_nested(bare, k.lstrip("+")) for k in keys):
            raise ConfigError(f"--grid {spec}: {bare} is given twice (or within another --grid key); give all its "
                              "values in one --grid")
        values = split_values(text)
        try:
            parsed = [_number(yaml.safe_load(v)) for v in values]
        except yaml.YAMLError as exc:
            raise ConfigError(f"--grid {spec}: a value is not valid YAML ({str(exc).splitlines()[0]})") from None
        if any(not v for v in values) or any(parsed[i] in parsed[:i] for i in range(len(parsed))):
            raise ConfigError(f"--grid {spec}: expected distinct, non-empty values separated by commas (as YAML "
                              "reads them: 1e-3 and 0.001 are one value)")
        keys.append(key)
        axes.append(values)
    points = []
    for combo in itertools.product(*axes):
        overrides = [f"{key}={value}" for key, value in zip(keys, combo)]
        points.append((",".join(o.lstrip("+") for o in overrides).replace("/", "_"), overrides))
    return points


def _number(value: Any) -> Any:
    """A YAML value as the config reads it: text that is a float (PyYAML reads ``1e-3`` as text; a
    float option takes it) as that float."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _nested(a: str, b: str) -> bool:
    """Whether dotted keys ``a`` and ``b`` are the same key or one holds the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def out_dir_override(directory: Path) -> str:
    """``run.out_dir='DIR'``: quoted, so that a point's name (``{a: 1}``, `` #``) stays one path."""
    return "run.out_dir='" + str(directory).replace("'", "''") + "'"


def plan(out_dir: str | Path, grid: Sequence[str], seeds: Sequence[int]) -> list[SweepRun]:
    """Every run of a sweep, in the order they run: each grid point (one point without a grid),
    each seed within it (the config's seed without ``seeds``)."""
    runs = []
    points = grid_points(grid) if grid else [("", [])]
    names = [name for name, _ in points]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"--grid: two points would share the directory {twice!r} (values that differ only in '/' "
                          "and '_'); rename one")
    for name, _ in points:
        if len(name.encode()) > 255:
            raise ConfigError(f"--grid: the point directory {name[:60]!r}... is {len(name.encode())} bytes, over the "
                              "file-name limit of 255; use shorter values")
    for name, overrides in points:
        base = Path(out_dir) / name if name else Path(out_dir)
        for seed in seeds or [None]:
            directory = seed_dir(base, seed) if seed is not None else base
            extra = [f"run.seed={seed}"] if seed is not None else []
            runs.append(SweepRun(directory, (*overrides, *extra), name, seed))
    return runs


def start_sweep(args: Any, kernel: Any, out_dir: str) -> int:
    """``lzkernel run --seeds/--grid`` (``args``: the parsed command line; ``out_dir``: the
    resolved ``run.out_dir``): every run's config validated and its directory checked here (exit
    2 before any run starts), then :func:`run_all`."""
    from lzkernel.checkpoint import refuse_fresh_run_into
    from lzkernel.cli import plugin_argv
    from lzkernel.config.loader import load_config, parse_override

    seeds, grid = args.seeds or [], args.grid or []
    what = "--seeds" if not grid else "--grid"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(f"{what} runs one process per run; it cannot run under a multi-rank launcher "
                          "(launch each run on its own)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {' '.join(map(str, args.seeds))}: a seed is repeated (each gets one run directory)")
    if args.resume not in (None, "auto"):
        raise ConfigError(f"--resume {args.resume} with {what}: a checkpoint belongs to one run; use --resume auto "
                          "(each run resumes its own directory)")
    given = [parse_override(o)[1] for o in args.overrides]  # the keys the overrides name
    if seeds and "run.seed" in given:
        raise ConfigError("run.seed=... with --seeds: give the seeds with --seeds alone")
    runs = plan(out_dir, grid, seeds)
    varied = [key for key in (parse_override(o)[1] for o in runs[0].overrides) if key != "run.seed"]
    if clash := sorted({v for v in varied for g in given if _nested(v, g)}):
        raise ConfigError(f"--grid varies {', '.join(clash)}, which an override also sets: give it in one place")
    # run.out_dir (the file's or an override's) is the sweep's directory; each run gets its own below it
    overrides = [o for o, key in zip(args.overrides, given) if key != "run.out_dir"]
    for r in runs:
        load_config(args.config, [*overrides, *r.overrides, out_dir_override(r.directory)], kernel.registry)
        if args.resume is None:
            refuse_fresh_run_into(r.directory)
    passed = [*plugin_argv(args), *["-v"] * args.verbose, *["--traceback"] * args.traceback]
    if args.dry_run:  # every run validated above: say what would run, start nothing
        for i, r in enumerate(runs):
            cmd = run_command(args.config, overrides, r, passed, args.resume)
            print(f"{_name(r)} ({i + 1} of {len(runs)}) in {r.directory}: {shlex.join(redact_argv(cmd[3:]))}")
        return 0
    record_runs(Path(out_dir), runs, running=True)
    try:
        return run_all(args.config, overrides, runs, passed, args.resume)
    finally:
        record_runs(Path(out_dir), runs, running=False)


def record_runs(out_dir: Path, runs: Sequence[SweepRun], running: bool) -> None:
    """Add the runs to ``<out_dir>/sweep.json`` (``runs``: paths relative to out_dir, in the order
    they run, after those of earlier sweeps into the same directory; ``pid``, ``host``: this
    sweep's process while ``running``, else null): what :func:`sweep_runs` and
    :func:`sweep_running` read, so the sweep's directory stands for exactly its runs."""
    import socket

    from lzkernel.checkpoint import write_text_atomic

    path = out_dir / SWEEP_FILE
    listed = json.loads(path.read_text(encoding="utf-8"))["runs"] if path.is_file() else []
    new = [r.directory.relative_to(out_dir).as_posix() for r in runs]
    body = {"runs": [*listed, *(n for n in new if n not in listed)], "pid": os.getpid() if running else None,
            "host": socket.gethostname() if running else None}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(body, indent=1) + "\n")


def sweep_running(path: Path) -> bool:
    """Whether the sweep that writes into ``path`` is still going (its process, on this host, is
    alive): ``lzkernel status --watch`` waits for its next run."""
    import socket

    from lzkernel.checkpoint import pid_alive

    try:
        body = json.loads((path / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    pid = body.get("pid")
    return isinstance(pid, int) and body.get("host") == socket.gethostname() and pid_alive(pid)


def expand_sweeps(dirs: Sequence[str]) -> list[str]:
    """Each directory as given, except a sweep's: its runs' directories instead
    (:func:`sweep_runs`; ``lzkernel status``, ``plot`` and ``eval`` take a sweep's directory so)."""
    return [str(x) for d in dirs for x in (sweep_runs(Path(d)) or [d])]


def seed_groups(dirs: Sequence[str | Path]) -> dict[Path, list[int]]:
    """The runs of one config, by position in ``dirs``: the runs in one ``seed_<S>`` parent (a
    ``--seeds`` sweep, or one point of a ``--grid`` with seeds) form a group, keyed by that
    parent; any other run is a group of its own, keyed by itself."""
    groups: dict[Path, list[int]] = {}
    for i, d in enumerate(map(Path, dirs)):
        groups.setdefault(d.parent if d.name.startswith("seed_") else d, []).append(i)
    return groups


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


def sweep_runs(path: Path) -> list[Path]:
    """The run directories of the sweep in ``path``, in the order they ran: those its
    ``sweep.json`` lists that have started (:func:`record_runs`; a starting run has a lock file
    only), else (a sweep from before that file) its ``seed_<S>`` runs; [] when ``path`` is not a
    sweep's directory."""
    listed = _listed(path)
    if listed is None:
        return seed_dirs(path) if path.is_dir() and not (path / "config.yaml").exists() else []
    return [run for run in listed if _started(run)]


def sweep_unstarted(path: Path) -> list[Path]:
    """The runs the sweep in ``path`` lists that have not started (a sweep stopped before them)."""
    return [run for run in _listed(path) or [] if not _started(run)]


def _listed(path: Path) -> list[Path] | None:
    """The runs ``path/sweep.json`` lists (None: ``path`` is no sweep's directory with that file)."""
    if not path.is_dir() or (path / "config.yaml").exists() or not (path / SWEEP_FILE).is_file():
        return None
    try:
        listed = json.loads((path / SWEEP_FILE).read_text(encoding="utf-8"))["runs"]
        return [path / rel for rel in listed]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path / SWEEP_FILE}: not a sweep's record (a JSON object with a list 'runs'): "
                          f"{type(exc).__name__}: {exc}") from None


def _started(run: Path) -> bool:
    from lzkernel.rundir import LOCK_NAME

    # a run that is starting holds its lock before it writes config.yaml
    return (run / "config.yaml").is_file() or (run / LOCK_NAME).is_file()


def run_command(config: str, overrides: Sequence[str], run: SweepRun, pass_args: Sequence[str],
                resume: str | None) -> list[str]:
    """The ``lzkernel run`` command line of one run: the sweep's config, overrides and options
    (``pass_args``), with the run's overrides (its point's and seed) and directory."""
    tail = ["--resume", resume] if resume else []
    return [sys.executable, "-m", "lzkernel", "run", config, *overrides, *run.overrides,
            out_dir_override(run.directory), *pass_args, *tail]


def run_all(config: str, overrides: Sequence[str], runs: Sequence[SweepRun], pass_args: Sequence[str],
            resume: str | None) -> int:
    """Run ``runs`` one after another (module docstring); returns the sweep's exit code.

    Each run is in its own session, so a signal to the sweep's process group (Ctrl-C, a
    ``timeout``, a batch scheduler) reaches the run once, through this process, not twice (a
    second signal makes a run exit at once, without saving). ``pass_args``: the plugin and
    logging options every run gets."""
    from lzkernel.launch import die_with_parent

    codes: dict[SweepRun, int] = {}
    current: list[subprocess.Popen[bytes]] = []
    stop: list[int] = []  # the signals received: no further seed starts

    def forward(signum: int, frame: Any) -> None:
        stop.append(signum)
        for proc in current:  # the running seed saves and stops (a second signal: at once)
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i, run in enumerate(runs):
            if stop:
                break
            cmd = run_command(config, overrides, run, pass_args, resume)
            print(f"lzkernel: {_name(run)} ({i + 1} of {len(runs)}) in {run.directory}: "
                  f"{shlex.join(redact_argv(cmd[3:]))}", file=sys.stderr, flush=True)
            proc = subprocess.Popen(cmd, env={**os.environ, SWEEP_CHILD_ENV: "1"}, start_new_session=True,
                                    preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
            current[:] = [proc]
            if stop:  # a signal came while the seed was being started: it did not reach it
                proc.send_signal(stop[-1])
            code = proc.wait()
            current.clear()
            codes[run] = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says
            if code < 0 or codes[run] in STOPPED:  # stopped by a signal (ours, or one sent to the run)
                stop.append(codes[run] - 128)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _report(codes, runs)
    if not stop:
        return next((code for code in codes.values() if code != 0), 0)
    if len(codes) < len(runs):
        print("lzkernel: sweep stopped; continue it with the same command and --resume auto", file=sys.stderr,
              flush=True)
    # Stopped: the exit code says so (the stopped seed's 128 + N, or 128 + N of a signal between seeds).
    return next((code for code in reversed(codes.values()) if code > 128), 128 + stop[0])


def _name(run: SweepRun) -> str:
    """``seed 3``, ``policy.lr=0.001`` or ``policy.lr=0.001, seed 3``: a run in the sweep's lines."""
    return ", ".join(x for x in (run.point, f"seed {run.seed}" if run.seed is not None else "") if x)


def _report(codes: dict[SweepRun, int], runs: Sequence[SweepRun]) -> None:
    """One status line per run, with its exit code; then how many solved, and how fast (for each
    point of a grid)."""
    from lzkernel.runinfo import format_status, solved_lines, status

    print(f"lzkernel: ran {len(codes)} of {len(runs)} runs:", file=sys.stderr, flush=True)
    statuses, dirs = [], []
    for run, code in codes.items():
        try:
            statuses.append(status(run.directory))
            dirs.append(run.directory)
            line = format_status(statuses[-1])
        except Exception as exc:  # noqa: BLE001 - a run that wrote nothing still gets its line (exc names it)
            line = str(exc)
        print(f"  exit {code:>3}  {line}", file=sys.stderr, flush=True)
    for line in solved_lines(statuses, dirs):
        print(f"  {line}", file=sys.stderr, flush=True)
