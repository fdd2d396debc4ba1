"""``python -m ascend_pd_dev.kubelet_sim --kubeconfig PATH``: run the simulated nodes."""

import sys

from ascend_pd_dev.kubelet_sim.process import main

sys.exit(main())
