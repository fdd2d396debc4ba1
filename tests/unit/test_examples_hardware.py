"""Every example follows the A2/A3 table of docs/compatibility.md for the chip it names.

The oracle is the document a user reads, not the operator: the table's recommended
``ascend.transferProtocol`` and NPUs per node for each chip, and each example's header
line ``# Chip: A2`` (or A3).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml")
                  if "kind: PDDeployment" in p.read_text())  # fmt: skip


def chip_table() -> dict[str, dict[str, str]]:
    """The "A2 and A3" table: row name -> chip -> cell."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("\n## A2 and A3\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    chips = [re.match(r"(A\d)\b", h).group(1) for h in header[1:]]  # type: ignore[union-attr]
    table: dict[str, dict[str, str]] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0]] = dict(zip(chips, cells[1:], strict=True))
    return table


def cell(row: str) -> dict[str, str]:
    table = chip_table()
    assert row in table, f"docs/compatibility.md's A2/A3 table has no row {row!r}"
    return table[row]


def example(path: Path) -> tuple[str, dict[str, Any]]:
    text = path.read_text()
    found = re.search(r"^# Chip: (A\d)\b", text, re.MULTILINE)
    assert found, f"{path.name}: its header names no chip (a line '# Chip: A2' or A3)"
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "PDDeployment")
    return found.group(1), doc["spec"]


def test_the_table_recommends_one_protocol_per_chip() -> None:
    protocols = cell("recommended `ascend.transferProtocol`")
    assert set(protocols) == {"A2", "A3"}
    assert all(re.fullmatch(r"`[a-z_]+`", p) for p in protocols.values()), protocols


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_uses_the_protocol_its_chip_needs(path: Path) -> None:
    chip, spec = example(path)
    assert (spec.get("runtime") or {}).get("transferBackend", "ascend") == "ascend"
    want = cell("recommended `ascend.transferProtocol`")[chip].strip("`")
    # said in the file, not left to a default a reader cannot see
    got = (spec.get("ascend") or {}).get("transferProtocol")
    assert got == want, f"{path.name} ({chip}): ascend.transferProtocol {got}, table: {want}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_fits_its_chips_nodes(path: Path) -> None:
    chip, spec = example(path)
    per_node = int(cell("NPUs a node's device plugin advertises")[chip])
    for role in ("prefill", "decode"):
        assert spec[role].get("devicesPerNode", 8) <= per_node, (path.name, role)
    assert path.name in cell("examples")[chip], f"the table's examples row lacks {path.name}"
