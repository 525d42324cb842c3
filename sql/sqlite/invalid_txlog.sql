-- The first change of the captured tables (:tables, a JSON array of names) whose row image is not valid
-- UTF-8: the images (_databus_images) copy text into their JSON unchanged, so text that is not UTF-8 in the table is
-- not UTF-8 in the txlog either, and capture will refuse it (validate names it first). Only images with
-- a byte beyond ASCII (GLOB :non_ascii) are handed to databus_bad_utf8, which the caller registers.
SELECT scn, tbl, CAST(row AS BLOB)
FROM _databus_images
WHERE tbl IN (SELECT value FROM json_each(:tables)) AND op != 'm'
  AND row GLOB :non_ascii AND databus_bad_utf8(CAST(row AS BLOB))
ORDER BY scn
LIMIT 1;
