-- Drops txlog rows the change log durably holds (coalesced, at or below :throughScn).
DELETE FROM sy$txlog WHERE scn <= :throughScn
