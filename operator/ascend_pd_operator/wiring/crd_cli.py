"""``ascend-pd crd``: print the PDDeployment CRD, or write every checked-in copy.

The CEL variant is for current clusters; ``--no-cel`` is for API servers before
1.25. ``--write`` refreshes ``crds/`` and the chart's ``files/crds/`` so the copies
can never drift from the pydantic models (a test compares them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ascend_pd_operator.api.crd import crd_yaml

#: (relative path, with CEL) of every checked-in copy of the CRD.
COPIES: tuple[tuple[str, bool], ...] = (
    ("crds/ascendpd.io_pddeployments.yaml", True),
    ("crds/k8s-1.24-and-older/ascendpd.io_pddeployments.yaml", False),
    ("charts/ascend-pd-operator/files/crds/pddeployments-cel.yaml", True),
    ("charts/ascend-pd-operator/files/crds/pddeployments-nocel.yaml", False),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cel",
        action="store_true",
        help="leave out x-kubernetes-validations (Kubernetes 1.24 and older)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="write crds/ and the chart's files/crds/ copies instead of printing",
    )
    parser.add_argument("--root", default=".", help="repository root for --write (.)")


def write_copies(root: Path) -> list[Path]:
    written = []
    for rel, with_cel in COPIES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(crd_yaml(with_cel), encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    if args.write:
        for path in write_copies(Path(args.root)):
            print(f"wrote {path}")
        return 0
    print(crd_yaml(not args.no_cel), end="")
    return 0
