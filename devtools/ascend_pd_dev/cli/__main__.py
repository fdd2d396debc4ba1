"""``python -m ascend_pd_dev.cli``: the ``ascend-pd-dev`` command."""

import sys

from ascend_pd_dev.cli.main import main

sys.exit(main())
