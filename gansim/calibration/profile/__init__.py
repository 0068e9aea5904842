"""profile.json: its schema (what `gansim calibrate` writes and `predict`, `validate` and a
scenario's `profile:` read) and the phase names of a timed step. No torch import."""
