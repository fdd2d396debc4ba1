"""The rules on ascend.hostMounts: each entry's path, and no entry at, inside or above
another, a path the operator mounts, or a role's own mount or volume."""

from __future__ import annotations

from typing import Any

from ascend_pd_operator.api import host_mounts as hm
from ascend_pd_operator.api.rules.limits import OWNED_RUNTIME_MOUNTS, RUNTIME_MOUNTS
from ascend_pd_operator.api.rules.rule import Rule, cel_list, overlaps, overlaps_cel, owned_paths
from ascend_pd_operator.api.vocabulary import ROLES, host_mount_volume

# The CEL binds each computed path once (``[expr].all(p, ...)``, ``paths_cel``): written
# out at every use, the expressions would be long past reading and past the cost budget.


def _clash(a: str, b: str) -> bool:
    """``overlaps`` for a path that may be unknown (""): an entry without one is refused
    by its own rule, never as a clash."""
    return bool(a) and bool(b) and overlaps(a, b)


def _host_mount_over_runtime(h: Any) -> bool:
    return any(_clash(h.target(), o) for o in RUNTIME_MOUNTS)


def _host_mounts_clashing(mounts: list[Any]) -> list[str]:
    return [
        f"{x.name} {x.target()!r} and {y.name} {y.target()!r}"
        for i, x in enumerate(mounts)
        for y in mounts[i + 1 :]
        if _clash(x.target(), y.target())
    ]


def _host_mounts_over_owned(s: Any) -> list[str]:
    """Entries at, inside or above the driver, or the model when a volume holds it."""
    owned = owned_paths(s)
    return [
        f"{h.name} {h.target()!r}"
        for h in s.ascend.host_mounts
        if any(_clash(h.target(), o) for o in owned)
    ]


def _role_over_host_mounts(s: Any, role: str) -> list[str]:
    return [
        f"{role}.volumeMounts {m.mount_path!r} (hostMounts {h.name})"
        for m in s.role(role).volume_mounts
        for h in s.ascend.host_mounts
        if _clash(m.mount_path, h.target())
    ]


def _role_over_host_mounts_rule(role: str) -> Rule:
    """One rule per role: each has its own CEL cost budget (64 mounts × 16 entries)."""
    return Rule(
        where="PDDeploymentSpec",
        cel=f"[{hm.paths_cel('self.ascend.hostMounts')}].all(ps, self.{role}.volumeMounts.all("
        f"m, ps.all(p, p == '' || !{overlaps_cel('m.mountPath', 'p')})))",
        message=f"{role}.volumeMounts may not mount at, inside or above a path of "
        "ascend.hostMounts: the operator mounts the node's path there (drop the role's "
        "mount, or the entry)",
        check=lambda s: not _role_over_host_mounts(s, role),
        detail=lambda s: f"got {', '.join(_role_over_host_mounts(s, role))}",
    )


def _role_volumes_of_host_mounts(s: Any) -> list[str]:
    volumes = {host_mount_volume(h.name): h.name for h in s.ascend.host_mounts}
    return [
        f"{role}.volumes {v.name!r} (hostMounts {volumes[v.name]})"
        for role in ("prefill", "decode")
        for v in s.role(role).volumes
        if v.name in volumes
    ]


HOST_MOUNT_RULES: tuple[Rule, ...] = (
    Rule(
        where="HostMount",
        cel=f"self.name in {cel_list(hm.KNOWN_NAMES)} || "
        "(has(self.hostPath) && size(self.hostPath) > 0)",
        message="hostPath is required for a name that is not well-known: "
        f"{', '.join(hm.KNOWN_NAMES)}",
        check=lambda h: bool(h.source()),
        detail=lambda h: f"got name {h.name!r} without hostPath",
    ),
    Rule(
        where="HostMount",
        cel=f"[{hm.mount_path_cel('self')}].all(p, p == '' || ("
        + " && ".join(f"!{overlaps_cel('p', repr(o))}" for o in RUNTIME_MOUNTS)
        + "))",
        message="its mountPath (or hostPath, or the well-known path) may not be at, inside or "
        f"above a path the operator mounts: {OWNED_RUNTIME_MOUNTS}",
        check=lambda h: not _host_mount_over_runtime(h),
        detail=lambda h: f"got name {h.name!r} at {h.target()!r}",
    ),
    Rule(
        where="Ascend",
        field="hostMounts",
        # each path overlaps itself once; a second entry at, inside or above it is a clash
        cel=f"[{hm.paths_cel('self')}].all(ps, ps.all(a, a == '' || "
        f"size(ps.filter(b, b != '' && {overlaps_cel('a', 'b')})) == 1))",
        message="entries may not mount at, inside or above one another",
        check=lambda mounts: not _host_mounts_clashing(mounts),
        detail=lambda mounts: f"got {', '.join(_host_mounts_clashing(mounts))}",
    ),
    Rule(
        where="PDDeploymentSpec",
        # each entry's path bound by a one-element list: cel-go before v0.17.8 (Kubernetes
        # 1.28, 1.29) prices a list made by map() as unbounded, far past the budget
        cel=f"self.ascend.hostMounts.all(h, [{hm.mount_path_cel('h')}].all(p, p == '' || "
        f"(!{overlaps_cel('p', 'self.ascend.driverHostPath')} && (!has(self.model.volume) "
        f"|| !{overlaps_cel('p', 'self.model.path')}))))",
        message="ascend.hostMounts may not mount at, inside or above ascend.driverHostPath "
        "(hccn_tool is in its tools/), nor model.path when model.volume is set: the operator "
        "mounts the Ascend driver and the model there",
        check=lambda s: not _host_mounts_over_owned(s),
        detail=lambda s: f"got {', '.join(_host_mounts_over_owned(s))}",
    ),
    _role_over_host_mounts_rule("prefill"),
    _role_over_host_mounts_rule("decode"),
    Rule(
        where="PDDeploymentSpec",
        cel=f"[{hm.volumes_cel('self.ascend.hostMounts')}].all(vs, "
        + " && ".join(f"self.{role}.volumes.all(v, !(v.name in vs))" for role in ROLES)
        + ")",
        message="prefill.volumes and decode.volumes may not use the volume name of an "
        "ascend.hostMounts entry: ascend-* for a well-known name, host-<name> for one of yours",
        check=lambda s: not _role_volumes_of_host_mounts(s),
        detail=lambda s: f"got {', '.join(_role_volumes_of_host_mounts(s))}",
    ),
)
