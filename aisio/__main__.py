import sys

from aisio._cli import main

sys.exit(main())
