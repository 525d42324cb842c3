"""Core model: positions (SCN), change events and windows, Avro row schemas."""
