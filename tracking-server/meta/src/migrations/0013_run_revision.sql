-- A run's revision: a number from one clock, taken anew by every change to the run's row, its
-- params, its tags or its project's name. A reader may keep a loaded run and reuse it while the
-- revision it was loaded at is still the run's revision.
CREATE TABLE revision_clock (n INTEGER NOT NULL);
INSERT INTO revision_clock (n) VALUES (0);
ALTER TABLE runs ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER runs_insert_revision AFTER INSERT ON runs BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = NEW.id;
END;
CREATE TRIGGER runs_update_revision
AFTER UPDATE OF id, project_id, name, status, start_ms, end_ms, user, host, group_name, parent_id, notes, deleted ON runs
BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = NEW.id;
END;
CREATE TRIGGER projects_rename_revision AFTER UPDATE OF name ON projects BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE project_id = NEW.id;
END;
CREATE TRIGGER params_insert_revision AFTER INSERT ON params BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = NEW.run_id;
END;
CREATE TRIGGER params_update_revision AFTER UPDATE ON params BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id IN (OLD.run_id, NEW.run_id);
END;
CREATE TRIGGER params_delete_revision AFTER DELETE ON params BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = OLD.run_id;
END;
CREATE TRIGGER tags_insert_revision AFTER INSERT ON tags BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = NEW.run_id;
END;
CREATE TRIGGER tags_update_revision AFTER UPDATE ON tags BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id IN (OLD.run_id, NEW.run_id);
END;
CREATE TRIGGER tags_delete_revision AFTER DELETE ON tags BEGIN
    UPDATE revision_clock SET n = n + 1;
    UPDATE runs SET revision = (SELECT n FROM revision_clock) WHERE id = OLD.run_id;
END;
