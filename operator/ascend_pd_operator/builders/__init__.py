"""Pure builders: from a spec and the model facts to the manifests the operator applies.

``desired`` checks the spec, computes the KV layout through the runtime's core and lists
every child in apply order; ``workloads`` (per-instance StatefulSet, Service, PodGroup),
``router``, ``disruption`` (PodDisruptionBudgets) and ``model_source`` (where the model
facts come from, and the inspector Job) build the pieces. No I/O: ``ascend-pd render``
prints exactly what the operator would apply.
"""
