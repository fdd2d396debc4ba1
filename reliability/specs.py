"""Small PDDeployments for the scenarios: real layouts, one NPU per pod, inline model facts.

Inline facts (``spec.model.config``) keep the scenarios independent of the model
inspector; sizes stay small so several scenarios fit the dev cluster's 64 NPUs at once.
"""

from __future__ import annotations

import copy
from typing import Any

from ascend_pd_operator.api import models

Json = dict[str, Any]

#: DeepSeek-V3's facts (61 layers, one MTP layer, MLA).
DEEPSEEK_V3 = {
    "architecture": "DeepseekV3ForCausalLM",
    "numHiddenLayers": 61,
    "numNextnPredictLayers": 1,
    "kvLoraRank": 512,
    "qkRopeHeadDim": 64,
}


#: Each runtime role's requests in the scenarios. DeepSeek-V3 on one NPU per rank does not
#: fit (the operator warns), and the requests it derives from the weights per rank (675Gi
#: for a prefill PP rank, 1258Gi for a decode rank) would leave room for one decode pod per
#: simulated node: several scenarios' deployments, and pods still terminating from the last
#: one, then outgrow the cluster's memory and a pod stays Pending. The scenarios judge
#: reconciliation, not sizing; a user's ``resources`` overrides the derived requests the same
#: way, so the pods keep requests (Burstable, never BestEffort).
ROLE_RESOURCES = {"requests": {"cpu": "1", "memory": "16Gi"}}

#: the runtime image the scenarios' (and the benchmarks') deployments name
RUNTIME_IMAGE = "registry.example.com/ascend-pd-runtime:0.1.0"


def document(name: str, namespace: str, spec: Json) -> Json:
    """The PDDeployment ``namespace/name`` of ``spec``."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pdd(
    name: str,
    namespace: str,
    prefill: int = 1,
    decode: int = 1,
    prefill_pp: int = 2,
    router_policy: str = "round_robin",
    host_network: bool = False,
) -> Json:
    """A DeepSeek-V3 PDDeployment: prefill PP ``prefill_pp`` × TP 1, decode TP 1, on the pod
    network unless ``host_network``: the scenarios run several such deployments side by side
    on a few nodes, and in the host network every runtime pod takes the same host ports, so
    kube-scheduler places one runtime pod per node, as on a real cluster."""
    model = {
        "name": "deepseek-v3",
        "path": "/models/DeepSeek-V3",
        "volume": {"hostPath": {"path": "/data/models/DeepSeek-V3"}},
        "config": dict(DEEPSEEK_V3),
    }
    return document(
        name,
        namespace,
        {
            "model": model,
            "runtime": {"image": RUNTIME_IMAGE},
            "prefill": {
                "replicas": prefill,
                "parallelism": {"tensor": 1, "pipeline": prefill_pp},
                "devicesPerNode": 1,
                "resources": copy.deepcopy(ROLE_RESOURCES),
            },
            "decode": {
                "replicas": decode,
                "parallelism": {"tensor": 1},
                "devicesPerNode": 1,
                "resources": copy.deepcopy(ROLE_RESOURCES),
            },
            "router": {"policy": router_policy},
            "ascend": {"hostNetwork": host_network},
        },
    )


def merged(base: Json, patch: Json) -> Json:
    """JSON merge patch (RFC 7386) of ``patch`` onto a copy of ``base``."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
