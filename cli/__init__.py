"""toolgym.cli: the ``toolgym`` command line, one thin module per subcommand (parse, call the library, print)."""
if __name__ != "toolgym.cli":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.cli: import toolgym.cli (after `pip install -e .` or `make install`), not {__name__!r}")
