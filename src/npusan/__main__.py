"""``python -m npusan ...``: the ``npusan`` command line, for environments without the script."""

from .cli import main

if __name__ == "__main__":
    main()
