"""The binary log as a replica reads it: the dump stream (``stream``), the table of every event type
(``codes``), compressed events and transaction payloads (``unpack``), table maps (``tablemap``), GTIDs
(``gtid``, ``serialization``), and row images decoded by column (``rows``, ``kernels``, ``values``,
``json_binary``). ``sources.mysql.stream`` reads a poll's transactions with these."""
