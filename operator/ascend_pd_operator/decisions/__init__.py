"""Pure decisions on one observation of a PDDeployment and its children.

``rollout`` (whole instances, KV-layout generations, routing), ``recovery`` (restart a
failed instance whole, with backoff; force-delete on a lost node), ``status`` (conditions,
phase, layout summary; from the ``findings``, with ``role_status`` and ``waits`` saying
what is not ready and why) and ``planner``, which joins them into one plan: what to apply,
what to delete, the status and the events (from an ``observation``, as ``writes`` and
``events``). No I/O, no clock of their own: time is an input.
``lease`` is the one rule about the operator itself: leader election among its replicas.
``scaling`` holds the roles' counts to their bounds and the P:D ratio; ``autoscale`` is the
PD planner's rule and ``autoscale_view`` what it observes and writes.
"""
