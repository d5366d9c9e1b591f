"""One module per `ragzoo` subcommand: `add_arguments(parser)` and `run(args) -> int`."""
