import sys

from inert._cli import main

sys.exit(main())
