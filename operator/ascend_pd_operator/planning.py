"""From a parsed spec and model facts to the KV layout, through the runtime's layout core.

The operator never computes a layer range itself: it turns the spec into the
core's ``LayoutRequest`` and asks ``compute_layout``. ``BadInput`` (a partition
that does not sum to the layer count, a pipeline longer than the model) and the
core's compatibility problems both reach the user through KVLayoutCompatible.
"""

from __future__ import annotations

from ascend_pd_runtime.layout import KVLayout, LayoutRequest, compute_layout
from ascend_pd_runtime.model_facts import ModelFacts

from .api import PDDeploymentSpec


def layout_request(spec: PDDeploymentSpec) -> LayoutRequest:
    algorithm = spec.speculative.algorithm.lower()
    return LayoutRequest(
        prefill_pp=spec.prefill.parallelism.pipeline,
        decode_pp=spec.decode.parallelism.pipeline,
        layer_partition=tuple(spec.prefill.layer_partition),
        speculative=algorithm,
        speculative_roles=tuple(spec.speculative.roles),
        sglang_version=spec.runtime.sglang_version,
        transfer_backend=spec.runtime.transfer_backend,
    )


def plan_layout(spec: PDDeploymentSpec, facts: ModelFacts) -> KVLayout:
    """The deployment's layout; raises ``BadInput`` when the spec cannot fit the model."""
    return compute_layout(facts, layout_request(spec))
