import sys

from aisio.tools.cli import main

sys.exit(main())
