"""Which config changes a resume accepts: the rule, and the diff against a checkpoint's config.

Every checkpoint stores the resolved config it was written with (``config.yaml``). Before a
resume loads anything, the current resolved config is compared with it key by key (dotted
keys, lists compared whole). A difference is accepted only if the key is *resume-safe*:

* ``run`` keys that are budgets, output, logging or cadence, or how the work is executed:
  :data:`RUN_RESUME_SAFE` (``run.seed`` is not among them: the RNG states come from the
  checkpoint, a different seed would only mislabel the run);
* every key of the sections in :data:`SAFE_SECTIONS` (``comm``: how ranks talk holds no state;
  a change of world size is refused by the trainer, which knows what its state needs);
* the keys a component declares in its registration, ``Component(resume_safe=(...))``, relative
  to its section: a declared key covers itself and everything below it (``"kwargs"`` covers
  ``env.kwargs.render_mode``). Only the component named in both configs counts: changing a
  section's ``name`` is never safe.

Anything else (model shapes, env id, support sizes, the trainer, the policy or optimizer, the
buffer, a key a plugin added since) is incompatible: the resume stops with exit code 2 and
prints every differing key with its old and new value. ``docs/architecture.md`` (Resume)
documents the rule.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

#: ``run`` keys a resume may change: budgets, output, logging, cadence and execution knobs.
RUN_RESUME_SAFE: tuple[str, ...] = (
    "max_env_steps", "max_train_iters", "max_seconds", "checkpoint_every", "keep_last", "log_every", "progress",
    "threads", "device", "deterministic", "save_buffer", "out_dir", "retain_freed_memory", "stall_timeout_s",
)
#: Sections whose every key (``name`` included) a resume may change.
SAFE_SECTIONS: tuple[str, ...] = ("comm",)
#: Differences listed at most (the rest are counted).
MAX_LISTED = 12

_ABSENT = object()


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key → leaf value (mappings are walked, lists are leaves)."""
    if not isinstance(tree, Mapping):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal values of one type (``1`` and ``1.0`` differ: the schema fixes each key's type, so a
    change of type is a change of meaning); NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


def _covered(rest: str, safe: tuple[str, ...]) -> bool:
    return any(rest == s or rest.startswith(s + ".") for s in safe)


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every leaf that differs (absent on one side:
    :data:`_ABSENT`), sorted by key (``lzkernel config --diff``, and the resume check's start)."""
    flat_old, flat_new = flatten(old), flatten(new)
    changes = []
    for key in sorted(set(flat_old) | set(flat_new)):
        a, b = flat_old.get(key, _ABSENT), flat_new.get(key, _ABSENT)
        if not _same(a, b):
            changes.append((key, a, b))
    return changes


def incompatible_changes(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    component_safe: Callable[[str, str], tuple[str, ...]],
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every change a resume must refuse.

    ``old``/``new`` are resolved configs as plain data (``ResolvedConfig.to_dict()``);
    ``component_safe(role, name)`` returns the component's declared ``resume_safe`` keys. A
    section whose ``name`` changed is reported by its ``name`` alone (its options belong to
    another component, listing them would bury the one change that matters)."""
    renamed = {s for s in set(old) | set(new)
               if isinstance(old.get(s), Mapping) and isinstance(new.get(s), Mapping)
               and old[s].get("name") != new[s].get("name")}
    changes = []
    for key, a, b in config_changes(old, new):
        section, _, rest = key.partition(".")
        if section == "run":
            if rest.split(".")[0] in RUN_RESUME_SAFE:
                continue
        elif section in SAFE_SECTIONS:
            continue
        elif section in renamed:
            if rest != "name":
                continue
        elif rest != "name":
            name = (new.get(section) or {}).get("name") if isinstance(new.get(section), Mapping) else None
            if isinstance(name, str) and _covered(rest, component_safe(section, name)):
                continue
        changes.append((key, a, b))
    return changes


def show_value(value: Any, width: int = 60) -> str:
    """A config value in one short line: its repr cut to ``width``, "(absent)" for a missing key."""
    if value is _ABSENT:
        return "(absent)"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def change_text(key: str, old: Any, new: Any) -> str:
    """``key: OLD → NEW``, each value in one short line (:func:`show_value`)."""
    return f"{key}: {show_value(old)} → {show_value(new)}"


def describe_changes(changes: list[tuple[str, Any, Any]], checkpoint: str) -> str:
    """The error message: one line per differing key (old → new), then what to do."""
    n = len(changes)
    lines = [f"--resume: the config differs from the one checkpoint {checkpoint} was written with, in "
             f"{n} key{'s' if n != 1 else ''} that a resume cannot change:"]
    lines += [f"  {change_text(*change)}" for change in changes[:MAX_LISTED]]
    if n > MAX_LISTED:
        lines.append(f"  ... and {n - MAX_LISTED} more")
    lines.append("(a resume may change budgets, logging, cadence and run.device/threads, and the keys each "
                 "component declares resume-safe; undo the other changes, or start a new run in another "
                 "run.out_dir)")
    return "\n".join(lines)
