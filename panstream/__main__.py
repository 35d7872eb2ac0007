"""``python -m panstream``: the same command line as the ``panstream`` script."""

from panstream.cli.main import main

if __name__ == "__main__":
    main()
