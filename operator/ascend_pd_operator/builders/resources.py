"""Pure builders of the CPU and memory the runtime and router containers ask for.

Without requests a pod is BestEffort: the scheduler reserves no host memory for it, and
the kubelet evicts it first under memory pressure (extended resources such as the NPUs do
not count for that ranking). A runtime pod holds its ranks' weights in host memory while
they load, and one evicted pod restarts its whole instance, so every container gets CPU and
memory requests, derived from the model and the parallel layout, which ``resources`` of the
role (or router) overrides one resource at a time:

* runtime, per pod: ``CPU_PER_RANK`` per NPU plus ``CPU_PER_POD``; memory, per NPU, the
  weights of the role's largest rank (``fit.check_fit``: its layers, TP, DP attention, EP
  and quantization as SGLang shards them) plus ``HOST_BYTES_PER_RANK`` (its process: torch,
  the CANN runtime, HCCL's host buffers), plus ``HOST_BYTES_PER_POD`` (tokenizer,
  detokenizer, launcher). No limits: a CPU limit throttles the ranks, and the checkpoint's
  page cache and a loading peak would meet a memory limit with an OOM kill of the instance.
  The pods are Burstable (Guaranteed when the user gives equal requests and limits).
* router: ``ROUTER_REQUESTS`` and the limit ``ROUTER_LIMITS`` (a cache-aware router's tree
  grows with traffic; the limit bounds it to one pod's restart).

When the model's sizes are not known (``check_fit`` cannot count them), the weights count as
0: the requests still keep the pod out of BestEffort.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import PDDeploymentSpec, ResourceRequirements
from ascend_pd_operator.api.vocabulary import ROLES
from ascend_pd_runtime.fit import GIB, RoleParallel, check_fit
from ascend_pd_runtime.layout import KVLayout

CPU, MEMORY = "cpu", "memory"
#: CPUs a rank's scheduler process keeps busy (its Python loop, the NPU launches).
CPU_PER_RANK = 2
#: CPUs of the processes a pod runs besides its ranks (tokenizer, detokenizer, launcher).
CPU_PER_POD = 2
HOST_BYTES_PER_RANK = 4 * GIB
HOST_BYTES_PER_POD = 4 * GIB
ROUTER_REQUESTS = {CPU: "1", MEMORY: "1Gi"}
ROUTER_LIMITS = {MEMORY: "4Gi"}

_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def quantity(value: int | str) -> Decimal:
    """A Kubernetes quantity's value (``2Gi``, ``500m``, ``1e3``); the API refuses what
    ``rules.pod.is_quantity`` refuses, so every spec's quantity parses."""
    text = str(value).lstrip("+")
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix) and not text.endswith("e" + suffix):
            return Decimal(text[: -len(suffix)]) * Decimal(_SUFFIX[suffix])
    try:
        return Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def merged(defaults: Json, user: ResourceRequirements) -> Json:
    """``defaults`` ({"requests": ..., "limits": ...}) under the user's resources: each
    resource the user names wins. A default request above the user's limit of the same
    resource becomes that limit, and a default limit below the user's request is dropped,
    since the API refuses a request above its limit."""
    requests = {k: v for k, v in defaults.get("requests", {}).items() if k not in user.requests}
    limits = {k: v for k, v in defaults.get("limits", {}).items() if k not in user.limits}
    for name, limit in user.limits.items():
        if name in requests and quantity(requests[name]) > quantity(limit):
            requests[name] = limit
    for name, request in user.requests.items():
        if name in limits and quantity(request) > quantity(limits[name]):
            del limits[name]
    out: Json = {}
    if reqs := {**requests, **user.requests}:
        out["requests"] = reqs
    if lims := {**limits, **user.limits}:
        out["limits"] = lims
    return out


def role_parallel(spec: PDDeploymentSpec) -> dict[str, RoleParallel]:
    """Each role's parallel sizes and weight-sharding flags, as ``fit.check_fit`` takes them."""
    return {
        r: RoleParallel(spec.role(r).parallelism.tensor, spec.role(r).parallelism.data,
                        tuple(spec.role(r).extra_args))
        for r in ROLES
    }  # fmt: skip


def rank_weight_bytes(spec: PDDeploymentSpec, layout: KVLayout, role: str) -> int:
    """The weights of ``role``'s largest rank (0 when the model's sizes are not known)."""
    report = check_fit(layout.facts, layout, role_parallel(spec))
    return max((s.weight_bytes for s in report.stages if s.role == role), default=0)


def _gib(n: int) -> str:
    return f"{math.ceil(n / GIB)}Gi"


def runtime_defaults(spec: PDDeploymentSpec, layout: KVLayout, role: str) -> Json:
    """The requests a runtime pod of ``role`` gets by default (no limits)."""
    ranks = spec.role(role).devices_per_node
    memory = ranks * (rank_weight_bytes(spec, layout, role) + HOST_BYTES_PER_RANK)
    cpu = ranks * CPU_PER_RANK + CPU_PER_POD
    return {"requests": {CPU: str(cpu), MEMORY: _gib(memory + HOST_BYTES_PER_POD)}}


def runtime_resources(spec: PDDeploymentSpec, layout: KVLayout, role: str) -> Json:
    """The runtime container's resources: the defaults (unless the role opts out) under the
    role's own, and the NPUs as request and limit."""
    r = spec.role(role)
    defaults = runtime_defaults(spec, layout, role) if r.default_resources else {}
    out = merged(defaults, r.resources)
    npus = {spec.ascend.resource_name: str(r.devices_per_node)}
    return {"requests": {**out.get("requests", {}), **npus},
            "limits": {**out.get("limits", {}), **npus}}  # fmt: skip


def router_resources(spec: PDDeploymentSpec) -> Json:
    """The router container's resources (empty only when it opts out and gives none)."""
    r = spec.router
    defaults = {"requests": ROUTER_REQUESTS, "limits": ROUTER_LIMITS} if r.default_resources else {}
    return merged(defaults, r.resources)
