-- The mark a poll leaves in the source for its change log (:log, an id the log's checkpoint keeps): the token
-- the checkpoint recorded at the last poll and this poll's, in one row of _databus_settings named
-- 'incarnation:<log>'. A file whose row holds neither the checkpoint's token was replaced by an older copy of
-- itself (a restored backup) whose SCNs new writes reuse. The checkpoint's token stays beside the new one, so a
-- poll that dies before its checkpoint commits leaves a mark the next poll still finds; each change log
-- capturing the file has its own row. Run inside BEGIN IMMEDIATE, after the check. Re-runnable.
INSERT INTO _databus_settings (name, value) VALUES ('incarnation:' || :log, trim(:recorded || ' ' || :token))
    ON CONFLICT (name) DO UPDATE SET value = excluded.value;
