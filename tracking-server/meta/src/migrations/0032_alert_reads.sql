-- How far each user has read each project's alerts, for the inbox's unread: the newest alert
-- id they saw. On a server without keys every caller is the user ''.
CREATE TABLE alert_reads (
    user_name  TEXT    NOT NULL,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    read_up_to INTEGER NOT NULL,
    PRIMARY KEY (user_name, project_id)
);
