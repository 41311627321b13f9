"""Plugin discovery and loading: entry points of group ``lzkernel``, ``-p`` and blocking.

One :class:`Kernel` per run (never a module-global plugin manager). Loading follows pytest:

1. ``-p no:NAME`` blocks NAME before anything is imported; NAME is an entry-point name, a
   module (or a package above it: ``no:lzk_sinks`` blocks every entry point in ``lzk_sinks``) or
   a distribution name;
2. entry points of group ``lzkernel`` are loaded one by one unless autoloading is off
   (``LZKERNEL_DISABLE_PLUGIN_AUTOLOAD`` set to anything but ``0``/``false``/``no``/``off``/empty,
   as pytest's switch, or ``autoload=False``); a plugin that fails to import (an exception, or
   ``sys.exit()`` at import) is recorded with its distribution and version instead of aborting
   start-up;
3. ``-p NAME`` loads the entry point called NAME, or else imports module NAME, even when
   autoloading is off; ``LZKERNEL_PLUGINS=a,b`` does the same;
4. before a plugin is registered its hook implementations are checked (:func:`hook_problems`):
   a hook name that does not exist, an argument the hook does not pass, or a ``lzkernel_*``
   function without ``@hookimpl`` (pluggy would skip it silently). Such a plugin is recorded as
   an error, not registered, like one that fails to import; ``check_pending()`` stays as the
   last guard.

Errors are collected, never raised while loading, so that ``lzkernel plugins`` can list every
plugin beside the broken ones; ``run``/``config``/``eval`` call :meth:`Kernel.raise_on_errors`.
"""
from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata as metadata
import inspect
import os
import re
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterable, Sequence

import pluggy

from lzkernel import hookspecs
from lzkernel.errors import ConfigError, PluginError
from lzkernel.registry import Registry

ENTRY_POINT_GROUP = "lzkernel"
AUTOLOAD_ENV = "LZKERNEL_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS_ENV = "LZKERNEL_PLUGINS"


@dataclass
class PluginInfo:
    """A loaded plugin and where it came from."""

    name: str
    module: str
    dist: str | None = None
    version: str | None = None
    source: str = "entry point"  # "entry point", "-p", "LZKERNEL_PLUGINS" or "object"
    file: str | None = None


@dataclass
class LoadError:
    """A plugin that could not be loaded (it failed to import, or its hooks are wrong)."""

    name: str
    dist: str | None
    version: str | None
    message: str
    traceback: str = field(default="", repr=False)
    #: What the entry point names (``pkg.module`` or ``pkg.module:attr``), or the ``-p`` module.
    target: str | None = None
    source: str = "entry point"  # "entry point", "-p", "LZKERNEL_PLUGINS" or "object"
    #: What went wrong, as the message's verb phrase.
    stage: str = "failed to load"

    def describe(self) -> str:
        origin = f"distribution {self.dist} {self.version}" if self.dist else "no distribution"
        loading = self.stage == "failed to load"
        target = f" {self.target}" if loading and self.target and self.target != self.name else ""
        return f"plugin '{self.name}' ({origin}) {self.stage}{target}: {self.message}"


