"""`python -m gateway.mockupstream`: the same as `gateway mock-upstream`."""

import sys

from gateway.mockupstream.cli import main

sys.exit(main())
