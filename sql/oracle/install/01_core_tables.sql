-- Databus for Oracle: the core objects of seed 000 ("Databus For Oracle").
-- Plain DDL, one statement per ';'. The installer skips a CREATE whose object already exists
-- (it checks USER_OBJECTS), so the script is re-runnable without harm.

-- txn ids: one per source transaction that touches a captured table.
CREATE SEQUENCE sy$scn_seq START WITH 1 INCREMENT BY 1 CACHE 1000 NOCYCLE;

-- Settings: RAISE_DBMS_ALERTS switches signal_beep on/off; the rest is install bookkeeping.
CREATE TABLE sync_core_settings (
    raise_dbms_alerts CHAR(1) DEFAULT 'Y' NOT NULL,
    databus_version   VARCHAR2(20),
    install_hash      VARCHAR2(64),
    epoch_id          VARCHAR2(64),
    CONSTRAINT sync_core_settings_alerts_ck CHECK (raise_dbms_alerts IN ('Y', 'N'))
);

-- Source name -> bit number in sy$txlog.mask. NUMBER holds 38 digits, so bits 0..125 (126 sources).
CREATE TABLE sy$sources (
    name   VARCHAR2(128) NOT NULL,
    bitnum NUMBER(3) NOT NULL,
    CONSTRAINT sy$sources_pk PRIMARY KEY (name),
    CONSTRAINT sy$sources_bit_uk UNIQUE (bitnum),
    CONSTRAINT sy$sources_bit_ck CHECK (bitnum BETWEEN 0 AND 125)
);

-- One row per transaction: scn is "infinity" until J_COALESCE_LOG copies the commit SCN
-- (ora_rowscn, row-level thanks to ROWDEPENDENCIES) into it.
CREATE TABLE sy$txlog (
    txn  NUMBER NOT NULL,
    scn  NUMBER NOT NULL,
    mask NUMBER NOT NULL,
    ts   TIMESTAMP(6) DEFAULT SYSTIMESTAMP NOT NULL,
    CONSTRAINT sy$txlog_pk PRIMARY KEY (txn)
) ROWDEPENDENCIES;

CREATE INDEX sy$txlog_scn_idx ON sy$txlog (scn);
