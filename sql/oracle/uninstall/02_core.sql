-- Removes the core objects. Jobs first, so nothing runs against dropped packages.
BEGIN
    FOR j IN (SELECT job_name FROM user_scheduler_jobs WHERE job_name IN ('J_COALESCE_LOG', 'J_CALL_SIGNAL')) LOOP
        DBMS_SCHEDULER.DROP_JOB(j.job_name, force => TRUE);
    END LOOP;
END;
/

DROP PACKAGE sync_alert;
DROP PACKAGE sync_core;
DROP TABLE sy$txlog PURGE;
DROP TABLE sy$sources PURGE;
DROP TABLE sync_core_settings PURGE;
DROP SEQUENCE sy$scn_seq;
