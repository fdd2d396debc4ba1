"""CPU and memory of the runtime and router containers (issue 36): no pod is BestEffort.

Expected values are derived by hand from the published model sizes and the formula
docs/models.md gives (per NPU: the rank's weights + 4 GiB; per pod: + 4 GiB; 2 CPUs per
NPU + 2), not computed by the builders.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.models import ResourceRequirements, parse_spec
from ascend_pd_operator.builders.resources import merged, quantity, router_resources
from ascend_pd_operator.wiring.render_cli import render

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GIB = 1 << 30


def _example(name: str) -> tuple[Json, list[Json]]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    resource = next(d for d in docs if d["kind"] == "PDDeployment")
    return resource, [d for d in docs if d["kind"] == "ConfigMap"]


def _containers(resource: Json, configmaps: list[Json]) -> dict[str, Json]:
    code, manifests, message = render(resource, None, "llm", configmaps)
    assert code == 0, message
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]["containers"][0]
        for m in manifests
        if m["kind"] in ("StatefulSet", "Deployment")
    }


def _lite(tensor: int) -> tuple[Json, list[Json]]:
    resource, configmaps = _example("deepseek-v2-lite.yaml")
    resource = copy.deepcopy(resource)
    for role in ("prefill", "decode"):
        resource["spec"][role].update(parallelism={"tensor": tensor}, devicesPerNode=tensor)
    return resource, configmaps


def test_one_npu_pod_asks_for_the_whole_model_and_the_overheads() -> None:
    # DeepSeek-V2-Lite: 15.7B parameters (its paper) in BF16 = 29.2 GiB on the one rank,
    # + 4 GiB for the rank's process + 4 GiB for the pod = 37.2 GiB -> 38Gi; 2 + 2 CPUs.
    want = math.ceil((15.7e9 * 2 + 8 * GIB) / GIB)
    assert want == 38
    container = _containers(*_lite(1))["dsv2-lite-prefill-0"]
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "38Gi", "huawei.com/Ascend910": "1"},
        "limits": {"huawei.com/Ascend910": "1"},
    }


def test_two_ranks_hold_the_model_once_and_what_they_replicate() -> None:
    # TP 2: the two ranks together hold the whole model (29.2 GiB) once, plus the parts
    # SGLang keeps whole on each (q_a, kv_a, norms, the gate: under 2 GiB for V2-Lite),
    # + 2 × 4 + 4 GiB: from 41.2 to 43.2 GiB, and 2 × 2 + 2 CPUs.
    requests = _containers(*_example("deepseek-v2-lite.yaml"))["dsv2-lite-decode-1"]["resources"][
        "requests"
    ]
    assert requests["cpu"] == "6"
    assert 42 * GIB <= quantity(requests["memory"]) <= 44 * GIB


def test_unknown_model_sizes_still_get_requests() -> None:
    # Inline layout facts of no bundled model: the weights are not known, the overheads are.
    resource, _ = _lite(2)
    resource["spec"]["model"].pop("configMapRef")
    resource["spec"]["model"]["config"] = {"numHiddenLayers": 5, "kvLoraRank": 512,
                                           "qkRopeHeadDim": 64}  # fmt: skip
    requests = _containers(resource, [])["dsv2-lite-prefill-0"]["resources"]["requests"]
    assert requests == {"cpu": "6", "memory": "12Gi", "huawei.com/Ascend910": "2"}


def test_every_example_container_has_cpu_and_memory_requests() -> None:
    for path in sorted(EXAMPLES.glob("deepseek-*.yaml")):
        for name, container in _containers(*_example(path.name)).items():
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), (path.name, name)
            if container["name"] == "router":
                assert container["resources"]["limits"] == {"memory": "4Gi"}


def test_the_role_s_resources_win_one_by_one_and_opting_out_leaves_the_npus() -> None:
    resource, configmaps = _lite(1)
    resource["spec"]["prefill"]["resources"] = {"requests": {"memory": "100Gi"},
                                                "limits": {"cpu": "3"}}  # fmt: skip
    resource["spec"]["decode"]["defaultResources"] = False
    containers = _containers(resource, configmaps)
    # the default CPU request (4) is above the role's CPU limit (3): the limit caps it
    assert containers["dsv2-lite-prefill-0"]["resources"] == {
        "requests": {"cpu": "3", "memory": "100Gi", "huawei.com/Ascend910": "1"},
        "limits": {"cpu": "3", "huawei.com/Ascend910": "1"},
    }
    assert containers["dsv2-lite-decode-0"]["resources"] == {
        "requests": {"huawei.com/Ascend910": "1"},
        "limits": {"huawei.com/Ascend910": "1"},
    }


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({}, {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}),
        # a request above the default limit drops that limit (the API refuses request > limit)
        ({"requests": {"memory": "8Gi"}},
         {"requests": {"cpu": "1", "memory": "8Gi"}}),
        # a limit below the default request caps that request
        ({"limits": {"memory": "512Mi", "cpu": "500m"}},
         {"requests": {"cpu": "500m", "memory": "512Mi"},
          "limits": {"memory": "512Mi", "cpu": "500m"}}),
        # Guaranteed when the user says so: equal requests and limits
        ({"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
         {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
    ],
)  # fmt: skip
def test_router_resources(given: Json, want: Json) -> None:
    resource, _ = _example("deepseek-v2-lite.yaml")
    spec = copy.deepcopy(resource["spec"])
    spec["router"]["resources"] = given
    assert router_resources(parse_spec(spec)) == want


def test_the_router_may_opt_out() -> None:
    resource, _ = _example("deepseek-v2-lite.yaml")
    spec = copy.deepcopy(resource["spec"])
    spec["router"]["defaultResources"] = False
    assert router_resources(parse_spec(spec)) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [("1Gi", 1 << 30), ("500m", 0.5), ("1.5", 1.5), ("2k", 2000), ("1e3", 1000), (3, 3),
     ("+4Mi", 4 << 20), ("100n", 1e-7)],
)  # fmt: skip
def test_quantity(text: str | int, value: float) -> None:
    assert float(quantity(text)) == pytest.approx(value)


def test_merged_keeps_user_resources_it_has_no_default_for() -> None:
    user = ResourceRequirements.model_validate({"limits": {"ephemeral-storage": "10Gi"}})
    assert merged({"requests": {"cpu": "1"}}, user) == {
        "requests": {"cpu": "1"}, "limits": {"ephemeral-storage": "10Gi"}}  # fmt: skip


def test_render_warns_of_a_part_that_reserves_no_memory() -> None:
    resource, configmaps = _lite(1)
    resource["spec"]["decode"]["defaultResources"] = False
    resource["spec"]["router"]["defaultResources"] = False
    resource["spec"]["router"]["resources"] = {"requests": {"memory": "1Gi"}}
    code, _, message = render(resource, None, "llm", configmaps)
    assert code == 0
    warned = [line for line in message.splitlines() if "defaultResources: false" in line]
    assert len(warned) == 1 and warned[0].startswith("dsv2-lite: warning: decode has "), warned
    resource, configmaps = _lite(1)
    _, _, quiet = render(resource, None, "llm", configmaps)
    assert "defaultResources" not in quiet
