-- Alerts: what a run said (`trainlog.alert`) or a rule found, per project. A repeat of the same
-- title on the same run within the alert's wait is folded into it (`count`, `last_ms`).
CREATE TABLE alerts (
    id         INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    run_id     TEXT,
    rule       TEXT    NOT NULL DEFAULT '',
    level      TEXT    NOT NULL,
    title      TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    step       INTEGER,
    time_ms    INTEGER NOT NULL,
    last_ms    INTEGER NOT NULL,
    count      INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX alerts_of_run ON alerts (run_id, title, last_ms);
CREATE INDEX alerts_of_project ON alerts (project_id, id);

-- Where a project's alerts go: a webhook (JSON, signed when it has a secret), Slack's or
-- Discord's incoming webhooks. `allow_private`: a server admin let it reach a private,
-- loopback or link-local address. A removed channel keeps its row for its deliveries.
CREATE TABLE alert_channels (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    kind          TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    secret        TEXT,
    allow_private INTEGER NOT NULL DEFAULT 0,
    created_by    TEXT,
    created_ms    INTEGER NOT NULL,
    deleted       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX alert_channels_of_project ON alert_channels (project_id) WHERE deleted = 0;

-- Each alert's sending to each channel: `pending` until sent, retried with backoff (`next_ms`),
-- `failed` after its last attempt; `answer` is what the receiver (or the network) last said.
CREATE TABLE alert_deliveries (
    id         INTEGER PRIMARY KEY,
    alert_id   INTEGER NOT NULL REFERENCES alerts(id),
    channel_id INTEGER NOT NULL REFERENCES alert_channels(id),
    status     TEXT    NOT NULL DEFAULT 'pending',
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_ms    INTEGER NOT NULL,
    answer     TEXT    NOT NULL DEFAULT '',
    sent_ms    INTEGER
);
CREATE INDEX alert_deliveries_due ON alert_deliveries (next_ms) WHERE status = 'pending';
CREATE INDEX alert_deliveries_of_alert ON alert_deliveries (alert_id);
