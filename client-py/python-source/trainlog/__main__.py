"""`python -m trainlog ...` runs the trainlog command line."""

from trainlog._cli import main

main()
