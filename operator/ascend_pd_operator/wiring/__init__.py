"""The operator process: what ties the layers together.

``reconciler`` runs one level-based reconcile (observe, plan with ``decisions.planner``,
execute the plan in numbered steps); ``handlers`` wires kopf's events, our watches, the
queue and its worker; ``run_cli``, ``crd_cli``, ``render_cli`` and ``cli`` are the
``ascend-pd`` commands.
"""
