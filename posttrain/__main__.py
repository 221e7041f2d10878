"""`python -m posttrain` is the same as the `posttrain` command."""

from posttrain.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
