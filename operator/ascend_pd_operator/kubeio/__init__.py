"""Kubernetes I/O and the long-lived threads that do it.

``kube`` (the REST client's verbs, with server-side apply) over ``sender`` (fencing,
throttling, denials), ``wire`` (the configured client, every request counted) and
``discovery`` (the server's version), raising ``errors``; ``child_watch`` (label-filtered
list-and-watch loops), ``ledger`` (what each watch knows and reports) and ``live_cache``
(what they last saw: ``watched`` objects, ``apply_records``); ``workqueue``, ``leader``
(Lease-based election), ``supervisor`` (restarts every unit, judges liveness), ``health``
(/healthz), ``metrics`` (/metrics; ``deployment_reports`` feeds its per-PDDeployment
series), ``denials`` (401/403 warm-up vs RBAC faults), ``backoff`` (the one retry
schedule), ``kept`` (what the cache keeps of an object), ``memory``, and ``pd_planner``
(the PD planner's loop; ``leader_metrics`` scrapes the leaders for it). Everything that
waits on the network or a thread is here.
"""
