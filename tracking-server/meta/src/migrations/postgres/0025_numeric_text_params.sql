-- Params sent as text that is written as a number (every param an MLflow client logs: "0.01",
-- "1e-3") get the number run search compares (`params.lr > 0.001`), as typed params have. The
-- rule is the server's own (ParamValue::search_number): JSON's number syntax, at most 40
-- characters, finite below 1e308. Type and text stay as they were sent.
DO $$
DECLARE
    p RECORD;
    n DOUBLE PRECISION;
BEGIN
    FOR p IN
        SELECT run_id, key, value FROM params
        WHERE type = 'str' AND num IS NULL AND length(value) BETWEEN 1 AND 40
          AND value ~ '^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$'
    LOOP
        BEGIN
            n := p.value::double precision;
            IF abs(n) < 1e308 THEN
                UPDATE params SET num = n WHERE run_id = p.run_id AND key = p.key;
            END IF;
        EXCEPTION WHEN numeric_value_out_of_range THEN
            NULL;
        END;
    END LOOP;
END
$$;
