"""The patch set ascend-pd applies to the installed SGLang (``ascend-pd-runtime patch-sglang``).

``engine`` applies and checks exact-text hunks, ``patches`` lists them per SGLang
version, ``hooks`` holds the few functions the patched SGLang files call, and
``cli`` is the subcommand. The logic the patched connector runs lives in
``ascend_pd_runtime.connector``.
"""
