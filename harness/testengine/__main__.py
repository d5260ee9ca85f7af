import sys

from harness.testengine.server import main

sys.exit(main())
