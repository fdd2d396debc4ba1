"""``Rule``, one spec rule for both enforcers, and the helpers the rules' CEL and Python
share: a CEL pattern's matches in Python, mount paths that overlap, the ``got ...`` detail."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from ascend_pd_operator.api.rules.limits import PREFIX_LENGTH_PATTERN


@dataclass(frozen=True)
class Rule:
    """One rule on one schema object (``where`` is the pydantic class name, or ``root``), or
    on one of its fields (``field``, the wire name): then ``self`` and the checked value are
    the field's, and both enforcers' messages start with the field's path."""

    where: str
    cel: str
    message: str
    check: Callable[[Any], bool]
    detail: Callable[[Any], str]
    field: str = ""
    #: the oldest Kubernetes minor whose API server takes the CEL (prices it within its
    #: cost budget; 0: every release with CEL): the CRD for an older one leaves it out,
    #: and there the operator's validator alone enforces the rule
    since: int = 0

    def violation(self, obj: Any) -> str | None:
        """The pydantic-side message when ``obj`` breaks the rule, else None."""
        if self.check(obj):
            return None
        return f"{self.message} ({self.detail(obj)})"


def regex(cel_literal: str) -> str:
    """The regex a CEL string literal of ours denotes (CEL unescapes ``\\\\``), for Python:
    RE2's ``$`` is the end of the text, Python's also matches before a final newline."""
    return cel_literal.replace("\\\\", "\\").replace("$", "\\Z")


def matching(pattern: str, texts: Iterable[str]) -> list[str]:
    """The texts a CEL ``matches`` of ``pattern`` (CEL literal text) is true for."""
    return [t for t in texts if re.search(regex(pattern), t)]


def bad_keys(pattern: str, keys: Collection[str]) -> list[str]:
    good = set(matching(pattern, matching(PREFIX_LENGTH_PATTERN, keys)))
    return [k for k in keys if k not in good]


def overlaps(path: str, owned: str) -> bool:
    """``path`` is ``owned``, lies inside it, or contains it: a mount there would hide the
    owned one, or the owned one part of it (the order runtimes mount in is theirs)."""
    return path == owned or path.startswith(owned + "/") or owned.startswith(path + "/")


def overlaps_cel(path: str, owned: str) -> str:
    """``overlaps(path, owned)`` in CEL; both are CEL expressions of strings."""
    inside, above = f"{path}.startsWith({owned} + '/')", f"{owned}.startsWith({path} + '/')"
    return f"({path} == {owned} || {inside} || {above})"


def mounts_over(mounts: Iterable[Any], owned: Iterable[str]) -> list[str]:
    owned = tuple(owned)
    return [m.mount_path for m in mounts if any(overlaps(m.mount_path, o) for o in owned)]


def owned_paths(s: Any) -> list[str]:
    """The paths the operator mounts itself: the driver, and the model when a volume holds it."""
    owned = [s.ascend.driver_host_path]
    if s.model.volume is not None:
        owned.append(s.model.path)
    return owned


def cel_list(texts: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{t}'" for t in texts) + "]"


def got(items: list[str]) -> str:
    return f"got {', '.join(map(repr, items))}"
