"""Which fields of a pod template differ, named the way ``status.roles.<role>.updatePending``
names them: ``containers[sglang].env[ASCEND_PD_FOO]``, ``metadata.labels[ascendpd.io/x]``.

The upgrade test compares a live StatefulSet's ``spec.template`` with the API server's
verdict on HEAD's manifest (a server-side dry-run apply), so both sides carry the server's
defaults and only what HEAD would change differs. Pure: two JSON values in, paths out.
"""

from __future__ import annotations

from typing import Any

#: maps whose keys are data, not schema: ``labels[key]`` rather than ``labels.key``
KEYED_MAPS = frozenset({"labels", "annotations", "nodeSelector", "limits", "requests"})
#: lists whose items differ field by field (``containers[sglang].image``); an item of any
#: other list of named objects differs whole (``env[A]``, ``volumes[models]``)
OPENED_LISTS = frozenset({"containers", "initContainers"})


def _named(items: list[Any]) -> dict[str, Any] | None:
    """A list of objects each with a unique ``name`` (containers, env, volumes, ports) as a
    map; None for any other list, which then differs as a whole."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    names = [i["name"] for i in items]
    return dict(zip(names, items, strict=True)) if len(set(names)) == len(names) else None


def _walk(old: Any, new: Any, path: str, out: list[str], keyed: bool = False) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            sub = f"{path}[{key}]" if keyed else (f"{path}.{key}" if path else key)
            _walk(old.get(key), new.get(key), sub, out, key in KEYED_MAPS and not keyed)
        return
    if isinstance(old, list) and isinstance(new, list):
        a, b = _named(old), _named(new)
        if a is not None and b is not None:
            opened = path.rsplit(".", 1)[-1] in OPENED_LISTS
            for name in sorted(set(a) | set(b)):
                if opened:
                    _walk(a.get(name), b.get(name), f"{path}[{name}]", out)
                elif a.get(name) != b.get(name):
                    out.append(f"{path}[{name}]")
            return
    out.append(path)


def changed_paths(live: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The fields of pod template ``live`` that ``desired`` changes (added, removed or
    altered): ``metadata.…`` for the template's metadata, the pod spec's fields bare."""
    out: list[str] = []
    _walk(live.get("metadata") or {}, desired.get("metadata") or {}, "metadata", out)
    _walk(live.get("spec") or {}, desired.get("spec") or {}, "", out)
    return out


def covers(named: str, path: str) -> bool:
    """Whether the field ``named`` (a status entry) and the changed ``path`` are the same
    field, or one holds the other (a whole list against one of its items)."""
    if named == path:
        return True
    longer, shorter = (path, named) if len(path) > len(named) else (named, path)
    return longer.startswith(shorter) and longer[len(shorter)] in ".["


def uncovered(named: list[str], paths: list[str]) -> list[str]:
    """The changed ``paths`` no entry of ``named`` covers."""
    return [p for p in paths if not any(covers(n, p) for n in named)]
