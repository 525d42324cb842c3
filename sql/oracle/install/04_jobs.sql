-- Scheduler jobs (seed 000): J_COALESCE_LOG every 2 seconds, J_CALL_SIGNAL every second.
-- Each block creates its job only when USER_SCHEDULER_JOBS lacks it: re-runnable.

DECLARE
    v_count NUMBER;
BEGIN
    SELECT COUNT(*) INTO v_count FROM user_scheduler_jobs WHERE job_name = 'J_COALESCE_LOG';
    IF v_count = 0 THEN
        DBMS_SCHEDULER.CREATE_JOB(
            job_name        => 'J_COALESCE_LOG',
            job_type        => 'PLSQL_BLOCK',
            job_action      => 'BEGIN sync_core.coalesce_log; END;',
            repeat_interval => 'FREQ=SECONDLY;INTERVAL=2',
            enabled         => TRUE,
            comments        => 'databus: copy commit SCNs into sy$txlog.scn');
    END IF;
END;
/

DECLARE
    v_count NUMBER;
BEGIN
    SELECT COUNT(*) INTO v_count FROM user_scheduler_jobs WHERE job_name = 'J_CALL_SIGNAL';
    IF v_count = 0 THEN
        DBMS_SCHEDULER.CREATE_JOB(
            job_name        => 'J_CALL_SIGNAL',
            job_type        => 'PLSQL_BLOCK',
            job_action      => 'BEGIN sync_core.signal_beep; END;',
            repeat_interval => 'FREQ=SECONDLY',
            enabled         => TRUE,
            comments        => 'databus: signal SY$ALERT_<source> when new transactions arrive');
    END IF;
END;
/
