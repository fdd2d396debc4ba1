"""The rules on the spec's shape: the name, a role's parallelism, layers and extraArgs,
and the fields that must agree across roles (pipeline sizes, the SGLang version's limits,
speculative decoding, the transfer backend)."""

from __future__ import annotations

import re
from typing import Any

from ascend_pd_operator.api.rules.limits import (
    CONTROL_CHARACTER_PATTERN,
    MANAGED_FLAG_PATTERN,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    NO_PP_PREFILL_DRAFT_PATTERN,
    SUPPORTED_VERSION_PATTERN,
)
from ascend_pd_operator.api.rules.rule import Rule, got, matching
from ascend_pd_runtime.layout import (
    SGLANG_PP_PREFILL_DRAFT,
    SUPPORTED_SGLANG_MAX,
    SUPPORTED_SGLANG_MIN,
    parse_sglang_version,
)

_lo, _hi = SUPPORTED_SGLANG_MIN[2], SUPPORTED_SGLANG_MAX[2]


def _version_supported(text: str) -> bool:
    v = parse_sglang_version(text)
    return v is not None and SUPPORTED_SGLANG_MIN <= v <= SUPPORTED_SGLANG_MAX


def _version_refuses_pp_prefill_draft(text: str) -> bool:
    v = parse_sglang_version(text)
    return v is not None and SUPPORTED_SGLANG_MIN <= v < SGLANG_PP_PREFILL_DRAFT


def _role_devices_ok(r: Any) -> bool:
    p = r.parallelism
    return bool(p.tensor * p.pipeline % r.devices_per_node == 0)


def _spec_spec_ok(s: Any) -> bool:
    sp = s.speculative
    return not (
        sp.algorithm != "NONE"
        and "prefill" in sp.roles
        and s.prefill.parallelism.pipeline > 1
        and _version_refuses_pp_prefill_draft(s.runtime.sglang_version)
    )


def _mooncake_ok(s: Any) -> bool:
    cfg = s.model.config
    mla = cfg is not None and cfg.kv_lora_rank > 0
    return not (
        s.runtime.transfer_backend == "mooncake" and s.prefill.parallelism.pipeline > 1 and mla
    )


def _managed(args: list[str]) -> list[str]:
    return matching(MANAGED_FLAG_PATTERN, args)


def _with_control(args: list[str]) -> list[str]:
    return matching(CONTROL_CHARACTER_PATTERN, args)


