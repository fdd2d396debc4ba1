"""What pinning an instance to a topology domain writes into its StatefulSet, and reads back.

A ``Pin`` is what ``decisions.placement`` chose for an instance when it was created: the
topology label, the domains its pods may (Required) or should (Preferred) run in, and
whether its pods mark the domain as held exclusively. The StatefulSet carries it in the
annotation ``ANNOTATION_PLACEMENT``, and every later apply rebuilds the same affinity and
labels from that annotation (``pin_of``), never from the spec: so a change or removal of
``spec.placement`` leaves a running instance's pod template exactly as it was (no rollout),
and only an instance created or recreated is pinned anew.

Pure: JSON in, JSON out.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import ANNOTATION_PLACEMENT, LABEL_EXCLUSIVE

#: The weight of a Preferred pin's term: the most the scheduler gives a preference.
PREFERRED_WEIGHT = 100


@dataclass(frozen=True)
class Pin:
    """An instance's domain(s) under ``topology_key``; ``mode`` Required or Preferred."""

    topology_key: str
    domains: tuple[str, ...]
    mode: str = "Required"
    exclusive: bool = False
    #: The Volcano PodGroup the instance's pods join when it is not the instance's own: the
    #: deployment's gang (``vocabulary.gang_name``). Recorded with the pin because the pods'
    #: group annotation is in their template: a later change must not roll them.
    gang: str = ""

    def annotation(self) -> str:
        """The annotation's value: compact JSON with sorted keys, so equal pins give equal
        manifests (``gang`` only when set: a pin made before it existed reads back equal)."""
        doc = {"topologyKey": self.topology_key, "domains": list(self.domains),
               "mode": self.mode, "exclusive": self.exclusive}  # fmt: skip
        if self.gang:
            doc["gang"] = self.gang
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @property
    def domain(self) -> str:
        """The domains as one text (a scoped pin has one)."""
        return ",".join(self.domains)


def pin_of(statefulset: Json | None) -> Pin | None:
    """The pin a live StatefulSet was created with (None: created unpinned, or an
    annotation that is not ours to read: then the instance stays as it is)."""
    if statefulset is None:
        return None
    text = ((statefulset.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLACEMENT)
    if not text:
        return None
    try:
        doc = json.loads(text)
        pin = Pin(
            topology_key=str(doc["topologyKey"]),
            domains=tuple(str(d) for d in doc["domains"]),
            mode=str(doc.get("mode", "Required")),
            exclusive=bool(doc.get("exclusive", False)),
            gang=str(doc.get("gang", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
    if not pin.topology_key or not pin.domains or pin.mode not in ("Required", "Preferred"):
        return None
    return pin


def _requirement(pin: Pin) -> Json:
    return {"key": pin.topology_key, "operator": "In", "values": list(pin.domains)}


def pinned_affinity(user: Json, pin: Pin | None) -> Json:
    """The pod's affinity: the user's (a role's ``affinity``) with the pin's term added.
    Required: the requirement joins every one of the user's node selector terms (they are
    ORed, so each must carry it), or is the one term. Preferred: one more preferred term.
    The user's affinity is not changed."""
    out = copy.deepcopy(user)
    if pin is None:
        return out
    node = out.setdefault("nodeAffinity", {})
    if pin.mode == "Required":
        required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        for term in terms:
            term["matchExpressions"] = [*(term.get("matchExpressions") or []), _requirement(pin)]
        required["nodeSelectorTerms"] = terms
    else:
        preferred = node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        preferred.append(
            {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": [_requirement(pin)]}}
        )
    return out


def pin_labels(pin: Pin | None) -> dict[str, str]:
    """The pod labels of a pinned instance: the exclusive mark, when it holds its domain."""
    return {LABEL_EXCLUSIVE: "true"} if pin is not None and pin.exclusive else {}


def pin_annotations(pin: Pin | None) -> dict[str, str]:
    """The StatefulSet's annotations of a pinned instance."""
    return {ANNOTATION_PLACEMENT: pin.annotation()} if pin is not None else {}
