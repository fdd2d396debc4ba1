"""The local control plane: a real Kubernetes 1.20 API server and controller manager, built here.

``build`` builds kube-apiserver and kube-controller-manager once from Debian's source package
(``reflect2_fix`` patches its vendored reflect2 for Go >= 1.18); ``certs`` makes the CA,
serving certificate and token users; ``cluster`` runs etcd, the API server, the controller
manager and kubelet-sim as background processes owned through pid files (``procs``), with
their state where ``paths`` says. ``crd_build`` and ``crd_server`` build and run a current
CRD server (Kubernetes 1.36, CRDs only) beside it, for checking the CRD.
"""
