import sys

from .service.server import main

if __name__ == "__main__":
    sys.exit(main())
