"""The local control plane: a real Kubernetes API server, controller manager and scheduler,
built here.

``versions`` holds the release table and picks a row (the newest by default, the oldest
supported for the compatibility tier): ``build_gomod`` builds a release's kube-apiserver,
kube-controller-manager and kube-scheduler once from Go modules, under ``build``'s
build-once lock; ``certs`` makes the CA, serving certificate and token users;
``cluster`` runs etcd, the API server, the controller manager, the scheduler and kubelet-sim
as background processes owned through pid files (``procs``), with the command lines of
``commands`` and their state where ``paths`` says. ``crd_server`` runs the newest
release's kube-apiserver alone beside it, for checking the CRD; ``apt`` reads the system's
Debian archive entries for the Prometheus install.
"""
