"""Async producers of state. No Textual imports: usable as a library."""
