"""`nanobragg` / `python -m nanobragg`: the command line, from the wheel."""

import sys

from ._nanobragg import main as _main


def main() -> None:
    sys.exit(_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
