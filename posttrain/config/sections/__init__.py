"""One module per config section; each owns the dataclasses of its section."""
