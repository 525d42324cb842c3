-- The sync_alert package (seed 000): lets a client wait for change signals.

CREATE OR REPLACE PACKAGE sync_alert AS
    FUNCTION registerSourceWithVersion(source IN VARCHAR, version IN NUMBER) RETURN NUMBER;
    PROCEDURE unregisterAllSources;
    FUNCTION waitForEvent(maxWait IN NUMBER) RETURN VARCHAR;
END sync_alert;
/

CREATE OR REPLACE PACKAGE BODY sync_alert AS
    is_registered BOOLEAN := FALSE;

    FUNCTION registerSourceWithVersion(source IN VARCHAR, version IN NUMBER) RETURN NUMBER IS
        v_bit NUMBER;
    BEGIN
        SELECT bitnum INTO v_bit FROM sy$sources WHERE name = source;
        DBMS_ALERT.REGISTER('SY$ALERT_' || source);
        is_registered := TRUE;
        RETURN v_bit;
    EXCEPTION
        WHEN NO_DATA_FOUND THEN
            RETURN NULL;
    END registerSourceWithVersion;

    PROCEDURE unregisterAllSources IS
    BEGIN
        DBMS_ALERT.REMOVEALL;
        is_registered := FALSE;
    END unregisterAllSources;

    FUNCTION waitForEvent(maxWait IN NUMBER) RETURN VARCHAR IS
        v_name    VARCHAR2(128);
        v_message VARCHAR2(1800);
        v_status  INTEGER;
    BEGIN
        IF NOT is_registered THEN
            RETURN NULL;
        END IF;
        DBMS_ALERT.WAITANY(v_name, v_message, v_status, maxWait);
        IF v_status = 0 THEN
            RETURN SUBSTR(v_name, LENGTH('SY$ALERT_') + 1);
        END IF;
        RETURN NULL;
    END waitForEvent;
END sync_alert;
/
