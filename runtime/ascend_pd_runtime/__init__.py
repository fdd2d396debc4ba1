"""ascend-pd runtime: the KV-layout core and what runs inside the serving pods.

The layout core (``model_facts``, ``partition``, ``layout``, ``transfer_plan``,
``plan``) is pure and light (numpy at most) so the operator, the CLI and the
patched SGLang connector all compute the KV layout with the same code.
"""
