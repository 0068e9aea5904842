"""Unit constants: SI inside (seconds, bytes, bytes/s), as DESIGN.md's conventions say."""

KiB = 1024
MiB = 1024 * 1024
MB = 1e6
GB = 1e9
HOUR = 3600.0
