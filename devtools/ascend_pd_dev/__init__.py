"""The development toolbox of ascend-pd (the ``ascend-pd-dev`` distribution; no image carries it).

Four folders, each importing only those below it (the import-linter contract in the root
``pyproject.toml`` keeps it so), read bottom-up:

1. ``kubelet_sim``: the simulated Ascend nodes: the scheduler and kubelets of a cluster that
   runs no container (node registration, pod lifecycle, the failure knobs a test turns).
2. ``controlplane`` and ``testtools``, side by side:

   - ``controlplane``: the local Kubernetes control plane (1.36, or the floor 1.28): the
     build of its binaries, its certificates, its processes (etcd, kube-apiserver,
     kube-controller-manager, kube-scheduler, kubelet-sim) and the current CRD server;
   - ``testtools``: what tests, ``reliability`` and ``bench`` drive against a cluster: the
     fault proxy, kubectl, the operator as a local process, the chart's RBAC, helm.
3. ``cli``: the ``ascend-pd-dev`` command and the demo.
"""
