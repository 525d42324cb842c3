-- The seed's before insert/update trigger, plus the delete trigger. CREATE OR REPLACE: re-runnable.

CREATE OR REPLACE TRIGGER {trigger}
BEFORE INSERT OR UPDATE ON {table}
REFERENCING OLD AS OLD NEW AS NEW
FOR EACH ROW
BEGIN
    :NEW.txn := sync_core.getTxn({source_literal});
    IF UPDATING AND ({key_changed}) THEN
        INSERT INTO {shadow} ({key_columns}, txn) VALUES ({old_keys}, :NEW.txn);
    END IF;
END;
/

CREATE OR REPLACE TRIGGER {delete_trigger}
AFTER DELETE ON {table}
REFERENCING OLD AS OLD NEW AS NEW
FOR EACH ROW
BEGIN
    INSERT INTO {shadow} ({key_columns}, txn) VALUES ({old_keys}, sync_core.getTxn({source_literal}));
END;
/
