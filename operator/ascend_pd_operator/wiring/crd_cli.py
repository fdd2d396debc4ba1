"""``ascend-pd crd``: print the API's CRDs (PDDeployment, PDRoleScaler), or write every
checked-in copy.

The default variant is for current clusters; ``--k8s 1.28`` leaves out the rules an
older API server's CEL cost estimate refuses (``Rule.since``: Kubernetes 1.28 and
1.29, the oldest supported). ``--write`` refreshes ``crds/``
and the chart's ``files/crds/`` so the copies can never drift from the pydantic
models (a test compares them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ascend_pd_operator.api.crd import KINDS, Kind, all_crds_yaml, cel_minor, crd_yaml

#: The oldest minor of the CEL copies for the releases before ``rules.SIZED_MAP_MINOR``.
OLDER_CEL_MINOR = 28
#: (relative path, kind, Kubernetes minor or None: every rule) of every checked-in copy
#: of each CRD; the chart picks its file by the cluster's version.
COPIES: tuple[tuple[str, Kind, int | None], ...] = tuple(
    copy
    for kind in KINDS
    for copy in (
        (f"crds/{kind.file_stem}.yaml", kind, None),
        (f"crds/k8s-1.28-and-1.29/{kind.file_stem}.yaml", kind, OLDER_CEL_MINOR),
        (f"charts/ascend-pd-operator/files/crds/{kind.plural}-cel.yaml", kind, None),
        (f"charts/ascend-pd-operator/files/crds/{kind.plural}-cel-1.28.yaml", kind,
         OLDER_CEL_MINOR),
    )
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--k8s",
        metavar="1.MINOR",
        type=_minor,
        help="for that Kubernetes release: leave out the rules whose CEL its API server "
        "refuses as too costly (1.28 and 1.29 refuse one)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="write crds/ and the chart's files/crds/ copies instead of printing",
    )
    parser.add_argument("--root", default=".", help="repository root for --write (.)")


def _minor(text: str) -> int:
    major, _, minor = text.strip().lstrip("v").partition(".")
    if major != "1" or not minor.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes release such as 1.28")
    return int(minor)


def write_copies(root: Path) -> list[Path]:
    written = []
    for rel, kind, minor in COPIES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(crd_yaml(kind, minor), encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    if args.write:
        for path in write_copies(Path(args.root)):
            print(f"wrote {path}")
        return 0
    print(all_crds_yaml(cel_minor(args.k8s) if args.k8s else None), end="")
    return 0
