"""``Json``: a JSON object as Python reads it (a Kubernetes object, a patch, a camelCase
spec), the one alias every layer of the operator and its tests spell it with."""

from typing import Any

Json = dict[str, Any]
