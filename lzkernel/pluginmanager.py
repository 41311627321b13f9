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
4. ``check_pending()`` rejects implementations of hooks that do not exist.
"""
from __future__ import annotations

import importlib
import importlib.metadata as metadata
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
    source: str = "entry point"  # "entry point", "-p" or "object"
    file: str | None = None


@dataclass
class LoadError:
    """A plugin that could not be loaded."""

    name: str
    dist: str | None
    version: str | None
    message: str
    traceback: str = field(default="", repr=False)

    def describe(self) -> str:
        origin = f"distribution {self.dist} {self.version}" if self.dist else "no distribution"
        return f"plugin '{self.name}' ({origin}) failed to load: {self.message}"


def _dist_name(ep: metadata.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else None


def _block_matches(block: str, name: str, module: str, dist_name: str | None) -> bool:
    """Whether ``-p no:block`` names this plugin: its name, its module or a package above it,
    or its distribution."""
    parts = module.split(".")
    return (block == name or any(".".join(parts[:i]) == block for i in range(1, len(parts) + 1))
            or (dist_name is not None and _normal(dist_name) == _normal(block)))


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
        wanted += [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]

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
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self.pm.get_name(exc.plugin) or repr(exc.plugin)
            raise PluginError(f"plugin '{name}' implements an unknown hook: {exc}") from exc

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
            self.errors.append(LoadError(name, dist_name, version, _import_failure(exc), traceback.format_exc()))
            return
        self.register(obj, name, PluginInfo(name, ep.value, dist_name, version, "entry point", _file(obj)))

    def _load_module(self, spec: str) -> None:
        if spec in self.infos or self._is_blocked(spec, spec):
            return
        try:
            module = importlib.import_module(spec)
        except (Exception, SystemExit) as exc:
            self.errors.append(LoadError(spec, None, None, _import_failure(exc), traceback.format_exc()))
            return
        self.register(module, spec, PluginInfo(spec, spec, source="-p", file=_file(module)))

    def register(self, obj: Any, name: str, info: PluginInfo) -> None:
        try:
            self.pm.register(obj, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin '{name}' has an invalid hook implementation: {exc}") from exc
        except ValueError as exc:  # already registered under another name
            raise PluginError(f"plugin '{name}': {exc}") from exc
        self.infos[name] = info
        self._registry = None

    # -- queries -----------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry.collect(self.pm)
        return self._registry

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
            hint = "skip a plugin with -p no:NAME, or set LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1"
            # One line per plugin, the hint on the last: the error ends with a line naming a plugin.
            error = ConfigError("\n".join(lines) + f" ({hint})", lines)
            error.details = "".join(e.traceback for e in self.errors)  # shown by --traceback
            raise error

    def describe(self) -> list[dict[str, Any]]:
        """One entry per loaded plugin: name, dist, version, module, components by role."""
        by_plugin = self.registry.by_plugin()
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
