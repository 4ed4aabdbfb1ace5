-- PostgreSQL version of ../0034_run_color.sql: INTEGER -> BIGINT.
-- A run's colour, `#rrggbb`: drawn from the palette (`RUN_PALETTE` in the schema crate) in the
-- order its project's runs were created, or set by a person. Runs already stored take the palette
-- in the order they started.
ALTER TABLE runs ADD COLUMN color TEXT;
-- How many runs each project has had: the next run's place in the palette, kept so that making a
-- run never counts its project's runs.
ALTER TABLE projects ADD COLUMN runs_created BIGINT NOT NULL DEFAULT 0;
UPDATE projects SET runs_created = (SELECT COUNT(*) FROM runs WHERE runs.project_id = projects.id);
UPDATE runs SET color = (
    SELECT CASE (o.n - 1) % 50
        WHEN 0 THEN '#2277bb'
        WHEN 1 THEN '#bbaa00'
        WHEN 2 THEN '#ff0022'
        WHEN 3 THEN '#ee66ff'
        WHEN 4 THEN '#007744'
        WHEN 5 THEN '#44bbbb'
        WHEN 6 THEN '#885577'
        WHEN 7 THEN '#886644'
        WHEN 8 THEN '#ff8800'
        WHEN 9 THEN '#00bb11'
        WHEN 10 THEN '#7733ff'
        WHEN 11 THEN '#dd9999'
        WHEN 12 THEN '#99aadd'
        WHEN 13 THEN '#ff0088'
        WHEN 14 THEN '#777700'
        WHEN 15 THEN '#227777'
        WHEN 16 THEN '#99aa77'
        WHEN 17 THEN '#00aaee'
        WHEN 18 THEN '#7777aa'
        WHEN 19 THEN '#aa5555'
        WHEN 20 THEN '#cc00bb'
        WHEN 21 THEN '#00bb88'
        WHEN 22 THEN '#cc5500'
        WHEN 23 THEN '#bb9966'
        WHEN 24 THEN '#bb77aa'
        WHEN 25 THEN '#9977ff'
        WHEN 26 THEN '#448800'
        WHEN 27 THEN '#aa7700'
        WHEN 28 THEN '#ff8866'
        WHEN 29 THEN '#bb2266'
        WHEN 30 THEN '#8855aa'
        WHEN 31 THEN '#009988'
        WHEN 32 THEN '#ff6677'
        WHEN 33 THEN '#bb99dd'
        WHEN 34 THEN '#88aa11'
        WHEN 35 THEN '#4466ff'
        WHEN 36 THEN '#dd9900'
        WHEN 37 THEN '#0088aa'
        WHEN 38 THEN '#bb7766'
        WHEN 39 THEN '#ff77bb'
        WHEN 40 THEN '#339955'
        WHEN 41 THEN '#bb3322'
        WHEN 42 THEN '#667744'
        WHEN 43 THEN '#5599ff'
        WHEN 44 THEN '#dd0044'
        WHEN 45 THEN '#995500'
        WHEN 46 THEN '#bb44ff'
        WHEN 47 THEN '#ff6611'
        WHEN 48 THEN '#ff11cc'
        WHEN 49 THEN '#bb7744'
    END
    FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY project_id ORDER BY start_ms, id) AS n FROM runs) o
    WHERE o.id = runs.id
);
