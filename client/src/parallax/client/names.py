"""Metric names as the server takes them: the grammar a trainer's name must follow, and Prometheus-style labels.

The client drops (and counts) a name the server would refuse; the server validates with the same functions
(``parallax.ingest.names`` re-exports them). Standard library only.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 200
NAME_PATTERN = re.compile(r"[A-Za-z0-9_:./@-]{1,200}")
# A labelled name, as Prometheus writes a series: base{label="value",...}, labels
# sorted, values escaped (backslash, double quote, newline) as in the text format.
# Built by ``labelled_name``; Prometheus samples with labels are stored under it.
_LABEL_VALUE = r'(?:[^"\\\x00-\x1f\x7f]|\\[\\"n])*'
LABELLED_NAME_PATTERN = re.compile(
    r'[A-Za-z0-9_:./@-]+\{[A-Za-z_][A-Za-z0-9_]*="' + _LABEL_VALUE + r'"(?:,[A-Za-z_][A-Za-z0-9_]*="' + _LABEL_VALUE + r'")*\}'
)
NAME_RULE = (
    "letters, digits and _ : . / @ -, optionally followed by Prometheus-style labels "
    '{k="v",...} (sorted, values escaped), 1 to 200 characters in all'
)


def is_valid_name(name: object) -> bool:
    if type(name) is not str:
        return False
    if NAME_PATTERN.fullmatch(name) is not None:
        return True
    return len(name) <= MAX_NAME_LENGTH and "{" in name and _is_labelled(name)


def _is_labelled(name: str) -> bool:
    if LABELLED_NAME_PATTERN.fullmatch(name) is None:
        return False
    labels = split_name(name)[1]
    keys = list(labels)
    return keys == sorted(keys) and len(keys) == len(set(keys)) and labelled_name(name[: name.index("{")], labels) == name


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labelled_name(base: str, labels: dict[str, str]) -> str:
    """``base{a="1",b="x"}``: labels sorted by name, values escaped as in Prometheus's text format; ``base`` without labels."""
    if not labels:
        return base
    return base + "{" + ",".join(f'{k}="{escape_label_value(labels[k])}"' for k in sorted(labels)) + "}"


_LABEL_ITEM = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="(' + _LABEL_VALUE + r')"')
_UNESCAPE = re.compile(r"\\(.)")


def split_name(name: str) -> tuple[str, dict[str, str]]:
    """The base name and the labels of a (possibly) labelled name: the inverse of ``labelled_name``."""
    brace = name.find("{")
    if brace < 0 or not name.endswith("}"):
        return name, {}
    labels = {
        m.group(1): _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        for m in _LABEL_ITEM.finditer(name, brace + 1, len(name) - 1)
    }
    return name[:brace], labels
