"""One module per subcommand: its argparse parser (`add_parser`) and its entry point (`run`)."""
