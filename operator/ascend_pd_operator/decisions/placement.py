"""spec.placement: which topology domain each instance to create goes to, or why none can.

One decision, pure: given the spec, the nodes (as the node watch keeps them:
``recovery.slim_node``), what the pods on them hold (``Usage``, from one LIST of the
cluster's non-terminal pods, read only when an instance with placement is to be created)
and the pins of the running instances, ``decide`` says per new instance the ``Pin`` it is
created with, which new instances wait (none are created while no domain fits; running ones
are kept), the ``PlacementFeasible`` condition and what ``status.placement`` records.

The rules:

- A domain is a value of the node label ``topologyKey``, restricted to ``domains`` when set.
- A node can take one runtime pod of this deployment, and only when it is Ready,
  schedulable, without a NoSchedule or NoExecute taint the role does not tolerate, matches
  the role's nodeSelector, runs no runtime pod of this deployment yet (nor, in the host
  network, of any PDDeployment: each takes port 30000 of its node), and has
  ``devicesPerNode`` of its allocatable NPUs (``ascend.resourceName``) not requested by
  other pods. The roles' own affinity is the scheduler's to judge, not ours.
- The KV transfer must reach from every prefill to every decode instance. Memfabric's
  ``sdma`` (the default ``ascend.transferProtocol`` of the ``ascend`` transfer backend)
  moves the KV over the HCCS/UB fabric, which a topology domain (a super-pod) bounds
  (``transfer``; without spec.placement ``transfer.implied_mismatch`` judges it): with
  it, scope Instance puts every instance of the deployment in the same domain (each still
  pinned on its own), the one its running instances use, else the best fit for all the new
  ones. When only instances spread over several domains would fit, or the running ones
  already are spread, the plan needs the protocol to cross domains: ``TransferProtocolMismatch``,
  no instance is created (in either mode: a preference would only move the failure to the
  first transfer), running ones are kept. ``device_rdma`` (RDMA over the NICs) and the
  mooncake backend cross domains; scope None chooses nothing and is not judged.
- ``scope`` Deployment: every instance in one domain; once chosen it is kept (the previous
  status, or the running instances' pins) while any instance exists, and the new instances
  must fit in it. With none running the domain is chosen for all instances to create.
  Instance: each new instance in one domain that fits it (in role and index order, each
  taking its nodes before the next chooses). None: nothing to choose; with ``domains`` the
  pods are held to them.
- The choice is best fit: of the domains that fit, the one with the fewest free NPUs, ties
  by name, so that large domains stay whole for large deployments.
- ``exclusive``: a domain with another PDDeployment's pods is not chosen, and a domain with
  pods labelled ``LABEL_EXCLUSIVE`` by another deployment is never chosen by anyone. (Pods
  not yet bound to a node are not seen: two deployments created in the same instant may
  still meet.)
- A node's healthy NPUs: its allocatable, less the chips MindCluster's device plugin
  reports unhealthy or network-unhealthy (``device_info``, read only when the operator runs
  with ``--placement-device-info`` and the node has such a ConfigMap): its capacity less
  those chips when that is below allocatable (the kubelet already withholds the unhealthy
  ones it was told about, and a chip is never subtracted twice). A chip a pod holds and
  MindCluster reports bad is counted both as held and as bad: placement errs on the side
  of a domain too full, never of one too sick.
- Nothing fits: ``NoTopologyLabel`` when no node carries the label (in the allowed
  domains), ``DomainsTaken`` when a domain would fit but is held by others,
  ``UnhealthyNPUs`` when one would fit were its NotReady, cordoned or tainted nodes and its
  unhealthy NPUs (capacity above allocatable, or reported bad by MindCluster: the message
  names those nodes and chips) usable, else ``InsufficientDomainCapacity``
  naming the need and the best domains. ``mode`` Required: the instance waits
  (PlacementFeasible False); Preferred: it is created unpinned (True,
  ``PreferredDomainUnavailable``), since a preference that cannot be met must not stop it.

The pins themselves (annotation, affinity, the exclusive label) are ``builders.pinning``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, Placement
from ascend_pd_operator.api.scheduling import given
from ascend_pd_operator.api.vocabulary import (
    COND_PLACEMENT_FEASIBLE,
    LABEL_DEPLOYMENT,
    LABEL_EXCLUSIVE,
    LABEL_ROLE,
    REASON_DOMAIN_CHOSEN,
    REASON_DOMAINS_TAKEN,
    REASON_INSUFFICIENT_DOMAIN_CAPACITY,
    REASON_NO_TOPOLOGY_LABEL,
    REASON_NODE_USAGE_UNKNOWN,
    REASON_PLACED,
    REASON_PREFERRED_DOMAIN_UNAVAILABLE,
    REASON_TRANSFER_PROTOCOL_MISMATCH,
    REASON_UNHEALTHY_NPUS,
    REASON_UNSCOPED,
    ROLES,
    Owner,
    instance_name,
)
from ascend_pd_operator.builders.pinning import Pin
from ascend_pd_operator.decisions.device_info import NodeDevices
from ascend_pd_operator.decisions.recovery import ready_condition
from ascend_pd_operator.decisions.transfer import single_domain_protocol

#: How often an instance waiting for a domain is decided again (a freed or added node
#: queues no reconcile of a deployment that has no pod on it).
RETRY_SECONDS = 30.0
#: Taint effects that keep a new pod off a node.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
#: Domains the InsufficientDomainCapacity message names, and status.placement.capacity keeps.
BEST_SHOWN = 3
CAPACITY_KEPT = 8

InstanceKey = tuple[str, int]


@dataclass(frozen=True)
class Usage:
    """What the pods on each node hold: the NPUs they request, the PDDeployments
    (``namespace/name``) with pods there and those of them that hold it exclusively.
    ``error``: the pods could not be listed (then nothing is known). ``devices``: per node,
    the chips MindCluster reports bad (``device_info``; empty when not read)."""

    npus: Mapping[str, int] = field(default_factory=dict)
    deployments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    exclusive: Mapping[str, frozenset[str]] = field(default_factory=dict)
    error: str = ""
    devices: Mapping[str, NodeDevices] = field(default_factory=dict)


def _quantity_int(value: object) -> int:
    """An NPU count as Kubernetes writes one (an integer, or its text)."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_npus(pod: Json, resource: str) -> int:
    """The NPUs ``pod`` requests: its containers' requests (an extended resource's request
    is its limit when only the limit is given), or its largest init container's if more."""
    spec = pod.get("spec") or {}

    def of(container: Json) -> int:
        res = container.get("resources") or {}
        want = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        return _quantity_int(want) if want is not None else 0

    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def usage_of(pods: Iterable[Json], resource: str) -> Usage:
    """``Usage`` from the non-terminal pods bound to nodes (a LIST of them, any namespace).
    A PDDeployment is seen on a node by its runtime pods (the role label)."""
    npus: dict[str, int] = {}
    deployments: dict[str, set[str]] = {}
    exclusive: dict[str, set[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        npus[node] = npus.get(node, 0) + pod_npus(pod, resource)
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = labels.get(LABEL_DEPLOYMENT)
        # runtime pods only: a router pod takes no NPU and no host port
        if owner and labels.get(LABEL_ROLE) in ROLES:
            who = f"{meta.get('namespace', '')}/{owner}"
            deployments.setdefault(node, set()).add(who)
            if labels.get(LABEL_EXCLUSIVE) == "true":
                exclusive.setdefault(node, set()).add(who)
    return Usage(
        npus,
        {n: frozenset(d) for n, d in deployments.items()},
        {n: frozenset(d) for n, d in exclusive.items()},
    )


def tolerated(taint: Json, tolerations: Iterable[Json]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' matching)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


@dataclass(frozen=True)
class Need:
    """Pods of one role to place: ``pods`` nodes with ``devices`` free NPUs each."""

    role: str
    pods: int
    devices: int
    tolerations: tuple[Json, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()


def _need(spec: PDDeploymentSpec, role: str, instances: int) -> Need:
    r = spec.role(role)
    tolerations = tuple(given(t) for t in r.tolerations)
    return Need(role, r.nodes_per_instance * instances, r.devices_per_node,
                tolerations, tuple(sorted(r.node_selector.items())))  # fmt: skip


def _needs(spec: PDDeploymentSpec, keys: Iterable[InstanceKey]) -> list[Need]:
    counts: dict[str, int] = {}
    for role, _ in keys:
        counts[role] = counts.get(role, 0) + 1
    return [_need(spec, role, n) for role, n in counts.items()]


@dataclass(frozen=True)
class Slot:
    """One node as a place for a runtime pod: its domain, its labels and taints, its free
    NPUs (allocatable minus requested) and whether it is healthy (Ready, schedulable);
    ``unhealthy_npus``: NPUs the device plugin withholds (capacity above allocatable) or
    MindCluster reports bad; ``bad``: those MindCluster named (None: it named none);
    ``taken``: it runs a runtime pod ours cannot share the node with."""

    name: str
    domain: str
    labels: Mapping[str, str]
    taints: tuple[Json, ...]
    free: int
    healthy: bool
    unhealthy_npus: int
    taken: bool
    bad: NodeDevices | None = None

    def takes(self, need: Need, relaxed: bool = False) -> bool:
        """Whether this node can run one pod of ``need``; ``relaxed``: as if it were
        healthy, untainted and every NPU it has were healthy."""
        if self.taken or any(self.labels.get(k) != v for k, v in need.node_selector):
            return False
        if relaxed:
            return self.free + self.unhealthy_npus >= need.devices
        untolerated = [t for t in self.taints if not tolerated(t, need.tolerations)]
        return self.healthy and not untolerated and self.free >= need.devices


def slots(
    nodes: Mapping[str, Json],
    key: str,
    resource: str,
    usage: Usage,
    me: str,
    host_network: bool = True,
) -> list[Slot]:
    """Every node that carries the label ``key``, as a ``Slot``. ``me``: this deployment's
    ``namespace/name``, whose pods already hold their nodes; ``host_network``: its pods
    take their node's ports, so a node with any PDDeployment's runtime pod is taken."""
    out = []
    for name, node in sorted(nodes.items()):
        labels = (node.get("metadata") or {}).get("labels") or {}
        if key not in labels:
            continue
        spec, status = node.get("spec") or {}, node.get("status") or {}
        allocatable = _quantity_int((status.get("allocatable") or {}).get(resource, 0))
        capacity = _quantity_int((status.get("capacity") or {}).get(resource, allocatable))
        taints = tuple(t for t in spec.get("taints") or [] if t.get("effect") in BLOCKING_EFFECTS)
        healthy = ready_condition(node).get("status") == "True" and not spec.get("unschedulable")
        bad = usage.devices.get(name)
        if bad is not None:
            allocatable = min(allocatable, max(capacity - len(bad.bad), 0))
        out.append(Slot(
            name, str(labels[key]), labels, taints,
            free=max(allocatable - usage.npus.get(name, 0), 0),
            healthy=healthy, unhealthy_npus=max(capacity - allocatable, 0),
            taken=_taken(usage.deployments.get(name, frozenset()), me, host_network),
            bad=bad,
        ))  # fmt: skip
    return out


def _taken(runs: frozenset[str], me: str, host_network: bool) -> bool:
    return me in runs or (host_network and bool(runs))


def fit(needs: list[Need], nodes: list[Slot], relaxed: bool = False) -> list[str] | None:
    """The nodes ``needs`` would take in one domain (``nodes``), or None if they do not
    fit. Greedy: the largest pods first, each on the node with the fewest free NPUs that
    takes it, so that big nodes stay for big pods."""
    taken: set[str] = set()
    for need in sorted(needs, key=lambda n: (-n.devices, n.role)):
        room = sorted((s for s in nodes if s.name not in taken and s.takes(need, relaxed)),
                      key=lambda s: (s.free, s.name))  # fmt: skip
        if len(room) < need.pods:
            return None
        taken.update(s.name for s in room[: need.pods])
    return sorted(taken)


@dataclass(frozen=True)
class Domain:
    """One domain's nodes, and what it has free for this deployment."""

    name: str
    nodes: tuple[Slot, ...]
    #: other PDDeployments with pods in it, and those holding it exclusively
    others: frozenset[str] = frozenset()
    holders: frozenset[str] = frozenset()

    @property
    def healthy(self) -> list[Slot]:
        return [s for s in self.nodes if s.healthy and not s.taken]

    @property
    def free_npus(self) -> int:
        return sum(s.free for s in self.healthy)

    def capacity(self) -> Json:
        return {"domain": self.name, "nodes": len(self.healthy), "freeNpus": self.free_npus}

    def takers(self, need: Need) -> int:
        """Nodes that could take one pod of ``need``."""
        return sum(1 for s in self.nodes if s.takes(need))


def domains_of(slots_: list[Slot], usage: Usage, me: str, allowed: Iterable[str]) -> list[Domain]:
    allow = set(allowed)
    by_name: dict[str, list[Slot]] = {}
    for s in slots_:
        if not allow or s.domain in allow:
            by_name.setdefault(s.domain, []).append(s)
    out = []
    for name, members in sorted(by_name.items()):
        others = frozenset().union(*(usage.deployments.get(s.name, frozenset()) for s in members))
        holders = frozenset().union(*(usage.exclusive.get(s.name, frozenset()) for s in members))
        out.append(Domain(name, tuple(members), others - {me}, holders - {me}))
    return out


@dataclass(frozen=True)
class Choice:
    """A domain chosen for some instances, or why none: (reason, message)."""

    domain: Domain | None
    reason: str
    message: str
    nodes: tuple[str, ...] = ()


def _need_text(needs: list[Need], resource: str) -> str:
    """``6 nodes with 8 free <resource>``: the pods of both roles counted together where
    they take as many NPUs."""
    pods: dict[int, int] = {}
    for n in needs:
        pods[n.devices] = pods.get(n.devices, 0) + n.pods
    return " and ".join(
        f"{count} node{'s' if count != 1 else ''} with {devices} free {resource}"
        for devices, count in sorted(pods.items(), reverse=True)
    )


def choose(
    needs: list[Need],
    domains: list[Domain],
    placement: Placement,
    resource: str,
    only: str = "",
) -> Choice:
    """The best-fit domain for ``needs`` (only ``only`` when given: a kept domain), or why
    none fits."""
    key = placement.topology_key
    candidates = [d for d in domains if not only or d.name == only]
    where = f"domain {only}" if only else "one domain"
    if not candidates:
        allowed = f" in domains {', '.join(placement.domains)}" if placement.domains else ""
        if only:
            allowed = f" in domain {only}"
        return Choice(None, REASON_NO_TOPOLOGY_LABEL, f"no node is labelled {key}{allowed}")
    fitting = [(d, nodes) for d in candidates if (nodes := fit(needs, list(d.nodes)))]
    free = [(d, n) for d, n in fitting if not d.holders and not (placement.exclusive and d.others)]
    if free:
        best, nodes = min(free, key=lambda dn: (dn[0].free_npus, dn[0].name))
        message = (f"{best.name}: best fit for {_need_text(needs, resource)}, "
                   f"{best.free_npus} {resource} free on {len(best.healthy)} nodes")  # fmt: skip
        return Choice(best, REASON_DOMAIN_CHOSEN, message, tuple(nodes))
    need = f"needs {_need_text(needs, resource)} in {where}"
    if fitting:
        taken = [
            f"{d.name} (held by {', '.join(sorted(d.holders or d.others))})" for d, _ in fitting
        ]
        return Choice(None, REASON_DOMAINS_TAKEN,
                      f"{need}; the domains that fit are taken: {'; '.join(taken)}")  # fmt: skip
    sick = [d for d in candidates if fit(needs, list(d.nodes), relaxed=True)]
    if sick:
        return Choice(
            None, REASON_UNHEALTHY_NPUS,
            f"{need}; only unhealthy capacity would fit ({', '.join(d.name for d in sick)}: "
            "nodes not Ready, cordoned or tainted, or NPUs the device plugin reports "
            f"unhealthy){_bad_chips(sick)}",
        )  # fmt: skip
    widest = max(needs, key=lambda n: n.devices)
    ranked = sorted(candidates, key=lambda d: (-d.takers(widest), d.name))[:BEST_SHOWN]
    shown = ", ".join(f"{d.name} has {d.takers(widest)}" for d in ranked)
    return Choice(None, REASON_INSUFFICIENT_DOMAIN_CAPACITY, f"{need}; best: {shown}")


def _bad_chips(domains: list[Domain]) -> str:
    """``; MindCluster reports n1: Ascend910-4 unhealthy; ...``: the nodes of ``domains``
    with chips MindCluster reports bad (the first ``BEST_SHOWN``), or ""."""
    named = [s for d in domains for s in d.nodes if s.bad is not None and s.bad.bad]
    if not named:
        return ""
    shown = "; ".join(f"{s.name}: {s.bad.describe()}" for s in named[:BEST_SHOWN] if s.bad)
    more = f"; and {len(named) - BEST_SHOWN} more nodes" if len(named) > BEST_SHOWN else ""
    return f"; MindCluster reports {shown}{more}"


@dataclass(frozen=True)
class PlacementDecision:
    """What ``decide`` found: the pins of the instances to create (an instance absent
    from ``pins`` is created unpinned), those that wait, the PlacementFeasible condition
    (status, reason, message), the deployment's domain (scope Deployment) and, when a
    domain was chosen now, the domains' capacity for the status."""

    pins: Mapping[InstanceKey, Pin] = field(default_factory=dict)
    blocked: frozenset[InstanceKey] = frozenset()
    status: str = "True"
    reason: str = REASON_DOMAIN_CHOSEN
    message: str = ""
    domain: str = ""
    #: a choice was made now (status.placement's reason, time and capacity follow it)
    chosen: bool = False
    capacity: tuple[Json, ...] = ()
    #: a choice is due and the pods' usage was not read: read it, then decide again
    needs_usage: bool = False


def transfer_mismatch(spec: PDDeploymentSpec, protocol: str, spread: str) -> str:
    """Why the plan needs ``protocol`` to cross domains: ``spread`` says where it would."""
    key = spec.placement.topology_key if spec.placement else ""
    return (
        f"ascend.transferProtocol {protocol} moves the KV only within one {key} domain, but "
        f"{spread}; use a transfer protocol that crosses domains (e.g. device_rdma), or free "
        "or add capacity in one domain"
    )


def _used_domains(placement: Placement, existing: Mapping[InstanceKey, Pin | None]) -> list[str]:
    return sorted({p.domain for p in existing.values()
                   if p is not None and p.topology_key == placement.topology_key})  # fmt: skip


def _kept_domain(
    placement: Placement, existing: Mapping[InstanceKey, Pin | None], previous: Json
) -> str:
    """The deployment's domain while any instance exists: the status's, else the one most
    of the running instances are pinned to (ties by name); "" when none is kept."""
    if not existing:
        return ""
    before = previous.get("placement") or {}
    if before.get("topologyKey") == placement.topology_key and before.get("domain"):
        return str(before["domain"])
    counts: dict[str, int] = {}
    for pin in existing.values():
        if pin is not None and pin.topology_key == placement.topology_key:
            counts[pin.domain] = counts.get(pin.domain, 0) + 1
    if not counts:
        return ""
    return min(counts, key=lambda d: (-counts[d], d))


def decide(
    owner: Owner,
    spec: PDDeploymentSpec,
    new: list[InstanceKey],
    existing: Mapping[InstanceKey, Pin | None],
    nodes: Mapping[str, Json],
    usage: Usage | None,
    previous: Json,
) -> PlacementDecision:
    """Where the ``new`` instances go (``existing``: the running ones and their pins;
    ``previous``: the last status). ``spec.placement`` must be set."""
    placement = spec.placement
    assert placement is not None
    resource = spec.ascend.resource_name
    kept = _kept_domain(placement, existing, previous) if placement.scope == "Deployment" else ""
    protocol = single_domain_protocol(spec) if placement.scope == "Instance" else ""
    # With a single-domain protocol every instance goes where the others are (``together``).
    together = placement.scope == "Deployment" or bool(protocol)
    if protocol:
        used = _used_domains(placement, existing)
        if len(used) > 1:  # spread already (the protocol or the scope changed): keep, add none
            spread = f"the running instances are in {', '.join(used)}"
            return PlacementDecision(
                blocked=frozenset(new), status="False", reason=REASON_TRANSFER_PROTOCOL_MISMATCH,
                message=transfer_mismatch(spec, protocol, spread),
            )  # fmt: skip
        kept = used[0] if used else ""
    if placement.scope == "None":
        pin = None
        if placement.domains:
            pin = Pin(placement.topology_key, tuple(placement.domains), placement.mode)
        held = f"held to domains {', '.join(placement.domains)}" if pin else "not held to any"
        return PlacementDecision(
            pins={k: pin for k in new} if pin else {}, reason=REASON_UNSCOPED,
            message=f"scope None: the scheduler places each pod, {held}",
        )  # fmt: skip
    if not new:
        # nothing to choose: the last choice's word stands while it was a success
        before: Json = next((c for c in previous.get("conditions") or []
                       if c.get("type") == COND_PLACEMENT_FEASIBLE), {})  # fmt: skip
        if before.get("status") == "True" and before.get("reason") == REASON_DOMAIN_CHOSEN:
            return PlacementDecision(domain=kept, message=str(before.get("message")))
        return PlacementDecision(
            domain=kept, reason=REASON_PLACED, message="no instance waits for a domain"
        )
    if usage is None or usage.error:
        why = usage.error if usage is not None else "not read yet"
        return PlacementDecision(
            blocked=frozenset(new) if placement.mode == "Required" else frozenset(),
            status="False" if placement.mode == "Required" else "True",
            reason=REASON_NODE_USAGE_UNKNOWN,
            message=f"what the pods on the nodes hold is unknown: {why}",
            domain=kept, needs_usage=usage is None,
        )  # fmt: skip
    me = f"{owner.namespace}/{owner.name}"
    found = slots(nodes, placement.topology_key, resource, usage, me, spec.ascend.host_network)
    domains = domains_of(found, usage, me, placement.domains)
    by_room = sorted(domains, key=lambda d: (-d.free_npus, d.name))
    capacity = tuple(d.capacity() for d in by_room[:CAPACITY_KEPT])
    if together:
        choice = choose(_needs(spec, new), domains, placement, resource, only=kept)
        groups = [(list(new), choice)]
        if protocol and choice.domain is None:
            apart = _apart(spec, new, domains, resource)
            if all(c.domain is not None for _, c in apart):
                where = sorted({c.domain.name for _, c in apart if c.domain is not None})
                spread = (f"the deployment {choice.message}, and only {', '.join(where)} "
                          "together would hold its instances")  # fmt: skip
                return PlacementDecision(
                    blocked=frozenset(new), status="False",
                    reason=REASON_TRANSFER_PROTOCOL_MISMATCH,
                    message=transfer_mismatch(spec, protocol, spread), domain=kept,
                    capacity=capacity,
                )  # fmt: skip
    else:
        groups = _apart(spec, new, domains, resource)
    pins: dict[InstanceKey, Pin] = {}
    blocked: set[InstanceKey] = set()
    failed: list[tuple[list[InstanceKey], Choice]] = []
    for keys, choice in groups:
        if choice.domain is not None:
            pin = Pin(placement.topology_key, (choice.domain.name,), placement.mode,
                      placement.exclusive)  # fmt: skip
            pins.update(dict.fromkeys(keys, pin))
        else:
            failed.append((keys, choice))
            if placement.mode == "Required":
                blocked.update(keys)
    chosen = [c.domain.name for _, c in groups if c.domain is not None]
    domain = kept or (chosen[0] if chosen and together else "")
    ordered = _chosen_first(capacity, chosen)
    if not failed:
        message = "; ".join(
            f"{', '.join(instance_name(owner, r, i) for r, i in keys)} → {c.message}"
            for keys, c in groups
        )
        return PlacementDecision(pins, frozenset(), "True", REASON_DOMAIN_CHOSEN, message,
                                 domain, chosen=True, capacity=ordered)  # fmt: skip
    keys, first = failed[0]
    names = ", ".join(instance_name(owner, r, i) for r, i in keys)
    more = f" (and {len(failed) - 1} more instance groups)" if len(failed) > 1 else ""
    if placement.mode == "Preferred":
        return PlacementDecision(
            pins, frozenset(), "True", REASON_PREFERRED_DOMAIN_UNAVAILABLE,
            f"{names} created unpinned ({first.reason}: {first.message}){more}", domain,
            chosen=bool(chosen), capacity=ordered,
        )  # fmt: skip
    return PlacementDecision(
        pins, frozenset(blocked), "False", first.reason,
        f"{names} not created: {first.message}{more}", domain, chosen=bool(chosen),
        capacity=ordered,
    )  # fmt: skip


def _apart(
    spec: PDDeploymentSpec, new: list[InstanceKey], domains: list[Domain], resource: str
) -> list[tuple[list[InstanceKey], Choice]]:
    """Each new instance in the domain that fits it best, in role and index order, each
    taking its nodes before the next chooses."""
    assert spec.placement is not None
    groups: list[tuple[list[InstanceKey], Choice]] = []
    for key in new:
        choice = choose(_needs(spec, [key]), domains, spec.placement, resource)
        groups.append(([key], choice))
        if choice.domain is not None:  # its nodes are taken for the next instance
            domains = [_without(d, choice.nodes) for d in domains]
    return groups


def _without(domain: Domain, taken: Iterable[str]) -> Domain:
    gone = set(taken)
    return Domain(domain.name, tuple(s for s in domain.nodes if s.name not in gone),
                  domain.others, domain.holders)  # fmt: skip


def _chosen_first(capacity: tuple[Json, ...], chosen: list[str]) -> tuple[Json, ...]:
    first = [c for c in capacity if c["domain"] in chosen]
    return tuple(first + [c for c in capacity if c["domain"] not in chosen])


def placement_status(
    spec: PDDeploymentSpec,
    owner: Owner,
    decision: PlacementDecision,
    pins: Mapping[InstanceKey, Pin],
    previous: Json,
    now: str,
) -> Json:
    """``status.placement``: the topology, the deployment's domain, each pinned instance's
    domain, and why and when the last domain was chosen (kept from the previous status
    while nothing is chosen)."""
    placement = spec.placement
    assert placement is not None
    before = previous.get("placement") or {}
    out: Json = {"topologyKey": placement.topology_key, "scope": placement.scope}
    if decision.domain:
        out["domain"] = decision.domain
    if decision.chosen:
        out.update(reason=decision.message, time=now, capacity=list(decision.capacity))
    else:
        out.update({k: before[k] for k in ("reason", "time", "capacity") if k in before})
    out["instances"] = [
        {"instance": instance_name(owner, role, index), "domain": pin.domain}
        for (role, index), pin in sorted(pins.items())
    ]
    return out
