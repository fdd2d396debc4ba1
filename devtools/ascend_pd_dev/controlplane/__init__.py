"""The local control plane: a real Kubernetes API server, controller manager and scheduler,
built here.

``versions`` picks the release (1.36 by default, 1.20 for its compatibility tier):
``build_gomod`` builds 1.36's kube-apiserver, kube-controller-manager and kube-scheduler once
from Go modules, ``build`` 1.20's from Debian's source package (``reflect2_fix`` patches its
vendored reflect2 for Go >= 1.18); ``certs`` makes the CA, serving certificate and token users;
``cluster`` runs etcd, the API server, the controller manager, the scheduler and kubelet-sim
as background processes owned through pid files (``procs``), with the command lines of
``commands`` and their state where ``paths`` says. ``crd_build`` and ``crd_server`` build and
run a current CRD server (Kubernetes 1.36, CRDs only) beside it, for checking the CRD.
"""
