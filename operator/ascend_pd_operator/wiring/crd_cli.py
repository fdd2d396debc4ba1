"""``ascend-pd crd``: print the API's CRDs (PDDeployment, PDRoleScaler), or write every
checked-in copy.

The CEL variant is for current clusters; ``--no-cel`` is for API servers before
1.25. ``--write`` refreshes ``crds/`` and the chart's ``files/crds/`` so the copies
can never drift from the pydantic models (a test compares them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ascend_pd_operator.api.crd import KINDS, Kind, all_crds_yaml, crd_yaml

#: (relative path, with CEL, kind) of every checked-in copy of each CRD.
COPIES: tuple[tuple[str, bool, Kind], ...] = tuple(
    copy
    for kind in KINDS
    for copy in (
        (f"crds/{kind.file_stem}.yaml", True, kind),
        (f"crds/k8s-1.24-and-older/{kind.file_stem}.yaml", False, kind),
        (f"charts/ascend-pd-operator/files/crds/{kind.plural}-cel.yaml", True, kind),
        (f"charts/ascend-pd-operator/files/crds/{kind.plural}-nocel.yaml", False, kind),
    )
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
    for rel, with_cel, kind in COPIES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(crd_yaml(with_cel, kind), encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    if args.write:
        for path in write_copies(Path(args.root)):
            print(f"wrote {path}")
        return 0
    print(all_crds_yaml(not args.no_cel), end="")
    return 0
