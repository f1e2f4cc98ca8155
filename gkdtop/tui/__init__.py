"""The Textual view: a thin layer that reads the store and draws it. One pane per module."""
