"""Operator-made template changes wait for the user (``operator_updates``, ``template_diff``).

The expectations are written by hand from the Kubernetes storage rules the comparison
stands in for (defaults filled in, empty values dropped, quantities canonical, lists
merged by key), and from the example's own shape (2 prefill and 1 decode instance, a
router), never from the planner's output.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_pd_operator.api.json_object import Json
from ascend_pd_operator.api.vocabulary import (
    ANNOTATION_APPLY_OPERATOR_UPDATES,
    LABEL_APPLIED_FOR,
    LABEL_TEMPLATE_DIGEST,
    Owner,
)
from ascend_pd_operator.decisions.observation import Observation
from ascend_pd_operator.decisions.operator_updates import Inputs, condition, hold, listed, stamp
from ascend_pd_operator.decisions.planner import Plan, plan
from ascend_pd_operator.decisions.template_diff import changes, quantity
from ascend_pd_runtime.env_contract import CONTRACT_VERSION
from tests.unit.operator.newer_operator import with_a_new_pod_label

NOW = "2026-01-01T00:00:00Z"
UID = "uid-1"


def _template(**container: Any) -> Json:
    base = {
        "name": "sglang",
        "image": "img:1",
        "env": [{"name": "A", "value": "1"}],
        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "1", "memory": "16Gi"}},
    }
    return {
        "metadata": {"labels": {"app": "x"}, "annotations": {}},
        "spec": {"containers": [{**base, **container}], "hostNetwork": False},
    }


def _stored(template: Json) -> Json:
    """What an API server stores of ``template``: defaults in, empty values out."""
    out = copy.deepcopy(template)
    out["metadata"] = {"creationTimestamp": None, "labels": out["metadata"]["labels"]}
    spec = out["spec"]
    del spec["hostNetwork"]  # false: omitted
    spec.update(dnsPolicy="ClusterFirst", restartPolicy="Always", schedulerName="default-scheduler")
    c = spec["containers"][0]
    c.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    c["resources"]["requests"]["memory"] = str(16 * 2**30)  # canonical form of 16Gi
    c["resources"]["requests"]["cpu"] = "1000m"
    return out


def test_a_template_as_stored_is_no_change() -> None:
    assert changes(_template(), _stored(_template())) == []


def test_quantities_compare_by_value() -> None:
    assert quantity("1000m") == quantity("1") and quantity("16Gi") == 16 * 2**30
    assert quantity("abc") is None


def test_added_changed_and_removed_fields_are_named_as_a_user_looks_them_up() -> None:
    live = _stored(_template())
    want = _template(env=[{"name": "B", "value": "2"}], securityContext={"privileged": False,
                     "capabilities": {"drop": ["NET_RAW"]}}, image="img:2")  # fmt: skip
    want["metadata"]["labels"] = {"new": "y"}
    assert sorted(changes(want, live)) == [
        "metadata.labels[app] removed",
        "metadata.labels[new] added",
        "spec.containers[sglang].env[A] removed",
        "spec.containers[sglang].env[B] added",
        "spec.containers[sglang].image changed",
        "spec.containers[sglang].securityContext added",
    ]


def test_an_unkeyed_list_is_one_change_and_a_foreign_annotation_is_none() -> None:
    want = _template(args=["--a", "--b"])
    live = _stored(_template(args=["--a"]))
    live["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "now"}
    assert changes(want, live) == ["spec.containers[sglang].args changed"]


def test_a_false_the_api_server_keeps_is_a_change_one_it_drops_is_none() -> None:
    """``enableServiceLinks`` is optional (a pointer): stored as false, so a template
    without it gains it; ``hostNetwork`` is a plain bool: false is stored as nothing. The
    upgrade tier found the first one missed against a router of 0dd9e25."""
    want = {"spec": {"enableServiceLinks": False, "hostNetwork": False,
                     "securityContext": {"runAsUser": 0}}}  # fmt: skip
    assert changes(want, {"spec": {}}) == [
        "spec.enableServiceLinks added",
        "spec.securityContext added",
    ]
    assert changes(want, {"spec": {"enableServiceLinks": False,
                                   "securityContext": {"runAsUser": 0}}}) == []  # fmt: skip


def test_a_port_as_string_or_number_is_the_same() -> None:
    want = {"port": 8000}
    assert changes(want, {"port": "8000"}) == [] and changes(want, {"port": 8001}) != []


OWNER = Owner("dsv3", "llm", UID, generation=3)


def _sts(name: str, template: Json, role: str = "prefill") -> Json:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"ascendpd.io/role": role}},
        "spec": {"selector": {"matchLabels": {"i": name}}, "template": template},
    }


def _live(
    manifest: Json, applied_for: tuple[int, str] | None, digest: str | None, rv: str = "7"
) -> Json:
    """``manifest`` as the cache holds it: its records (applied for (generation, trigger)
    and the template digest, if any) and no template."""
    live = copy.deepcopy(manifest)
    labels = dict(live["metadata"].get("labels") or {})
    if applied_for is not None:
        owner = Owner(OWNER.name, OWNER.namespace, OWNER.uid, applied_for[0])
        labels[LABEL_APPLIED_FOR] = stamp(owner, applied_for[1])
    if digest is not None:
        labels[LABEL_TEMPLATE_DIGEST] = digest
    live["metadata"].update(labels=labels, resourceVersion=rv)
    live["spec"] = {"selector": live["spec"]["selector"]}  # the cache keeps no template
    return live


def _inputs(**kw: Any) -> Inputs:
    base = dict(owner=OWNER, trigger="", router_inputs="", observed_generation=3, rolling=False)
    return Inputs(**{**base, **kw})  # type: ignore[arg-type]


def test_a_workload_applied_for_these_inputs_with_another_template_waits() -> None:
    old, new = _template(), _template(env=[{"name": "A", "value": "1"}, {"name": "B"}])
    desired = _sts("p0", new)
    live = {("StatefulSet", "p0"): _live(desired, (3, ""), "an-older-digest")}
    first = hold(_inputs(), [desired], live, {})
    # the live template is needed first; meanwhile nothing is applied
    assert first.needs_templates == (("StatefulSet", "p0"),) and first.children == ()
    read = {("StatefulSet", "p0"): ("7", _stored(old))}
    second = hold(_inputs(), [desired], live, read)
    assert second.children == () and second.kept == {("StatefulSet", "p0")}
    assert second.held.changes == {"prefill": ("spec.containers[sglang].env[B] added",)}
    assert second.held.summary() == "prefill" and not second.held.required
    # a template read at another resourceVersion is read again
    stale = hold(_inputs(), [desired], live, {("StatefulSet", "p0"): ("6", _stored(old))})
    assert stale.needs_templates == (("StatefulSet", "p0"),)


def test_a_user_change_the_trigger_or_rolling_applies_the_new_template() -> None:
    desired = _sts("p0", _template(image="img:2"))
    live = {("StatefulSet", "p0"): _live(desired, (2, ""), "an-older-digest")}
    for inputs, live_now in [
        (_inputs(), live),  # applied for generation 2, now 3: the user changed the spec
        (_inputs(trigger="now"), {("StatefulSet", "p0"): _live(desired, (3, ""), "older")}),
        (_inputs(rolling=True), {("StatefulSet", "p0"): _live(desired, (3, ""), "older")}),
    ]:
        out = hold(inputs, [desired], live_now, {})
        assert [m["metadata"]["name"] for m in out.children] == ["p0"]
        labels = out.children[0]["metadata"]["labels"]
        assert labels[LABEL_APPLIED_FOR] == stamp(OWNER, inputs.trigger)
        assert labels[LABEL_TEMPLATE_DIGEST] != "older" and not out.held.changes


def test_a_workload_without_records_is_unchanged_while_the_status_is_of_this_generation() -> None:
    desired = _sts("p0", _template(image="img:2"))
    live = {("StatefulSet", "p0"): _live(desired, None, None)}
    read = {("StatefulSet", "p0"): ("7", _stored(_template()))}
    held = hold(_inputs(observed_generation=3), [desired], live, read)
    assert held.held.changes == {"prefill": ("spec.containers[sglang].image changed",)}
    # the user changed the spec while no operator ran: it rolls
    assert len(hold(_inputs(observed_generation=2), [desired], live, read).children) == 1


def test_an_env_contract_change_is_required_and_still_waits() -> None:
    old = _template(env=[{"name": CONTRACT_VERSION, "value": "1"}])
    new = _template(env=[{"name": CONTRACT_VERSION, "value": "2"}])
    desired = _sts("d0", new, role="decode")
    live = {("StatefulSet", "d0"): _live(desired, (3, ""), "x")}
    out = hold(_inputs(), [desired], live, {("StatefulSet", "d0"): ("7", _stored(old))})
    assert out.children == () and out.held.required == {"decode"}
    cond = condition(OWNER, out.held)
    assert (cond["status"], cond["reason"]) == ("True", "OperatorChangeRequired")
    assert (
        f"decode: spec.containers[sglang].env[{CONTRACT_VERSION}].value changed"
        in (cond["message"])
    )
    assert (
        f"kubectl annotate pdd dsv3 --overwrite {ANNOTATION_APPLY_OPERATOR_UPDATES}="
        in (cond["message"])
    )


def test_children_that_restart_no_pod_are_always_applied() -> None:
    service = {"kind": "Service", "metadata": {"name": "p0"}, "spec": {"ports": []}}
    out = hold(_inputs(), [service], {("Service", "p0"): service}, {})
    assert out.children == (service,)


def test_long_lists_are_cut_and_counted() -> None:
    found = tuple(f"f{i}" for i in range(20))
    assert listed(found)[-1] == "and 8 more" and len(listed(found)) == 13


# --- the planner: a builder change on an unchanged spec ---------------------------------


def _resource(dsv3: Json, **annotations: str) -> Json:
    cr = copy.deepcopy(dsv3)
    cr["metadata"].update(namespace="llm", uid=UID, generation=1, annotations=annotations)
    cr["status"] = {"observedGeneration": 1}
    return cr


def _as_live(p: Plan) -> tuple[dict[str, list[Json]], dict[tuple[str, str], tuple[str, Json]]]:
    """The children ``p`` applied, as the cache holds them (no template) and as read."""
    children: dict[str, list[Json]] = {}
    templates = {}
    for w in p.applies:
        obj = copy.deepcopy(w.manifest)
        assert obj is not None
        obj["metadata"].update(ownerReferences=[{"uid": UID}], resourceVersion="5",
                               generation=1)  # fmt: skip
        if w.kind in ("StatefulSet", "Deployment"):
            templates[(w.kind, w.name)] = ("5", _stored_like(obj["spec"]["template"]))
            obj["spec"] = {k: obj["spec"][k] for k in ("replicas", "selector") if k in obj["spec"]}
        children.setdefault(w.kind, []).append(obj)
    return children, templates


def _stored_like(template: Json) -> Json:
    out = copy.deepcopy(template)
    out["metadata"]["creationTimestamp"] = None
    for c in out["spec"]["containers"]:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
    return out


def test_a_builder_change_on_an_unchanged_spec_waits_and_the_trigger_rolls_it(
    dsv3: Json, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = plan(Observation(_resource(dsv3)), NOW)
    children, templates = _as_live(first)
    runtime = {("StatefulSet", n) for n in ("dsv3-prefill-0", "dsv3-prefill-1", "dsv3-decode-0")}
    # the same operator: everything applies again unchanged, nothing waits
    again = plan(Observation(_resource(dsv3), children=children), NOW)
    assert runtime <= {(w.kind, w.name) for w in again.applies} and not again.needs_templates
    assert {c["type"]: c["status"] for c in again.status["conditions"]}["UpdatePending"] == "False"

    with_a_new_pod_label(monkeypatch)
    upgraded = plan(Observation(_resource(dsv3), children=children), NOW)
    assert set(upgraded.needs_templates) == runtime
    p = plan(Observation(_resource(dsv3), children=children, templates=templates), NOW)
    applied = {(w.kind, w.name) for w in p.applies}
    assert not runtime & applied and ("Service", "dsv3-prefill-0") in applied
    assert ("Deployment", "dsv3-router") in applied  # its template did not change
    assert p.restarts == ()
    roles = p.status["roles"]
    for role in ("prefill", "decode"):
        assert roles[role]["updatePending"] == ["metadata.labels[example.com/new] added"]
    assert p.status["updatePending"] == "prefill,decode"
    pending = next(c for c in p.status["conditions"] if c["type"] == "UpdatePending")
    assert (pending["status"], pending["reason"]) == ("True", "OperatorChanged")

    cr = _resource(dsv3, **{ANNOTATION_APPLY_OPERATOR_UPDATES: "2026-01-02"})
    triggered = plan(Observation(cr, children=children, templates=templates), NOW)
    applied = {(w.kind, w.name): w.manifest for w in triggered.applies}
    assert runtime <= set(applied)
    sts = applied[("StatefulSet", "dsv3-decode-0")]
    assert sts is not None and sts["spec"]["template"]["metadata"]["labels"]["example.com/new"]
    assert "updatePending" not in triggered.status


def test_ready_never_waits_for_update_pending(dsv3: Json) -> None:
    """UpdatePending is advisory: Ready's "waiting for" named it beside the roles (the Pod
    Security e2e test, which quotes Ready's message, caught it)."""
    p = plan(Observation(_resource(dsv3)), NOW)
    ready = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "UpdatePending" not in ready["message"], ready
