-- The cuts that end the windows of changes in (:since_scn, :cut_scn], ascending: a change belongs to
-- the window of the first cut at or above it.
SELECT group_concat(scn) FROM (SELECT scn FROM _databus_cuts WHERE scn > :since_scn AND scn <= :cut_scn ORDER BY scn);
