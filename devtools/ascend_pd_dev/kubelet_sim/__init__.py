"""kubelet-sim: simulated Ascend nodes for the dev cluster. It never runs a container."""
