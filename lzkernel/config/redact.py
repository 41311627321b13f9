"""Secrets stay out of what a run writes and prints (RELIABILITY E7).

A config key is a secret when the words of its name (split at ``_``, ``-`` and camelCase) end
in ``token(s)``, ``secret(s)``, ``password(s)``, ``passwd``, ``pwd``, ``passphrase``,
``apikey``, ``credential(s)``, ``auth`` or ``authorization``, or in ``api key``, ``access key``,
``secret key``, ``private key`` or ``auth key``, or the name is ``key`` alone: ``wandb_api_key``,
``hfToken``, ``client_secret``; not ``token_dim``, ``token_file`` or ``auth_mode``. Only text is
secret: the string values of such a key, and every string below it when its value is a mapping
or a list (``max_tokens: 512`` stays as it is).

Their values are written as :data:`REDACTED` in the resolved config a run writes
(``config.yaml`` of the run directory and of every checkpoint, ``lzkernel config``'s output), in
``overrides.txt`` and ``command.txt``, and in the command lines the CLI prints; and every text
the process prints or records as an error (the CLI's error line, ``summary.json``, log records)
has the secret values seen in this process (:func:`remember`) replaced. Components get the real
values. Comparisons between a config and a written one (the resume check, ``config --diff``)
redact both sides, so a secret is neither a difference nor shown. A run refuses to start from a
config whose secret reads ``<redacted>`` (:func:`check_unredacted`): give the value again.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

REDACTED = "<redacted>"

_LAST = {"token", "tokens", "secret", "secrets", "password", "passwords", "passwd", "pwd", "passphrase", "apikey",
         "credential", "credentials", "auth", "authorization"}
_LAST_TWO = {("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("auth", "key")}
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
#: Secret values shorter than this are not scrubbed from text (they would hit ordinary words).
MIN_SCRUBBED = 4
_SEEN: set[str] = set()
_LONGEST_FIRST: list[str] = []  # _SEEN in the order scrub() replaces them


def is_secret(key: str) -> bool:
    """Whether the last name of the dotted config key ``key`` names a secret (module docstring)."""
    words = [w.lower() for w in _WORDS.findall(key.rsplit(".", 1)[-1])]
    return bool(words) and (words[-1] in _LAST or tuple(words[-2:]) in _LAST_TWO or words == ["key"])


def is_secret_path(key: str) -> bool:
    """Whether any name of the dotted key is a secret's (everything below a secret is one)."""
    return any(is_secret(part) for part in key.split("."))


def _hide(value: Any) -> Any:
    """``value`` of a secret key: its strings replaced (in mappings and lists too)."""
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, Mapping):
        return {k: _hide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide(v) for v in value]
    return value


def redact_tree(tree: Any) -> Any:
    """A copy of ``tree`` (nested mappings and lists) with the strings under every secret key
    replaced by :data:`REDACTED`."""
    if isinstance(tree, Mapping):
        return {k: _hide(v) if is_secret(str(k)) else redact_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [redact_tree(v) for v in tree]
    return tree


def _strings(value: Any) -> list[str]:
    """Every non-empty string in ``value`` (in mappings and lists too)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, Mapping):
        value = list(value.values())
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []


def secret_values(tree: Any) -> set[str]:
    """The strings under every secret key of ``tree``."""
    if isinstance(tree, Mapping):
        return {s for k, v in tree.items() for s in (_strings(v) if is_secret(str(k)) else secret_values(v))}
    if isinstance(tree, list):
        return {s for v in tree for s in secret_values(v)}
    return set()


def _override_parts(word: str) -> tuple[str, str] | None:
    """``(dotted key, value text)`` of an override word ``[+]a.b=VALUE`` (None: a command-line
    option, a deletion, or not an override)."""
    from lzkernel.config.loader import parse_override

    if word.startswith("-"):
        return None
    op, key, value = parse_override(word)
    return None if op == "~" or not key or value is None else (key, value)


def _override_tree(key: str, value: str) -> Any:
    """The override as a tree ``{a: {b: VALUE}}``, VALUE read as YAML (as text if it is not YAML)."""
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    tree: Any = parsed
    for part in reversed(key.split(".")):
        tree = {part: tree}
    return tree


def redact_argv(words: Sequence[str]) -> list[str]:
    """Command-line words with every secret of an override (``a.api_key=V``, ``+a.b={token: V}``,
    a secret anywhere in the dotted key) replaced; other words as they are."""
    import yaml

    out = []
    for word in words:
        parts = _override_parts(word)
        if parts is None:
            out.append(word)
            continue
        key, value = parts
        if is_secret_path(key):
            out.append(word.partition("=")[0] + "=" + REDACTED)
            continue
        tree = _override_tree(key, value)
        hidden = redact_tree(tree)
        if hidden != tree:  # a secret inside a mapping or list value
            for part in key.split("."):
                hidden = hidden[part]
            value = yaml.safe_dump(hidden, default_flow_style=True, width=10**9, sort_keys=False).strip()
        out.append(word.partition("=")[0] + "=" + value)
    return out


def remember(values: Iterable[str]) -> None:
    """Secret values of this process, scrubbed from the text :func:`scrub` is given."""
    _SEEN.update(v for v in values if len(v) >= MIN_SCRUBBED and v != REDACTED)
    _LONGEST_FIRST[:] = sorted(_SEEN, key=len, reverse=True)


def remember_config(tree: Any, overrides: Sequence[str] = ()) -> None:
    """:func:`remember` the secrets of a config tree and of override words (the raw text of a
    secret override too, in case it does not parse)."""
    remember(secret_values(tree))
    for word in overrides:
        parts = _override_parts(word)
        if parts is None:
            continue
        key, value = parts
        if is_secret_path(key):
            remember([value.strip()])
        remember(secret_values(_override_tree(key, value)))


def remembered() -> list[str]:
    """The secret values remembered in this process (an env worker is given them, to scrub its logs)."""
    return sorted(_SEEN)


def scrub(text: str) -> str:
    """``text`` with every remembered secret value replaced by :data:`REDACTED` (longest first)."""
    for value in _LONGEST_FIRST:
        text = text.replace(value, REDACTED)
    return text


def check_unredacted(tree: Any, where: str) -> None:
    """Refuse (ConfigError) a config whose secret reads :data:`REDACTED`: it was read back from
    what a run wrote, and the real value must be given again."""
    from lzkernel.errors import ConfigError

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                key = f"{path}.{k}" if path else str(k)
                if is_secret(str(k)) and REDACTED in _strings(v):
                    raise ConfigError(f"{key}: {where} holds {REDACTED!r}, a secret a run does not write; give its "
                                      f"value again (an override {key}=... or the config file)")
                walk(v, key)

    walk(tree, "")


class ScrubFilter:
    """A :mod:`logging` filter that scrubs remembered secrets from every record's message."""

    def filter(self, record: Any) -> bool:
        if _SEEN:
            record.msg, record.args = scrub(record.getMessage()), ()
        return True
