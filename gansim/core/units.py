"""Unit constants: SI inside (seconds, bytes, bytes/s), as every file format in docs/formats.md states its units."""

KiB = 1024
MiB = 1024 * 1024
MB = 1e6
GB = 1e9
HOUR = 3600.0
