-- The sync_core package (seed 000): transaction ids, source masks, SCN coalescing, alerts.
-- PL/SQL units end with a line holding only '/', as in SQL*Plus. CREATE OR REPLACE: re-runnable.

CREATE OR REPLACE PACKAGE sync_core AS
    INFINITY CONSTANT NUMBER := 9999999999999999999999999999;
    FUNCTION getScn(v_scn IN NUMBER, v_ora_rowscn IN NUMBER) RETURN NUMBER;
    FUNCTION getMask(source IN VARCHAR) RETURN NUMBER;
    FUNCTION getTxn(source IN VARCHAR) RETURN NUMBER;
    PROCEDURE coalesce_log;
    PROCEDURE signal_beep;
    PROCEDURE unconditional_signal_beep;
END sync_core;
/

CREATE OR REPLACE PACKAGE BODY sync_core AS
    -- DBMS_TRANSACTION.LOCAL_TRANSACTION_ID of the latest transaction: a change means a new txn.
    lastTxID    VARCHAR2(100);
    -- sy$txlog.txn and sy$txlog.mask of the row the current transaction owns.
    currentTxn  NUMBER;
    currentMask NUMBER;
    TYPE source_bits_t IS TABLE OF NUMBER INDEX BY VARCHAR2(128);
    source_bits source_bits_t;
    lastSignalled NUMBER := 0;

    FUNCTION getScn(v_scn IN NUMBER, v_ora_rowscn IN NUMBER) RETURN NUMBER IS
    BEGIN
        IF v_scn = INFINITY THEN
            RETURN v_ora_rowscn;
        END IF;
        RETURN v_scn;
    END getScn;

    FUNCTION getMask(source IN VARCHAR) RETURN NUMBER IS
        v_bit NUMBER;
    BEGIN
        IF NOT source_bits.EXISTS(source) THEN
            SELECT bitnum INTO v_bit FROM sy$sources WHERE name = source;
            source_bits(source) := POWER(2, v_bit);
        END IF;
        RETURN source_bits(source);
    EXCEPTION
        WHEN NO_DATA_FOUND THEN
            RAISE_APPLICATION_ERROR(-20100, 'databus source ' || source || ' is not registered in sy$sources');
    END getMask;

    FUNCTION getTxn(source IN VARCHAR) RETURN NUMBER IS
        v_txid VARCHAR2(100) := DBMS_TRANSACTION.LOCAL_TRANSACTION_ID(TRUE);
        v_mask NUMBER := getMask(source);
    BEGIN
        IF lastTxID IS NULL OR lastTxID <> v_txid THEN
            lastTxID := v_txid;
            SELECT sy$scn_seq.NEXTVAL INTO currentTxn FROM dual;
            currentMask := v_mask;
            INSERT INTO sy$txlog (txn, scn, mask, ts) VALUES (currentTxn, INFINITY, currentMask, SYSTIMESTAMP);
        ELSIF BITAND(currentMask, v_mask) = 0 THEN
            currentMask := currentMask + v_mask;
            UPDATE sy$txlog SET mask = currentMask WHERE txn = currentTxn;
        END IF;
        RETURN currentTxn;
    END getTxn;

    PROCEDURE coalesce_log IS
    BEGIN
        -- Only committed rows are visible here, so ora_rowscn is the commit SCN.
        UPDATE sy$txlog SET scn = ora_rowscn WHERE scn = INFINITY;
        COMMIT;
    END coalesce_log;

    PROCEDURE unconditional_signal_beep IS
    BEGIN
        FOR s IN (SELECT name FROM sy$sources) LOOP
            DBMS_ALERT.SIGNAL('SY$ALERT_' || s.name, 'changes');
        END LOOP;
        COMMIT;
    END unconditional_signal_beep;

    PROCEDURE signal_beep IS
        v_enabled CHAR(1);
        v_newest  NUMBER;
    BEGIN
        SELECT MAX(raise_dbms_alerts) INTO v_enabled FROM sync_core_settings;
        IF v_enabled = 'N' THEN
            RETURN;
        END IF;
        SELECT NVL(MAX(txn), 0) INTO v_newest FROM sy$txlog;
        IF v_newest > lastSignalled THEN
            lastSignalled := v_newest;
            unconditional_signal_beep;
        END IF;
    END signal_beep;
END sync_core;
/
