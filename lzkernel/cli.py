"""The ``lzkernel`` command line: ``run``, ``config``, ``plugins``, ``--version``.

``main(argv) -> int`` so tests can call it in-process. Configuration errors (bad YAML, unknown
keys, unknown components, a missing resume path, a plugin that fails to import) print one
message without a traceback and return 2. Any other error during a run prints its traceback,
then ``lzkernel: error: rank R: Type: message``, and returns 1 (each rank of a multi-rank run
has this error boundary). ``config`` and ``plugins`` never import torch.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from lzkernel import __version__
from lzkernel.errors import ConfigError, PluginError

EXIT_CONFIG = 2
EXIT_FAILURE = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lzkernel", description="Train MCTS-based RL agents from a YAML config, with plugins."
    )
    parser.add_argument("--version", action="store_true", help="print versions and registered plugins")
    sub = parser.add_subparsers(dest="command")

    def plugin_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("-p", dest="plugins", action="append", default=[], metavar="NAME",
                       help="load plugin NAME (entry-point name or module); 'no:NAME' blocks it before import")
        p.add_argument("--disable-plugin-autoload", action="store_true",
                       help="do not load entry points (like LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1)")

    run = sub.add_parser("run", help="train from a config")
    run.add_argument("config", help="YAML config file")
    run.add_argument("overrides", nargs="*", help="a.b=VALUE, +a.new=VALUE, ~a.b")
    run.add_argument("--resume", metavar="auto|PATH", help="resume from the newest checkpoint (auto) or PATH")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    plugin_opts(run)

    cfg = sub.add_parser("config", help="validate a config and print it resolved (no torch import)")
    cfg.add_argument("config")
    cfg.add_argument("overrides", nargs="*")
    cfg.add_argument("--explain", action="store_true", help="list every key with its type, default and doc")
    plugin_opts(cfg)

    plugins = sub.add_parser("plugins", help="list plugins, their components and load errors")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugin_opts(plugins)
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
    kernel.hook.lzkernel_configure(config=config.to_dict())

    from lzkernel.run import RunContext  # imports numpy; torch is imported when the run starts

    run = RunContext(kernel, config, resume=args.resume, overrides=args.overrides)
    try:
        with run:
            trainer = run.build("trainer")
            trainer.train()
    except (ConfigError, PluginError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the error boundary of one rank: name it, exit non-zero
        return _report_failure(exc, run)
    if run.stop_signal is not None:
        return 128 + run.stop_signal
    return 0


def _report_failure(exc: BaseException, run: object) -> int:
    """Print the traceback, then ``lzkernel: error: rank R: Type: message`` (the line a multi-rank
    launcher's output is searched for); under torchrun also write its error file, so the
    launcher's summary names this rank's exception. Returns exit code 1."""
    import os
    import traceback

    try:
        rank = int(run.rank) if getattr(run, "comm", None) is not None else int(os.environ.get("RANK", "0"))  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        rank = 0
    traceback.print_exception(exc)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        try:
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(exc)
        except Exception:  # noqa: BLE001 - reporting must not mask the error
            pass
    print(f"lzkernel: error: rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return EXIT_FAILURE


def cmd_config(args: argparse.Namespace) -> int:
    from lzkernel.config.loader import load_config
    from lzkernel.config.run_config import RunConfig
    from lzkernel.config.schema import describe

    kernel = _kernel(args)
    kernel.raise_on_errors()
    config = load_config(args.config, args.overrides, kernel.registry)
    if not args.explain:
        sys.stdout.write(config.to_yaml())
        return 0
    rows = describe(RunConfig, "run")
    for role, (name, options) in config.sections.items():
        if options is not None:
            rows += describe(type(options), role)
    width = max(len(r[0]) for r in rows)
    for key, tp, default, doc in rows:
        print(f"{key:<{width}}  {tp:<12} {default!r:<14} {doc}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    kernel = _kernel(args)
    entries = kernel.describe()
    errors = [{"name": e.name, "dist": e.dist, "version": e.version, "error": e.message} for e in kernel.errors]
    if args.json:
        json.dump({"plugins": entries, "errors": errors, "blocked": sorted(kernel.blocked),
                   "autoload": kernel.autoload}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for e in entries:
        origin = f"{e['dist']} {e['version']}" if e["dist"] else e["source"]
        print(f"{e['name']}  ({origin}; {e['module']})")
        for role, names in e["components"].items():
            print(f"    {role}: {', '.join(names)}")
    for e in kernel.errors:
        print(f"ERROR {e.describe()}")
    if kernel.blocked:
        print(f"blocked: {', '.join(sorted(kernel.blocked))}")
    return 0


def cmd_version() -> int:
    from lzkernel.pluginmanager import Kernel

    print(f"lzkernel {__version__}")
    kernel = Kernel()
    dists = sorted({(i.dist, i.version) for i in kernel.infos.values() if i.dist})
    if dists:
        print("registered plugins: " + ", ".join(f"{d}-{v}" for d, v in dists))
        print("plugins: " + ", ".join(sorted(kernel.infos)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.version:
            return cmd_version()
        if args.command == "run":
            return cmd_run(args)
        if args.command == "config":
            return cmd_config(args)
        if args.command == "plugins":
            return cmd_plugins(args)
        parser.print_help()
        return EXIT_CONFIG
    except (ConfigError, PluginError) as exc:
        print(f"lzkernel: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("lzkernel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
