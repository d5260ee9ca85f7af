"""One module per `specbench` subcommand."""
