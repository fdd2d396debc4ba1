"""Every node of an OpenAPI schema with its path, for the tests that walk the CRD's schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def schema_nodes(
    node: Any, path: str = "", item: str = "[]", entry: str = "{}"
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, node) for ``node`` and every schema below it, parents first; ``item`` and
    ``entry`` are what a path appends for a list's items and a map's values."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, prop in (node.get("properties") or {}).items():
        yield from schema_nodes(prop, f"{path}.{name}", item, entry)
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}{item}", item, entry)
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{entry}", item, entry)
