"""The upgrade tier's oracle names changed pod-template fields as the status does."""

from __future__ import annotations

from ascend_pd_dev.testtools.template_diff import changed_paths, covers, uncovered

LIVE = {
    "metadata": {"labels": {"ascendpd.io/role": "decode"}, "annotations": {"a": "1"}},
    "spec": {
        "containers": [
            {"name": "sglang", "image": "i:1", "args": ["--x"],
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        ],
        "nodeSelector": {"accelerator": "910b"},
    },
}  # fmt: skip


def test_names_added_removed_and_altered_fields_by_item_name() -> None:
    desired = {
        "metadata": {"labels": {"ascendpd.io/role": "decode", "ascendpd.io/x": "y"}},
        "spec": {
            "containers": [
                {"name": "sglang", "image": "i:1", "args": ["--x", "--y"],
                 "env": [{"name": "A", "value": "3"}, {"name": "C", "value": "2"}]},
            ],
            "nodeSelector": {"accelerator": "910b"},
        },
    }  # fmt: skip
    assert changed_paths(LIVE, desired) == [
        "metadata.annotations",
        "metadata.labels[ascendpd.io/x]",
        "spec.containers[sglang].args",
        "spec.containers[sglang].env[A].value",
        "spec.containers[sglang].env[B]",
        "spec.containers[sglang].env[C]",
    ]


def test_an_equal_template_changes_nothing() -> None:
    assert changed_paths(LIVE, LIVE) == []


def test_mounts_are_named_by_their_path_as_the_api_server_merges_them() -> None:
    live = {"spec": {"containers": [{"name": "c", "volumeMounts": [
        {"name": "shm", "mountPath": "/dev/shm"}]}]}}  # fmt: skip
    desired = {"spec": {"containers": [{"name": "c", "volumeMounts": [
        {"name": "shm", "mountPath": "/dev/shm", "readOnly": True}]}]}}  # fmt: skip
    assert changed_paths(live, desired) == ["spec.containers[c].volumeMounts[/dev/shm].readOnly"]


def test_a_field_covers_itself_and_what_it_holds_not_its_siblings() -> None:
    assert covers(
        "spec.containers[sglang].securityContext added", "spec.containers[sglang].securityContext"
    )
    assert covers("volumes[dshm].emptyDir.sizeLimit changed", "volumes[dshm]")
    assert covers("spec.containers[sglang].env[A]", "spec.containers[sglang].env[A].value")
    assert covers("spec.containers[sglang].env", "spec.containers[sglang].env[A]")
    assert not covers("spec.containers[sglang].env[A]", "spec.containers[sglang].env[AB]")
    assert uncovered(["metadata.labels[x]"], ["metadata.labels[x]", "metadata.labels[y]"]) == [
        "metadata.labels[y]"
    ]
