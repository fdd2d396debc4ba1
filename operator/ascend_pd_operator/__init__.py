"""ascend-pd operator: reconciles PDDeployments into prefill/decode/router workloads.

It imports the runtime's pure layout core and never the other way round.
"""
