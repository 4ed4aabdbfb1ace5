-- A stop asked of a running run (`POST /api/v1/runs/{id}/stop`, `trainlog stop`, the UI's Stop
-- button, a rule): when, by whom and why. Its processes see it in their next heartbeat's answer.
ALTER TABLE runs ADD COLUMN stop_ms INTEGER;
ALTER TABLE runs ADD COLUMN stop_by TEXT;
ALTER TABLE runs ADD COLUMN stop_reason TEXT;
