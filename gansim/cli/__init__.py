"""The `gansim` command line, on top of every other layer."""
