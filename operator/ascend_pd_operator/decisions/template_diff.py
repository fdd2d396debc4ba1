"""What applying a desired pod template would change in a live one, field by field.

The live template is what the API server stored: our fields plus the defaults it filled
in (``terminationMessagePath``, probe periods, ``imagePullPolicy``, ...). So a field the
live template has and the desired one lacks is a default, not a difference, except where
only the operator ever writes: an item of a list keyed by name (a container, an env var, a
volume) or a key of the template's labels and annotations. There, an item the desired
template lacks is one an apply would remove. Empty and zero values the API server drops
on storage (Go's ``omitempty``) equal a missing one, and resource quantities compare by
value (``1000m`` is ``1``).

Names read as a user would look them up: ``containers[sglang].env[HCCL_BUFFSIZE]``,
``metadata.labels[ascendpd.io/fingerprint]``, ``securityContext``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

#: Lists whose items the API server merges by a key (the key's field), and so the ones an
#: apply adds to, changes an item of or removes from one by one.
KEYED_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "hostAliases": "ip",
}
#: Maps whose keys are data, not field names (shown as ``[key]``).
DATA_MAPS = ("labels", "annotations", "nodeSelector", "limits", "requests", "matchLabels")
#: Maps only the operator writes into on its own templates: a key the desired map lacks
#: is removed by an apply. ``kubectl rollout restart`` stamps the template's annotations
#: with its own key, which an apply never removes (another field manager owns it).
OWNED_MAPS = ("labels", "annotations")
FOREIGN_PREFIXES = ("kubectl.kubernetes.io/",)
#: The parent a value of limits or requests is compared under: a quantity.
QUANTITIES = "<quantity>"

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}  # fmt: skip


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (None: not one)."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        return None


def _empty(value: Any) -> bool:
    """Dropped on storage: absent, empty, false or zero, at any depth."""
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    if isinstance(value, list):
        return not value
    return value is None or value is False or value == "" or value == 0


def _same_scalar(want: Any, have: Any, in_quantities: bool) -> bool:
    if want == have:
        return True
    if in_quantities:
        a, b = quantity(want), quantity(have)
        if a is not None and a == b:
            return True
    # an int-or-string field (a port, maxUnavailable) may come back as either
    return isinstance(want, int | str) and isinstance(have, int | str) and str(want) == str(have)


def _child(path: str, key: str, data_map: bool) -> str:
    if data_map:
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def changes(want: Any, have: Any, path: str = "", parent: str = "") -> list[str]:
    """What applying ``want`` over ``have`` changes, as ``<field> added|changed|removed``."""
    if have is None:
        return [] if _empty(want) else [f"{path} added"]
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{path} changed"]
        data_map = parent in DATA_MAPS
        # a key of limits or requests names a resource, its value is a quantity
        child_parent = QUANTITIES if parent in ("limits", "requests") else None
        out: list[str] = []
        for key, value in want.items():
            out += changes(value, have.get(key), _child(path, key, data_map), child_parent or key)
        if parent in OWNED_MAPS and path.startswith("metadata"):
            out += [
                f"{_child(path, key, True)} removed"
                for key in have
                if key not in want and not key.startswith(FOREIGN_PREFIXES)
            ]
        return out
    if isinstance(want, list):
        if not isinstance(have, list):
            return [] if _empty(want) and _empty(have) else [f"{path} changed"]
        key = KEYED_LISTS.get(parent)
        if key is not None and all(isinstance(i, dict) and key in i for i in want + have):
            return _keyed(want, have, path, key)
        if len(want) != len(have):
            return [f"{path} changed"]
        found = [c for w, h in zip(want, have, strict=True) for c in changes(w, h, path, parent)]
        # an item of an unkeyed list is replaced with the whole list
        return [f"{path} changed"] if found else []
    return [] if _same_scalar(want, have, parent == QUANTITIES) else [f"{path} changed"]


def _keyed(want: list[Any], have: list[Any], path: str, key: str) -> list[str]:
    live = {str(i[key]): i for i in have}
    wanted = {str(i[key]): i for i in want}
    out: list[str] = []
    for name, item in wanted.items():
        where = f"{path}[{name}]"
        out += [f"{where} added"] if name not in live else changes(item, live[name], where)
    out += [f"{path}[{name}] removed" for name in live if name not in wanted]
    return out