def _dist_name(ep: metadata.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else None


def _block_matches(block: str, name: str, module: str, dist_name: str | None) -> bool:
    """Whether ``-p no:block`` names this plugin: its name, its module or a package above it,
    or its distribution."""
    parts = module.split(".")
    return (block == name or any(".".join(parts[:i]) == block for i in range(1, len(parts) + 1))
            or (dist_name is not None and _normal(dist_name) == _normal(block)))


def skip_hint(errors: Sequence[LoadError]) -> str:
    """How to run without the plugins of ``errors``: ``-p no:NAME`` for an entry point, leaving
    out ``-p NAME`` for a module asked for on the command line, or dropping it from
    ``LZKERNEL_PLUGINS``."""
    parts = []
    entry = [e.name for e in errors if e.source == "entry point"]
    if entry:
        parts.append(f"skip {'it' if len(entry) == 1 else 'them'} with {' '.join(f'-p no:{n}' for n in entry)}, "
                     "or every entry point with LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1")
    asked = [e.name for e in errors if e.source == "-p"]
    if asked:
        parts.append(f"drop {' '.join(f'-p {n}' for n in asked)}")
    named = [e.name for e in errors if e.source == PLUGINS_ENV]
    if named:
        parts.append(f"remove {', '.join(named)} from {PLUGINS_ENV}")
    return "; ".join(parts) or "fix the plugin"


def unknown_block(name: str) -> str:
    """The message for a ``-p no:name`` that names nothing."""
    return f"-p no:{name}: no plugin, module or distribution of that name"


class Kernel:
    """A plugin manager plus the registry built from it."""

    def __init__(
        self,
        plugin_args: Sequence[str] = (),
        *,
        autoload: bool | None = None,
        plugins: Iterable[Any] = (),
    ) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.errors: list[LoadError] = []
        self.blocked: set[str] = set()
        if autoload is None:
            autoload = not autoload_disabled(os.environ.get(AUTOLOAD_ENV, ""))
        self.autoload = autoload
        self._registry: Registry | None = None

        wanted: list[str] = []
        for arg in plugin_args:
            if arg.startswith("no:"):
                self.block(arg[3:])
            else:
                wanted.append(arg)
        from_env = [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]
        self._env_named = set(from_env) - set(wanted)  # modules named only by LZKERNEL_PLUGINS
        wanted += from_env

        entry_points = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
        if autoload:
            for name, ep in sorted(entry_points.items()):
                self._load_entry_point(name, ep)
        for spec in wanted:
            if spec in entry_points:
                self._load_entry_point(spec, entry_points[spec])
            else:
                self._load_module(spec)
        for obj in plugins:
            name = getattr(obj, "__name__", None) or type(obj).__name__
            self.register(obj, name, PluginInfo(name, name, source="object"))
        # A block that names no entry point (nor a -p module) is a typo: it would leave its plugin loaded.
        candidates = [(ep.name, ep.module, _dist_name(ep)) for ep in entry_points.values()]
        candidates += [(spec, spec, None) for spec in wanted]
        self.unknown_blocks = sorted(b for b in self.blocked if not any(_block_matches(b, *c) for c in candidates))
        while True:  # the last guard (hook_problems catches these first): drop such a plugin, record it
            try:
                self.pm.check_pending()
                break
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin) or repr(exc.plugin)
                self.pm.unregister(exc.plugin)
                info = self.infos.pop(name, PluginInfo(name, name))
                self.errors.append(LoadError(name, info.dist, info.version, _one_line(exc), target=info.module,
                                             source=info.source, stage="implements an unknown hook"))

    # -- loading -----------------------------------------------------------------------------

    def block(self, name: str) -> None:
        """Block ``name`` (an entry-point or module name) before it is imported."""
        self.blocked.add(name)
        self.pm.set_blocked(name)

    def _is_blocked(self, name: str, module: str, dist_name: str | None = None) -> bool:
        """Whether ``-p no:X`` names this plugin: its name, its module or a package above it, or
        its distribution (checked before anything is imported)."""
        return self.pm.is_blocked(name) or any(_block_matches(b, name, module, dist_name) for b in self.blocked)

    def _load_entry_point(self, name: str, ep: metadata.EntryPoint) -> None:
        dist = getattr(ep, "dist", None)
        dist_name = _dist_name(ep)
        version = dist.version if dist is not None else None
        if name in self.infos or self._is_blocked(name, ep.module, dist_name):
            return
        try:
            obj = ep.load()
        except (Exception, SystemExit) as exc:  # one broken plugin must not take the CLI down
            self.errors.append(LoadError(name, dist_name, version, _import_failure(exc), traceback.format_exc(),
                                         target=ep.value))
            return
        self.register(obj, name, PluginInfo(name, ep.value, dist_name, version, "entry point", _file(obj)))

    def _load_module(self, spec: str) -> None:
        if spec in self.infos or self._is_blocked(spec, spec):
            return
        source = PLUGINS_ENV if spec in self._env_named else "-p"
        try:
            module = importlib.import_module(spec)
        except (Exception, SystemExit) as exc:
            why = _import_failure(exc)
            if isinstance(exc, ModuleNotFoundError) and exc.name == spec.split(".")[0]:
                why += (" (a plugin module is imported by name: put its directory on PYTHONPATH or install it; "
                        "the lzkernel command does not look in the current directory)")
            self.errors.append(LoadError(spec, None, None, why, traceback.format_exc(), target=spec, source=source))
            return
        self.register(module, spec, PluginInfo(spec, spec, source=source, file=_file(module)))

    def register(self, obj: Any, name: str, info: PluginInfo) -> None:
        """Register ``obj`` as plugin ``name``, or record why its hooks cannot be (not registered)."""
        problems = hook_problems(obj)
        if not problems:
            try:
                self.pm.register(obj, name=name)
            except pluggy.PluginValidationError as exc:  # what hook_problems does not check (a wrapper)
                problems = [_one_line(exc)]
            except ValueError as exc:  # already registered under another name
                raise PluginError(f"plugin '{name}': {exc}") from exc
        if problems:
            self.errors.append(LoadError(name, info.dist, info.version, "; ".join(problems), target=info.module,
                                         source=info.source, stage="has a wrong hook implementation"))
            return
        self.infos[name] = info
        self._registry = None

    # -- queries -----------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The registry; a plugin's registration mistake raises :class:`PluginError`."""
        if self._registry is None:
            self._registry = Registry.collect(self.pm)
        return self._registry

    def lenient_registry(self) -> tuple[Registry, list[tuple[str, str]]]:
        """The registry without the components whose registration went wrong, and ``(plugin,
        message)`` for each mistake (what ``lzkernel plugins`` lists)."""
        problems: list[tuple[str, str]] = []
        return Registry.collect(self.pm, problems), problems

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def raise_on_errors(self) -> None:
        """Turn load errors, and a ``-p no:NAME`` that names nothing, into one
        :class:`ConfigError` (exit code 2) for ``run``/``config``/``eval``."""
        if self.unknown_blocks:
            known = sorted(self.infos) or ["none loaded"]
            raise ConfigError(f"{unknown_block(self.unknown_blocks[0])} (plugins: {', '.join(known)})")
        if self.errors:
            lines = [e.describe() for e in self.errors]
            hint = skip_hint(self.errors)
            # One line per plugin, the hint on the last: the error ends with a line naming a plugin.
            error = ConfigError("\n".join(lines) + f" ({hint})", lines)
            error.details = "".join(e.traceback for e in self.errors)  # shown by --traceback
            raise error

    def describe(self, registry: Registry | None = None) -> list[dict[str, Any]]:
        """One entry per loaded plugin: name, dist, version, module, components by role (those
        registered without a mistake: ``registry``, by default :meth:`lenient_registry`'s), hooks."""
        by_plugin = (registry if registry is not None else self.lenient_registry()[0]).by_plugin()
        out = []
        for name, info in sorted(self.infos.items()):
            hooks = sorted(h.name for h in self.pm.get_hookcallers(self.pm.get_plugin(name)) or [])
            out.append(
                {
                    "name": name,
                    "dist": info.dist,
                    "version": info.version,
                    "module": info.module,
                    "source": info.source,
                    "file": info.file,
                    "components": by_plugin.get(name, {}),
                    "hooks": hooks,
                }
            )
        return out


