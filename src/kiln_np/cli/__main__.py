"""``python -m kiln_np.cli``: the ``kiln-np`` console script."""

import sys

from .entry import main

if __name__ == "__main__":
    sys.exit(main())
