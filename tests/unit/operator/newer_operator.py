"""A newer operator for tests: its builder adds a label to every runtime pod template."""

from __future__ import annotations

from typing import Any

import pytest

import ascend_pd_operator.builders.workloads as workloads
from ascend_pd_operator.api.json_object import Json

#: The label the newer operator's runtime pod templates carry.
NEW_LABEL = "example.com/new"


def with_a_new_pod_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on the builders are a newer operator's: ``NEW_LABEL`` on runtime pods."""
    built = workloads.pod_template

    def newer(*args: Any, **kwargs: Any) -> Json:
        template = built(*args, **kwargs)
        template["metadata"]["labels"][NEW_LABEL] = "yes"
        return template

    monkeypatch.setattr(workloads, "pod_template", newer)
