"""`gkdtop serve`: the dashboard in a browser. A view layer like tui/: one monitor, a thin view per browser."""
