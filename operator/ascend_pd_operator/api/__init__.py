"""The PDDeployment API: what users write and what the operator promises.

``models`` (pydantic, the single source of truth), ``rules`` (each spec rule written once
for both the validators and the CRD's CEL), ``crd`` (the CRD generated from them),
``access`` (every resource and verb the operator needs), ``vocabulary`` (the names,
labels, ports, conditions and reasons every other layer speaks) and ``json_object`` (the
``Json`` alias every layer types a JSON object with). No I/O.
"""
