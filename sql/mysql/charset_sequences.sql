-- Byte sequences of a multi-byte character set (hex, each followed by a newline) as the server converts them
-- to utf8mb4: what Python's codec of the same name is checked against (an ill-formed or unmapped sequence
-- becomes '?').
SELECT HEX(CONVERT(CONVERT(UNHEX(%s) USING {charset}) USING utf8mb4))
