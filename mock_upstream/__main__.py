"""`python -m mock_upstream`: the same as `gateway mock-upstream`."""

import sys

from mock_upstream.cli import main

sys.exit(main())
