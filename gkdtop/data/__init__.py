"""The built-in rules (phases, findings, frameworks, stack phases) as YAML, read through importlib.resources."""
