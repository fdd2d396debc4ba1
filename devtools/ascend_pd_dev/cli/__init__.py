"""``ascend-pd-dev``: the command (``main``), its ``cluster`` and ``tools`` subcommands and the
demo, the whole product on the local control plane. The top layer: nothing imports it."""
