"""The ``lzkernel`` command line: ``run``, ``launch``, ``config``, ``eval``, ``play``, ``status``, ``plot``,
``plugins``, ``--version``.

``main(argv) -> int`` so tests can call it in-process. Configuration errors (bad YAML, unknown
keys, unknown components, a missing or damaged resume checkpoint, a resume with an incompatible
config, a plugin that fails to import, a run directory in use or that cannot be written, a full
disk) print one message without a traceback and return 2; ``--traceback`` (or
``LZKERNEL_TRACEBACK=1``) adds the traceback. Any other error during a run prints its
traceback, then ``lzkernel: error: rank R: Type: message``, and returns 1 (each rank of a
multi-rank run has this error boundary). ``config``, ``plot`` and ``plugins`` never import torch;
``eval`` and ``play`` import it once the checkpoint and config have been found.

Overrides may come before or after the options: ``run CONFIG --resume auto a.b=1`` works.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import sys
import traceback
from typing import Sequence

from lzkernel import __version__
from lzkernel.config.redact import ScrubFilter, check_unredacted, scrub
from lzkernel.errors import EXIT_CONFIG, EXIT_FAILURE, ConfigError, PluginError, error_line
from lzkernel.play import add_parser as add_play_parser, command as play_command

TRACEBACK_ENV = "LZKERNEL_TRACEBACK"


def _plugin_opts(p: argparse.ArgumentParser) -> None:
    """The plugin options every command that loads plugins takes."""
    p.add_argument("-p", dest="plugins", action="append", default=[], metavar="NAME",
                   help="load plugin NAME (entry-point name or module); 'no:NAME' blocks it before import")
    p.add_argument("--disable-plugin-autoload", action="store_true",
                   help="do not load entry points (like LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1)")
    p.add_argument("--traceback", action="store_true",
                   help=f"print the traceback of configuration errors too (like {TRACEBACK_ENV}=1)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lzkernel", description="Train MCTS-based RL agents from a YAML config, with plugins."
    )
    parser.add_argument("--version", action="store_true", help="print versions and registered plugins")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="train from a config")
    run.add_argument("config", help="YAML config file")
    run.add_argument("overrides", nargs="*", default=[], help="a.b=VALUE, +a.new=VALUE, ~a.b")
    run.add_argument("--resume", metavar="auto|PATH", help="resume from the newest checkpoint (auto) or PATH")
    run.add_argument("--seeds", nargs="+", action="extend", metavar="S",
                     help="one run per seed, one after another, in <run.out_dir>/seed_<S> (then a status line each)")
    run.add_argument("--dry-run", action="store_true", help="with --seeds/--grid: validate every run and list them; "
                                                            "start none")
    run.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                     help="one run per combination of the values (repeat for more keys), in <run.out_dir>/KEY=V,... "
                          "(with --seeds: each seed below it)")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    _plugin_opts(run)

    launch = sub.add_parser(
        "launch", help="run N ranks on this machine (gloo on loopback only); the rest goes to `lzkernel run`",
        description="Start N ranks of `lzkernel run CONFIG ARGS...` on this machine with their rendezvous "
                    "store and every socket on 127.0.0.1, a heartbeat that names a rank that stops responding, "
                    "fail-fast teardown and signal forwarding. Pass comm.name=gloo.")
    launch.add_argument("--nproc", type=int, required=True, metavar="N", help="number of ranks")
    launch.add_argument("--port", type=int, default=0,
                        help="port of the rendezvous store on 127.0.0.1 (default: one the OS picks)")
    launch.add_argument("config", help="YAML config file")
    launch.add_argument("args", nargs=argparse.REMAINDER, help="overrides and options of `lzkernel run`")

    cfg = sub.add_parser("config", help="validate a config and print it resolved (no torch import)")
    cfg.add_argument("config")
    cfg.add_argument("overrides", nargs="*", default=[])
    cfg.add_argument("--explain", action="store_true", help="list every key with its type, default and doc")
    cfg.add_argument("--diff", metavar="OTHER",
                     help="print the keys where OTHER (a config file, a run or checkpoint directory: its "
                          "config.yaml, or a sweep's directory: each seed's) differs from this config, resolved "
                          "both: KEY: THIS → OTHER; exit 0 when none does, 1 when some do (as diff)")
    _plugin_opts(cfg)

    ev = sub.add_parser("eval", help="play a trained policy from a checkpoint; returns, optional video",
                        description="Load a run's checkpoint and its resolved config, play one evaluation with "
                                    "the run's evaluator and print the return statistics. Without --seed it "
                                    "replays the checkpoint's last evaluation (ckpt/best: the return recorded "
                                    "when it was written, exactly).")
    ev.add_argument("target", metavar="RUN_DIR_OR_CHECKPOINT", help="a run's out_dir or a checkpoint directory")
    ev.add_argument("overrides", nargs="*", default=[], help="a.b=VALUE, +a.new=VALUE, ~a.b (on the checkpoint's config)")
    ev.add_argument("--checkpoint", default="last", metavar="last|best|PATH",
                    help="which checkpoint of RUN_DIR (default: last)")
    ev.add_argument("--episodes", type=int, metavar="N", help="episodes (games per side for versus) to play")
    ev.add_argument("--seed", type=int, metavar="S", help="play other episodes: run.seed=S (default: replay)")
    ev.add_argument("--video", metavar="PATH.mp4|.gif", help="record env 0's first episodes (rgb_array rendering)")
    ev.add_argument("--video-episodes", type=int, default=1, metavar="N", help="episodes in the video (default 1)")
    ev.add_argument("--json", metavar="PATH", help="write the report (metrics, replayed index, video) as JSON")
    _plugin_opts(ev)

    st = sub.add_parser("status", help="one line per run directory: running or how it ended, counters, last and best eval",
                        description="Reads each run directory (no torch): whether a live process on this host holds "
                                    "it, else how it ended (summary.json), its iteration, env steps, last and best "
                                    "evaluation, wall time and, while it runs, the share of its budget done.")
    st.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    st.add_argument("--json", action="store_true", help="machine-readable output (a list of objects)")
    st.add_argument("--watch", action="store_true",
                    help="show the lines again every --every seconds until every run has ended (Ctrl-C stops)")
    st.add_argument("--every", type=float, metavar="SECONDS", help="--watch's interval (default 10)")

    plot = sub.add_parser("plot", help="PNG of a metric against env steps, train iterations and wall time (runs), "
                                       "or of time-to-solve JSON",
                          description="Runs of one config with different seeds are drawn as the median with a "
                                      "min-max band. JSON files of benchmarks/time_to_solve.py are plotted as "
                                      "time to solve per seed.")
    plot.add_argument("inputs", nargs="+", metavar="RUN_DIR|RESULT.json")
    plot.add_argument("--metric", action="append", help="any logged metric (default eval/return_mean); repeat it "
                                                         "for one row of plots per metric")
    plot.add_argument("--list", action="store_true", help="print the metrics the runs logged, and plot nothing")
    plot.add_argument("-o", "--out", default="plot.png", metavar="PATH.png", help="output file (default plot.png)")
    plot.add_argument("--traceback", action="store_true", help="print the traceback of errors too")

    _plugin_opts(add_play_parser(sub))

    plugins = sub.add_parser("plugins", help="list plugins, their components and load errors")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    _plugin_opts(plugins)
    return parser


def _kernel(args: argparse.Namespace):  # noqa: ANN202 - Kernel, imported lazily
    from lzkernel.pluginmanager import Kernel

    autoload = False if args.disable_plugin_autoload else None
    return Kernel(args.plugins, autoload=autoload)


def cmd_run(args: argparse.Namespace) -> int:
    from lzkernel.config.loader import load_config

    kernel = _kernel(args)
    kernel.raise_on_errors()
    config = load_config(args.config, args.overrides, kernel.registry)
    check_unredacted(config.to_dict(), f"the config {args.config} (with its overrides)")
    if args.dry_run and not (args.seeds or args.grid):
        raise ConfigError("--dry-run lists the runs of --seeds/--grid; to check one run's config: lzkernel config")
    if args.seeds or args.grid:
        from lzkernel.sweep import start_sweep

        return start_sweep(args, kernel, config.run.out_dir)
    kernel.hook.lzkernel_configure(config=config.to_dict())

    from lzkernel.run import RunContext  # imports numpy; torch is imported when the run starts

    from lzkernel.api import run_trainer

    run = RunContext(kernel, config, resume=args.resume, overrides=args.overrides)
    try:
        run_trainer(run)
    except (ConfigError, PluginError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the error boundary of one rank: name it, exit non-zero
        return _report_failure(exc, run)
    if run.stop_signal is not None:
        # The main rank saved where it stopped: say how to go on (a sweep's run: the sweep says it).
        from lzkernel.sweep import SWEEP_CHILD_ENV

        if run.last_checkpoint is not None and not os.environ.get(SWEEP_CHILD_ENV):
            print(f"lzkernel: stopped at train_iter {run.train_iter}, saved in {run.last_checkpoint}; "
                  f"continue with: {_resume_command(args, run.world_size)}", file=sys.stderr, flush=True)
        return 128 + run.stop_signal
    return 0


def plugin_argv(args: argparse.Namespace) -> list[str]:
    """The plugin options of a parsed command line, as arguments again (``-p NAME`` ...,
    ``--disable-plugin-autoload``) for a command this one starts or prints."""
    return [*(x for p in args.plugins for x in ("-p", p)), *["--disable-plugin-autoload"] * args.disable_plugin_autoload]


def _resume_command(args: argparse.Namespace, world_size: int) -> str:
    """The command line that continues this run: its config, overrides and plugin options, with
    ``--resume auto``; several ranks are started again by ``lzkernel launch``."""
    head = ["lzkernel", "run"] if world_size == 1 else ["lzkernel", "launch", "--nproc", str(world_size)]
    from lzkernel.config.redact import redact_argv

    shown = redact_argv(args.overrides)
    line = shlex.join([*head, str(args.config), *shown, *plugin_argv(args), "--resume", "auto"])
    return line + ("  (with the <redacted> values given again)" if shown != list(args.overrides) else "")


def _report_failure(exc: BaseException, run: object) -> int:
    """Print the traceback, then ``lzkernel: error: rank R: Type: message`` (the line a multi-rank
    launcher's output is searched for); under torchrun also write its error file, so the
    launcher's summary names this rank's exception. Returns exit code 1."""
    try:
        rank = int(run.rank) if getattr(run, "comm", None) is not None else int(os.environ.get("RANK", "0"))  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        rank = 0
    _print_exception(exc)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        try:
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(exc)
        except Exception:  # noqa: BLE001 - reporting must not mask the error
            pass
    print(scrub(f"lzkernel: error: rank {rank}: {error_line(exc)}"), file=sys.stderr, flush=True)
    return EXIT_FAILURE


def _print_exception(exc: BaseException) -> None:
    """The traceback of ``exc`` on stderr, secrets scrubbed (:mod:`lzkernel.config.redact`)."""
    sys.stderr.write(scrub("".join(traceback.format_exception(exc))))


def cmd_launch(args: argparse.Namespace) -> int:
    from lzkernel.launch import launch

    return launch(args.nproc, [args.config, *args.args], port=args.port)


def cmd_config(args: argparse.Namespace) -> int:
    from lzkernel.config.loader import load_config

    kernel = _kernel(args)
    kernel.raise_on_errors()
    if args.explain:
        from lzkernel.config.explain import explain

        explain(args.config, args.overrides, kernel.registry)
        return 0
    config = load_config(args.config, args.overrides, kernel.registry)
    if args.diff is not None:  # where another config differs, one line per key; exit 1 if any (as diff)
        from lzkernel.config.diff import diff_lines

        lines = diff_lines(config.to_dict(), args.diff, kernel.registry)
        print("\n".join(lines or ["no differences"]))
        return 1 if lines else 0
    sys.stdout.write(config.to_yaml())
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from lzkernel.evaluate import evaluate, over_seeds, summary

    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.video_episodes != 1 and not args.video:
        raise ConfigError(f"--video-episodes {args.video_episodes} needs --video PATH (.mp4 or .gif)")
    if args.json:  # checked before playing: a typo must not cost the whole evaluation
        from pathlib import Path

        if not Path(args.json).parent.is_dir():
            raise ConfigError(f"--json {args.json}: directory {Path(args.json).parent} does not exist")
    from lzkernel.sweep import expand_sweeps

    targets = expand_sweeps([args.target])  # a sweep's directory: each of its seeds' runs
    if len(targets) > 1 and args.video:
        raise ConfigError(f"--video with the sweep {args.target}: name one of its run directories")
    kernel = _kernel(args)
    kernel.raise_on_errors()
    reports = []
    for target in targets:
        reports.append(evaluate(kernel, target, checkpoint=args.checkpoint, overrides=args.overrides,
                                episodes=args.episodes, seed=args.seed, video=args.video,
                                video_episodes=args.video_episodes))
        for line in summary(reports[-1]):
            print(line)
    for line in over_seeds(targets, reports):  # a sweep: each group of seeds' mean and spread of mean returns
        print(line)
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(reports[0] if len(reports) == 1 else reports, f, indent=1, default=float)
                f.write("\n")
        except OSError as exc:
            raise ConfigError(f"--json {args.json}: cannot write it ({exc.strerror})") from None
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lzkernel import plot
    from lzkernel.sweep import expand_sweeps

    paths = [Path(p) for p in expand_sweeps(args.inputs)]
    jsons = [p for p in paths if p.suffix == ".json"]
    if jsons and len(jsons) != len(paths):
        raise ConfigError("lzkernel plot: give run directories or time-to-solve JSON files, not both")
    if args.list:
        if jsons or args.metric:
            raise ConfigError("--list names the metrics of run directories: give run directories and no --metric")
        names = plot.metric_names(paths)
        print("\n".join(f"{name}  ({n} of {len(paths)} runs)" for name, n in names.items()))
        return 0
    fig = plot.plot_time_to_solve(jsons) if jsons else plot.plot_runs(paths, args.metric or ["eval/return_mean"])
    print(f"wrote {plot.save(fig, args.out)}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from lzkernel.runinfo import status_lines, watch

    if args.every is not None and not (args.watch and math.isfinite(args.every) and args.every > 0):
        raise ConfigError(f"--every {args.every:g}: the interval of --watch, a positive number of seconds")
    if args.watch:
        if args.json:
            raise ConfigError("--watch redraws lines for a person; --json is for scripts: give one of them")
        return watch(args.run_dirs, args.every or 10.0)
    report, lines, errors = status_lines(args.run_dirs)
    for line in errors:
        print(line, file=sys.stderr)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif lines:
        print("\n".join(lines), flush=True)
    return EXIT_CONFIG if errors else 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from lzkernel.pluginmanager import unknown_block

    kernel = _kernel(args)
    # What went wrong when a plugin registered its components (a name taken, a factory that
    # cannot be called as its role's): listed beside the plugins, which stay listed.
    registry, problems = kernel.lenient_registry()
    entries = kernel.describe(registry)
    errors = [{"name": e.name, "dist": e.dist, "version": e.version, "error": e.message} for e in kernel.errors]
    for plugin, message in problems:
        info = kernel.infos.get(plugin)
        errors.append({"name": plugin, "dist": info and info.dist, "version": info and info.version, "error": message})
    # Every plugin is listed either way; a plugin that failed to load or register (or a -p no:NAME
    # that blocks nothing) makes the exit code 2, so that a script checking an installation sees it.
    status = EXIT_CONFIG if errors or kernel.unknown_blocks else 0
    if args.json:
        json.dump({"plugins": entries, "errors": errors, "blocked": sorted(kernel.blocked),
                   "autoload": kernel.autoload}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return status
    for e in entries:
        origin = f"{e['dist']} {e['version']}" if e["dist"] else e["source"]
        print(f"{e['name']}  ({origin}; {e['module']})")
        for role, names in e["components"].items():
            print(f"    {role}: {', '.join(names)}")
        events = [h for h in e["hooks"] if not h.startswith("lzkernel_register_")]
        if events:  # observers (metric sinks): what they listen to
            print(f"    hooks: {', '.join(events)}")
    for e in kernel.errors:
        if _want_traceback(args):
            sys.stdout.write(e.traceback)
        print(f"ERROR {e.describe()}")
    for _, message in problems:
        print(f"ERROR {message}")
    if kernel.blocked:
        print(f"blocked: {', '.join(sorted(kernel.blocked))}")
    for name in kernel.unknown_blocks:
        print(f"ERROR {unknown_block(name)}")
    if not entries and not kernel.autoload:
        print("no plugins loaded: autoload is off (LZKERNEL_DISABLE_PLUGIN_AUTOLOAD); load one with -p NAME")
    return status


def cmd_version() -> int:
    from lzkernel.pluginmanager import Kernel

    print(f"lzkernel {__version__}")
    kernel = Kernel()
    dists = sorted({(i.dist, i.version) for i in kernel.infos.values() if i.dist})
    if dists:
        print("registered plugins: " + ", ".join(f"{d}-{v}" for d, v in dists))
        print("plugins: " + ", ".join(sorted(kernel.infos)))
    return 0


def _add_plugin_commands(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """When ``argv`` names no built-in command (a plugin's, or ``--help``), load the plugins
    (autoload, ``LZKERNEL_PLUGINS``, and any ``-p NAME`` / ``--disable-plugin-autoload`` given) and
    let them add theirs (hook ``lzkernel_add_commands``), one plugin at a time so that a clash
    names it. Built-in commands load no plugin here: their own start-up does."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    words = [w for w in argv if not w.startswith("-")]
    if words and words[0] in sub.choices:
        return
    if not words and not {"-h", "--help"} & set(argv):
        return
    options = argparse.ArgumentParser(add_help=False)  # the plugin options alone, wherever they stand
    _plugin_opts(options)
    kernel = _kernel(options.parse_known_args(argv)[0])
    for impl in kernel.pm.hook.lzkernel_add_commands.get_hookimpls():
        before = set(sub.choices)
        try:
            impl.function(subparsers=sub)
        except argparse.ArgumentError as exc:  # a name taken already (built in, or by another plugin)
            raise PluginError(f"plugin {impl.plugin_name}: lzkernel_add_commands: {exc}") from None
        for name in set(sub.choices) - before:
            command = sub.choices[name]
            if command.get_default("lzkernel_command") is None:
                raise PluginError(f"plugin {impl.plugin_name}: command '{name}' has no function to run; "
                                  "set_defaults(lzkernel_command=function) on its parser")
            try:  # the plugin options, as every command that loads plugins takes them
                _plugin_opts(command)
            except argparse.ArgumentError:  # the plugin defined one of them itself: its own wins
                pass


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; overrides given after an option (``CONFIG --resume auto a.b=1``) join the
    others in the order written (argparse alone calls them unrecognized)."""
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "seeds", None):  # `--seeds 0 1 a.b=2`: the seeds end at the first override
        seeds = list(args.seeds)
        cut = next((i for i, x in enumerate(seeds) if not x.lstrip("-").isdigit()), len(seeds))
        if cut == 0:
            parser.error(f"--seeds: expected integer seeds, got {seeds[0]!r}")
        args.seeds, extra = [int(x) for x in seeds[:cut]], [*seeds[cut:], *extra]
    if extra:
        if getattr(args, "command", None) in ("run", "config", "eval", "play") and not any(x.startswith("-") for x in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _want_traceback(args: argparse.Namespace) -> bool:
    from lzkernel.pluginmanager import autoload_disabled as _truthy  # same rule as the autoload switch

    return bool(getattr(args, "traceback", False)) or _truthy(os.environ.get(TRACEBACK_ENV, ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        _add_plugin_commands(parser, sys.argv[1:] if argv is None else list(argv))
    except (ConfigError, PluginError) as exc:
        print(f"lzkernel: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    args = _parse(parser, argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubFilter())
    try:
        if args.version:
            return cmd_version()
        if getattr(args, "lzkernel_command", None) is not None:  # a plugin's subcommand
            code = args.lzkernel_command(args)
            return 0 if code is None else int(code)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "launch":
            return cmd_launch(args)
        if args.command == "config":
            return cmd_config(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "play":
            return play_command(args, _kernel(args))
        if args.command == "plot":
            return cmd_plot(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "plugins":
            return cmd_plugins(args)
        parser.print_help()
        return EXIT_CONFIG
    except (ConfigError, PluginError) as exc:
        if _want_traceback(args):
            details = getattr(exc, "details", "")
            if details:
                sys.stderr.write(scrub(details))
            _print_exception(exc)
        print(scrub(f"lzkernel: error: {exc}"), file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("lzkernel: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `lzkernel plugins --json | head`: the reader left; no traceback, and no second error
        # when Python flushes stdout at exit (the conventional 128 + SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
