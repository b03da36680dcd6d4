"""`python -m mindrl.platforms.preload KIND DIRECTORY [MODULES...]`: one preload server, as
`preload.start_server` starts it (the command line names its kind, for `ps` and the tests)."""

import sys

from mindrl.platforms.preload.server import serve

if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3:])
