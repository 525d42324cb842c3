"""The change log: durable, append-only Avro segments with an SCN manifest and a checkpoint."""
