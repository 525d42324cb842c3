"""The change log's segment format: Avro object container files, encoded and decoded by column.

``container`` reads and writes the file framing (header, blocks, codecs); ``fields`` says how each
column is written as an Avro field; ``encoder`` (with ``encode_kernels``) turns Arrow record batches
into Avro records; ``decoder`` (with ``decode_program``, ``decode_kernels`` and ``decode_columns``)
turns a container's blocks back into Arrow record batches.
"""
