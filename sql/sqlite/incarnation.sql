-- The marks polls leave in the source for one change log (:log, an id the log's checkpoint keeps): random
-- tokens, oldest first, in one row of _databus_settings named 'incarnation:<log>'. A file whose row lacks the
-- token the checkpoint recorded was replaced by an older copy of itself (a restored backup) whose SCNs new
-- writes reuse. Python passes the row's new value (:tokens): the tokens from the checkpoint's on, and this
-- poll's, so a poll that dies before its checkpoint commits, or loses to another run of the same log, leaves
-- every token a checkpoint may hold; each change log capturing the file has its own row. Run inside BEGIN
-- IMMEDIATE, after the check. Re-runnable.
INSERT INTO _databus_settings (name, value) VALUES ('incarnation:' || :log, :tokens)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value;
