"""Reliability and security scenarios of ascend-pd on the local control plane.

Each scenario drives the real operator (``ascend-pd run`` as the Helm chart's
ServiceAccount) against a real kube-apiserver, breaks something on purpose
(SIGKILLs, drift, bad input, API faults, a paused leader, deletion while down)
and measures whether the cluster converges to exactly the desired children.
``python -m reliability`` runs them all and prints one table; ``tests/reliability``
runs each at a CI size with assertions.
"""
