"""The plan's API writes (``Write``: apply, create, delete, label, a status patch, an
instance's restart) and what carrying them out taught (``Outcome``, a ``Failure``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascend_pd_operator.api.json_object import Json


@dataclass(frozen=True)
class Write:
    """One API write of the plan: apply ``manifest``, or delete ``kind``/``name``."""

    #: "apply" | "create" (once: an existing object is left as it is) | "delete" | "label"
    #: (a merge patch of labels) | "status" (a merge patch of the manifest's status) |
    #: "restart" (delete every pod matching the manifest's labels, one request: ``name``
    #: is the instance)
    verb: str
    kind: str
    name: str
    manifest: Json | None = None
    #: A delete's grace period (None: the object's own; 0: a force-delete).
    grace_period_seconds: int | None = None
    #: A delete that leaves the object's dependents (a drained instance's pods).
    orphan: bool = False

    def describe(self) -> str:
        if self.verb == "restart":
            return f"restarting instance {self.name} (deleting its pods in one request)"
        verb = {"apply": "applying", "create": "creating", "delete": "deleting",
                "label": "labelling", "status": "updating the status of"}[self.verb]  # fmt: skip
        if self.verb == "delete" and self.grace_period_seconds == 0:
            verb = "force-deleting"
        if self.orphan:
            return f"releasing {self.kind} {self.name} (deleting it, its pods left)"
        return f"{verb} {self.kind} {self.name}"


def label(kind: str, name: str, labels: dict[str, str | None]) -> Write:
    return Write("label", kind, name, {"metadata": {"labels": labels}})


def apply(manifest: Json) -> Write:
    return Write("apply", manifest["kind"], manifest["metadata"]["name"], manifest)


def delete(kind: str, name: str) -> Write:
    return Write("delete", kind, name)


def restart(instance: str, selector: dict[str, str]) -> Write:
    return Write("restart", "Pod", instance, {"metadata": {"labels": selector}})


@dataclass(frozen=True)
class Failure:
    """A write the API server refused (not transiently): which, its HTTP status, why."""

    write: Write
    status: int | None
    error: str

    def message(self) -> str:
        if self.write.kind == "PodGroup" and self.write.verb == "apply" and self.status == 404:
            return (
                f"{self.write.describe()}: scheduling.gang is volcano but the cluster has no "
                "PodGroup API (scheduling.volcano.sh/v1beta1); install Volcano or set "
                "scheduling.gang: none"
            )
        return f"{self.write.describe()}: {self.error}"


@dataclass(frozen=True)
class Outcome:
    """What carrying out steps 1 to 3 taught: the objects the applies returned (or the
    watched objects standing in for them) and the write that failed, if one did."""

    live: Mapping[tuple[str, str], Json] = field(default_factory=dict)
    failure: Failure | None = None
