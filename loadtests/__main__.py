"""``python -P -m loadtests LOCUST-ARGUMENTS``: Locust, as the runner starts it
(``chaos.load.sources.locust_argv``), on this toolkit's packages whatever its working directory.

Locust itself puts its working directory first on ``sys.path`` just before it imports a
locustfile (``locust.util.load_locustfile``), so safe-path mode alone (``-P``:
``chaos.lifeline.toolkit_python``) is not enough: run from a directory holding a ``chaos/`` or
``loadtests/`` folder, ``python -m locust`` has our locustfiles import *that*. Here both packages
are imported first, from the runner's own import path; every later ``chaos.*`` or ``loadtests.*``
import is looked up inside them (their ``__path__``), not on ``sys.path``.
"""

import sys

import chaos  # noqa: F401 - imported now, before Locust changes sys.path (the loadtests package already is)

if __name__ == "__main__":
    from locust.main import main

    sys.argv[0] = "locust"  # Locust's usage lines name it
    main()
