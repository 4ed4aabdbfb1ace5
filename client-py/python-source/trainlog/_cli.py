"""The `trainlog` console script: the same command line as the `trainlog` binary."""

import sys

from trainlog._trainlog import cli_main


def main() -> None:
    sys.exit(cli_main(["trainlog", *sys.argv[1:]]))
