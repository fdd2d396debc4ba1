"""ascend-pd operator: reconciles PDDeployments into prefill/decode/router workloads.

Five layers, each a subpackage that imports only the ones below it (an import-linter
``layers`` contract in pyproject.toml keeps it so):

5. ``wiring``: the process. kopf handlers, the reconciler that observes, plans and
   executes, and the CLIs.
4. ``kubeio``: everything that talks to the API server or runs a thread: the REST client,
   the watches and their cache, the work queue, leader election, the supervisor,
   ``/healthz`` and ``/metrics``.
3. ``decisions``: pure decisions on an observation: rollout, recovery, status and the
   planner that joins them into one plan.
2. ``builders``: pure builders of the desired children from a spec and the model facts.
1. ``api``: the PDDeployment API: its models, rules, CRD, RBAC allow-list and vocabulary.

Layers 1 to 3 do no I/O. The operator imports the runtime's pure layout core and never the
other way round.
"""

#: The release this tree is (``make release`` checks it against every other version); the
#: CRDs it generates name it (``vocabulary.ANNOTATION_GENERATED_BY``).
__version__ = "0.1.0"
