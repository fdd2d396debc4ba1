"""Env contract versions a runtime image of version 1 does not speak, and the words its
launcher's and inspector's refusal must name for each (``None``: the variable unset)."""

SKEWS = [
    ("2", "the operator wrote version 2 (ASCEND_PD_CONTRACT_VERSION)"),
    ("0", "the operator wrote version 0 (ASCEND_PD_CONTRACT_VERSION)"),
    ("v1", "ASCEND_PD_CONTRACT_VERSION 'v1' is not a version"),
    (None, "ASCEND_PD_CONTRACT_VERSION is not set"),
]
