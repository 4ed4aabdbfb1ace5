-- A run's revision: a number from one clock, taken anew by every change to the run's row, its
-- params, its tags or its project's name. A reader may keep a loaded run and reuse it while the
-- revision it was loaded at is still the run's revision.
-- PostgreSQL version of ../0013_run_revision.sql: the clock is a SEQUENCE (not a one-row table,
-- which would serialise concurrent writers) and the triggers call PL/pgSQL functions; the runs
-- triggers are BEFORE triggers that set NEW.revision instead of updating the row again; the params
-- and tags triggers fire once per statement, over its transition table.
CREATE SEQUENCE revision_clock AS BIGINT;
ALTER TABLE runs ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION runs_take_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.revision := nextval('revision_clock');
    RETURN NEW;
END;
$$;

CREATE TRIGGER runs_insert_revision BEFORE INSERT ON runs
FOR EACH ROW EXECUTE FUNCTION runs_take_revision();
CREATE TRIGGER runs_update_revision
BEFORE UPDATE OF id, project_id, name, status, start_ms, end_ms, "user", host, group_name, parent_id, notes, deleted ON runs
FOR EACH ROW EXECUTE FUNCTION runs_take_revision();

CREATE FUNCTION projects_rename_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET revision = nextval('revision_clock') WHERE project_id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER projects_rename_revision AFTER UPDATE OF name ON projects
FOR EACH ROW EXECUTE FUNCTION projects_rename_revision();

-- For params and tags: once per statement (a run's 100,000 params take one update of its row,
-- not one each), the runs of the new rows (INSERT), of the old rows (DELETE), or both (UPDATE).
CREATE FUNCTION runs_of_new_rows_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET revision = nextval('revision_clock') WHERE id IN (SELECT run_id FROM new_rows);
    RETURN NULL;
END;
$$;
CREATE FUNCTION runs_of_old_rows_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET revision = nextval('revision_clock') WHERE id IN (SELECT run_id FROM old_rows);
    RETURN NULL;
END;
$$;
CREATE FUNCTION runs_of_changed_rows_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET revision = nextval('revision_clock')
    WHERE id IN (SELECT run_id FROM old_rows UNION SELECT run_id FROM new_rows);
    RETURN NULL;
END;
$$;

CREATE TRIGGER params_insert_revision AFTER INSERT ON params REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_new_rows_revision();
CREATE TRIGGER params_update_revision AFTER UPDATE ON params REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_changed_rows_revision();
CREATE TRIGGER params_delete_revision AFTER DELETE ON params REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_old_rows_revision();
CREATE TRIGGER tags_insert_revision AFTER INSERT ON tags REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_new_rows_revision();
CREATE TRIGGER tags_update_revision AFTER UPDATE ON tags REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_changed_rows_revision();
CREATE TRIGGER tags_delete_revision AFTER DELETE ON tags REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION runs_of_old_rows_revision();
