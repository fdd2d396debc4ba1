"""Does an installed CRD keep every field this operator writes and reads? Pure.

The API server prunes, on every write, each field its CRD's structural schema does not
know: an operator newer than its CRD writes status (``status.roles`` for one) that is
silently dropped, and reads it back as absent. What matters is only which paths survive:
descriptions, defaults and CEL rules do not. So ``missing_paths`` walks the schema this
operator generates (``crd.openapi_schema``) beside the installed one and names each
property path the installed one would prune. A path survives when the installed schema has
that property, or when an ancestor keeps unknown fields
(``x-kubernetes-preserve-unknown-fields: true``); under a typed map (``additionalProperties``)
the map's value schema decides, as it does for the API server.

Paths are dotted from the root (``status.roles.prefill.ready``); ``[]`` stands for an
array's items and ``*`` for a map's values. Below a missing path nothing more is named:
``status.roles`` missing is one path, not one per field under it.
"""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.api.json_object import Json

#: The marker of a schema node whose unknown fields the API server keeps.
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def installed_schema(crd: Json, version: str) -> Json | None:
    """The ``openAPIV3Schema`` of ``version`` in CRD object ``crd`` (None: no such version,
    or it has no schema)."""
    for entry in (crd.get("spec") or {}).get("versions") or []:
        if entry.get("name") == version:
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, dict) else None
    return None


def missing_paths(wanted: Json, installed: Json | None) -> list[str]:
    """The property paths of ``wanted`` that ``installed`` would prune, in ``wanted``'s
    order, each the highest such path (none of its descendants is listed)."""
    if installed is None:
        return ["<the whole object>"]
    missing: list[str] = []
    _walk(wanted, installed, "", missing)
    return missing


def _keeps_unknown(node: Any) -> bool:
    return isinstance(node, dict) and node.get(PRESERVE) is True


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _walk(wanted: Any, installed: Any, path: str, missing: list[str]) -> None:
    """Compare one node of each schema; ``installed`` is known to keep ``path`` itself."""
    if not isinstance(wanted, dict) or not isinstance(installed, dict):
        return
    if _keeps_unknown(installed) and not installed.get("properties"):
        return  # nothing below is ever pruned
    known = installed.get("properties") or {}
    for name, child in (wanted.get("properties") or {}).items():
        child_path = _join(path, name)
        if name in known:
            _walk(child, known[name], child_path, missing)
        elif not _keeps_unknown(installed):
            missing.append(child_path)
        # an unknown field kept as it is: nothing under it is pruned either
    if "additionalProperties" in wanted:
        _map_values(wanted["additionalProperties"], installed, f"{path}.*", missing)
    if "items" in wanted:
        items = installed.get("items")
        if isinstance(items, dict):
            _walk(wanted["items"], items, f"{path}[]", missing)
        elif not _keeps_unknown(installed):
            missing.append(f"{path}[]")


def _map_values(wanted: Any, installed: Json, path: str, missing: list[str]) -> None:
    """A typed map's values: kept by the installed node's own map, or by it keeping unknown
    fields; pruned (every key) when the installed node is an object of fixed properties."""
    theirs = installed.get("additionalProperties")
    if theirs is True or _keeps_unknown(installed):
        return
    if isinstance(theirs, dict):
        _walk(wanted, theirs, path, missing)
    else:
        missing.append(path)


def summary(missing: list[str], shown: int = 3) -> str:
    """The first ``shown`` paths, and how many more: ``a, b, c and 4 more``."""
    head = ", ".join(missing[:shown])
    rest = len(missing) - shown
    return f"{head} and {rest} more" if rest > 0 else head
