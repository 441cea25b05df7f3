import sys

from .cli import main

if __name__ == "__main__":  # not in a spawned worker, which imports this module as __mp_main__
    sys.exit(main())
