-- How far each user has read each project's alerts, for the inbox's unread: the newest alert
-- id they saw. On a server without keys every caller is the user ''.
-- PostgreSQL version of ../0032_alert_reads.sql: INTEGER -> BIGINT.
CREATE TABLE alert_reads (
    user_name  TEXT    NOT NULL,
    project_id BIGINT  NOT NULL REFERENCES projects(id),
    read_up_to BIGINT  NOT NULL,
    PRIMARY KEY (user_name, project_id)
);
