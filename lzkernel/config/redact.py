"""Secrets stay out of what a run writes and prints (RELIABILITY E7).

A config key whose last name looks like a credential (``token``, ``secret``, ``password``,
``api_key``, ``access_key``, ``private_key``, ``credentials``, ``auth``, alone or as a ``_``- or
``-``-separated part: ``wandb_api_key``, ``hf_token``; not ``max_tokens``) has its value replaced
by :data:`REDACTED` in the resolved config a run writes (``config.yaml`` of the run directory and
of every checkpoint, ``lzkernel config``'s output), in ``overrides.txt`` and ``command.txt``, and
in the command lines the CLI prints. Components get the real value: only what is written or
shown is redacted. Comparisons between a config and a written one (the resume check,
``config --diff``) redact both sides first, so a secret is neither a difference nor shown.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

REDACTED = "<redacted>"

_SECRET = re.compile(r"(?:^|[_-])(?:token|secret|password|passwd|api_?key|access_?key|private_?key|credentials?|auth)"
                     r"(?:$|[_-])", re.IGNORECASE)


def is_secret(key: str) -> bool:
    """Whether the dotted config key ``key`` names a credential (module docstring)."""
    return bool(_SECRET.search(key.rsplit(".", 1)[-1]))


def redact_tree(tree: Any) -> Any:
    """A copy of ``tree`` (nested mappings and lists) with the value of every secret key
    replaced by :data:`REDACTED` (``None`` and empty values are kept: nothing to hide)."""
    if isinstance(tree, Mapping):
        return {k: (REDACTED if is_secret(str(k)) and v not in (None, "", {}, []) else redact_tree(v))
                for k, v in tree.items()}
    if isinstance(tree, list):
        return [redact_tree(v) for v in tree]
    return tree


def redact_argv(words: Sequence[str]) -> list[str]:
    """Command-line words with the value of every override of a secret key (``a.b=VALUE``,
    ``+a.b=VALUE``) replaced by :data:`REDACTED`; other words as they are."""
    out = []
    for word in words:
        key, eq, _ = word.partition("=")
        secret = eq and not key.startswith("-") and is_secret(key.lstrip("+"))
        out.append(f"{key}={REDACTED}" if secret else word)
    return out
