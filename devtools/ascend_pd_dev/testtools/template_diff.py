"""Which fields of a pod template differ, named the way ``status.roles.<role>.updatePending``
names them: ``spec.containers[sglang].env[ASCEND_PD_FOO]``, ``metadata.labels[ascendpd.io/x]``
(the status adds `` added``, `` changed`` or `` removed``, which ``field_of`` drops).

The upgrade test compares a live StatefulSet's ``spec.template`` with the API server's
verdict on HEAD's manifest (a server-side dry-run apply), so both sides carry the server's
defaults and only what HEAD would change differs. Pure: two JSON values in, paths out.
"""

from __future__ import annotations

from typing import Any

#: maps whose keys are data, not schema: ``labels[key]`` rather than ``labels.key``
KEYED_MAPS = frozenset({"labels", "annotations", "nodeSelector", "limits", "requests"})
#: the lists the API server merges by a key (strategic merge and server-side apply), with
#: that key: their items are named by it (``volumeMounts[/dev/shm]``); any other list
#: differs whole
KEYED_LISTS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath",
    "volumeDevices": "devicePath", "ports": "containerPort", "imagePullSecrets": "name",
    "resourceClaims": "name", "hostAliases": "ip",
}  # fmt: skip
#: the words the status ends a field with
VERDICTS = ("added", "changed", "removed")


def _keyed(items: list[Any], key: str) -> dict[str, Any] | None:
    """A keyed list as a map by its key; None when an item lacks it or two share it."""
    if not all(isinstance(i, dict) and key in i for i in items):
        return None
    names = [str(i[key]) for i in items]
    return dict(zip(names, items, strict=True)) if len(set(names)) == len(names) else None


def _walk(old: Any, new: Any, path: str, out: list[str], keyed: bool = False) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            sub = f"{path}[{key}]" if keyed else f"{path}.{key}"
            _walk(old.get(key), new.get(key), sub, out, key in KEYED_MAPS and not keyed)
        return
    key = KEYED_LISTS.get(path.rsplit(".", 1)[-1].split("[", 1)[0])
    if isinstance(old, list) and isinstance(new, list) and key is not None:
        a, b = _keyed(old, key), _keyed(new, key)
        if a is not None and b is not None:
            for name in sorted(set(a) | set(b)):
                _walk(a.get(name), b.get(name), f"{path}[{name}]", out)
            return
    out.append(path)


def changed_paths(live: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The fields of pod template ``live`` that ``desired`` changes (added, removed or
    altered): ``metadata.…`` for the template's metadata, ``spec.…`` for the pod's."""
    out: list[str] = []
    _walk(live.get("metadata") or {}, desired.get("metadata") or {}, "metadata", out)
    _walk(live.get("spec") or {}, desired.get("spec") or {}, "spec", out)
    return out


def field_of(entry: str) -> str:
    """The field a status entry names: ``env[A] added`` -> ``env[A]``."""
    head, _, last = entry.rpartition(" ")
    return head if head and last in VERDICTS else entry


def covers(named: str, path: str) -> bool:
    """Whether the field ``named`` (a status entry) and the changed ``path`` are the same
    field, or one holds the other (a whole list against one of its items)."""
    named = field_of(named)
    if named == path:
        return True
    longer, shorter = (path, named) if len(path) > len(named) else (named, path)
    return longer.startswith(shorter) and longer[len(shorter)] in ".["


def uncovered(named: list[str], paths: list[str]) -> list[str]:
    """The changed ``paths`` no entry of ``named`` covers."""
    return [p for p in paths if not any(covers(n, p) for n in named)]
