"""What every layer shares: the validated config tree, strict file reading and atomic
writes, the registry of pluggable things, errors, units and the version."""
