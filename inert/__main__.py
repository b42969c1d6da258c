import sys

from inert.cli.main import main

sys.exit(main())
