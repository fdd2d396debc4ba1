"""Taking verbs from the operator's Role for a while, and giving them back.

The chart binds the operator's ServiceAccount to a Role in each watched namespace; a
scenario edits that Role as an administrator would (``kubectl replace``) and restores it
exactly as it was, whatever happens meanwhile.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

from .env import Env, Release, ScenarioError

Json = dict[str, Any]


def without(role: Json, group: str, resource: str, verbs: tuple[str, ...]) -> Json:
    """``role`` with ``verbs`` taken from its rule for ``resource`` in ``group`` (the
    rule's other resources keep every verb)."""
    edited = replaceable(role)
    rules = []
    for rule in edited["rules"]:
        if resource in rule.get("resources", []) and group in rule.get("apiGroups", []):
            others = [r for r in rule["resources"] if r != resource]
            if others:
                rules.append({**rule, "resources": others})
            rules.append({**rule, "resources": [resource],
                          "verbs": [v for v in rule["verbs"] if v not in verbs]})  # fmt: skip
        else:
            rules.append(rule)
    edited["rules"] = rules
    return edited


def replaceable(role: Json) -> Json:
    """A copy of ``role`` that ``kubectl replace`` takes whatever its resourceVersion now."""
    copied = copy.deepcopy(role)
    meta = copied["metadata"]
    copied["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    return copied


@contextlib.contextmanager
def revoked(
    env: Env, release: Release, namespace: str, group: str, resource: str, verbs: tuple[str, ...]
) -> Iterator[None]:
    """The release's Role in ``namespace`` without ``verbs`` on ``resource`` for the block."""
    role = env.get_json("-n", namespace, "role", release.fullname)
    if role is None:
        raise ScenarioError(f"the chart's Role {namespace}/{release.fullname} is missing")
    env.kubectl("replace", "-f", "-", input=json.dumps(without(role, group, resource, verbs)))
    try:
        yield
    finally:
        env.kubectl("replace", "-f", "-", input=json.dumps(replaceable(role)))
