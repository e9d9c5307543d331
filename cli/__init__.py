"""toolgym.cli: the ``toolgym`` command line, one thin module per subcommand (parse, call the library, print)."""
