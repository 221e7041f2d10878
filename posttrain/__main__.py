"""`python -m posttrain` is the same as the `posttrain` command."""

import os
import sys

from posttrain.cli import main
from posttrain.cluster import RANK_ENV

if __name__ == "__main__":
    code = main()
    if RANK_ENV in os.environ:
        # A worker process its launcher started: everything it writes is closed and its status is
        # decided. Interpreter teardown would now destroy torch.distributed's native threads in an
        # arbitrary order, which now and then aborts the process (SIGABRT, "terminate called
        # without an active exception") after its work is done; exit without that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
