-- The installation's price catalog: instance prices (per instance type, in a region and zone or
-- any; on-demand and spot, per hour) imported from a catalog, and the installation's own rates
-- per GPU-hour (for a GPU model, a cluster, or both). Each row holds from `valid_from_ms` until
-- a newer row of the same key; an empty text means any. A node is priced when it joins, with
-- the rows valid when its attempt started.
CREATE TABLE prices (
    kind              TEXT    NOT NULL,
    cloud             TEXT    NOT NULL,
    instance_type     TEXT    NOT NULL,
    accelerator       TEXT    NOT NULL,
    accelerator_count REAL    NOT NULL,
    region            TEXT    NOT NULL,
    zone              TEXT    NOT NULL,
    cluster           TEXT    NOT NULL,
    usd_per_hour      REAL,
    spot_usd_per_hour REAL,
    valid_from_ms     INTEGER NOT NULL,
    source            TEXT    NOT NULL,
    PRIMARY KEY (kind, cloud, instance_type, accelerator, region, zone, cluster, valid_from_ms)
) WITHOUT ROWID;
