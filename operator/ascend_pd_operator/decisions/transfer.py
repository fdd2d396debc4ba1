"""Whether the KV transfer protocol reaches from prefill to decode: what the spec says.

Memfabric (the ``ascend`` transfer backend) moves the KV with ``ascend.transferProtocol``:
``sdma`` over the HCCS/UB fabric, which exists only inside one domain, and ``device_rdma``
over the NPUs' RoCE NICs, between servers. The domain depends on the hardware:

- an A2 server (Atlas 800I/800T A2) is a domain of its own: its 8 NPUs are joined by HCCS,
  and it reaches other servers only over RoCE;
- A3 servers (16 NPUs each) are joined into a super-pod by the UB fabric, so ``sdma``
  reaches across the servers of one super-pod, not beyond it.

With ``spec.placement``, its ``topologyKey`` names the domains and ``placement.decide``
keeps the instances within one where the protocol needs it. Without it, the spec alone
says enough in one case: ``devicesPerNode: 8`` in the host network. Every runtime pod then
holds a node of its own (port 30000), 8 NPUs of it, which is a whole A2 server (the
``devicesPerNode`` the A2 row of docs/compatibility.md gives; on an A3 node half the NPUs
would sit idle): prefill and decode are on different servers, each its own HCCS domain, and
``sdma`` cannot carry the KV from one to the other. ``implied_mismatch`` says so.

It is inferred from the spec's shape, not from the nodes, so it does not stop the
deployment (the PlacementFeasible condition and a Warning Event say it; a spec the
inference misreads still runs). A pod of fewer NPUs, or one off the host network, may be
part of an A3 node in a super-pod: not judged (what is not known to fail is not refused).
"""

from __future__ import annotations

from ascend_pd_operator.api.models import PDDeploymentSpec
from ascend_pd_operator.api.vocabulary import ROLES

#: Memfabric transfer protocols (``ascend.transferProtocol``) that reach only within one
#: topology domain: ``sdma`` runs over the HCCS/UB fabric of one server (A2) or super-pod
#: (A3). ``device_rdma`` runs over the NICs and crosses domains.
SINGLE_DOMAIN_PROTOCOLS = frozenset({"sdma"})
#: NPUs of an A2 server: a pod of this many in the host network is a whole A2 server.
A2_NPUS_PER_NODE = 8
#: The protocol that crosses servers, which the A2 row of docs/compatibility.md recommends.
CROSSING_PROTOCOL = "device_rdma"


def single_domain_protocol(spec: PDDeploymentSpec) -> str:
    """The transfer protocol when it reaches only within one domain ("" when it crosses)."""
    if spec.runtime.transfer_backend != "ascend":
        return ""
    protocol = spec.ascend.transfer_protocol
    return protocol if protocol in SINGLE_DOMAIN_PROTOCOLS else ""


def a2_roles(spec: PDDeploymentSpec) -> list[str]:
    """The roles whose every pod is a whole A2 server, as far as the spec says: 8 NPUs
    per pod, one runtime pod per node (the host network)."""
    if not spec.ascend.host_network:
        return []
    return [r for r in ROLES if spec.role(r).devices_per_node == A2_NPUS_PER_NODE]


def implied_mismatch(spec: PDDeploymentSpec) -> str:
    """Why, without ``spec.placement``, the spec's transfer protocol cannot carry the KV
    from prefill to decode ("" when nothing says it cannot). With ``spec.placement`` the
    placement decision judges it over the topology's domains."""
    protocol = single_domain_protocol(spec)
    roles = a2_roles(spec)
    if spec.placement is not None or not protocol or not roles:
        return ""
    which = " and ".join(roles)
    return (
        f"ascend.transferProtocol {protocol} moves the KV only within one HCCS/UB domain, but "
        f"{which} pods each take devicesPerNode {A2_NPUS_PER_NODE} NPUs with ascend.hostNetwork "
        f"true, a whole A2 server each (its own HCCS domain), so the KV crosses servers from "
        f"prefill to decode; use ascend.transferProtocol {CROSSING_PROTOCOL} (RDMA over the "
        "NICs, the A2 row of docs/compatibility.md), or on an A3 super-pod set spec.placement "
        "to its super-pod label"
    )
