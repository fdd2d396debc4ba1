"""What tests, ``reliability`` and ``bench`` drive against a cluster, beside the operator.

``faultproxy`` (a fault-injecting proxy in front of the API server, counting what passes),
``kubectl`` (the project's kubectl, the CRD installed and Established), ``local_run`` (the
operator as a local process, with the chart's rights), ``rbac`` (the chart's RBAC as
triples, a ServiceAccount's kubeconfig) and ``helm`` (the pinned helm binary from a
registry package). None of them needs the local control plane: they work on any cluster.
"""
