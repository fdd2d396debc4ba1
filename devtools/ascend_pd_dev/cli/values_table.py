"""The chart README's table of values, generated from ``values.yaml`` and ``values.schema.json``.

Each value documented in ``values.yaml`` by a ``# -- `` comment (continued on the comment
lines below it, up to the key) becomes one row: its dotted key, its type from the schema
(with the allowed values of an enum), its default from ``values.yaml`` and the comment. A
documented value whose default is a mapping stands for the keys under it that have no
comment of their own. Every value must be documented, by itself or by such a parent: the
generator refuses a chart where one is not.

The table lives in the chart's README between ``<!-- values-table:start -->`` and
``<!-- values-table:end -->`` (``marked_block``). ``ascend-pd-dev values-table --write``
rewrites it there; ``--check`` exits 1 when the README's table is not the generated one (a
test runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml

from ascend_pd_dev.cli import marked_block
from ascend_pd_dev.cli.marked_block import Block, BlockError
from ascend_pd_dev.controlplane import paths

BLOCK = Block("values-table", "ascend-pd-dev values-table")
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


class ValuesTableError(BlockError):
    """values.yaml cannot be documented as it is; the message names the value."""


def chart_dir() -> Path:
    return paths.project_root() / "charts" / "ascend-pd-operator"


def comments(values_text: str) -> dict[tuple[str, ...], str]:
    """Key path -> its ``# --`` comment, in the file's order."""
    found: dict[tuple[str, ...], str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[len("# --") :].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if not stripped or match is None:
            pending = None  # a blank line or a list item ends a comment's reach
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), match["key"])
        if pending is not None:
            found[path] = " ".join(p for p in pending if p)
        pending = None
        if not match["rest"].strip() or match["rest"].strip().startswith("#"):
            stack.append((indent, match["key"]))
    return found


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, str(k)))]
    return [path]


def _at(node: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def _schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: dict[str, Any] = schema
    for key in path:
        props = node.get("properties") or {}
        if key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return {}
    return node


def schema_type(node: dict[str, Any]) -> str:
    """The type a schema node allows, as the table shows it."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    kinds = node.get("type")
    if kinds is None and "oneOf" in node:
        kinds = [alt.get("type") for alt in node["oneOf"] if alt.get("type")]
    if isinstance(kinds, list):
        return " or ".join(dict.fromkeys(str(k) for k in kinds))
    return str(kinds) if kinds else "any"


def _cell(text: str) -> str:
    """Table-safe markdown: pipes escaped; outside code spans, ``<`` and ``>`` as entities (a
    renderer would take ``<registry>`` for an HTML tag and show nothing)."""
    parts = text.replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def table(values_text: str, schema: dict[str, Any]) -> str:
    """The markdown table of every documented value."""
    values = yaml.safe_load(values_text)
    documented = comments(values_text)
    missing = [
        ".".join(leaf)
        for leaf in _leaves(values)
        if not any(leaf[:n] in documented for n in range(1, len(leaf) + 1))
    ]
    if missing:
        raise ValuesTableError(f"values.yaml: no '# --' comment documents {', '.join(missing)}")
    rows = ["| value | type | default | description |", "|---|---|---|---|"]
    for path, text in documented.items():
        try:
            default = _at(values, path)
        except (KeyError, TypeError) as exc:
            raise ValuesTableError(f"values.yaml: cannot read {'.'.join(path)}") from exc
        node = _schema_at(schema, path)
        if not node:
            raise ValuesTableError(f"values.schema.json: no schema for {'.'.join(path)}")
        shown = json.dumps(default, separators=(", ", ": ")).replace("|", "\\|")
        key = ".".join(path)
        rows.append(f"| `{key}` | {_cell(schema_type(node))} | `{shown}` | {_cell(text)} |")
    return "\n".join(rows) + "\n"


def generated(chart: Path) -> str:
    return table(
        (chart / "values.yaml").read_text(),
        json.loads((chart / "values.schema.json").read_text()),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    marked_block.add_arguments(parser, "the chart README")
    parser.add_argument("--chart", type=Path, default=None, help="the chart directory")


def run(args: argparse.Namespace) -> int:
    chart = args.chart or chart_dir()
    return marked_block.run(args, BLOCK, chart / "README.md", lambda: generated(chart))
