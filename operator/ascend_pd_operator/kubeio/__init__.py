"""Kubernetes I/O and the long-lived threads that do it.

``kube`` (the REST client with server-side apply), ``child_watch`` and ``live_cache``
(label-filtered watches and what they last saw), ``workqueue``, ``leader`` (Lease-based
election), ``supervisor`` (restarts every unit, judges liveness), ``health`` (/healthz),
``metrics`` (/metrics), ``denials`` (401/403 warm-up vs RBAC faults), ``backoff`` (the one
retry schedule) and ``memory``. Everything that waits on the network or a thread is here.
"""