SPEC_RULES: tuple[Rule, ...] = (
    Rule(
        where="root",
        # The API server already holds names to DNS-1123 subdomains (lowercase, digits,
        # '-', '.', alphanumeric at both ends); what a DNS label starting with a letter adds
        # is no '.' and a letter first. Short patterns keep the estimated cost low, since
        # metadata.name has no maxLength the cost estimator could use.
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
        "!self.metadata.name.contains('.') && self.metadata.name.matches('^[a-z]')",
        message=f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters "
        "starting with a letter, so every child name is valid",
        check=lambda name: bool(re.match(NAME_PATTERN, name)) and len(name) <= MAX_NAME_LENGTH,
        detail=lambda name: f"got {name!r}, {len(name)} characters",
    ),
    Rule(
        where="RoleSpec",
        cel="(self.parallelism.tensor * self.parallelism.pipeline) % self.devicesPerNode == 0",
        message="parallelism.tensor × parallelism.pipeline must be divisible by devicesPerNode "
        "(one pod per node, devicesPerNode NPUs each)",
        check=_role_devices_ok,
        detail=lambda r: (
            f"{r.parallelism.tensor} × {r.parallelism.pipeline} = "
            f"{r.parallelism.tensor * r.parallelism.pipeline}, devicesPerNode {r.devices_per_node}"
        ),
    ),
    Rule(
        where="RoleSpec",
        cel="size(self.layerPartition) == 0 || "
        "size(self.layerPartition) == self.parallelism.pipeline",
        message="layerPartition must be empty or have one entry per pipeline stage",
        check=lambda r: len(r.layer_partition) in (0, r.parallelism.pipeline),
        detail=lambda r: (
            f"{len(r.layer_partition)} entries {r.layer_partition}, "
            f"pipeline {r.parallelism.pipeline}"
        ),
    ),
    Rule(
        where="RoleSpec",
        cel=f"self.extraArgs.all(a, !a.matches('{MANAGED_FLAG_PATTERN}'))",
        message="extraArgs may not set flags the operator manages (parallel sizes, "
        "disaggregation, dist-init address, nnodes, node rank, model path, served model "
        "name, host, port, speculative settings)",
        check=lambda r: not _managed(r.extra_args),
        detail=lambda r: f"got {', '.join(_managed(r.extra_args))}",
    ),
    Rule(
        where="RoleSpec",
        cel=f"self.extraArgs.all(a, !a.matches('{CONTROL_CHARACTER_PATTERN}'))",
        message="extraArgs elements may not contain control characters (newline, tab, ...): "
        "each element is one argument, give every flag and value its own element",
        check=lambda r: not _with_control(r.extra_args),
        detail=lambda r: got(_with_control(r.extra_args)),
    ),
    Rule(
        where="ModelVolume",
        cel="has(self.persistentVolumeClaim) != has(self.hostPath)",
        message="model.volume must set exactly one of persistentVolumeClaim and hostPath",
        check=lambda v: (v.persistent_volume_claim is None) != (v.host_path is None),
        detail=lambda v: "both are set" if v.host_path else "neither is set",
    ),
    Rule(
        where="Speculative",
        cel="self.algorithm == 'NONE' || !('prefill' in self.roles) || 'decode' in self.roles",
        message="speculative.roles with prefill must include decode: prefill's draft KV "
        "needs a destination on decode",
        check=lambda s: s.algorithm == "NONE" or "prefill" not in s.roles or "decode" in s.roles,
        detail=lambda s: f"roles {s.roles}",
    ),
    Rule(
        where="Rollout",
        cel="self.maxUnavailable + self.maxSurge >= 1",
        message="rollout.maxUnavailable and rollout.maxSurge may not both be 0: "
        "a rollout could never take an instance down nor start a new one",
        check=lambda r: r.max_unavailable + r.max_surge >= 1,
        detail=lambda r: f"maxUnavailable {r.max_unavailable}, maxSurge {r.max_surge}",
    ),
    Rule(
        where="Runtime",
        cel=f"self.sglangVersion.matches('{SUPPORTED_VERSION_PATTERN}')",
        message=f"runtime.sglangVersion must be a supported SGLang release "
        f"(0.5.{_lo} to 0.5.{_hi})",
        check=lambda r: _version_supported(r.sglang_version),
        detail=lambda r: f"got {r.sglang_version!r}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.decode.parallelism.pipeline == 1 || "
        "self.decode.parallelism.pipeline == self.prefill.parallelism.pipeline",
        message="decode.parallelism.pipeline must be 1 or equal to prefill.parallelism.pipeline",
        check=lambda s: s.decode.parallelism.pipeline in (1, s.prefill.parallelism.pipeline),
        detail=lambda s: (
            f"decode {s.decode.parallelism.pipeline}, prefill {s.prefill.parallelism.pipeline}"
        ),
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="size(self.decode.layerPartition) == 0 || "
        "self.decode.layerPartition == self.prefill.layerPartition",
        message="decode.layerPartition must be empty or equal to prefill.layerPartition "
        "(decode at the prefill's pipeline size uses the prefill's partition)",
        check=lambda s: (
            not s.decode.layer_partition or s.decode.layer_partition == s.prefill.layer_partition
        ),
        detail=lambda s: f"decode {s.decode.layer_partition}, prefill {s.prefill.layer_partition}",
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.speculative.algorithm == 'NONE' || !('prefill' in self.speculative.roles) || "
        "self.prefill.parallelism.pipeline == 1 || "
        f"!self.runtime.sglangVersion.matches('{NO_PP_PREFILL_DRAFT_PATTERN}')",
        message="SGLang before 0.5.20 refuses speculative decoding on a prefill with pipeline "
        "size > 1: remove prefill from speculative.roles, use prefill pipeline 1, or "
        "SGLang >= 0.5.20",
        check=_spec_spec_ok,
        detail=lambda s: (
            f"sglangVersion {s.runtime.sglang_version!r}, prefill pipeline "
            f"{s.prefill.parallelism.pipeline}, roles {s.speculative.roles}"
        ),
    ),
    Rule(
        where="PDDeploymentSpec",
        cel="self.runtime.transferBackend != 'mooncake' || self.prefill.parallelism.pipeline == 1"
        " || !has(self.model.config) || self.model.config.kvLoraRank == 0",
        message="transferBackend mooncake with prefill pipeline > 1 on an MLA model is refused "
        "(it corrupts KV); use transferBackend ascend",
        check=_mooncake_ok,
        detail=lambda s: (
            f"prefill pipeline {s.prefill.parallelism.pipeline}, kvLoraRank "
            f"{s.model.config.kv_lora_rank if s.model.config else '?'}"
        ),
    ),
)
