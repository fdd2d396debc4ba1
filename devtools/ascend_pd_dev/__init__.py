"""The local development cluster: a real Kubernetes 1.20 control plane with simulated Ascend nodes.

``ascend-pd-dev cluster up|down|status`` (``cli``) builds kube-apiserver and kube-controller-manager
from Debian's source package once (``build``), generates the certificates and tokens
(``certs``), runs etcd, the API server, the controller manager and the simulated kubelet as
background processes owned through pid files (``cluster``). The simulated kubelet
(``kubelet_sim``) binds and reports pods but never runs a container.
"""
