"""``python -m ctxengine.cli``: the command line, as the console script runs it."""

from ctxengine.cli.launch import main

if __name__ == "__main__":
    main()
