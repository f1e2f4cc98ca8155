"""Things a key (or a subcommand) does: stack dumps, cleanup, the bug-report bundle. No Textual imports."""