def autoload_disabled(value: str) -> bool:
    """Whether ``LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=value`` turns autoloading off: any value but
    empty, ``0``, ``false``, ``no`` or ``off`` (any case), like pytest's
    ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``. A security switch fails closed: ``True`` counts."""
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def _normal(dist_name: str) -> str:
    """A distribution name as PEP 503 compares them (``lzkernel_Demo`` == ``lzkernel-demo``)."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


_HOOK_PREFIX = f"{hookspecs.PROJECT}_"


@functools.cache
def _hook_arguments() -> dict[str, list[str]]:
    """Every hook's name → the arguments it passes (its spec's parameters)."""
    marker = f"{hookspecs.PROJECT}_spec"
    return {name: list(inspect.signature(fn).parameters) for name, fn in vars(hookspecs).items()
            if name.startswith(_HOOK_PREFIX) and getattr(fn, marker, None) is not None}


def hook_problems(plugin: Any) -> list[str]:
    """What is wrong with ``plugin``'s hook implementations, one phrase each: a hook that does not
    exist (with the closest name), an argument the hook does not pass, or a function named
    ``lzkernel_*`` without ``@lzkernel.hookimpl`` (pluggy ignores it: it would never be called)."""
    hooks = _hook_arguments()
    marker = f"{hookspecs.PROJECT}_impl"
    problems: list[str] = []
    for attr in dir(plugin):
        if attr.startswith("_"):
            continue
        try:
            value = getattr(plugin, attr)
        except Exception:  # noqa: BLE001 - pluggy skips such attributes too
            continue
        if not inspect.isroutine(value):
            continue
        opts = getattr(value, marker, None)
        if not isinstance(opts, dict):
            if attr.startswith(_HOOK_PREFIX):
                problems.append(f"{attr} is not decorated with @lzkernel.hookimpl, so it would never be called")
            continue
        hook = opts.get("specname") or attr
        if hook not in hooks:
            if not opts.get("optionalhook"):
                # compared without the common prefix, which would make every name look close
                stems = [h[len(_HOOK_PREFIX):] for h in hooks]
                stem = hook[len(_HOOK_PREFIX):] if hook.startswith(_HOOK_PREFIX) else hook
                close = difflib.get_close_matches(stem, stems, n=1, cutoff=0.6)
                hint = f" (did you mean '{_HOOK_PREFIX}{close[0]}'?)" if close else ""
                problems.append(f"{hook} is not an lzkernel hook{hint}")
            continue
        try:
            params = inspect.signature(value).parameters.values()
        except (TypeError, ValueError):
            continue
        required = [p.name for p in params if p.default is p.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        extra = [a for a in required if a not in hooks[hook]]
        if extra:
            problems.append(f"{hook}({', '.join(required)}) takes {', '.join(map(repr, extra))}, which the hook "
                            f"does not pass; it passes ({', '.join(hooks[hook])}), and an implementation may "
                            "take any of them")
    return problems


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _import_failure(exc: BaseException) -> str:
    """What went wrong importing a plugin, in one line."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while being imported"
    return f"{type(exc).__name__}: {exc}"


def _file(obj: Any) -> str | None:
    if isinstance(obj, ModuleType):
        return getattr(obj, "__file__", None)
    module = importlib.import_module(type(obj).__module__) if hasattr(obj, "__class__") else None
    return getattr(module, "__file__", None)
